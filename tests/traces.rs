//! Traces (`traces:`, docs/tracing.md) end to end: tokentap in-process with its exporter pointed at a
//! scripted OTLP/HTTP receiver (`support/otlp.rs`), which decodes each export with the OpenTelemetry project's
//! own messages (`opentelemetry-proto`). A request with a `traceparent` becomes one span in that trace,
//! its attributes the record's figures exactly; sampling at the end keeps exactly the requests the
//! records mark as missed; `propagate` rewrites the `traceparent` the upstream sees to the exported
//! span's id, and without it the upstream gets the client's head byte for byte. A dead, slow, failing
//! or never-reading collector costs spans, counted by reason, and never a request's time.

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use support::*;
use tokentap::record::metrics::family;
use tokentap::record::request_record::RequestRecord;
use tokio::net::TcpListener;

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
const CHAT: &str = "/v1/chat/completions";

/// A collector that accepts connections and never reads from them.
async fn deaf_collector() -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    (url, task)
}

/// A loopback port nothing listens on.
async fn dead_collector() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    drop(listener);
    url
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<Value> {
    let found: &KeyValue = span.attributes.iter().find(|kv| kv.key == key)?;
    found.value.as_ref()?.value.clone()
}

fn double(span: &Span, key: &str) -> Option<f64> {
    match attribute(span, key)? {
        Value::DoubleValue(v) => Some(v),
        other => panic!("{key} is not a double: {other:?}"),
    }
}

fn int(span: &Span, key: &str) -> Option<u64> {
    match attribute(span, key)? {
        Value::IntValue(v) => u64::try_from(v).ok(),
        other => panic!("{key} is not an int: {other:?}"),
    }
}

fn text(span: &Span, key: &str) -> Option<String> {
    match attribute(span, key)? {
        Value::StringValue(v) => Some(v),
        other => panic!("{key} is not a string: {other:?}"),
    }
}

fn with_header(
    mut request: http::Request<Full<Bytes>>, name: &'static str, value: &str,
) -> http::Request<Full<Bytes>> {
    request
        .headers_mut()
        .insert(name, value.parse().expect("value"));
    request
}

/// The upstream of most tests: `slow` streams its first token after 80 ms, `fail` answers 500, any
/// other model streams at once.
async fn model_server() -> Upstream {
    upstream(|request| {
        let body = String::from_utf8_lossy(&request.body).to_string();
        if body.contains("\"fail\"") {
            return vec![json_response(
                500,
                "Internal Server Error",
                r#"{"error":"no"}"#,
            )];
        }
        if body.contains("\"slow\"") {
            return tokens_after(ms(80), 3);
        }
        tokens_after(ms(1), 3)
    })
    .await
}

fn traces_yaml(endpoint: &str, extra: &str) -> String {
    format!("traces: {{endpoint: \"{endpoint}\", interval: 10ms{extra}}}\n")
}

