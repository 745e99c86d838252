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

/// Runs `command` to its end, which must succeed (else its stderr is the failure); its stdout.
fn stdout_of(command: &mut Command) -> String {
    let out = command.output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
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
    assert!(stdout_of(tokentap().args(["check-config", example])).contains("ok"));
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

/// Ten broken files, as people break them: every problem of each is reported (not only the first), each
/// as `file:line: key: …` in words for someone who writes YAML, and the exit status says it failed.
#[test]
fn check_config_reports_every_problem_of_ten_broken_files_with_key_and_line() {
    let cases: [(&str, &[&str]); 10] = [
        // Three value errors in one file: all three, in line order.
        (
            "max_models: -3\nshutdown_grace: 5\ntimeouts:\n  connect: 1x\n",
            &[
                ":1: max_models: must be a whole number (0 or more), not -3",
                ":2: shutdown_grace: invalid duration \"5\": expected a number followed by",
                ":4: timeouts.connect: invalid duration \"1x\"",
            ],
        ),
        // An indentation slip: said as one, not as a bad duration.
        (
            "slo:\n  ttft: 500ms\n   tpot: 50ms\n",
            &[":3: line 3 (`tpot: 50ms`) is indented further than `ttft` on line 2"],
        ),
        (
            "slo:\n  ttft: 500ms\n   tpot 50ms\n",
            &[":3: slo.ttft: line 3 (`tpot 50ms`) is indented further than `ttft` on line 2"],
        ),
        // A ceiling that lost its indentation, and a limit under the timeouts.
        (
            "slo:\n  ttft: 500ms\ntpot: 50ms\ntimeouts:\n  max_connections: 5\n",
            &[
                ":3: tpot: not a key at the top level (`tpot` is a key of `buckets:`, `slo:`: is it indented under one of them?)",
                ":5: timeouts.max_connections: not a key of `timeouts:` (`max_connections` is a key of `limits:`: is it indented under it?)",
            ],
        ),
        // Typos, with what was meant.
        (
            "lisen: 0.0.0.0:8080\nmetrics:\n  idle: 1h\n",
            &[
                ":1: lisen: not a key at the top level (did you mean `listen`?)",
                ":3: metrics.idle: not a key of `metrics:` (did you mean `model_idle`?)",
            ],
        ),
        // Wrong types in plain words.
        (
            "max_models: many\nui:\n  enabled: yes please\nbuckets:\n  itl: [0.1, fast]\n",
            &[
                ":1: max_models: must be a whole number (0 or more), not the text \"many\"",
                ":3: ui.enabled: must be true or false, not the text \"yes please\"",
                ":5: buckets.itl[1]: must be a number, not the text \"fast\"",
            ],
        ),
        // Checks across keys and of values, each on its line.
        (
            "listen: 0.0.0.0:8080\nmetrics_listen: 0.0.0.0:8080\nbuckets:\n  ttft: [0.1, 0.5, 0.5]\n",
            &[
                ":2: metrics_listen: invalid address \"0.0.0.0:8080\": must differ from listen",
                ":4: buckets.ttft[2]: invalid bucket boundary \"0.5\"",
            ],
        ),
        // A model's ceilings: a typo and a zero.
        (
            "slo:\n  models:\n    llama-3.1-70b:\n      ttf: 1s\n    qwen:\n      e2e: 0s\n",
            &[
                ":4: slo.models.llama-3.1-70b.ttf: not a key of `slo.models.llama-3.1-70b:` (did you mean `ttft`?)",
                ":6: slo.models.qwen.e2e: invalid duration \"0s\": must be greater than zero",
            ],
        ),
        // YAML itself refuses: a tab, and a key written twice.
        (
            "slo:\n\tttft: 1s\n",
            &[":2: the file is not valid YAML: ", "(YAML indents with spaces, never tabs)"],
        ),
        (
            "upstream: http://a:8000\nupstream: http://b:8000\n",
            &[":2: upstream: written twice (each key once per mapping)"],
        ),
    ];
    let scratch = Scratch::new("ten-broken");
    for (i, (yaml, said)) in cases.iter().enumerate() {
        let path = scratch.write(&format!("broken{i}.yaml"), yaml);
        let out = check_config(&path);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{yaml:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{yaml:?}");
        for needle in *said {
            assert!(
                stderr.contains(needle),
                "{yaml:?}: no {needle:?} in\n{stderr}"
            );
        }
        assert!(
            !stderr.contains("usize") && !stderr.contains("invalid type"),
            "{stderr}"
        );
        let problems = stderr
            .lines()
            .filter(|l| {
                l.split(".yaml:")
                    .nth(1)
                    .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
            })
            .count();
        let lines = said.iter().filter(|s| s.starts_with(':')).count();
        assert_eq!(problems, lines, "{yaml:?}: one line a problem:\n{stderr}");
        if lines > 1 {
            let counted = format!("{}: {lines} problems", path.display());
            assert!(stderr.contains(&counted), "{stderr}");
        }
    }
}

#[test]
fn check_config_is_quiet_on_the_shipped_example_without_a_model_cache_and_takes_500_models() {
    let scratch = Scratch::new("quiet");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/tokentap.yaml");
    let out = tokentap()
        .args(["check-config", example])
        // A machine with no HuggingFace cache: the default search root does not exist.
        .env("HOME", &scratch.0)
        .env_remove("HF_HOME")
        .env_remove("HF_HUB_CACHE")
        .output()
        .expect("run");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.is_empty(), "the log says more than stdout: {stderr}");
    assert!(
        stdout.contains("(the HuggingFace cache): none there yet"),
        "{stdout}"
    );
    let many = scratch.write("adapters.yaml", "max_models: 500\n");
    stdout_of(tokentap().arg("check-config").arg(&many));
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
            "tokenizer discovery under {}: 1 model(s) found now (each loaded when its model is first served)",
            hub.display()
        ),
        format!("  tokenizer for model `org/words`: {}", in_hub.display()),
        format!(
            "tokenizer discovery under {}: 1 model(s) found now (each loaded when its model is first served)",
            models.display()
        ),
        format!("  tokenizer for model `llama`: {}", in_dir.display()),
        "tokenizer discovery under /nonexistent/tokenizers: not a directory (yet); looked in again for each new model".to_owned(),
        FROM_ROOT_ON.to_owned(),
    ];
    let bound = "series bound: at most 750000 series: ";
    assert!(
        stdout.lines().nth(1).is_some_and(|l| l.starts_with(bound)),
        "{stdout}"
    );
    let lines: Vec<&str> = stdout.lines().skip(2).collect();
    assert_eq!(lines, expected, "{stdout}");
    let (ok, stdout, stderr) = run("discovery-off.yaml", "tokenizer_dirs: []\n");
    assert!(ok, "{stderr}");
    let off = format!("\ntokenizer discovery by name: off\n{FROM_ROOT_ON}\n");
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
        // Its record file under this test's own directory (the demo's is under the temp dir).
        .env("TMPDIR", &scratch.0)
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
        table = stdout_of(tokentap().args(["top", "--once", "--url", &format!("http://{addr}")]));
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

