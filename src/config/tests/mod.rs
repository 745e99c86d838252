//! Tests of the configuration as a whole: documents and files in, a validated [`Config`] or an
//! error naming the key (or the file) out. The value syntaxes are tested beside their parsers in
//! `values.rs`, which borrows [`rows`] from here.

use super::values::DURATION_SYNTAX;
use super::*;

mod hostile;
mod reference;
mod slo;

const FULL: &str = "
listen: 127.0.0.1:18080
upstream: https://api.example.com/openai/
metrics_listen: '[::1]:19464'
max_models: 7
timeouts: {connect: 2.5s, response_headers: 1m, idle: 45s, client_header_read: 5s, client_idle: 90s, request_body_idle: 20s, upstream_idle: 4s}
limits: {max_request_header_bytes: 16KiB, max_request_body_bytes: 1MiB, max_connections: 50, max_upstream_connections: 40, max_concurrent_streams: 16, max_upstream_per_connection: 8, hold_request_body_bytes: 256KiB}
budgets: {held_bodies: 16MiB, held_bodies_per_client: 4MiB}
shutdown_grace: 2m
metering: {max_event_bytes: 1MiB, model_scan_bytes: 65536}
metrics: {model_idle: 10m}
buckets: {ttft: [0.1, 1, 10], itl: [0.01, 0.1], tpot: [0.02], e2e: [1, 60], output_tokens_per_second: [10, 100]}
slo:
  ttft: 500ms
  tpot: 50ms
  itl: 250ms
  e2e: 60s
  models:
    llama-3.1-70b:
      ttft: 1s
";

fn ms(n: u64) -> Option<Duration> {
    Some(Duration::from_millis(n))
}

/// The timeouts in the order docs/configuration.md lists them (`metrics_send` is tested in hostile.rs).
fn timeouts(t: &Timeouts) -> [Option<Duration>; 7] {
    [
        t.connect,
        t.response_headers,
        t.idle,
        t.client_header_read,
        t.client_idle,
        t.request_body_idle,
        t.upstream_idle,
    ]
    .map(Some)
}

/// The request size limits, then the connection and stream counts.
fn sizes(l: &Limits) -> (usize, u64, usize, usize, u32) {
    (
        l.max_request_header_bytes,
        l.max_request_body_bytes,
        l.max_connections,
        l.max_upstream_connections,
        l.max_concurrent_streams,
    )
}

fn all(c: Ceilings) -> [Option<Duration>; 6] {
    SloKind::ALL.map(|k| c[k])
}

/// The first problem of `yaml`, without its line (the tests of lines and of several problems are
/// `problems.rs`').
pub(super) fn err(yaml: &str) -> String {
    match Config::from_yaml_str(yaml) {
        Ok(c) => panic!("expected an error for {yaml:?}, got {c:?}"),
        Err(e) => match e.problems() {
            [first, ..] => first.error.to_string(),
            [] => e.to_string(),
        },
    }
}

/// Non-empty lines of a table, split at " | ".
pub(super) fn rows(table: &str) -> impl Iterator<Item = Vec<&str>> {
    table
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim().split(" | ").collect())
}