#[tokio::test]
async fn a_request_with_a_traceparent_is_one_span_in_that_trace_with_the_records_figures() {
    let collector = Collector::start(Reply::Accept).await;
    let upstream = model_server().await;
    let path = temp_file("traces-one-span");
    let yaml = format!(
        "slo: {{ttft: 50ms}}\nrequest_log: {{path: {}}}\n{}",
        path.display(),
        traces_yaml(
            &collector.url(),
            ", headers: {authorization: Bearer collector-key}"
        )
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    let request = with_header(
        post(&proxy, CHAT, &chat_request("slow")),
        "traceparent",
        CALLER,
    );
    let request = with_header(request, "tracestate", "congo=t61rcWkgMzE");
    let got = send(&client(), request).await;
    assert_eq!((got.status, got.end.is_ok()), (200, true));
    settle(&proxy).await;
    proxy.flush_spans(Duration::from_secs(5)).await;

    let record: RequestRecord = read_records(&path, 1).remove(0);
    let spans = collector.spans();
    assert_eq!(spans.len(), 1, "{spans:?}");
    let span = &spans[0];
    assert_eq!(hex(&span.trace_id), CALLER_TRACE);
    assert_eq!(hex(&span.parent_span_id), CALLER_SPAN);
    assert_eq!(span.trace_state, "congo=t61rcWkgMzE");
    assert_eq!(record.trace_id.as_deref(), Some(CALLER_TRACE));
    assert_eq!(record.span_id.as_deref(), Some(hex(&span.span_id).as_str()));
    assert_eq!(span.name, "chat slow");
    assert_eq!(span.kind, 2, "SERVER");
    // The figures are the record's, to the bit.
    assert_eq!(double(span, "tokentap.ttft_s"), record.ttft_s);
    assert_eq!(
        double(span, "gen_ai.response.time_to_first_chunk"),
        record.ttft_s
    );
    assert_eq!(double(span, "tokentap.e2e_s"), Some(record.e2e_s));
    assert_eq!(double(span, "tokentap.tpot_s"), record.tpot_s);
    assert_eq!(double(span, "tokentap.max_gap_s"), record.max_gap_s);
    assert_eq!(
        int(span, "gen_ai.usage.output_tokens"),
        record.output_tokens
    );
    assert_eq!(int(span, "gen_ai.usage.input_tokens"), record.input_tokens);
    assert_eq!(
        (record.output_tokens, record.input_tokens),
        (Some(3), Some(7))
    );
    assert_eq!(text(span, "tokentap.id"), Some(record.id.clone()));
    assert_eq!(
        attribute(span, "tokentap.goodput"),
        Some(Value::BoolValue(record.goodput))
    );
    assert_eq!(record.slo_missed, ["ttft"]);
    let Some(Value::ArrayValue(missed)) = attribute(span, "tokentap.slo_missed") else {
        panic!("slo_missed");
    };
    assert_eq!(missed.values.len(), 1);
    assert_eq!(int(span, "http.response.status_code"), Some(200));
    assert_eq!(text(span, "http.request.method").as_deref(), Some("POST"));
    assert_eq!(
        int(span, "server.port"),
        Some(u64::from(upstream.addr.port()))
    );
    // Times: t_arrive is the record's start (which is written to the microsecond), t_end is e2e later.
    let start = tokentap::record::request_record::parse_rfc3339(&record.start).unwrap();
    assert_eq!(
        span.start_time_unix_nano / 1_000,
        (start * 1e6).round() as u64
    );
    let e2e = (record.e2e_s * 1e9).round() as u64;
    assert_eq!(span.end_time_unix_nano - span.start_time_unix_nano, e2e);
    let first = &span.events[0];
    assert_eq!(first.name, "tokentap.first_token");
    let ttft = (record.ttft_s.unwrap() * 1e9).round() as u64;
    assert_eq!(first.time_unix_nano - span.start_time_unix_nano, ttft);
    // The export's head: protobuf, gzipped, with the configured header.
    let head = collector.exports()[0].0.clone();
    assert_eq!(head["content-type"], "application/x-protobuf");
    assert_eq!(head["content-encoding"], "gzip");
    assert_eq!(head["authorization"], "Bearer collector-key");
    let metrics = scrape(&proxy).await;
    assert_eq!(metrics.get(family::SPANS_EXPORTED.name, &[]), 1.0);
    assert_eq!(metrics.get(family::SPANS_DROPPED.name, &[]), 0.0);
}

#[tokio::test]
async fn without_propagate_the_upstream_gets_the_clients_head_byte_for_byte() {
    let collector = Collector::start(Reply::Accept).await;
    let upstream = model_server().await;
    let plain = proxy(&upstream.url(), "").await;
    let traced = proxy(&upstream.url(), &traces_yaml(&collector.url(), "")).await;
    let c = client();
    for proxy in [&plain, &traced] {
        let request = with_header(post(proxy, CHAT, &chat_request("m")), "traceparent", CALLER);
        let request = with_header(request, "tracestate", "congo=t61rcWkgMzE");
        assert_eq!(send(&c, request).await.status, 200);
    }
    traced.flush_spans(Duration::from_secs(5)).await;
    let heads: Vec<Vec<u8>> = upstream
        .requests()
        .iter()
        .map(|r| r.raw_head.clone())
        .collect();
    assert_eq!(heads.len(), 2);
    assert_eq!(heads[0], heads[1], "tracing changed the forwarded head");
    let head = String::from_utf8_lossy(&heads[1]).to_string();
    assert!(
        head.contains(&format!("traceparent: {CALLER}\r\n")),
        "{head}"
    );
    assert_eq!(collector.spans().len(), 1);
}

#[tokio::test]
async fn with_propagate_the_upstream_sees_the_exported_span_as_its_parent() {
    let collector = Collector::start(Reply::Accept).await;
    let upstream = model_server().await;
    let plain = proxy(&upstream.url(), "").await;
    let traced = proxy(
        &upstream.url(),
        &traces_yaml(&collector.url(), ", propagate: true"),
    )
    .await;
    let c = client();
    let caller = |proxy| with_header(post(proxy, CHAT, &chat_request("m")), "traceparent", CALLER);
    assert_eq!(send(&c, caller(&plain)).await.status, 200);
    assert_eq!(send(&c, caller(&traced)).await.status, 200);
    // And one without a traceparent: tokentap adds one, starting the trace.
    assert_eq!(
        send(&c, post(&traced, CHAT, &chat_request("m")))
            .await
            .status,
        200
    );
    settle(&traced).await;
    traced.flush_spans(Duration::from_secs(5)).await;
    let requests = upstream.requests();
    let spans = collector.spans();
    assert_eq!((requests.len(), spans.len()), (3, 2));
    let sent = requests[1].header("traceparent");
    let joined = spans
        .iter()
        .find(|s| hex(&s.trace_id) == CALLER_TRACE)
        .expect("the caller's trace");
    assert_eq!(hex(&joined.parent_span_id), CALLER_SPAN);
    assert_eq!(
        sent,
        [format!("00-{CALLER_TRACE}-{}-01", hex(&joined.span_id))]
    );
    // Only that line differs from the head a plain proxy forwards.
    let lines = |r: &RecordedRequest| -> Vec<String> {
        r.head
            .lines()
            .filter(|l| !l.starts_with("traceparent"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(lines(&requests[0]), lines(&requests[1]));
    let root = spans
        .iter()
        .find(|s| hex(&s.trace_id) != CALLER_TRACE)
        .expect("a new trace");
    assert!(root.parent_span_id.is_empty());
    let added = requests[2].header("traceparent");
    let want = format!("00-{}-{}-01", hex(&root.trace_id), hex(&root.span_id));
    assert_eq!(added, [want]);
}

/// On tokio's paused clock: a fast request's 1 ms first token meets the 50 ms ceiling and a slow one's
/// 80 ms misses it, whatever the machine is doing.
#[tokio::test(start_paused = true)]
async fn with_ratio_0_exactly_the_requests_the_records_mark_as_missed_are_exported() {
    let collector = Collector::start(Reply::Accept).await;
    let upstream = model_server().await;
    let path = temp_file("traces-sampled");
    let sample = ", sample: {ratio: 0, slo_misses: true, failures: false, parent: false}";
    let yaml = format!(
        "slo: {{ttft: 50ms}}\nrequest_log: {{path: {}}}\n{}",
        path.display(),
        traces_yaml(&collector.url(), sample)
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    let c = client();
    let models = [
        "fast", "slow", "fast", "fail", "slow", "fast", "slow", "fast",
    ];
    for model in models {
        // A sampling caller does not count with `parent: false`.
        let request = with_header(
            post(&proxy, CHAT, &chat_request(model)),
            "traceparent",
            CALLER,
        );
        let _ = send(&c, request).await;
    }
    settle(&proxy).await;
    proxy.flush_spans(Duration::from_secs(5)).await;
    let records = read_records(&path, models.len());
    let missed: BTreeSet<String> = records
        .iter()
        .filter(|r| !r.slo_missed.is_empty())
        .map(|r| r.span_id.clone().expect("a missed request names its span"))
        .collect();
    assert_eq!(missed.len(), 3, "{records:?}");
    assert!(records
        .iter()
        .filter(|r| r.slo_missed.is_empty())
        .all(|r| r.span_id.is_none()));
    let exported: BTreeSet<String> = collector.spans().iter().map(|s| hex(&s.span_id)).collect();
    assert_eq!(exported, missed);
    // The 500 failed but `failures: false`: not exported.
    assert!(records
        .iter()
        .any(|r| r.status == Some(500) && r.trace_id.is_none()));
}

/// What the traffic looked like through one proxy: each request's time, and the counters after.
struct Batch {
    times: Vec<Duration>,
    metrics: Metrics,
}

/// `n` streamed requests one after another, all answered whole.
async fn batch(proxy: &tokentap::Running, n: usize) -> Vec<Duration> {
    let c = client();
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let got = send(&c, post(proxy, CHAT, &chat_request("m"))).await;
        assert_eq!((got.status, got.end.is_ok()), (200, true));
        times.push(started.elapsed());
    }
    times
}

async fn faulty(collector_url: &str, upstream: &Upstream, n: usize) -> Batch {
    let extra = ", timeout: 300ms, queue: 4, batch: 2";
    let proxy = proxy(&upstream.url(), &traces_yaml(collector_url, extra)).await;
    let times = batch(&proxy, n).await;
    settle(&proxy).await;
    // Two batches queued at most, each ending within the timeout.
    proxy.flush_spans(Duration::from_secs(3)).await;
    Batch {
        times,
        metrics: scrape(&proxy).await,
    }
}

fn worst(times: &[Duration]) -> Duration {
    times.iter().copied().max().unwrap_or_default()
}

#[tokio::test]
async fn a_dead_slow_failing_or_deaf_collector_costs_spans_counted_by_reason_never_a_requests_time()
{
    const N: usize = 20;
    let upstream = model_server().await;
    let off = proxy(&upstream.url(), "").await;
    let baseline = batch(&off, N).await;
    let slow = Collector::start(Reply::After(Duration::from_secs(30))).await;
    let failing = Collector::start(Reply::Status(500)).await;
    let (deaf, _held) = deaf_collector().await;
    let dead = dead_collector().await;
    let cases = [
        ("dead", dead, "failed"),
        ("slow", slow.url(), "timeout"),
        ("500", failing.url(), "rejected"),
        ("deaf", deaf, "timeout"),
    ];
    for (name, url, reason) in cases {
        let got = faulty(&url, &upstream, N).await;
        let dropped = |reason| {
            got.metrics
                .get(family::SPANS_DROPPED.name, &[("reason", reason)])
        };
        let exported = got.metrics.get(family::SPANS_EXPORTED.name, &[]);
        let all: f64 = family::SPAN_DROP_REASONS.iter().map(|r| dropped(r)).sum();
        // Every span accounted for: none exported, each dropped once, for this fault's reason or
        // because the queue (4) was full while the exporter waited on the collector.
        assert_eq!((exported, all), (0.0, N as f64), "{name}");
        assert!(
            dropped(reason) >= 2.0,
            "{name}: {reason} {}",
            dropped(reason)
        );
        assert_eq!(dropped(reason) + dropped("queue_full"), N as f64, "{name}");
        // No request waited for the exporter: the slowest stays within the plain proxy's slowest plus
        // a margin for this shared machine, far below the export timeout (300 ms) or the 30 s answer.
        let (plain, traced) = (worst(&baseline), worst(&got.times));
        eprintln!("{name}: slowest request {traced:?} (tracing off: {plain:?})");
        assert!(
            traced < plain + Duration::from_millis(150),
            "{name}: {traced:?} vs {plain:?}"
        );
    }
    assert!(slow.spans().is_empty() && failing.spans().is_empty());
}

#[tokio::test]
async fn a_shutdown_flushes_the_queued_spans_without_waiting_for_the_interval() {
    let collector = Collector::start(Reply::Accept).await;
    let upstream = model_server().await;
    let yaml = format!(
        "traces: {{endpoint: \"{}\", interval: 1m}}\n",
        collector.url()
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    let times = batch(&proxy, 3).await;
    assert_eq!(times.len(), 3);
    settle(&proxy).await;
    assert!(
        collector.spans().is_empty(),
        "the batch waits for its interval"
    );
    let drained = proxy.shutdown().await;
    assert_eq!(drained.cut, 0);
    let asked = Instant::now();
    proxy.flush_spans(Duration::from_secs(5)).await;
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(collector.spans().len(), 3);
    let metrics = scrape(&proxy).await;
    assert_eq!(metrics.get(family::SPANS_EXPORTED.name, &[]), 3.0);
}

/// The binary as an operator runs it: SIGTERM, after the drain, sends the spans still waiting for their
/// batch (a 1-minute interval) before it exits, within the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sigterm_the_binary_sends_its_queued_spans_before_it_exits() {
    let _slot = slot();
    let collector = Collector::start(Reply::Accept).await;
    let upstream = model_server().await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {}\nshutdown_grace: 10s\ntraces: {{endpoint: \"{}\", interval: 1m}}\n",
        upstream.url(),
        collector.url()
    );
    let process = tokio::task::spawn_blocking(move || start_binary("traces-sigterm", &yaml, None))
        .await
        .expect("started");
    let c = client();
    for _ in 0..2 {
        let request = http::Request::post(format!("http://{}{CHAT}", process.proxy))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(chat_request("m"))))
            .expect("request");
        assert_eq!(send(&c, request).await.status, 200);
    }
    tokio::time::sleep(ms(100)).await;
    assert!(
        collector.spans().is_empty(),
        "the batch waits for its interval"
    );
    let signalled = Instant::now();
    process.signal("TERM");
    let (status, log) = tokio::task::spawn_blocking(move || process.wait())
        .await
        .expect("exited");
    assert!(status.success(), "{status:?}\n{log}");
    // Within the 10 s grace (it takes milliseconds), not at the batch's 1-minute interval.
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "{:?}",
        signalled.elapsed()
    );
    assert_eq!(collector.spans().len(), 2, "{log}");
}

#[tokio::test]
async fn an_export_carries_at_most_a_batch_and_a_partial_success_counts_the_spans_it_rejected() {
    let collector = Collector::start(Reply::Partial(1)).await;
    let upstream = model_server().await;
    let yaml = format!(
        "traces: {{endpoint: \"{}\", interval: 1m, batch: 3}}\n",
        collector.url()
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    batch(&proxy, 7).await;
    settle(&proxy).await;
    proxy.flush_spans(Duration::from_secs(5)).await;
    // 3 + 3 by size, the last one by the flush; the collector rejected one of each.
    let carried: Vec<usize> = collector.exports().iter().map(|e| e.1).collect();
    assert_eq!(carried, [3, 3, 1]);
    let metrics = scrape(&proxy).await;
    assert_eq!(metrics.get(family::SPANS_EXPORTED.name, &[]), 4.0);
    let rejected = [("reason", "rejected")];
    assert_eq!(metrics.get(family::SPANS_DROPPED.name, &rejected), 3.0);
}