/// `demo --duration` names its record file first, stops sending when the time is up, lets what is in
/// flight finish (no request cut: the only `cancelled` records are the streams its clients walked away
/// from on purpose, as it says at the end), and `tokentap report` reads the file right after, with the
/// goodput ratio beside the count.
#[test]
fn the_demo_names_its_record_file_and_report_reads_it_right_after() {
    let scratch = Scratch::new("demo-records");
    let started = Instant::now();
    let stdout = stdout_of(tokentap().env("TMPDIR", &scratch.0).args([
        "demo",
        "--duration",
        "6s",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--ui",
        "false",
    ]));
    // The duration, then at most the demo's FINISH (30 s) for what was in flight, with room.
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "{:?}",
        started.elapsed()
    );
    let file = scratch.0.join("tokentap-demo.jsonl");
    let named = format!(
        "  records                {}   (tokentap report {0})",
        file.display()
    );
    let first: Vec<&str> = stdout.lines().take(6).collect();
    assert!(first.contains(&named.as_str()), "{stdout}");
    let said = stdout
        .lines()
        .find_map(|l| l.strip_prefix("tokentap demo stopped: "))
        .unwrap_or_else(|| panic!("no closing line: {stdout}"));
    let number = |after: &str| -> usize {
        let at = said.find(after).expect("a count") + after.len();
        let digits: String = said[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().expect("a number")
    };
    let (answered, left) = (number(""), number("answered, "));
    let records = std::fs::read_to_string(&file).expect("the demo's records");
    let outcomes: Vec<String> = records
        .lines()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).expect("a record");
            record["outcome"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert!(answered >= 3, "{said}");
    assert_eq!(outcomes.len(), answered, "one record a request: {said}");
    let cancelled = outcomes.iter().filter(|o| *o == "cancelled").count();
    assert_eq!(
        cancelled, left,
        "only the walk-aways are cancelled: {outcomes:?}"
    );
    assert_eq!(
        outcomes.len() - cancelled,
        outcomes.iter().filter(|o| *o == "ok").count()
    );
    let report = stdout_of(tokentap().args(["report", "--format", "json"]).arg(&file));
    let doc: serde_json::Value = serde_json::from_str(&report).expect("json");
    let total = &doc["total"];
    assert_eq!(total["request_count"], answered as u64);
    let (good, ratio) = (
        total["good_request_count"].as_f64(),
        total["goodput_ratio"].as_f64(),
    );
    assert_eq!(ratio, good.map(|g| g / answered as f64), "{total}");
    let table = stdout_of(tokentap().arg("report").arg(&file));
    let line = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .map(str::to_owned)
    };
    assert!(
        line("Good Request Count").is_some() && line("Goodput Ratio (%)").is_some(),
        "{table}"
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
