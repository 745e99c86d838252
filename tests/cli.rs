//! The `tokentap` command as a user runs it: `check-config` verdicts and exit codes, flag errors, and a
//! bounded `demo` run that proves the README's first command produces metered traffic.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokentap::record::metrics::family;

use support::get_blocking;

/// `tokentap check-config FILE`, run to its end.
fn check_config(file: impl AsRef<std::ffi::OsStr>) -> std::process::Output {
    tokentap()
        .arg("check-config")
        .arg(file)
        .output()
        .expect("run")
}

fn tokentap() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tokentap"))
}

/// A directory of one test's own under the temp dir, removed with what is in it when dropped (the
/// tests of this file run at once: one directory for all of them would be removed under the others).
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tokentap-cli-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Scratch(dir)
    }

    /// Writes `text` to the file `name` in the directory; its path.
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn check_config_accepts_the_shipped_example() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/tokentap.yaml");
    let out = tokentap()
        .args(["check-config", example])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

#[test]
fn check_config_rejects_bad_values_naming_key_and_value() {
    let cases = [
        ("slo:\n  ttft: fast\n", ["slo.ttft", "fast"]),
        (
            "slo:\n  models:\n    llama:\n      tpot: -5ms\n",
            ["slo.models.llama.tpot", "-5ms"],
        ),
        (
            "upstream: ftp://example.com\n",
            ["upstream", "ftp://example.com"],
        ),
        ("max_models: 0\n", ["max_models", "0"]),
    ];
    let scratch = Scratch::new("bad-values");
    for (i, (yaml, needles)) in cases.iter().enumerate() {
        let path = scratch.write(&format!("bad{i}.yaml"), yaml);
        let out = check_config(&path);
        assert!(!out.status.success(), "accepted {yaml:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "message for {yaml:?} lacks {needle:?}: {stderr}"
            );
        }
    }
}

#[test]
fn check_config_reads_the_listen_tls_pair_and_names_what_is_wrong_with_it() {
    let tls = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");
    let scratch = Scratch::new("listen-tls");
    let pair =
        |key: &str| format!("listen_tls: {{cert_file: {tls}/server.pem, key_file: {tls}/{key}}}\n");
    let good = scratch.write("good.yaml", &pair("server.key"));
    let out = check_config(&good);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("listen_tls: ") && stdout.contains("(1 certificate(s) in the chain)"),
        "{stdout}"
    );
    let bad = scratch.write("bad.yaml", &pair("rotated.key"));
    let out = check_config(&bad);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let said = format!("listen_tls.key_file: {tls}/rotated.key: is not the key of the certificate in {tls}/server.pem");
    assert!(stderr.contains(&said), "{stderr}");
}

#[test]
fn the_shipped_slo_objects_are_what_slo_objects_renders_from_the_example_config() {
    let root = env!("CARGO_MANIFEST_DIR");
    for (format, file) in [
        ("pyrra", "deploy/kubernetes/pyrra-slos.yaml"),
        ("sloth", "deploy/kubernetes/sloth-slos.yaml"),
    ] {
        let out = tokentap()
            .current_dir(root)
            .args([
                "slo-objects",
                "--config",
                "config/tokentap.yaml",
                "--format",
                format,
            ])
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let shipped = std::fs::read_to_string(format!("{root}/{file}")).expect("shipped");
        assert!(
            String::from_utf8_lossy(&out.stdout) == shipped,
            "{file} differs from `tokentap slo-objects --config config/tokentap.yaml --format {format}`: run it again"
        );
    }
    let out = tokentap()
        .current_dir(root)
        .args([
            "slo-objects",
            "--config",
            "config/tokentap.yaml",
            "--target",
            "100",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--target: 100 must be above 0 and below 100"));
}

#[test]
fn check_config_checks_tokenizers_as_this_binary_can_use_them() {
    let words = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tokenizer/words.json"
    );
    let not_json = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let scratch = Scratch::new("tokenizers");
    let run = |name: &str, path: &str| {
        let config = scratch.write(name, &format!("tokenizers:\n  my-model: {path}\n"));
        let out = check_config(&config);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), stderr)
    };
    let (ok, stderr) = run("tok-words.yaml", words);
    let (bad_ok, bad_stderr) = run("tok-bad.yaml", not_json);
    assert!(!bad_ok, "accepted a tokenizer that is not one");
    assert!(bad_stderr.contains("tokenizers.my-model"), "{bad_stderr}");
    if cfg!(feature = "tokenizer") {
        assert!(ok, "{stderr}");
    } else {
        assert!(!ok, "a binary without the feature accepted a tokenizer");
        assert!(
            stderr.contains("built without the `tokenizer` feature"),
            "{stderr}"
        );
    }
}

