//! A real Prometheus (Debian's `prometheus` binary) scrapes an in-process tokentap on loopback, with
//! deploy/prometheus's recording and alert rules loaded, while a scripted upstream serves a known load.
//! The recording rules are then read back through Prometheus' HTTP API: the p99 TTFT, the goodput
//! ratio and tokens/s come out as the load dictates, which proves that the metric names, labels and
//! buckets tokentap exports work in real PromQL, and that every rule evaluates without error.
//!
//! Skipped, with a message, only when `prometheus` is not on PATH; `.ci/run` installs it and sets
//! TOKENTAP_REQUIRE_PROMETHEUS=1, which turns the skip into a failure.
//!
//! Why the load is sent twice: `rate()` extrapolates each series from its first sample, and how far
//! depends on that sample's value. A series first scraped at 0 and one first scraped at 1 would get
//! different extrapolations, and ratios between them would be off by a few percent. So a like priming
//! load runs before Prometheus starts: every series is first seen at about the values the measured load
//! then adds (at least a fifteenth of it is enough: Prometheus then extrapolates each series by half a
//! scrape interval), all series get the same extrapolation, and the ratios are exact.
//!
//! What the figures are checked against is what tokentap recorded, read from its own `/metrics` before
//! and after the measured load, not what the script meant: on a quiet machine the p99 TTFT is 0.972 s and
//! the goodput ratio 0.75, but at a load of 10 a 20 ms first token can take 150 ms and a 330 ms one over
//! a second, and the test must not turn red for that.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;
use tokentap::record::live::quantile::histogram_quantile;
use tokentap::record::metrics::family;
use tokentap::Running;

const CHAT: &str = "/v1/chat/completions";
/// Requests per load; every fourth is slow.
const REQUESTS: usize = 40;
const SLOW_EVERY: usize = 4;
/// Output tokens per request (five content chunks, and the usage chunk says 5).
const TOKENS: usize = 5;
/// Between request starts.
const PACE: Duration = Duration::from_millis(100);
/// TTFT buckets 0.1, 0.2 (the ceiling, added by tokentap), 0.3, 1.
const CONFIG: &str = "slo:\n  ttft: 200ms\nbuckets:\n  ttft: [0.1, 0.3, 1]\nui: {interval: 1s}\n";
/// The TTFT buckets' bounds as `le` labels (the ceiling's among them), and `+Inf`.
const LES: [&str; 5] = ["0.1", "0.2", "0.3", "1", "+Inf"];

/// Model "m"'s cumulative TTFT bucket counts in `m`, one a bound of [`LES`].
fn ttft_buckets(m: &Metrics) -> Vec<u64> {
    let bucket = format!("{}_bucket", family::TTFT.name);
    (LES.iter())
        .map(|le| m.get(&bucket, &[("model", "m"), ("le", le)]) as u64)
        .collect()
}

/// The p99 of cumulative TTFT bucket counts, one a bound of [`LES`]: `histogram_quantile`'s own rule.
fn quantile(cumulative: &[u64]) -> f64 {
    histogram_quantile(0.99, &[0.1, 0.2, 0.3, 1.0], cumulative).expect("observations")
}