#[test]
fn full_example_parses_to_the_given_values() {
    let c = Config::from_yaml_str(FULL).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:18080");
    assert_eq!(c.upstream.to_string(), "https://api.example.com/openai");
    assert_eq!(c.metrics_listen.to_string(), "[::1]:19464");
    assert_eq!((c.upstream_ca_file, c.max_models), (None, 7));
    let waits = [2500, 60_000, 45_000, 5_000, 90_000, 20_000, 4_000];
    assert_eq!(timeouts(&c.timeouts), waits.map(ms));
    let l = &c.limits;
    assert_eq!(
        (
            l.upstream_per_connection(),
            l.held_body_bytes(),
            c.budgets.held_bodies,
            c.budgets.held_bodies_per_client
        ),
        (8, 256 << 10, 16 << 20, 4 << 20)
    );
    assert_eq!(sizes(l), (16 << 10, 1 << 20, 50, 40, 16));
    assert_eq!(Some(c.shutdown_grace), ms(120_000));
    let m = c.metering;
    assert_eq!((m.max_event_bytes, m.model_scan_bytes), (1 << 20, 65536));
    assert_eq!(c.metrics.model_idle, ms(600_000));
    let b = c.buckets;
    assert_eq!(
        (b.ttft, b.itl, b.tpot),
        (vec![0.1, 1.0, 10.0], vec![0.01, 0.1], vec![0.02])
    );
    assert_eq!(
        (b.e2e, b.output_tokens_per_second),
        (vec![1.0, 60.0], vec![10.0, 100.0])
    );
    assert_eq!(
        all(c.slo.default),
        [ms(500), ms(50), ms(250), ms(60_000), None, None]
    );
    assert_eq!(c.slo.models.keys().collect::<Vec<_>>(), ["llama-3.1-70b"]);
    assert_eq!(
        all(c.slo.models["llama-3.1-70b"]),
        [ms(1000), None, None, None, None, None]
    );
}

#[test]
fn empty_document_gives_the_defaults() {
    for text in [
        "",
        "\n",
        "# only a comment\n",
        "~",
        "---\n",
        "timeouts:\nslo:\n",
    ] {
        assert_eq!(
            Config::from_yaml_str(text).unwrap(),
            Config::default(),
            "{text:?}"
        );
    }
    let d = Config::default();
    assert_eq!(d.upstream, parse_upstream("http://127.0.0.1:8000").unwrap());
    assert_eq!(
        format!("{} {}", d.listen, d.metrics_listen),
        "0.0.0.0:8080 0.0.0.0:9464"
    );
    assert_eq!((d.max_models, Some(d.timeouts.connect)), (1000, ms(10_000)));
    let waits = [10_000, 600_000, 600_000, 30_000, 660_000, 60_000, 1_500];
    assert_eq!(timeouts(&d.timeouts), waits.map(ms));
    let l = &d.limits;
    // A sixteenth of the upstream slots per connection; bodies up to 1 MiB held, 64 MiB for all.
    assert_eq!(
        (
            l.max_upstream_per_connection,
            l.upstream_per_connection(),
            l.hold_request_body_bytes,
            d.budgets.held_bodies
        ),
        (None, 64, 1 << 20, 64 << 20)
    );
    assert_eq!(sizes(l), (64 << 10, 64 << 20, 10_000, 1024, 128));
    assert_eq!(Some(d.shutdown_grace), ms(30_000));
    let m = d.metering;
    assert_eq!((m.max_event_bytes, m.model_scan_bytes), (262_144, 8 << 20));
    assert_eq!(d.slo, Slo::default());
}

#[test]
fn every_default_bucket_list_passes_validation() {
    Config::default().validate().unwrap();
    for (name, list) in Buckets::default().named() {
        check_buckets(name, list).unwrap();
        assert!(list.len() > 15, "{name}");
    }
}

#[test]
fn example_config_file_parses_and_shows_the_defaults() {
    let c = Config::from_yaml_str(include_str!("../../../config/tokentap.yaml")).unwrap();
    let d = Config::default();
    assert_eq!(
        Config {
            slo: d.slo.clone(),
            ..c.clone()
        },
        d,
        "all but slo are defaults"
    );
    assert_eq!(
        all(c.slo.default),
        [ms(500), ms(50), ms(250), ms(60_000), None, None]
    );
    assert_eq!(c.slo.ceilings_for("llama-3.1-70b")[SloKind::Ttft], ms(1000));
}

#[test]
fn model_idle_defaults_to_an_hour_and_never_or_zero_turns_retirement_off() {
    assert_eq!(Config::default().metrics.model_idle, ms(3_600_000));
    for (yaml, want) in [
        ("metrics: {model_idle: 90s}", ms(90_000)),
        ("metrics: {model_idle: never}", None),
        ("metrics: {model_idle: 0s}", None),
        ("metrics: {}", ms(3_600_000)),
    ] {
        let c = Config::from_yaml_str(yaml).unwrap();
        assert_eq!(c.metrics.model_idle, want, "{yaml}");
    }
    let want = "metrics.idle: not a key of `metrics:` (did you mean `model_idle`?); the keys there are: model_idle, max_series, allowed_hosts, enable_reload";
    assert_eq!(err("metrics: {idle: 1h}"), want);
}

