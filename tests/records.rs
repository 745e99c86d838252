//! The per-request records (`request_log:`): for the same traffic they say exactly what `/metrics`
//! says (counts per outcome and tenant, TTFT and E2E sums, output tokens, gaps, goodput), they carry
//! the client's request id or tokentap's own, and the forwarded request is not changed by either.

use crate::support;

use std::time::Duration;

use support::*;
use tokentap::logging::records;
use tokentap::record::metrics::family;

fn with_header(
    mut request: http::Request<http_body_util::Full<bytes::Bytes>>, name: &'static str, value: &str,
) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let value = value.parse().expect("header value");
    request.headers_mut().insert(name, value);
    request
}

/// A stream of `tokens` content chunks `gap` apart after `first`, with usage.
fn stream_with_usage(first: Duration, tokens: usize, gap: Duration) -> Vec<Step> {
    let mut steps = vec![sse_head(), Step::Sleep(first)];
    for i in 0..tokens {
        if i > 0 {
            steps.push(Step::Sleep(gap));
        }
        steps.push(chunk(content_chunk(&format!("t{i}")).as_bytes()));
    }
    steps.push(chunk(usage_chunk(5, tokens as u64).as_bytes()));
    steps.push(chunk(DONE.as_bytes()));
    steps.push(last_chunk());
    steps
}