/// Fast requests get their first token after 20 ms (within the 200 ms ceiling), slow ones after
/// 330 ms: in the TTFT bucket (0.3, 1], over the ceiling, on a quiet machine (the checks read what
/// tokentap recorded, so a busy machine that moves a request to another bucket changes no verdict).
fn script(slow: bool) -> Vec<Step> {
    let mut steps = vec![
        sse_head(),
        chunk(ROLE_CHUNK.as_bytes()),
        Step::Sleep(ms(if slow { 330 } else { 20 })),
    ];
    for i in 0..TOKENS {
        if i > 0 {
            steps.push(Step::Sleep(ms(10)));
        }
        steps.push(chunk(content_chunk(&format!("t{i}")).as_bytes()));
    }
    steps.push(chunk(usage_chunk(10, TOKENS as u64).as_bytes()));
    steps.push(chunk(DONE.as_bytes()));
    steps.push(last_chunk());
    steps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_recording_rules_report_the_p99_ttft_goodput_ratio_and_tokens_per_second_of_a_known_load(
) {
    let _slot = slot();
    if !prometheus_installed("prometheus_recording_rules_*") {
        return;
    }
    let started = Instant::now();
    let served = Arc::new(AtomicUsize::new(0));
    let counter = served.clone();
    let upstream = upstream(move |_| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        script(n % SLOW_EVERY == SLOW_EVERY - 1)
    })
    .await;
    let proxy = proxy(&upstream.url(), CONFIG).await;

    drive(&proxy).await; // priming: see the module comment
    let primed = scrape(&proxy).await;
    let mut prom = Prometheus::start(&[proxy.metrics_addr().port()]);
    prom.wait_until(
        "the first scrape has the priming load",
        "sum(tokentap_requests_total)",
        |v| v == REQUESTS as f64,
    )
    .await;

    drive(&proxy).await; // the measured load
    let measured = scrape(&proxy).await;
    assert_eq!(served.load(Ordering::SeqCst), 2 * REQUESTS);
    prom.wait_until(
        "a scrape has the measured load",
        "sum(tokentap_requests_total)",
        |v| v == 2.0 * REQUESTS as f64,
    )
    .await;
    // Recording rules run every second, on their own timer: let a few evaluations see that scrape.
    tokio::time::sleep(Duration::from_millis(3500)).await;

    // p99 TTFT: histogram_quantile of what the measured load added to each bucket (quiet: 30 of 40
    // first tokens within 0.3 s, 10 in (0.3, 1]; rank 0.99 × 40 = 39.6, 9.6 of that bucket's 10 in:
    // 0.3 + 0.96 × 0.7 = 0.972 s).
    let added =
        |name: &str, labels: &[(&str, &str)]| measured.get(name, labels) - primed.get(name, labels);
    let (before, after) = (ttft_buckets(&primed), ttft_buckets(&measured));
    let expected_p99 = quantile(
        &after
            .iter()
            .zip(&before)
            .map(|(a, b)| a - b)
            .collect::<Vec<_>>(),
    );
    let p99 = prom
        .query_model("model:tokentap_time_to_first_token_seconds:p99_rate5m")
        .await;
    assert!(
        (p99 - expected_p99).abs() < 1e-9,
        "p99 TTFT: got {p99}, tokentap's buckets give {expected_p99}"
    );
    // The bucket boundaries PromQL sees are the configured ones plus the ceiling.
    let boundaries = prom
        .query("count by (le) (tokentap_time_to_first_token_seconds_bucket)")
        .await;
    let mut les: Vec<String> = boundaries
        .iter()
        .map(|(labels, _)| labels["le"].as_str().expect("le").to_owned())
        .collect();
    les.sort();
    assert_eq!(les, ["+Inf", "0.1", "0.2", "0.3", "1"]);

    // Goodput ratio: the requests that met the 200 ms TTFT ceiling (quiet: 30 of 40).
    let requests = added(family::REQUESTS.name, &[]);
    assert_eq!(requests, REQUESTS as f64);
    let expected_ratio = added(family::GOODPUT.name, &[]) / requests;
    let ratio = prom
        .query_model("model:tokentap_goodput:ratio_rate5m")
        .await;
    assert!(
        (ratio - expected_ratio).abs() < 1e-9,
        "goodput ratio: got {ratio}, tokentap counted {expected_ratio}"
    );
    let burn = prom
        .query_model("model:tokentap_slo_errors:ratio_rate5m")
        .await;
    assert!(
        (burn - (1.0 - expected_ratio)).abs() < 1e-9,
        "error ratio: got {burn}"
    );
    let expected_misses = added(family::SLO_VIOLATIONS.name, &[("slo", "ttft")]) / requests;
    let ttft_misses = prom
        .query_model("model:tokentap_slo_violations_ttft:ratio_rate5m")
        .await;
    assert!(
        (ttft_misses - expected_misses).abs() < 1e-9,
        "TTFT misses: got {ttft_misses}, tokentap counted {expected_misses}"
    );

    // tokens/s over 1 minute: exactly 5 tokens per request, so 5 × requests/s...
    let tokens_per_second = prom
        .query_model("model:tokentap_output_tokens:rate1m")
        .await;
    let requests_per_second = prom.query_model("model:tokentap_requests:rate1m").await;
    assert!(
        (tokens_per_second / requests_per_second - TOKENS as f64).abs() < 1e-3,
        "tokens/s {tokens_per_second} is not {TOKENS} × requests/s {requests_per_second}"
    );
    // ...and the 200 tokens of the measured load over the 60 s window, plus what rate() adds by
    // extrapolating from the samples to the window's edges (one scrape interval, 1 s, over the
    // ≥ 7.5 s the samples span, i.e. < 14 %; 35 % allowed, for scrapes a busy machine delays).
    let delivered = (REQUESTS * TOKENS) as f64 / 60.0;
    assert!(
        tokens_per_second >= delivered * 0.999 && tokens_per_second < delivered * 1.35,
        "tokens/s: got {tokens_per_second}, expected {delivered} (+ extrapolation)"
    );

    // The live page's figures (docs/live.md) agree with PromQL: its quantile from bucket deltas is
    // histogram_quantile's. Its 30 m window reaches back to its first snapshot, taken before the first
    // request, so it holds both loads: the buckets as they stand, which PromQL reads without a rate.
    let promql = prom
        .query("histogram_quantile(0.99, sum by (le) (tokentap_time_to_first_token_seconds_bucket{model=\"m\"}))")
        .await;
    assert_eq!(promql.len(), 1, "{promql:?}");
    assert!(
        (promql[0].1 - quantile(&after)).abs() < 1e-9,
        "PromQL {} from the buckets tokentap shows",
        promql[0].1
    );
    let live = live_figures(&proxy, 2 * REQUESTS as u64).await;
    let live_p99 = live["quantiles"]["ttft"]["p99"].as_f64().expect("p99");
    assert!(
        (live_p99 - promql[0].1).abs() < 1e-9,
        "live page p99 TTFT {live_p99}, PromQL {}",
        promql[0].1
    );
    let live_ratio = live["goodput_ratio"].as_f64().expect("goodput");
    let standing_ratio = measured.get(family::GOODPUT.name, &[]) / (2 * REQUESTS) as f64;
    assert!(
        (live_ratio - standing_ratio).abs() < 1e-9,
        "live goodput {live_ratio}, tokentap counted {standing_ratio}"
    );

    // Every rule, recording and alert, loaded and evaluated without error in this Prometheus.
    let rules = prom.get("/api/v1/rules").await;
    let mut count = 0;
    for group in rules["data"]["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            count += 1;
            assert_eq!(
                rule["health"], "ok",
                "rule {} in group {}: {}",
                rule["name"], group["name"], rule["lastError"]
            );
        }
    }
    assert!(count >= 40, "only {count} rules loaded");
    eprintln!(
        "prometheus test: p99 TTFT {p99} (0.972 on a quiet machine), goodput ratio {ratio} (0.75), tokens/s {tokens_per_second}, {count} rules ok, {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The live view's current figures for model "m" over the whole history, once a snapshot has seen
/// `requests` finished requests (snapshots come every second; 60 s is a bound for a hang).
async fn live_figures(proxy: &Running, requests: u64) -> Value {
    let addr = proxy.metrics_addr();
    let get = format!(
        "GET /api/v1/live?window=30m HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    );
    for _ in 0..600 {
        let (head, body) = raw_split(&raw_exchange(addr, get.as_bytes()).await);
        let body = match head.to_ascii_lowercase().contains("chunked") {
            true => dechunk(&body).unwrap_or_default(),
            false => body,
        };
        let view: Value = serde_json::from_slice(&body).expect("live view");
        let current = &view["models"][0]["current"];
        if current["requests"].as_u64() == Some(requests) {
            return current.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the live view never showed {requests} requests");
}

/// Sends the load: REQUESTS chat streams, one every PACE, and checks each ended cleanly.
async fn drive(proxy: &Running) {
    let client = client();
    let mut tasks = Vec::new();
    for _ in 0..REQUESTS {
        let (client, request) = (client.clone(), post(proxy, CHAT, &chat_request("m")));
        tasks.push(tokio::spawn(async move { send(&client, request).await }));
        tokio::time::sleep(PACE).await;
    }
    for task in tasks {
        let got = task.await.expect("request task");
        assert_eq!((got.status, got.end), (200, Ok(())));
    }
    settle(proxy).await;
}