#[test]
fn unknown_key_at_top_level_is_named() {
    let want = "lisen: not a key at the top level (did you mean `listen`?); the keys there are: listen, \
         listen_tls, upstream, metrics_listen, upstream_ca_file, max_models, model_list, timeouts, limits, \
         budgets, shutdown_grace, log_level, metering, metrics, buckets, slo, tokenizers, tokenizer_dirs, request_log, \
         tenants, ui, conversations, traces, otlp_metrics, capture";
    assert_eq!(err("listen: 0.0.0.0:1\nlisen: 0.0.0.0:2\n"), want);
}

#[test]
fn wrong_yaml_types_are_named_with_their_key_in_yaml_words() {
    let table = r#"
        max_models: many | max_models: must be a whole number (0 or more), not the text "many"
        max_models: -3 | max_models: must be a whole number (0 or more), not -3
        buckets: {itl: [0.1, fast]} | buckets.itl[1]: must be a number, not the text "fast"
        timeouts: {connect: true} | timeouts.connect: must be a string or a number, not true
        ui: {enabled: yes please} | ui.enabled: must be true or false, not the text "yes please"
        slo: {models: {a: {}, a: {}}} | slo.models.a: written twice (each key once per mapping)
        listen: [1] | listen: must be a string or a number, not a list
        slo: [1] | slo: must be a mapping (its keys indented under it), not a list
    "#;
    for row in rows(table) {
        assert_eq!(err(row[0]), row[1]);
    }
}

