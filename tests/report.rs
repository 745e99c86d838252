//! `tokentap report` on a fixed record file whose figures were computed by hand
//! (tests/fixtures/records/day.jsonl: six requests, two models, three tenants, a cancelled stream, a
//! 503 and a non-streaming answer): every figure, goodput and attainment as recorded and with what-if
//! ceilings, grouping and its cap, the time window, gzip told by its magic bytes, malformed lines and
//! other schema versions skipped and counted (or refused with `--strict`), `--compare`, `--slowest`,
//! a config's ceilings (per model and tenant), the sketch past 1,000 values, the JSON shape, the
//! command line itself, and docs/report.md's sample.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;
use tokentap::report::query::{self, By, Window};
use tokentap::report::slowest::SlowBy;
use tokentap::report::{run, Format, Options};

const DAY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/records/day.jsonl"
);

fn options(files: &[&str]) -> Options {
    Options {
        files: files.iter().map(|f| f.to_string()).collect(),
        compare: Vec::new(),
        by: None,
        window: Window::default(),
        format: Format::Json,
        slo: None,
        strict: false,
        progress: false,
        slowest: 0,
        slowest_by: SlowBy::TTFT,
    }
}

/// The report's output and its warnings.
fn report(options: &Options) -> Result<(String, String), String> {
    let (mut out, mut warn) = (Vec::new(), Vec::new());
    run(options, &mut out, &mut warn)?;
    let text = |b: Vec<u8>| String::from_utf8(b).expect("utf-8");
    Ok((text(out), text(warn)))
}

fn json(options: &Options) -> Value {
    let (out, _) = report(options).expect("report");
    serde_json::from_str(&out).expect("json")
}

fn temp(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tokentap-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write");
    path
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("gzip");
    encoder.finish().expect("gzip")
}

fn close(got: &Value, want: f64) {
    let got = got
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {got}"));
    assert!((got - want).abs() < 1e-9, "{got} != {want}");
}

/// avg, min, max, p50, p90, p99 and count of one figure.
fn figure(total: &Value, tag: &str, want: [f64; 6], count: u64) {
    let m = &total["metrics"][tag];
    for (stat, want) in ["avg", "min", "max", "p50", "p90", "p99"].iter().zip(want) {
        let got = m[stat].as_f64().unwrap_or(f64::NAN);
        assert!((got - want).abs() < 1e-9, "{tag} {stat}: {got} != {want}");
    }
    assert_eq!(m["count"], count, "{tag} count");
}

#[test]
fn every_figure_of_the_fixture_matches_the_hand_computed_value() {
    let doc = json(&options(&[DAY]));
    let t = &doc["total"];
    assert_eq!(t["request_count"], 6);
    assert_eq!(t["start"], "2026-12-03T08:00:00.000Z");
    // The last end is r6: started 08:00:05, E2E 4 s.
    assert_eq!(t["end"], "2026-12-03T08:00:09.000Z");
    close(&t["duration_s"], 9.0);
    close(&t["request_throughput"], 6.0 / 9.0);
    assert_eq!(
        (t["input_tokens"].clone(), t["output_tokens"].clone()),
        (1500.into(), 308.into())
    );
    close(&t["input_token_throughput"], 1500.0 / 9.0);
    close(&t["output_token_throughput"], 308.0 / 9.0);
    assert_eq!(t["good_request_count"], 2);
    close(&t["goodput"], 2.0 / 9.0);
    // Nearest rank: p50 of 4 values is the 2nd, p90 and p99 the 4th.
    figure(t, "time_to_first_token", [0.25, 0.1, 0.4, 0.2, 0.4, 0.4], 4);
    figure(
        t,
        "time_to_first_output_token",
        [0.8 / 3.0, 0.1, 0.5, 0.2, 0.5, 0.5],
        3,
    );
    // Seven gaps of four requests (the cancelled one's too): .01 .02 .03 .04 .05 .06 .5.
    figure(
        t,
        "inter_chunk_latency",
        [0.71 / 7.0, 0.01, 0.5, 0.04, 0.5, 0.5],
        7,
    );
    assert_eq!(
        (
            t["requests_with_gaps"].clone(),
            t["requests_with_every_gap"].clone()
        ),
        (4.into(), 4.into())
    );
    // Only requests that ended ok, like the proxy's histograms: not the cancelled r4.
    figure(t, "longest_gap", [0.58 / 3.0, 0.03, 0.5, 0.05, 0.5, 0.5], 3);
    figure(
        t,
        "inter_token_latency",
        [0.07 / 3.0, 0.01, 0.04, 0.02, 0.04, 0.04],
        3,
    );
    figure(t, "request_latency", [2.1, 0.5, 4.0, 2.0, 4.0, 4.0], 5);
    figure(
        t,
        "output_token_throughput_per_user",
        [175.0 / 3.0, 25.0, 100.0, 50.0, 100.0, 100.0],
        3,
    );
    figure(
        t,
        "input_sequence_length",
        [300.0, 100.0, 500.0, 300.0, 500.0, 500.0],
        5,
    );
    figure(
        t,
        "output_sequence_length",
        [61.6, 10.0, 91.0, 71.0, 91.0, 91.0],
        5,
    );
    let outcomes = serde_json::json!([
        {"outcome": "cancelled", "status": "200", "count": 1},
        {"outcome": "ok", "status": "200", "count": 4},
        {"outcome": "ok", "status": "503", "count": 1},
    ]);
    assert_eq!(t["outcomes"], outcomes);
}