const FROM_ROOT_ON: &str = "tokenizer from the upstream's model list (a served model's root): on";

#[test]
fn check_config_lists_each_tokenizer_it_found_for_which_model_and_where_it_looks() {
    let words = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tokenizer/words.json"
    );
    let scratch = Scratch::new("discovery");
    let dir = scratch.0.join("discovery");
    let place = |relative: &str| {
        let path = dir.join(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::copy(words, &path).expect("copy");
        path
    };
    let in_hub = place("hub/models--org--words/snapshots/abc/tokenizer.json");
    let in_dir = place("models/llama/tokenizer.json");
    let (hub, models) = (dir.join("hub"), dir.join("models"));
    let yaml = format!(
        "tokenizers:\n  m: {words}\ntokenizer_dirs: [{}, {}, /nonexistent/tokenizers]\n",
        hub.display(),
        models.display()
    );
    let run = |name: &str, yaml: &str| {
        let config = scratch.write(name, yaml);
        let out = check_config(&config);
        let (stdout, stderr) = (out.stdout, out.stderr);
        let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
        (out.status.success(), text(stdout), text(stderr))
    };
    let (ok, stdout, stderr) = run("discovery.yaml", &yaml);
    if !cfg!(feature = "tokenizer") {
        assert!(!ok, "a binary without the feature accepted tokenizer_dirs");
        assert!(
            stderr.contains("built without the `tokenizer` feature"),
            "{stderr}"
        );
        return;
    }
    assert!(ok, "{stderr}");
    let expected = [
        format!("tokenizer for model `m`: {words} (configured)"),
        format!(
            "tokenizer discovery under {}: 1 model(s) found now",
            hub.display()
        ),
        format!("  tokenizer for model `org/words`: {}", in_hub.display()),
        format!(
            "tokenizer discovery under {}: 1 model(s) found now",
            models.display()
        ),
        format!("  tokenizer for model `llama`: {}", in_dir.display()),
        "tokenizer discovery under /nonexistent/tokenizers: not a directory (yet)".to_owned(),
        FROM_ROOT_ON.to_owned(),
    ];
    let bound = "series bound: models 103 × apis 11 × statuses 22 × outcomes 4 = 99704 series of tokentap_requests_total alone; 590434 series in all";
    assert!(
        stdout.lines().nth(1).is_some_and(|l| l.starts_with(bound)),
        "{stdout}"
    );
    let lines: Vec<&str> = stdout.lines().skip(2).collect();
    assert_eq!(lines, expected, "{stdout}");
    let (ok, stdout, stderr) = run("discovery-off.yaml", "tokenizer_dirs: []\n");
    assert!(ok, "{stderr}");
    let off = format!("\ntokenizer discovery: off\n{FROM_ROOT_ON}\n");
    assert!(stdout.ends_with(&off), "{stdout}");
    let yaml = "tokenizer_dirs: []\nmodel_list: {tokenizer_from_root: false}\n";
    let (ok, stdout, stderr) = run("from-root-off.yaml", yaml);
    assert!(ok, "{stderr}");
    let off = "\ntokenizer from the upstream's model list (a served model's root): off\n";
    assert!(stdout.ends_with(off), "{stdout}");
}

