//! The `tokentap` command as a user runs it: flag errors, `slo-objects`, each subcommand's options, and
//! bounded `demo` runs that prove the README's first commands produce metered traffic, a record file and
//! a report (`check-config`: `check_config.rs`).

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokentap::record::metrics::family;

use support::{get_blocking, stdout_of, tokentap, Scratch};

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
    let _slot = support::slot();
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
    let deadline = Instant::now() + support::HANG;
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
    let deadline = Instant::now() + support::HANG;
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
    let deadline = Instant::now() + support::HANG;
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
    let _slot = support::slot();
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
    let _slot = support::slot();
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