#[test]
fn recorded_verdicts_give_goodput_and_attainment_per_missed_ceiling() {
    let doc = json(&options(&[DAY]));
    assert_eq!(doc["slo"], "recorded");
    let attainment = &doc["total"]["attainment"];
    let names: Vec<&str> = attainment
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["ceiling"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ttft", "tpot", "itl"]);
    for a in attainment.as_array().unwrap() {
        assert_eq!(
            (a["met"].clone(), a["missed"].clone()),
            (5.into(), 1.into())
        );
        close(&a["share"], 5.0 / 6.0);
        assert!(a.get("limit_s").is_none());
    }
}

#[test]
fn what_if_ceilings_judge_every_record_again() {
    let mut o = options(&[DAY]);
    o.slo = Some(query::parse_slo("ttft=250ms,e2e=2.5s").unwrap());
    let doc = json(&o);
    let t = &doc["total"];
    // Only r1 is ok, 2xx, TTFT ≤ 250 ms and E2E ≤ 2.5 s; r6 (no TTFT: not a stream) misses E2E.
    assert_eq!(t["good_request_count"], 1);
    assert_eq!(
        doc["slo"],
        serde_json::json!({"ttft_s": 0.25, "e2e_s": 2.5})
    );
    let want = serde_json::json!([
        // r2 (0.3 s) and the cancelled r4 (0.4 s, a lower bound the proxy judges too).
        {"ceiling": "ttft", "limit_s": 0.25, "met": 4, "missed": 2, "share": 4.0 / 6.0},
        // r3 (3 s) and r6 (4 s).
        {"ceiling": "e2e", "limit_s": 2.5, "met": 4, "missed": 2, "share": 4.0 / 6.0},
    ]);
    assert_eq!(t["attainment"], want);
    // A ceiling every request meets: all six attain it, and goodput is every ok 2xx answer.
    o.slo = Some(query::parse_slo("itl=10s").unwrap());
    let t = json(&o)["total"].clone();
    assert_eq!(t["good_request_count"], 4);
    assert_eq!(t["attainment"][0]["met"], 6);
}

#[test]
fn grouping_splits_the_records_and_rates_divide_by_the_whole_span() {
    let mut o = options(&[DAY]);
    o.by = Some(By::Model);
    let doc = json(&o);
    assert_eq!(doc["by"], "model");
    let groups = doc["groups"].as_object().unwrap();
    assert_eq!(groups.keys().collect::<Vec<_>>(), ["llama", "qwen"]);
    assert_eq!(groups["llama"]["request_count"], 4);
    assert_eq!(groups["qwen"]["request_count"], 2);
    close(&groups["qwen"]["request_throughput"], 2.0 / 9.0);
    assert_eq!(groups["llama"]["good_request_count"], 2);
    // Every group shows the ceilings of the whole report, met or not.
    let llama: Vec<(String, u64)> = groups["llama"]["attainment"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["ceiling"].as_str().unwrap().to_owned(),
                a["met"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = [("ttft", 3), ("tpot", 4), ("itl", 4)].map(|(k, n)| (k.to_owned(), n));
    assert_eq!(llama, want);
    o.by = Some(By::Tenant);
    let doc = json(&o);
    let counts: Vec<(String, u64)> = doc["groups"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v["request_count"].as_u64().unwrap()))
        .collect();
    let want = [("-", 1), ("a", 3), ("b", 2)].map(|(k, n)| (k.to_owned(), n));
    assert_eq!(counts, want);
    o.by = Some(By::Api);
    let doc = json(&o);
    assert_eq!(doc["groups"]["completions"]["request_count"], 1);
    assert_eq!(doc["groups"]["chat"]["request_count"], 5);
}

#[test]
fn groups_beyond_the_cap_are_summed_under_other() {
    let mut lines = String::new();
    for i in 0..1_005 {
        lines.push_str(&format!(
            "{{\"v\":1,\"start\":\"2026-12-03T08:00:00Z\",\"id\":\"{i}\",\"model\":\"m{i:04}\",\"api\":\"chat\",\"status\":200,\"outcome\":\"ok\",\"stream\":false,\"e2e_s\":0.1,\"goodput\":true}}\n"
        ));
    }
    let path = temp("many-models.jsonl", lines.as_bytes());
    let mut o = options(&[path.to_str().unwrap()]);
    o.by = Some(By::Model);
    let doc = json(&o);
    let groups = doc["groups"].as_object().unwrap();
    assert_eq!(groups.len(), 1_001);
    assert_eq!(groups["other"]["request_count"], 5);
    assert_eq!(groups["m0999"]["request_count"], 1);
    assert_eq!(doc["total"]["request_count"], 1_005);
}

#[test]
fn the_time_window_keeps_requests_that_started_inside_it() {
    let mut o = options(&[DAY]);
    let at = |t: &str| query::parse_rfc3339(t).unwrap();
    o.window = Window {
        since: Some(at("2026-12-03T08:00:01Z")),
        until: Some(at("2026-12-03T09:00:03+01:00")),
    };
    let t = json(&o)["total"].clone();
    // r2 and r3: since is inclusive, until exclusive (r4 started at 08:00:03).
    assert_eq!(t["request_count"], 2);
    assert_eq!(t["start"], "2026-12-03T08:00:01.000Z");
    assert_eq!(t["end"], "2026-12-03T08:00:05.000Z");
}

#[test]
fn gzip_is_told_by_its_magic_bytes_and_files_add_up() {
    let plain = std::fs::read(DAY).unwrap();
    // A gzipped file named like a plain one, and a plain file named like a gzipped one.
    let gz = temp("looks-plain.jsonl", &gzip(&plain));
    let fake = temp("looks-gzipped.jsonl.gz", &plain);
    let doc = json(&options(&[gz.to_str().unwrap(), fake.to_str().unwrap()]));
    assert_eq!(doc["total"]["request_count"], 12);
    assert_eq!(doc["input"]["files"], 2);
    assert_eq!(doc["input"]["records"], 12);
    assert_eq!(doc["total"]["metrics"]["time_to_first_token"]["count"], 8);
    // Two gzip members one after the other (as `cat a.gz b.gz` makes) are one stream.
    let mut two = gzip(&plain);
    two.extend(gzip(&plain));
    let two = temp("two-members.gz", &two);
    assert_eq!(
        json(&options(&[two.to_str().unwrap()]))["total"]["request_count"],
        12
    );
}

#[test]
fn a_truncated_gzip_file_reports_what_it_read_and_says_where_it_stopped() {
    let plain = std::fs::read(DAY).unwrap();
    let mut cut = gzip(&plain.repeat(50));
    cut.truncate(cut.len() - 40);
    let path = temp("cut.gz", &cut);
    let (out, warn) = report(&options(&[path.to_str().unwrap()])).unwrap();
    let doc: Value = serde_json::from_str(&out).unwrap();
    let n = doc["total"]["request_count"].as_u64().unwrap();
    assert!(n > 200 && n < 300, "{n}");
    assert!(warn.contains("cut.gz: reading stopped at line"), "{warn}");
}

#[test]
fn malformed_lines_are_counted_with_the_first_line_number_and_never_stop_the_report() {
    let day = std::fs::read_to_string(DAY).unwrap();
    let mut lines: Vec<&str> = day.lines().collect();
    lines.insert(2, "{\"v\":1,\"start\":");
    lines.insert(4, "not json at all");
    lines.insert(5, "");
    lines.push("{\"v\":2,\"start\":\"2026-12-03T08:00:00Z\",\"new_field\":1}");
    lines.push("{\"v\":1,\"start\":\"yesterday\",\"id\":\"x\",\"model\":\"m\",\"api\":\"chat\",\"outcome\":\"ok\",\"stream\":false,\"e2e_s\":1,\"goodput\":false}");
    let path = temp("mixed.jsonl", lines.join("\n").as_bytes());
    let name = path.to_str().unwrap();
    let (out, warn) = report(&options(&[name])).unwrap();
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["total"]["request_count"], 6);
    assert_eq!(doc["input"]["malformed"], 2);
    assert_eq!(doc["input"]["first_malformed"], format!("{name}:3"));
    assert_eq!(doc["input"]["other_version"], 1);
    assert_eq!(doc["input"]["first_other_version"], format!("{name}:10"));
    assert_eq!(doc["records_without_time"], 1);
    let want = format!(
        "tokentap report: 2 line(s) skipped: not a request record (first at {name}:3)\n\
         tokentap report: 1 record(s) skipped: schema version other than 1 (first at {name}:10)\n\
         tokentap report: 1 record(s) skipped: `start` is not an RFC 3339 time\n"
    );
    assert_eq!(warn, want);
    let mut strict = options(&[name]);
    strict.strict = true;
    let err = report(&strict).unwrap_err();
    assert!(err.starts_with("--strict: 2 line(s) skipped"), "{err}");
}

/// The fixture with every TTFT doubled and r5 a success.
fn slower_day() -> PathBuf {
    let day = std::fs::read_to_string(DAY).unwrap();
    let mut out = String::new();
    for line in day.lines() {
        let mut record: Value = serde_json::from_str(line).unwrap();
        if let Some(ttft) = record["ttft_s"].as_f64() {
            record["ttft_s"] = (ttft * 2.0).into();
        }
        if record["id"] == "r5" {
            record["status"] = 200.into();
            record["goodput"] = true.into();
        }
        out.push_str(&record.to_string());
        out.push('\n');
    }
    temp("slower.jsonl", out.as_bytes())
}

#[test]
fn compare_shows_before_after_and_the_change_per_figure() {
    let after = slower_day();
    let mut o = options(&[DAY]);
    o.compare = vec![after.to_str().unwrap().to_owned()];
    o.format = Format::Markdown;
    let (out, _) = report(&o).unwrap();
    let row = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("| {name} ")))
            .unwrap_or_else(|| panic!("no row {name}:\n{out}"))
            .split('|')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .skip(1)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("Time to First Token avg (ms)"),
        ["250.00", "500.00", "+250.00", "+100.0%"]
    );
    assert_eq!(
        row("Time to First Token p50 (ms)"),
        ["200.00", "400.00", "+200.00", "+100.0%"]
    );
    assert_eq!(row("Good Request Count"), ["2", "3", "+1", "+50.0%"]);
    assert_eq!(row("Outcome ok 503"), ["1", "0", "-1", "-100.0%"]);
    assert_eq!(row("Outcome ok 200"), ["4", "5", "+1", "+25.0%"]);
    assert_eq!(
        row("Request Latency avg (ms)"),
        ["2,100.00", "2,100.00", "+0.00", "+0.0%"]
    );
    // JSON: both sides whole.
    o.format = Format::Json;
    let doc: Value = serde_json::from_str(&report(&o).unwrap().0).unwrap();
    assert_eq!(doc["report"], 1);
    close(
        &doc["after"]["total"]["metrics"]["time_to_first_token"]["avg"],
        0.5,
    );
    close(
        &doc["before"]["total"]["metrics"]["time_to_first_token"]["avg"],
        0.25,
    );
}