#[tokio::test]
async fn records_say_exactly_what_the_metrics_say_for_the_same_traffic() {
    let upstream = upstream(|request| {
        let body = String::from_utf8_lossy(&request.body).to_string();
        if request.request_line().contains("/missing") {
            return vec![json_response(404, "Not Found", r#"{"error":"no"}"#)];
        }
        if body.contains("\"json\"") {
            let usage = r#"{"id":"x","object":"chat.completion","model":"json","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":9,"total_tokens":13}}"#;
            return vec![json_response(200, "OK", usage)];
        }
        if body.contains("\"broken\"") {
            return vec![
                sse_head(),
                chunk(content_chunk("a").as_bytes()),
                Step::Sleep(ms(5)),
                Step::Close,
            ];
        }
        if body.contains("\"slow\"") {
            return stream_with_usage(ms(120), 2, ms(5));
        }
        stream_with_usage(ms(1), 4, ms(10))
    })
    .await;
    let path = temp_file("records-match");
    let yaml = format!(
        "max_models: 4\nslo: {{ttft: 100ms}}\ntenants: {{header: x-tenant-id, max: 4, slo: {{vip: {{ttft: 1ms}}}}}}\nrequest_log: {{path: {}}}\n",
        path.display()
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    let chat = "/v1/chat/completions";
    let c = client();
    let tenant = |model: &str, tenant: &str| {
        with_header(
            post(&proxy, chat, &chat_request(model)),
            "x-tenant-id",
            tenant,
        )
    };
    for _ in 0..3 {
        assert_eq!(send(&c, tenant("m", "acme")).await.status, 200);
    }
    let named = with_header(tenant("m", "acme"), "x-request-id", "client-id-1");
    assert_eq!(send(&c, named).await.status, 200);
    assert_eq!(send(&c, tenant("slow", "globex")).await.status, 200);
    // The tenant's own ceiling (1 ms) wins over the default (100 ms).
    assert_eq!(send(&c, tenant("m", "vip")).await.status, 200);
    assert_eq!(
        send(&c, post(&proxy, chat, &chat_request("json")))
            .await
            .status,
        200
    );
    let missing = post(&proxy, "/missing/v1/chat/completions", "{}");
    assert_eq!(send(&c, missing).await.status, 404);
    let broken = send(&c, tenant("broken", "acme")).await;
    assert!(broken.end.is_err(), "the stream broke off");
    settle(&proxy).await;

    let records = read_records(&path, 9);
    let metrics = scrape(&proxy).await;
    assert_eq!(records.len(), 9);
    for outcome in ["ok", "upstream_error"] {
        let n = records.iter().filter(|r| r.outcome == outcome).count();
        let counted = metrics.get(family::REQUESTS.name, &[("outcome", outcome)]);
        assert_eq!(n as f64, counted, "{outcome}");
    }
    for t in ["acme", "globex", "vip", "none"] {
        let n = records
            .iter()
            .filter(|r| r.tenant.as_deref() == Some(t))
            .count();
        let counted = metrics.get(family::REQUESTS.name, &[("tenant", t)]);
        assert_eq!(n as f64, counted, "tenant {t}");
    }
    let close = |a: f64, b: f64, what: &str| assert!((a - b).abs() < 1e-9, "{what}: {a} vs {b}");
    let ttft: Vec<f64> = records.iter().filter_map(|r| r.ttft_s).collect();
    let ttft_metric = family::TTFT.name;
    close(
        ttft.iter().sum(),
        metrics.get(&format!("{ttft_metric}_sum"), &[]),
        "TTFT sum",
    );
    assert_eq!(
        ttft.len() as f64,
        metrics.get(&format!("{ttft_metric}_count"), &[])
    );
    let e2e: f64 = records
        .iter()
        .filter(|r| r.outcome == "ok")
        .map(|r| r.e2e_s)
        .sum();
    close(e2e, metrics.get(&family::E2E.sum(), &[]), "E2E sum");
    let tokens: u64 = records.iter().filter_map(|r| r.output_tokens).sum();
    assert_eq!(tokens as f64, metrics.get(family::OUTPUT_TOKENS.name, &[]));
    assert_eq!(tokens, 5 * 4 + 2 + 9 + 1);
    let gaps: u64 = records.iter().map(|r| r.gaps).sum();
    let itl_count = metrics.get(&family::ITL.count(), &[]);
    assert_eq!(gaps as f64, itl_count);
    let goodput = records.iter().filter(|r| r.goodput).count();
    let goodput_metric = metrics.get(family::GOODPUT.name, &[]);
    assert_eq!(goodput as f64, goodput_metric);
    assert_eq!(goodput, 5, "4 acme streams and the JSON answer");
    let goodput_acme = metrics.get(family::GOODPUT.name, &[("tenant", "acme")]);
    assert_eq!(goodput_acme, 4.0);
    assert_eq!(metrics.get(records::WRITTEN, &[]), 9.0);
    let missed_ttft = records
        .iter()
        .filter(|r| r.slo_missed.contains(&"ttft".to_owned()));
    let violations = metrics.get(family::SLO_VIOLATIONS.name, &[("slo", "ttft")]);
    assert_eq!(missed_ttft.count() as f64, violations);
    let vip = records.iter().find(|r| r.tenant.as_deref() == Some("vip"));
    let vip = vip.expect("the vip record");
    assert_eq!(
        (vip.goodput, vip.slo_missed.clone()),
        (false, vec!["ttft".to_owned()])
    );
    let dropped = metrics.get(records::DROPPED, &[]);
    assert_eq!(dropped, 0.0);

    let slow = records.iter().find(|r| r.model == "slow").expect("slow");
    assert_eq!(
        (slow.goodput, slow.slo_missed.clone()),
        (false, vec!["ttft".to_owned()])
    );
    let stream = records
        .iter()
        .find(|r| r.client_request_id.as_deref() == Some("client-id-1"))
        .expect("the client's id");
    assert_ne!(
        stream.id, "client-id-1",
        "the record's id is tokentap's own"
    );
    assert_eq!(
        (stream.status, stream.stream, stream.gaps),
        (Some(200), true, 3)
    );
    assert_eq!(
        (stream.output_tokens, stream.input_tokens),
        (Some(4), Some(5))
    );
    assert_eq!(stream.output_tokens_source.as_deref(), Some("usage"));
    let (p50, max) = (
        stream.itl_p50_s.unwrap_or(0.0),
        stream.max_gap_s.unwrap_or(0.0),
    );
    assert!(p50 > 0.0 && p50 <= max * (1.0 + 1.0 / 32.0), "{p50} {max}");
    assert_eq!(stream.gaps_s, None, "gaps are listed only when asked for");
    assert!(
        stream.start.ends_with('Z') && stream.start.len() == 27,
        "{}",
        stream.start
    );
    let mut ids: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 9, "every request has its own id");
    // Read-only: the upstream saw the client's x-request-id, and none where the client sent none.
    let sent: Vec<Vec<String>> = upstream
        .requests()
        .iter()
        .map(|r| r.header("x-request-id"))
        .collect();
    assert_eq!(sent.iter().flatten().collect::<Vec<_>>(), ["client-id-1"]);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn with_gaps_on_a_record_lists_each_gap_up_to_max_gaps() {
    let upstream = upstream(|_| stream_with_usage(ms(1), 6, ms(5))).await;
    let path = temp_file("records-gaps");
    let yaml = format!(
        "request_log: {{path: {}, gaps: true, max_gaps: 3}}\n",
        path.display()
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    let got = send(
        &client(),
        post(&proxy, "/v1/chat/completions", &chat_request("m")),
    )
    .await;
    assert_eq!(got.status, 200);
    let records = read_records(&path, 1);
    let record = &records[0];
    assert_eq!(record.gaps, 5);
    let listed = record.gaps_s.clone().unwrap_or_default();
    assert_eq!(listed.len(), 3, "capped at max_gaps");
    assert!(listed
        .iter()
        .all(|&g| g > 0.0 && g <= record.max_gap_s.unwrap_or(0.0)));
    assert_eq!(record.tenant, None, "no tenants configured: no tenant");
    let metrics = scrape(&proxy).await;
    assert!(!metrics.has(family::REQUESTS.name, &[("tenant", "none")]));
    let _ = std::fs::remove_file(&path);
}

/// A chat request over a blocking connection; the status line's code (0 when none came).
fn chat_blocking(proxy: &str, model: &str) -> u16 {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(proxy) else {
        return 0;
    };
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
    if stream.write_all(&support::raw_chat(model, true)).is_err() {
        return 0;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn binary_yaml(upstream: &str, rest: &str) -> String {
    format!("listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {upstream}\n{rest}")
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reopens_the_record_file_so_new_records_land_in_the_new_file() {
    let _slot = slot();
    let upstream = upstream(|_| stream_with_usage(ms(1), 2, ms(1))).await;
    let dir = std::env::temp_dir().join(format!("tokentap-rotate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (path, rotated) = (dir.join("requests.jsonl"), dir.join("requests.jsonl.1"));
    let rest = format!("request_log: {{path: {}}}\n", path.display());
    let process = start_binary("records-rotate", &binary_yaml(&upstream.url(), &rest), None);
    let proxy = process.proxy.clone();
    let first = tokio::task::spawn_blocking(move || chat_blocking(&proxy, "before"));
    assert_eq!(first.await.expect("client"), 200);
    assert_eq!(read_records(&path, 1)[0].model, "before");
    // logrotate (create mode): rename, then SIGHUP.
    std::fs::rename(&path, &rotated).expect("rename");
    process.signal("HUP");
    let proxy = process.proxy.clone();
    let mut status = 0;
    let since = std::time::Instant::now();
    while since.elapsed() < HANG {
        // The signal is handled asynchronously: wait until the new file exists.
        if path.exists() {
            let proxy = proxy.clone();
            status = tokio::task::spawn_blocking(move || chat_blocking(&proxy, "after"))
                .await
                .expect("client");
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(status, 200, "the new file was opened after SIGHUP");
    assert_eq!(read_records(&path, 1)[0].model, "after");
    let old = read_records(&rotated, 1);
    assert_eq!(old.len(), 1, "nothing more went to the renamed file");
    process.signal("TERM");
    let (exit, log) = process.wait();
    assert!(exit.success(), "{log}");
    assert!(log.contains("request_log file reopened"), "{log}");
    assert!(
        log.contains("series bound: at most 750000 series: "),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdout_nobody_reads_drops_and_counts_records_and_requests_still_succeed() {
    let _slot = slot();
    // Long records (every gap listed) fill the pipe and the writer's buffer quickly.
    let upstream = upstream(|_| stream_with_usage(ms(0), 60, ms(0))).await;
    let rest = "request_log: {path: \"-\", queue: 4, gaps: true}\n";
    let process = start_binary_with(
        "records-stalled",
        &binary_yaml(&upstream.url(), rest),
        None,
        std::process::Stdio::piped(),
    );
    // Eight clients at once, 50 requests each.
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let proxy = process.proxy.clone();
            std::thread::spawn(move || (0..50).map(|_| chat_blocking(&proxy, "m")).collect())
        })
        .collect();
    let statuses: Vec<u16> = tokio::task::spawn_blocking(move || {
        let answers = clients.into_iter().map(|c| c.join().unwrap_or_default());
        answers.flat_map(|a: Vec<u16>| a).collect()
    })
    .await
    .expect("clients");
    assert_eq!(statuses.len(), 400);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let metrics = process.scrape();
    let dropped = metrics.get(records::DROPPED, &[("reason", "queue_full")]);
    let written = metrics.get(records::WRITTEN, &[]);
    assert!(dropped > 0.0, "written {written}, dropped {dropped}");
    assert!(written + dropped <= 400.0);
    assert_eq!(metrics.get(family::REQUESTS.name, &[]), 400.0);
    process.signal("TERM");
    let (exit, log) = process.wait();
    assert!(exit.success(), "{log}");
    assert!(log.contains("request records dropped"), "{log}");
}

#[test]
fn a_config_whose_values_always_counted_are_above_the_series_budget_is_refused_naming_them() {
    let dir = std::env::temp_dir().join(format!("tokentap-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("tokentap.yaml");
    let yaml = binary_yaml(
        "http://127.0.0.1:9",
        &format!(
            "model_list: {{names: [{}]}}\ntenants: {{header: x-tenant-id, max: 32}}\nmetrics: {{max_series: 1000000}}\n",
            (0..20).map(|i| format!("m{i}")).collect::<Vec<_>>().join(", ")
        ),
    );
    std::fs::write(&file, yaml).expect("config");
    let binary = env!("CARGO_BIN_EXE_tokentap");
    let product = "the 23 model values always counted (unknown, other, unadmitted and the names under slo.models and model_list.names)";
    let checked = std::process::Command::new(binary)
        .arg("check-config")
        .arg(&file)
        .output()
        .expect("check-config");
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert!(!checked.status.success(), "{stderr}");
    assert!(stderr.contains(product), "{stderr}");
    assert!(stderr.contains("above the budget of 1000000"), "{stderr}");
    let started = std::process::Command::new(binary)
        .arg("--config")
        .arg(&file)
        .output()
        .expect("tokentap");
    let stderr = String::from_utf8_lossy(&started.stderr);
    assert!(!started.status.success(), "{stderr}");
    assert!(stderr.contains(product), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_full_disk_is_counted_as_write_errors_and_never_fails_a_request() {
    let upstream = upstream(|_| stream_with_usage(ms(1), 2, ms(1))).await;
    // /dev/full: every write fails with ENOSPC, as a full disk does.
    let proxy = proxy(&upstream.url(), "request_log: {path: /dev/full}\n").await;
    let c = client();
    for _ in 0..3 {
        let got = send(&c, post(&proxy, "/v1/chat/completions", &chat_request("m"))).await;
        assert_eq!((got.status, got.end.is_ok()), (200, true));
    }
    settle(&proxy).await;
    let mut errors = 0.0;
    let since = std::time::Instant::now();
    while since.elapsed() < HANG {
        let metrics = scrape(&proxy).await;
        let reason = [("reason", "write_error")];
        errors = metrics.get(records::DROPPED, &reason);
        if errors >= 3.0 {
            assert_eq!(metrics.get(records::WRITTEN, &[]), 0.0);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(errors, 3.0, "each lost record is counted once");
    let got = send(&c, post(&proxy, "/v1/chat/completions", &chat_request("m"))).await;
    assert_eq!(got.status, 200, "still serving");
}

/// What `tokentap tenant-tag --config` prints for `token` with the config `yaml`.
fn tenant_tag(yaml: &str, token: &str) -> String {
    use std::io::Write;
    let config = temp_file("tenant-tag-config");
    std::fs::write(&config, yaml).expect("config");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["tenant-tag", "--config"])
        .arg(&config)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("tokentap tenant-tag");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{token}").expect("token");
    drop(stdin);
    let out = child.wait_with_output().expect("output");
    let _ = std::fs::remove_file(&config);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test]
async fn a_bearer_tenant_is_a_keyed_hash_and_the_token_is_in_no_record_and_no_series() {
    let upstream = upstream(|_| stream_with_usage(ms(1), 2, ms(1))).await;
    let path = temp_file("records-bearer");
    let yaml = format!(
        "max_models: 4\ntenants: {{bearer_hash: true, hash_key: \"Yx3Qm0v8pH2wN5rT7sK9dL4fJ6gB1cZ+aE0uI2oR8yA=\", max: 4}}\nrequest_log: {{path: {}}}\n",
        path.display()
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    let token = "sk-live-SECRET0123456789";
    let request = post(&proxy, "/v1/chat/completions", &chat_request("m"));
    let request = with_header(request, "authorization", &format!("Bearer {token}"));
    assert_eq!(send(&client(), request).await.status, 200);
    let records = read_records(&path, 1);
    let tenant = records[0].tenant.clone().unwrap_or_default();
    assert!(tenant.starts_with("t-") && tenant.len() == 14, "{tenant}");
    // `tokentap tenant-tag` gives an operator the same tag, for tenants.allow.
    assert_eq!(tenant_tag(&yaml, token), tenant);
    let file = std::fs::read_to_string(&path).unwrap_or_default();
    let metrics = scrape(&proxy).await;
    for part in [token, "SECRET", "sk-live"] {
        assert!(!file.contains(part), "the record shows {part}");
        assert!(!metrics.text.contains(part), "/metrics shows {part}");
    }
    assert_eq!(
        metrics.get(family::REQUESTS.name, &[("tenant", &tenant)]),
        1.0
    );
    // The upstream still got the client's Authorization, unchanged.
    let sent = upstream.requests()[0].header("authorization");
    assert_eq!(sent, [format!("Bearer {token}")]);
    let _ = std::fs::remove_file(&path);
}