#[test]
fn check_config_refuses_a_short_or_documented_hash_key_and_says_how_to_make_one() {
    // With a key anyone can read (the one the example showed), a six-digit token was found again
    // from its tenant tag in 1.4 s.
    let scratch = Scratch::new("hash-key");
    for key in ["at least 16 bytes", "0123456789abcdef0123"] {
        let yaml = format!("tenants: {{bearer_hash: true, hash_key: \"{key}\"}}\n");
        let path = scratch.write("hash-key.yaml", &yaml);
        let out = check_config(&path);
        assert!(!out.status.success(), "accepted {key:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("tenants.hash_key"), "{stderr}");
        assert!(
            stderr.contains("head -c 32 /dev/urandom | base64"),
            "{stderr}"
        );
        assert!(!stderr.contains(key), "the key is shown: {stderr}");
    }
}

#[test]
fn check_config_rejects_unknown_keys() {
    let scratch = Scratch::new("unknown-keys");
    let path = scratch.write("unknown.yaml", "slo:\n  ttft: 1s\n  tffts: 2s\n");
    let out = check_config(&path);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("tffts"));
}

#[test]
fn a_missing_config_file_is_an_error_naming_it() {
    let out = tokentap()
        .args(["--config", "/nonexistent/tokentap.yaml"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/tokentap.yaml"));
}

#[test]
fn a_bad_upstream_flag_is_an_error_naming_the_flag() {
    let out = tokentap()
        .args(["--upstream", "not a url", "--listen", "127.0.0.1:0"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--upstream"));
}

#[test]
fn demo_serves_metered_traffic_and_stops_on_sigterm() {
    let scratch = Scratch::new("demo");
    let log = scratch.write("demo.log", "");
    let mut child = tokentap()
        .args([
            "demo",
            "--duration",
            "20s",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn demo");
    let stdout = child.stdout.take().expect("stdout");
    let mut metrics_addr = None;
    let mut live_page = None;
    for (i, line) in BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .take(20)
        .enumerate()
    {
        // The live page's URL comes first.
        if i == 0 {
            live_page = line.strip_prefix("live page: http://").and_then(|rest| {
                rest.split_whitespace()
                    .next()
                    .map(|u| u.trim_end_matches('/').to_owned())
            });
        }
        if let Some(rest) = line.trim().strip_prefix("metrics") {
            let url = rest.trim();
            metrics_addr = url
                .strip_prefix("http://")
                .and_then(|u| u.strip_suffix("/metrics"))
                .map(str::to_owned);
            break;
        }
    }
    let addr = metrics_addr.expect("the demo prints its metrics address");
    let live_page = live_page.expect("the demo's first line is the live page's URL");
    assert_eq!(live_page, addr, "the live page is on the metrics port");
    let page = get_blocking(&addr, "/").expect("the live page answers");
    assert!(page.contains("<title>tokentap live</title>"));
    let deadline = Instant::now() + Duration::from_secs(18);
    let mut seen = String::new();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        let got = get_blocking(&addr, "/metrics");
        if let Err(err) = &got {
            seen = err.clone();
        }
        if let Ok(text) = got {
            seen = text;
            // At least two answered requests, so that one of them came over a reused upstream
            // connection (checked below: none failed upstream).
            let body = seen.split_once("\r\n\r\n").map_or("", |(_, body)| body);
            let answered =
                support::Metrics::parse(body).get(family::REQUESTS.name, &[("outcome", "ok")]);
            if seen.contains("tokentap_time_to_first_token_seconds_count{api=\"chat\"")
                && answered >= 2.0
            {
                break;
            }
        }
    }
    assert!(
        seen.contains(&family::TTFT.count()),
        "no TTFT after the demo ran: {seen}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(seen.contains("model=\"demo-"), "demo models missing");
    // `tokentap top` reads the same figures from the live page's JSON (a snapshot every 5 s).
    let deadline = Instant::now() + Duration::from_secs(12);
    let mut table = String::new();
    while Instant::now() < deadline && !table.contains("\ndemo-") {
        let out = tokentap()
            .args(["top", "--once", "--url", &format!("http://{addr}")])
            .output()
            .expect("run top");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        table = String::from_utf8_lossy(&out.stdout).into_owned();
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        table.contains("TTFT50") && table.contains("\ndemo-"),
        "{table}"
    );
    // The demo's own server keeps its connections alive and answers every request: no request of the
    // demo's clients fails upstream (a server that closed each connection after one answer made
    // tokentap's pool resend or fail the next).
    let answer = get_blocking(&addr, "/metrics").unwrap_or_default();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    let metrics = support::Metrics::parse(body);
    let requests = family::REQUESTS.name;
    assert!(
        metrics.get(requests, &[("outcome", "ok")]) >= 2.0,
        "{}",
        metrics.text
    );
    assert_eq!(
        metrics.get(requests, &[("outcome", "upstream_error")]),
        0.0,
        "{}",
        metrics.text
    );
    // SIGTERM (what `docker stop` and Kubernetes send) stops the demo cleanly, long before --duration.
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        status.is_some_and(|s| s.success()),
        "demo did not exit cleanly on SIGTERM: {status:?}"
    );
}

#[test]
fn ui_false_on_the_command_line_turns_the_live_page_off() {
    let mut child = tokentap()
        .args(["demo", "--ui", "false", "--duration", "10s"])
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn demo");
    let stdout = child.stdout.take().expect("stdout");
    let lines: Vec<String> = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .take(5)
        .collect();
    assert_eq!(lines.first().map(String::as_str), Some("tokentap demo"));
    let addr = lines
        .iter()
        .find_map(|l| l.trim().strip_prefix("metrics"))
        .and_then(|rest| rest.trim().strip_prefix("http://"))
        .and_then(|u| u.strip_suffix("/metrics"))
        .expect("metrics address")
        .to_owned();
    let page = get_blocking(&addr, "/").expect("answer");
    let _ = child.kill();
    let _ = child.wait();
    assert!(page.starts_with("HTTP/1.1 404"), "{page}");
}

/// Each subcommand takes its own options only: `report --help` offers no proxy flag, the proxy's
/// `--help` no report flag, and a proxy flag given to a subcommand (before or after it) is a usage error.
#[test]
fn each_subcommand_lists_and_takes_only_its_own_options() {
    let help = |args: &[&str]| {
        let out = tokentap().args(args).arg("--help").output().expect("run");
        assert!(out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let proxy_only = ["--listen", "--metrics-listen", "--upstream", "--ui"];
    for sub in ["report", "top", "check-config", "tenant-tag"] {
        let text = help(&[sub]);
        for flag in proxy_only {
            assert!(
                !text.contains(flag),
                "`{sub} --help` offers {flag}:\n{text}"
            );
        }
    }
    let demo = help(&["demo"]);
    assert!(
        demo.contains("--listen") && demo.contains("--duration"),
        "{demo}"
    );
    assert!(
        !demo.contains("--upstream"),
        "the demo has its own upstream:\n{demo}"
    );
    let proxy = help(&[]);
    for flag in proxy_only {
        assert!(proxy.contains(flag), "{flag} missing from --help:\n{proxy}");
    }
    assert!(!proxy.contains("--slowest"), "{proxy}");
    for args in [
        &["report", "x.jsonl", "--listen", "127.0.0.1:1"][..],
        &["--listen", "127.0.0.1:1", "report", "x.jsonl"],
        &["check-config", "x.yaml", "--upstream", "http://x"],
    ] {
        let out = tokentap().args(args).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?} is a usage error");
    }
}