#[test]
fn json_output_has_a_stable_shape() {
    let mut o = options(&[DAY]);
    o.by = Some(By::Model);
    let doc = json(&o);
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        keys(&doc),
        [
            "by",
            "groups",
            "input",
            "records_without_time",
            "report",
            "slo",
            "total"
        ]
    );
    assert_eq!(doc["report"], 1);
    assert_eq!(
        keys(&doc["total"]),
        [
            "attainment",
            "duration_s",
            "end",
            "good_request_count",
            "goodput",
            "goodput_ratio",
            "input_token_throughput",
            "input_tokens",
            "metrics",
            "outcomes",
            "output_token_sources",
            "output_token_throughput",
            "output_tokens",
            "request_count",
            "request_throughput",
            "requests_with_every_gap",
            "requests_with_gaps",
            "start",
        ]
    );
    assert_eq!(
        keys(&doc["total"]["metrics"]),
        [
            "inter_chunk_latency",
            "inter_token_latency",
            "longest_gap",
            "output_sequence_length",
            "output_token_throughput_per_user",
            "request_gap_p50",
            "request_gap_p99",
            "request_latency",
            "input_sequence_length",
            "time_to_first_output_token",
            "time_to_first_token",
        ]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    assert_eq!(
        keys(&doc["total"]["metrics"]["request_latency"]),
        ["avg", "count", "exact", "max", "min", "p50", "p90", "p99", "unit"]
    );
    assert_eq!(doc["total"]["metrics"]["request_latency"]["unit"], "s");
    assert_eq!(
        doc["total"]["metrics"]["input_sequence_length"]["unit"],
        "tokens"
    );
}