#[test]
fn bad_values_give_errors_naming_the_key_and_the_value() {
    let table = "
        slo: {models: {llama-3.1-70b: {ttft: 1 second}}} | slo.models.llama-3.1-70b.ttft | 1 second
        timeouts: {connect: 5} | timeouts.connect | 5
        slo: {ttft: 0.5} | slo.ttft | 0.5
        slo: {itl: -1} | slo.itl | -1
        metering: {max_event_bytes: 1.5} | metering.max_event_bytes | 1.5
        metering: {model_scan_bytes: 1e6} | metering.model_scan_bytes | 1000000.0
        metering: {max_event_bytes: 256kb} | metering.max_event_bytes | 256kb
        metering: {max_event_bytes: 100MiB} | metering.max_event_bytes | 104857600
        metering: {model_scan_bytes: 1000} | metering.model_scan_bytes | 1000
        slo: {tpot: 0ms} | slo.tpot | 0ms
        timeouts: {connect: 0s} | timeouts.connect | 0s
        timeouts: {response_headers: 0s} | timeouts.response_headers | 0s
        timeouts: {idle: 5} | timeouts.idle | 5
        timeouts: {client_header_read: soon} | timeouts.client_header_read | soon
        timeouts: {client_idle: 0ms} | timeouts.client_idle | 0ms
        timeouts: {request_body_idle: 0s} | timeouts.request_body_idle | 0s
        timeouts: {request_body_idle: 60} | timeouts.request_body_idle | 60
        ui: {interval: 500ms} | ui.interval | 500ms
        ui: {interval: 5} | ui.interval | 5
        ui: {history: 5s} | ui.history | 5s
        ui: {history: 24h} | ui.history | 86400s
        ui: {window: 1s} | ui.window | 1s
        ui: {window: 1h} | ui.window | 3600s
        ui: {max_models: 0} | ui.max_models | 0
        ui: {prometheus: https://prometheus:9090} | ui.prometheus | https://prometheus:9090
        ui: {prometheus: prometheus:9090} | ui.prometheus | prometheus:9090
        ui: {prometheus: http://} | ui.prometheus | http://
        limits: {max_request_header_bytes: 4KiB} | limits.max_request_header_bytes | 4096
        limits: {max_request_header_bytes: 1MiB} | limits.max_request_header_bytes | 1048576
        limits: {max_request_header_bytes: lots} | limits.max_request_header_bytes | lots
        limits: {max_request_body_bytes: 100} | limits.max_request_body_bytes | 100
        limits: {max_request_body_bytes: 1.5MiB} | limits.max_request_body_bytes | 1.5MiB
        limits: {max_connections: 0} | limits.max_connections | 0
        limits: {max_connections: 2000000} | limits.max_connections | 2000000
        limits: {max_upstream_connections: 0} | limits.max_upstream_connections | 0
        limits: {max_upstream_connections: 2000000} | limits.max_upstream_connections | 2000000
        limits: {max_concurrent_streams: 0} | limits.max_concurrent_streams | 0
        limits: {max_upstream_per_connection: 0} | limits.max_upstream_per_connection | 0
        limits: {max_upstream_per_connection: 2000} | limits.max_upstream_per_connection | 2000
        limits: {hold_request_body_bytes: 1 MB} | limits.hold_request_body_bytes | 1 MB
        budgets: {held_bodies_per_client: 512KiB} | budgets.held_bodies_per_client | 524288
        budgets: {event_bytes: 1MiB} | budgets.event_bytes_per_client | 16777216
        timeouts: {upstream_idle: 0s} | timeouts.upstream_idle | 0s
        timeouts: {upstream_idle: 5} | timeouts.upstream_idle | 5
        shutdown_grace: 0s | shutdown_grace | 0s
        shutdown_grace: 30 | shutdown_grace | 30
        buckets: {ttft: [0.1, 0.5, 0.5]} | buckets.ttft[2] | 0.5
        buckets: {e2e: [0, 1]} | buckets.e2e[0] | 0
        buckets: {itl: [0.1, .inf]} | buckets.itl[1] | inf
        buckets: {tpot: []} | buckets.tpot | []
        upstream: ftp://x | upstream | ftp://x
        upstream: http://x/v1?key=1 | upstream | http://x/v1?key=1
        upstream: 127.0.0.1:8000 | upstream | 127.0.0.1:8000
        listen: nonsense | listen | nonsense
        metrics_listen: localhost:9464 | metrics_listen | localhost:9464
        metrics_listen: 0.0.0.0:8080 | metrics_listen | 0.0.0.0:8080
        max_models: 0 | max_models | 0
        metrics: {model_idle: 1 hour} | metrics.model_idle | 1 hour
        metrics: {model_idle: 3600} | metrics.model_idle | 3600
        upstream_ca_file: /nonexistent/ca.pem | upstream_ca_file | /nonexistent/ca.pem
        upstream_ca_file: / | upstream_ca_file | /
    ";
    for row in rows(table) {
        let (msg, key, value) = (err(row[0]), row[1], row[2]);
        let named = msg.starts_with(&format!("{key}: invalid "));
        assert!(named && msg.contains(&format!("{value:?}")), "{msg}");
    }
    assert_eq!(
        err("slo: {models: {llama-3.1-70b: {ttft: 1 second}}}"),
        "slo.models.llama-3.1-70b.ttft: invalid duration \"1 second\": expected a number \
         followed by us, ms, s, m or h (e.g. \"250ms\", \"1.5s\", \"2m\")"
    );
    let want = "buckets.ttft[2]: invalid bucket boundary \"0.5\": boundaries must be strictly increasing, but the one before is 0.5";
    assert_eq!(err("buckets: {ttft: [0.1, 0.5, 0.5]}"), want);
}

#[test]
fn validate_catches_values_set_in_code() {
    let mut c = Config::default();
    c.slo.models.insert(
        "m".into(),
        Ceilings::default().with(SloKind::E2e, Duration::ZERO),
    );
    let msg = c.validate().unwrap_err().to_string();
    assert_eq!(
        msg,
        "slo.models.m.e2e: invalid duration \"0s\": must be greater than zero"
    );
    let c = Config {
        upstream: http::Uri::from_static("ftp://x/"),
        ..Config::default()
    };
    let msg = c.validate().unwrap_err().to_string();
    assert!(msg.starts_with("upstream: invalid upstream URL"));
    let mut c = Config::default();
    c.timeouts.upstream_idle = Duration::ZERO;
    let msg = c.validate().unwrap_err().to_string();
    let want = "timeouts.upstream_idle: invalid duration \"0s\": must be greater than zero";
    assert_eq!(
        msg, want,
        "a zero set in code is refused like one in a file"
    );
    let path = std::env::temp_dir().join(format!("tokentap-ca-{}.pem", std::process::id()));
    std::fs::write(&path, "-----BEGIN CERTIFICATE-----\n").unwrap();
    let c = Config {
        upstream_ca_file: Some(path.clone()),
        ..Config::default()
    };
    let result = c.validate();
    std::fs::remove_file(&path).unwrap();
    result.unwrap();
}

#[test]
fn load_names_the_file() {
    let missing = Config::load(Path::new("/nonexistent/tokentap.yaml")).unwrap_err();
    let msg = missing.to_string();
    assert!(
        msg.starts_with("cannot read config file /nonexistent/tokentap.yaml: "),
        "{msg}"
    );
    let path = std::env::temp_dir().join(format!("tokentap-cfg-{}.yaml", std::process::id()));
    std::fs::write(&path, "slo:\n  e2e: soon\n").unwrap();
    let bad = Config::load(&path).map_err(|e| e.to_string());
    std::fs::write(&path, "max_models: 3\n").unwrap();
    let good = Config::load(&path)
        .map(|c| c.max_models)
        .map_err(|e| e.to_string());
    std::fs::remove_file(&path).unwrap();
    let want = format!("{}:2: slo.e2e: invalid duration \"soon\": ", path.display());
    assert_eq!(
        (bad, good),
        (Err(format!("{want}{DURATION_SYNTAX}")), Ok(3))
    );
}

#[test]
fn tokenizers_map_model_names_to_files_and_a_repeated_model_is_an_error() {
    let c = yaml::parse("tokenizers:\n  llama-3.1-8b: /models/llama/tokenizer.json\n").unwrap();
    let path = c
        .tokenizers
        .get("llama-3.1-8b")
        .map(|p| p.display().to_string());
    assert_eq!(path.as_deref(), Some("/models/llama/tokenizer.json"));
    let msg = err("tokenizers:\n  m: /a.json\n  m: /b.json\n");
    assert_eq!(
        msg,
        "tokenizers.m: written twice (each key once per mapping)"
    );
    let msg = err("tokenizers: [a]\n");
    assert!(
        msg.contains("a mapping from model name to a tokenizer.json path"),
        "{msg}"
    );
}

#[cfg(not(feature = "tokenizer"))]
#[test]
fn a_tokenizer_in_a_binary_built_without_the_feature_is_a_clear_error() {
    let msg = err("tokenizers:\n  m: Cargo.toml\n");
    assert_eq!(
        msg,
        "tokenizers.m: invalid tokenizer file \"Cargo.toml\": this tokentap was built without the \
         `tokenizer` feature; rebuild it with its default features (`cargo build --release`)"
    );
    let msg = err("tokenizer_dirs: [/models]\n");
    assert!(
        msg.starts_with(
            "tokenizer_dirs[0]: invalid directory \"/models\": this tokentap was built without"
        ),
        "{msg}"
    );
    // Without the feature the default (the hub cache) and an explicit empty list are fine.
    Config::from_yaml_str("tokenizer_dirs: []\n").unwrap();
}

#[cfg(feature = "tokenizer")]
#[test]
fn a_missing_tokenizer_file_is_an_error_naming_the_model() {
    let msg = err("tokenizers:\n  m: /nonexistent/tokenizer.json\n");
    assert!(
        msg.starts_with(
            "tokenizers.m: invalid path \"/nonexistent/tokenizer.json\": cannot read it"
        ),
        "{msg}"
    );
    let msg = err("tokenizers:\n  '': Cargo.toml\n");
    assert!(msg.starts_with("tokenizers: invalid model name"), "{msg}");
}

#[test]
fn tokenizer_dirs_default_to_the_hub_cache_and_an_empty_list_turns_discovery_off() {
    assert_eq!(Config::default().tokenizer_dirs, None);
    let c = yaml::parse("tokenizer_dirs: [/models, /root/.cache/huggingface/hub]\n").unwrap();
    let dirs = c.tokenizer_dirs.unwrap();
    assert_eq!(
        dirs,
        [
            PathBuf::from("/models"),
            "/root/.cache/huggingface/hub".into()
        ]
    );
    assert_eq!(
        yaml::parse("tokenizer_dirs: []\n").unwrap().tokenizer_dirs,
        Some(vec![])
    );
    let msg = err("tokenizer_dirs: /models\n");
    assert!(msg.starts_with("tokenizer_dirs: must be a list"), "{msg}");
}

#[cfg(feature = "tokenizer")]
#[test]
fn tokenizer_dirs_must_be_absolute_without_dot_segments() {
    Config::from_yaml_str("tokenizer_dirs: [/models, /not/there/yet]\n").unwrap();
    let cases = [
        ("tokenizer_dirs: [models]\n", "tokenizer_dirs[0]: invalid directory \"models\": must be an absolute path"),
        (
            "tokenizer_dirs: [/ok, /models/../etc]\n",
            "tokenizer_dirs[1]: invalid directory \"/models/../etc\": must not contain . or .. segments",
        ),
    ];
    for (yaml, want) in cases {
        assert_eq!(err(yaml), want);
    }
}

#[test]
fn request_log_is_off_by_default_and_takes_a_file_or_stdout_with_checked_bounds() {
    assert_eq!(Config::default().request_log, None);
    let c = Config::from_yaml_str("request_log: {path: /tmp/r.jsonl, gaps: true, max_gaps: 10}")
        .unwrap();
    let log = c.request_log.unwrap();
    assert_eq!(log.path, RecordPath::File("/tmp/r.jsonl".into()));
    assert_eq!((log.gaps, log.max_gaps, log.queue), (true, 10, 8192));
    let c = Config::from_yaml_str("request_log: {path: \"-\"}").unwrap();
    assert_eq!(c.request_log.map(|l| l.path), Some(RecordPath::Stdout));
    for (yaml, want) in [
        ("request_log: {}", "request_log.path: invalid path \"\": request_log needs a `path`: a file, or \"-\" for standard output"),
        ("request_log: {path: /tmp, queue: 5}", "request_log.path: invalid path \"/tmp\": is a directory; name the file to write (e.g. /var/log/tokentap/requests.jsonl)"),
        ("request_log: {path: x.jsonl, queue: 0}", "request_log.queue: invalid value \"0\": must be between 1 and 1048576"),
        ("request_log: {path: x.jsonl, max_gaps: 0}", "request_log.max_gaps: invalid value \"0\": must be between 1 and 1048576"),
        ("request_log: {path: x.jsonl, gap: true}", "request_log.gap: not a key of `request_log:` (did you mean `gaps`?); the keys there are: path, gaps, max_gaps, queue"),
    ] {
        assert_eq!(err(yaml), want, "{yaml}");
    }
}

#[test]
fn tenants_come_from_one_header_or_the_bearer_hash_never_a_credential_header() {
    assert_eq!(Config::default().tenants, None);
    let c =
        Config::from_yaml_str("tenants: {header: X-Tenant-Id, max: 8, slo: {acme: {ttft: 300ms}}}")
            .unwrap();
    let t = c.tenants.clone().unwrap();
    assert_eq!(
        (t.source(), t.max),
        (TenantFrom::Header("x-tenant-id".into()), 8)
    );
    assert_eq!(c.slo.tenants["acme"][SloKind::Ttft], ms(300));
    let key = "Yx3Qm0v8pH2wN5rT7sK9dL4fJ6gB1cZ+aE0uI2oR8yA=";
    let c = Config::from_yaml_str(&format!(
        "tenants: {{bearer_hash: true, hash_key: \"{key}\"}}"
    ))
    .unwrap();
    let t = c.tenants.unwrap();
    assert_eq!((t.source(), t.max), (TenantFrom::BearerHash, 32));
    for (yaml, want) in [
        ("tenants: {}", "tenants: invalid value \"{}\": say where the tenant comes from: `header: x-tenant-id` or `bearer_hash: true`"),
        ("tenants: {header: a, bearer_hash: true}", "tenants.header: invalid value \"a\": set either `header` or `bearer_hash: true`, not both"),
        ("tenants: {header: Authorization}", "tenants.header: invalid header name \"authorization\": carries a credential, which must never become a label; use `bearer_hash: true` for the bearer token"),
        ("tenants: {header: \"a b\"}", "tenants.header: invalid header name \"a b\": must be a header name such as x-tenant-id"),
        ("tenants: {header: t, max: 0}", "tenants.max: invalid value \"0\": must be between 1 and 10000"),
        ("tenants: {header: t, slo: {acme: {ttft: 0s}}}", "tenants.slo.acme.ttft: invalid duration \"0s\": must be greater than zero"),
        ("metrics: {max_series: 0}", "metrics.max_series: invalid value \"0\": must be at least 1"),
    ] {
        assert_eq!(err(yaml), want, "{yaml}");
    }
}

#[test]
fn the_live_page_is_on_by_default_with_30_minutes_of_5s_snapshots() {
    let d = Config::default().ui;
    assert!(d.enabled);
    assert_eq!(
        (d.interval, d.history, d.window),
        (
            Duration::from_secs(5),
            Duration::from_secs(1800),
            Duration::from_secs(60)
        )
    );
    assert_eq!((d.points(), d.max_models), (360, 10));
    let c = Config::from_yaml_str(
        "ui: {enabled: false, interval: 2s, history: 10m, window: 30s, max_models: 3}",
    )
    .unwrap();
    assert!(!c.ui.enabled);
    assert_eq!(
        (c.ui.points(), c.ui.window, c.ui.max_models),
        (300, Duration::from_secs(30), 3)
    );
    assert!(err("ui: {colour: blue}").starts_with("ui.colour: not a key of `ui:`"));
}

#[test]
fn a_file_over_a_base_replaces_only_the_keys_it_writes() {
    let mut base = Config {
        listen: "127.0.0.1:8080".parse().unwrap(),
        tokenizer_dirs: Some(Vec::new()),
        ..Config::default()
    };
    base.slo.default = Ceilings::default()
        .with(SloKind::Ttft, Duration::from_millis(500))
        .with(SloKind::Tpot, Duration::from_millis(50));
    base.slo.models.insert(
        "m".into(),
        Ceilings::default().with(SloKind::Ttft, Duration::from_secs(1)),
    );
    let path = std::env::temp_dir().join(format!("tokentap-over-{}.yaml", std::process::id()));
    std::fs::write(
        &path,
        "slo:\n  ttft: 2s\n  itl: ~\nrequest_log: {path: /tmp/x.jsonl}\n",
    )
    .unwrap();
    let over = Config::load_over(&path, &base);
    std::fs::write(&path, "slo:\n  ttft: soon\n").unwrap();
    let bad = Config::load_over(&path, &base).map_err(|e| e.to_string());
    std::fs::remove_file(&path).unwrap();
    let c = over.unwrap();
    assert_eq!(
        all(c.slo.default),
        [ms(2000), ms(50), None, None, None, None]
    );
    assert_eq!(
        c.slo.ceilings_for("m")[SloKind::Ttft],
        ms(1000),
        "a model's own kept"
    );
    assert_eq!(c.listen, base.listen);
    assert_eq!(c.tokenizer_dirs, Some(Vec::new()));
    let log = c.request_log.map(|l| l.path);
    assert_eq!(log, Some(RecordPath::File("/tmp/x.jsonl".into())));
    let want = format!(
        "{}:2: slo.ttft: invalid duration \"soon\": ",
        path.display()
    );
    assert!(bad.as_ref().is_err_and(|e| e.starts_with(&want)), "{bad:?}");
}