#[test]
fn without_every_gap_the_table_shows_each_requests_own_gap_quantiles_instead() {
    let day = std::fs::read_to_string(DAY).unwrap();
    let mut out = String::new();
    for line in day.lines() {
        let mut record: Value = serde_json::from_str(line).unwrap();
        record.as_object_mut().unwrap().remove("gaps_s");
        out.push_str(&record.to_string());
        out.push('\n');
    }
    let path = temp("no-gaps.jsonl", out.as_bytes());
    let mut o = options(&[path.to_str().unwrap()]);
    o.format = Format::Table;
    let (text, _) = report(&o).unwrap();
    assert!(!text.contains("Inter Chunk Latency (ms)"), "{text}");
    assert!(text.contains("Request Median Gap (ms)"), "{text}");
    let with_gaps = report(&Options {
        format: Format::Table,
        ..options(&[DAY])
    })
    .unwrap()
    .0;
    assert!(with_gaps.contains("Inter Chunk Latency (ms)"));
    assert!(!with_gaps.contains("Request Median Gap (ms)"));
}

fn tokentap() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tokentap"))
}

#[test]
fn the_command_reads_gzip_from_stdin_and_prints_the_table() {
    let mut child = tokentap()
        .args(["report", "-", "--by", "tenant"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    let body = gzip(&std::fs::read(DAY).unwrap());
    child.stdin.take().unwrap().write_all(&body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("All requests\n============\n"), "{text}");
    assert!(text.contains("\ntenant = a\n"), "{text}");
    let ttft = text
        .lines()
        .find(|l| l.starts_with("Time to First Token (ms)"))
        .unwrap();
    let cells: Vec<&str> = ttft
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        cells,
        [
            "Time to First Token (ms)",
            "250.00",
            "100.00",
            "400.00",
            "400.00",
            "400.00",
            "200.00",
            "4"
        ]
    );
}

#[test]
fn bad_flags_fail_naming_the_flag_and_the_value() {
    for (args, want) in [
        (vec!["--by", "region"], "--by: invalid grouping \"region\""),
        (
            vec!["--slo", "ttft=fast"],
            "--slo: invalid ceiling \"ttft=fast\"",
        ),
        (vec!["--since", "soon"], "--since: invalid time \"soon\""),
        (vec!["--format", "xml"], "--format: invalid format \"xml\""),
    ] {
        let out = tokentap()
            .arg("report")
            .arg(DAY)
            .args(&args)
            .output()
            .expect("run");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let out = tokentap()
        .args(["report", "/nonexistent/records.jsonl"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/records.jsonl: No such file")
    );
}

#[test]
fn a_config_gives_its_ceilings_with_per_model_overrides_and_slo_wins_over_it() {
    let yaml = "slo:\n  ttft: 250ms\n  e2e: 2.5s\n  models:\n    qwen:\n      e2e: 5s\n";
    let config = temp("ceilings.yaml", yaml.as_bytes());
    let run = |extra: &[&str]| {
        let out = tokentap()
            .arg("report")
            .arg(DAY)
            .args(["--format", "json", "--config"])
            .arg(&config)
            .args(extra)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let doc = run(&[]);
    // r3 (qwen, 3 s) is within qwen's 5 s: good with r1; r6 (llama, 4 s) misses the default 2.5 s.
    assert_eq!(doc["total"]["good_request_count"], 2);
    let want = serde_json::json!([
        {"ceiling": "ttft", "limit_s": 0.25, "met": 4, "missed": 2, "share": 4.0 / 6.0},
        {"ceiling": "e2e", "met": 5, "missed": 1, "share": 5.0 / 6.0},
    ]);
    assert_eq!(doc["total"]["attainment"], want);
    assert_eq!(doc["slo"]["models"]["qwen"]["e2e_s"], 5.0);
    // A tenant's ceiling wins over its model's and the default, as in the proxy: tenant a's 10 s E2E
    // makes r6 (llama, 4 s, tenant a) good.
    let yaml = format!("{yaml}tenants:\n  header: x-tenant-id\n  slo:\n    a: {{e2e: 10s}}\n");
    let tenants = temp("tenant-ceilings.yaml", yaml.as_bytes());
    let out = tokentap()
        .args(["report", DAY, "--format", "json", "--config"])
        .arg(&tenants)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["total"]["good_request_count"], 3);
    assert_eq!(doc["total"]["attainment"][1]["missed"], 0);
    assert_eq!(doc["slo"]["tenants"]["a"]["e2e_s"], 10.0);
    // --slo replaces the config's ceilings.
    let doc = run(&["--slo", "itl=10s"]);
    assert_eq!(doc["slo"], serde_json::json!({"itl_s": 10.0}));
    assert_eq!(doc["total"]["good_request_count"], 4);
}

#[test]
fn progress_goes_to_stderr_every_million_lines_when_asked() {
    let mut child = tokentap()
        .args(["report", "-", "--progress", "--format", "json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    let mut input = std::fs::read(DAY).unwrap();
    input.extend(std::iter::repeat_n(b'\n', 1_000_000));
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err, "tokentap report: 1000000 lines read, 6 records (-)\n");
    // Without --progress, and stderr not a terminal: nothing.
    let out = tokentap().args(["report", DAY]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn proxy_flags_and_a_second_stdin_are_refused() {
    let out = tokentap()
        .args(["report", DAY, "--listen", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unexpected argument '--listen'"), "{err}");
    let out = tokentap()
        .args(["report", "-", "--compare", "-"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("- (stdin) can be read only once"));
}

#[test]
fn the_documented_sample_is_the_real_output_on_the_fixture() {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/report.md")).unwrap();
    let after = page
        .split("`tokentap report tests/fixtures/records/day.jsonl`")
        .nth(1)
        .expect("docs/report.md shows the fixture's report");
    let sample = after
        .split("```text\n")
        .nth(1)
        .and_then(|s| s.split("\n```").next())
        .expect("a text block");
    let out = tokentap().args(["report", DAY]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let tables = text.split("\nNotes:\n").next().unwrap().trim_end();
    assert_eq!(sample.trim_end(), tables);
}

#[test]
fn past_a_thousand_values_quantiles_come_from_the_sketch_within_its_error_and_are_marked() {
    let mut lines = String::new();
    // TTFT 1 ms, 2 ms, … 1,500 ms, in a scrambled order.
    for i in 0..1_500u64 {
        let ttft = ((i * 7_919) % 1_500 + 1) as f64 / 1000.0;
        lines.push_str(&format!(
            "{{\"v\":1,\"start\":\"2026-12-03T08:00:00Z\",\"id\":\"{i}\",\"model\":\"m\",\"api\":\"chat\",\"status\":200,\"outcome\":\"ok\",\"stream\":true,\"e2e_s\":2,\"ttft_s\":{ttft},\"goodput\":true}}\n"
        ));
    }
    let path = temp("sketched.jsonl", lines.as_bytes());
    let doc = json(&options(&[path.to_str().unwrap()]));
    let ttft = &doc["total"]["metrics"]["time_to_first_token"];
    assert_eq!(ttft["exact"], false);
    // Nearest rank of 1..=1500 ms: p50 = 750 ms, p90 = 1,350 ms, p99 = 1,485 ms; within 0.5 %.
    for (stat, exact) in [("p50", 0.75), ("p90", 1.35), ("p99", 1.485)] {
        let got = ttft[stat].as_f64().unwrap();
        assert!(
            (got - exact).abs() <= exact * 0.005,
            "{stat}: {got} vs {exact}"
        );
    }
    close(&ttft["min"], 0.001);
    close(&ttft["max"], 1.5);
    close(&ttft["avg"], 0.7505);
    assert_eq!(doc["total"]["metrics"]["request_latency"]["exact"], false);
    let table = report(&Options {
        format: Format::Table,
        ..options(&[path.to_str().unwrap()])
    })
    .unwrap()
    .0;
    let row = table
        .lines()
        .find(|l| l.starts_with("Time to First Token"))
        .unwrap();
    assert_eq!(row.matches('~').count(), 3, "{row}");
    assert!(table.contains("- ~: more than 1000 values"), "{table}");
}

#[test]
fn slowest_lists_the_requests_with_the_largest_figure_and_who_sent_them() {
    let mut o = options(&[DAY]);
    o.slowest = 2;
    let doc = json(&o);
    assert_eq!(doc["slowest"]["by"], "ttft");
    let requests = doc["slowest"]["requests"].as_array().unwrap();
    let ids: Vec<&str> = requests.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["r4", "r2"]);
    let want = serde_json::json!({
        "start": "2026-12-03T08:00:03.000000Z", "id": "r4", "model": "qwen", "tenant": "b",
        "outcome": "cancelled", "status": 200, "input_tokens": 400, "output_tokens": 10,
        "ttft_s": 0.4, "max_gap_s": 0.06, "e2e_s": 1.5,
    });
    assert_eq!(requests[0], want);
    o.slowest_by = SlowBy(tokentap::record::figure::Figure::E2e);
    o.format = Format::Table;
    let (text, _) = report(&o).unwrap();
    let table = text
        .split("Slowest 2 by e2e\n")
        .nth(1)
        .expect("the slowest table");
    let rows: Vec<&str> = table.lines().skip(3).take(2).collect();
    assert!(
        rows[0].contains(" r6 ") && rows[0].ends_with("4,000.00"),
        "{table}"
    );
    assert!(
        rows[1].contains(" r3 ") && rows[1].ends_with("3,000.00"),
        "{table}"
    );
    // Off by default: no such field.
    assert!(json(&options(&[DAY])).get("slowest").is_none());
    let out = tokentap()
        .args(["report", DAY, "--slowest", "1", "--slowest-by", "tps"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--slowest-by: invalid figure \"tps\""));
}

/// A record that names its span (`traces:`) is listed with its trace and span ids, in the table and
/// the JSON; records without one leave the columns out.
#[test]
fn slowest_names_the_span_of_a_traced_request() {
    let line = |id: &str, ttft: f64, trace: Option<(&str, &str)>| {
        let ids = trace.map_or(String::new(), |(t, s)| {
            format!(",\"trace_id\":\"{t}\",\"span_id\":\"{s}\"")
        });
        format!(
            "{{\"v\":1,\"start\":\"2026-12-03T08:00:00Z\",\"id\":\"{id}\",\"model\":\"m\",\"api\":\"chat\",\"outcome\":\"ok\",\"stream\":true,\"e2e_s\":1.0,\"ttft_s\":{ttft},\"goodput\":false{ids}}}\n"
        )
    };
    let trace = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let lines = line("a", 0.9, Some(trace)) + &line("b", 0.5, None);
    let path = temp("traced.jsonl", lines.as_bytes());
    let mut o = options(&[path.to_str().unwrap()]);
    o.slowest = 2;
    let doc = json(&o);
    let requests = doc["slowest"]["requests"].as_array().unwrap();
    assert_eq!(requests[0]["trace_id"], trace.0);
    assert_eq!(requests[0]["span_id"], trace.1);
    assert!(requests[1].get("trace_id").is_none());
    o.format = Format::Table;
    let (text, _) = report(&o).unwrap();
    let table = text.split("Slowest 2 by ttft\n").nth(1).expect("the table");
    assert!(
        table.lines().nth(1).unwrap().contains("trace id"),
        "{table}"
    );
    let rows: Vec<&str> = table.lines().skip(3).take(2).collect();
    assert!(
        rows[0].contains(trace.0) && rows[0].contains(trace.1),
        "{table}"
    );
    assert!(
        rows[1].contains(" b ") && rows[1].contains(" - "),
        "{table}"
    );
    let plain = temp("untraced.jsonl", line("b", 0.5, None).as_bytes());
    let mut o = options(&[plain.to_str().unwrap()]);
    (o.slowest, o.format) = (1, Format::Table);
    let (text, _) = report(&o).unwrap();
    assert!(!text.contains("trace id"), "{text}");
}

#[test]
fn made_up_outcomes_and_ceiling_names_are_capped_so_memory_stays_bounded() {
    let mut lines = String::new();
    for i in 0..200 {
        lines.push_str(&format!(
            "{{\"v\":1,\"start\":\"2026-12-03T08:00:00Z\",\"id\":\"{i}\",\"model\":\"m\",\"api\":\"chat\",\"outcome\":\"made-up-{i}\",\"stream\":false,\"e2e_s\":0.1,\"goodput\":false,\"slo_missed\":[\"ceiling-{i}\"]}}\n"
        ));
    }
    let path = temp("made-up.jsonl", lines.as_bytes());
    let doc = json(&options(&[path.to_str().unwrap()]));
    let outcomes = doc["total"]["outcomes"].as_array().unwrap();
    assert_eq!(outcomes.len(), 65);
    let other = outcomes.iter().find(|o| o["outcome"] == "other").unwrap();
    assert_eq!(other["count"], 200 - 64);
    let attainment = doc["total"]["attainment"].as_array().unwrap();
    assert_eq!(attainment.len(), 65);
}

/// Agent turns: the time to the first tool call has its row (over the records that called a tool),
/// ranks `--slowest-by`, and is judged by a what-if ceiling like the others; a turn without a call meets it.
#[test]
fn the_time_to_first_tool_call_is_a_row_a_ranking_and_a_ceiling() {
    let line = |id: &str, tool: Option<f64>| {
        let tool = tool.map_or(String::new(), |t| {
            format!(",\"time_to_first_tool_call_s\":{t}")
        });
        format!(
            "{{\"v\":1,\"start\":\"2026-12-03T08:00:0{id}Z\",\"id\":\"{id}\",\"model\":\"m\",\"api\":\"chat\",\"status\":200,\"outcome\":\"ok\",\"stream\":true,\"e2e_s\":1.0,\"ttft_s\":0.1{tool},\"goodput\":true}}\n"
        )
    };
    let lines = [line("1", Some(0.4)), line("2", Some(1.2)), line("3", None)].concat();
    let path = temp("tool-calls.jsonl", lines.as_bytes());
    let mut o = options(&[path.to_str().unwrap()]);
    let doc = json(&o);
    let row = &doc["total"]["metrics"]["time_to_first_tool_call"];
    assert_eq!(row["count"], 2, "{row}");
    close(&row["max"], 1.2);
    o.slowest = 1;
    o.slowest_by = SlowBy(tokentap::record::figure::Figure::TimeToFirstToolCall);
    let doc = json(&o);
    assert_eq!(doc["slowest"]["by"], "time_to_first_tool_call");
    assert_eq!(doc["slowest"]["requests"][0]["id"], "2");
    o.slo = Some(query::parse_slo("time_to_first_tool_call=1s").unwrap());
    let t = json(&o)["total"].clone();
    assert_eq!(t["good_request_count"], 2, "only the 1.2 s call misses");
    let table = report(&Options {
        format: Format::Table,
        ..o
    })
    .unwrap()
    .0;
    assert!(table.contains("Time to First Tool Call"), "{table}");
}

/// Agent traffic: `--by turn` groups by the position in the conversation, and a summary says how many
/// conversations, their turns, and how their wall time splits between the server and the client.
#[test]
fn turns_group_by_position_and_conversations_are_summarised() {
    let line = |start: &str, conversation: &str, turn: u32, e2e: f64, think: Option<f64>| {
        let think = think.map_or(String::new(), |t| format!(",\"think_s\":{t}"));
        format!(
            "{{\"v\":1,\"start\":\"2026-12-03T08:00:{start}Z\",\"id\":\"{conversation}{turn}\",\"model\":\"m\",\"api\":\"chat\",\"conversation\":\"{conversation}\",\"turn\":{turn}{think},\"status\":200,\"outcome\":\"ok\",\"stream\":true,\"e2e_s\":{e2e},\"ttft_s\":0.1,\"goodput\":true}}\n"
        )
    };
    let lines = [
        line("00", "c-a", 1, 1.0, None),
        line("03", "c-a", 2, 2.0, Some(2.0)),
        line("10", "c-a", 3, 1.0, Some(5.0)),
        line("01", "c-b", 1, 0.5, None),
        line("02", "c-b", 2, 0.5, Some(0.5)),
    ]
    .concat();
    let path = temp("turns.jsonl", lines.as_bytes());
    let mut o = options(&[path.to_str().unwrap()]);
    o.by = Some(By::Turn);
    let doc = json(&o);
    let groups = doc["groups"].as_object().unwrap();
    assert_eq!(groups.keys().collect::<Vec<_>>(), ["1", "2", "3"]);
    assert_eq!(groups["2"]["request_count"], 2);
    let c = &doc["conversations"];
    assert_eq!(
        (c["conversation_count"].as_u64(), c["turn_count"].as_u64()),
        (Some(2), Some(5))
    );
    // c-a: 08:00:00 to 08:00:11, 4 s in the server, 7 s between turns.
    assert_eq!(c["slowest"][0]["conversation"], "c-a");
    close(&c["slowest"][0]["wall_s"], 11.0);
    close(&c["slowest"][0]["server_s"], 4.0);
    close(&c["slowest"][0]["between_turns_s"], 7.0);
    close(&c["server_s"], 5.0);
    close(&c["between_turns_s"], 7.5);
    let table = report(&Options {
        format: Format::Table,
        ..o
    })
    .unwrap()
    .0;
    assert!(table.contains("Conversations: 2, 5 turns"), "{table}");
    // Records without conversations have no such section.
    assert!(json(&options(&[DAY])).get("conversations").is_none());
}

/// `--by turn` shows its groups in the order of the turns (`16+` after `8-15`, not after `1` as text sorts
/// it), records outside any conversation after them; both in one report and in a comparison.
#[test]
fn turn_groups_are_shown_in_turn_order_not_as_text() {
    let line = |turn: Option<u32>| {
        let turn = turn.map_or(String::new(), |t| {
            format!(",\"conversation\":\"c\",\"turn\":{t}")
        });
        format!(
            "{{\"v\":1,\"start\":\"2026-12-03T08:00:00Z\",\"id\":\"r\",\"model\":\"m\",\"api\":\"chat\"{turn},\"status\":200,\"outcome\":\"ok\",\"stream\":true,\"e2e_s\":1.0,\"ttft_s\":0.1,\"goodput\":true}}\n"
        )
    };
    let lines: String = [Some(20), None, Some(9), Some(1), Some(5), Some(2), Some(3)]
        .map(line)
        .concat();
    let path = temp("turn-order.jsonl", lines.as_bytes());
    let path = path.to_str().unwrap();
    let in_order = ["1", "2", "3", "4-7", "8-15", "16+", "-"].map(|g| format!("turn = {g}\n"));
    let positions = |table: &str| -> Vec<usize> {
        in_order
            .iter()
            .map(|title| {
                table
                    .find(title.as_str())
                    .unwrap_or_else(|| panic!("{title:?} missing:\n{table}"))
            })
            .collect()
    };
    let mut o = options(&[path]);
    o.by = Some(By::Turn);
    o.format = Format::Table;
    let table = report(&o).unwrap().0;
    let at = positions(&table);
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?}\n{table}");
    o.compare = vec![path.to_owned()];
    let table = report(&o).unwrap().0;
    let at = positions(&table);
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?}\n{table}");
}
