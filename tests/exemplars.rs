//! Metrics and traces joined, against real Prometheus servers (Debian's 2.42): tokentap in-process with
//! its spans going to the scripted OTLP receiver (`support/otlp.rs`), one Prometheus with
//! `--enable-feature=exemplar-storage` (it scrapes OpenMetrics) and one with native histograms on as
//! well (it scrapes the protobuf exposition), both scraping the same tokentap under the same load.
//!
//! - Every exemplar Prometheus stored on a TTFT bucket above the SLO ceiling names a span the receiver
//!   has, of a request that missed the ceiling, with that request's TTFT as its value; every one on a
//!   bucket at or below it, a request that met it. E2E's exemplars name exported spans too.
//! - The TTFT family is ingested as a native histogram: its count and sum are the classic ones, and
//!   `histogram_quantile` on it agrees with the classic buckets' within the native schema's error (one
//!   bucket: 2^(1/8) − 1 = 9.05 %).
//! - The same tokentap pushes its metrics over OTLP (`otlp_metrics:`) to the receiver: the last export's
//!   `gen_ai.server.time_to_first_token` and `tokentap.time_to_first_token` are Prometheus's TTFT series
//!   bucket for bucket, with its count and sum, and `tokentap.goodput` is its goodput counter.
//!
//! The load: 40 streams whose first tokens come 100 to 490 ms after the request (10 ms apart), so the
//! quantiles of both histograms are read from evenly filled buckets. Whether a request met the 200 ms
//! ceiling is read from what tokentap recorded (its span), never assumed from the delay.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, Metric};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value;
use support::*;
use tokentap::record::metrics::family;

const CHAT: &str = "/v1/chat/completions";
const REQUESTS: u64 = 40;
const CEILING: f64 = 0.2;
/// Fine classic buckets over the load's range, so the classic quantile is read from even buckets too.
const BUCKETS: &str = "[0.05, 0.1, 0.15, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 1]";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn ttft_of(span: &Span) -> f64 {
    let found = span
        .attributes
        .iter()
        .find(|kv| kv.key == "tokentap.ttft_s");
    match found.and_then(|kv| kv.value.clone()).and_then(|v| v.value) {
        Some(Any::DoubleValue(v)) => v,
        other => panic!("tokentap.ttft_s: {other:?}"),
    }
}

/// The model name says when the first token comes: `d120` after 120 ms.
async fn model_server() -> Upstream {
    upstream(|request| {
        let body = String::from_utf8_lossy(&request.body).to_string();
        let delay = body
            .split("\"d")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        tokens_after(ms(delay), 3)
    })
    .await
}

/// Sends the load: one request every 50 ms, each on its own task.
async fn load(proxy: &tokentap::Running) {
    let client = client();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..REQUESTS {
        let body = chat_request(&format!("d{}", 100 + 10 * i)).replace("\"d", "\"m\",\"x\":\"d");
        let request = post(proxy, CHAT, &body);
        let client = client.clone();
        tasks.spawn(async move { send(&client, request).await.status });
        tokio::time::sleep(ms(50)).await;
    }
    while let Some(status) = tasks.join_next().await {
        assert_eq!(status.expect("a request"), 200);
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let found = attributes.iter().find(|kv| kv.key == key)?;
    match found.value.clone()?.value? {
        Any::StringValue(v) => Some(v),
        other => panic!("{key}: {other:?}"),
    }
}

/// The last export's metric `name`.
fn exported(collector: &Collector, name: &str) -> Metric {
    let last = collector.metrics().pop().expect("a metrics export");
    let metrics = (last.resource_metrics.into_iter())
        .flat_map(|r| r.scope_metrics)
        .flat_map(|s| s.metrics);
    metrics
        .into_iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("{name} not exported"))
}

/// The one value `expr` returns.
async fn one(prom: &Prometheus, expr: String) -> f64 {
    let result = prom.query(&expr).await;
    assert_eq!(result.len(), 1, "{expr}: {result:?}");
    result[0].1
}

/// Waits (at most 20 s) until `prom` holds exemplars for `expr` naming `at_least` distinct traces.
async fn exemplars(
    prom: &Prometheus, expr: &str, at_least: usize,
) -> Vec<(Value, Vec<(Value, f64)>)> {
    for _ in 0..100 {
        let found = prom.exemplars(expr).await;
        let traces: std::collections::HashSet<String> = (found.iter())
            .flat_map(|(_, kept)| {
                kept.iter()
                    .map(|(labels, _)| labels["trace_id"].to_string())
            })
            .collect();
        if traces.len() >= at_least {
            return found;
        }
        tokio::time::sleep(ms(200)).await;
    }
    panic!("no exemplars for {expr}:\n{}", prom.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exemplars_lead_to_exported_spans_and_the_native_histogram_agrees_with_the_classic_buckets()
{
    let _slot = slot();
    if !prometheus_installed("exemplars_lead_to_exported_spans_*") {
        return;
    }
    let collector = Collector::start(Reply::Accept).await;
    let upstream = model_server().await;
    let yaml = format!(
        "slo: {{ttft: 200ms}}\nbuckets: {{ttft: {BUCKETS}}}\ntraces: {{endpoint: \"{0}\", interval: 10ms}}\notlp_metrics: {{endpoint: \"{0}\", interval: 200ms}}\n",
        collector.url()
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    let port = proxy.metrics_addr().port();
    let mut classic = Prometheus::with_features(&[port], &["exemplar-storage"]);
    let mut native = Prometheus::with_features(&[port], &["exemplar-storage", "native-histograms"]);
    for prom in [&mut classic, &mut native] {
        prom.wait_until("the first scrape", "up", |v| v == 1.0)
            .await;
    }
    load(&proxy).await;
    settle(&proxy).await;
    proxy.flush_spans(Duration::from_secs(5)).await;
    let spans: HashMap<String, Span> = (collector.spans().into_iter())
        .map(|s| (hex(&s.trace_id), s))
        .collect();
    assert_eq!(
        spans.len() as u64,
        REQUESTS,
        "every request sampled (ratio 1)"
    );
    let missed = spans.values().filter(|s| ttft_of(s) > CEILING).count();
    assert!(
        missed >= 25 && missed < REQUESTS as usize,
        "{missed} of {REQUESTS} missed the ceiling"
    );

    let count = format!("sum({}_count)", family::TTFT.name);
    classic
        .wait_until("the load scraped", &count, |v| v == REQUESTS as f64)
        .await;
    let native_count = format!("histogram_count(sum({}))", family::TTFT.name);
    native
        .wait_until(
            "the load scraped as a native histogram",
            &native_count,
            |v| v == REQUESTS as f64,
        )
        .await;

    // Exemplars, as the OpenMetrics scrape stored them: per bucket, each names an exported span whose
    // TTFT is the exemplar's value and lies in that bucket, so above the ceiling only misses.
    let buckets = format!("{}_bucket", family::TTFT.name);
    let found = exemplars(&classic, &buckets, 3).await;
    let (mut above, mut below) = (0, 0);
    for (series, kept) in &found {
        let le = series["le"].as_str().expect("le");
        let le: f64 = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().expect("le")
        };
        for (labels, value) in kept {
            let trace = labels["trace_id"].as_str().expect("trace_id");
            let span = spans
                .get(trace)
                .unwrap_or_else(|| panic!("exemplar {labels} names no exported span"));
            assert_eq!(
                labels["span_id"].as_str(),
                Some(hex(&span.span_id).as_str())
            );
            assert!(labels["request_id"]
                .as_str()
                .is_some_and(|id| !id.is_empty()));
            let ttft = ttft_of(span);
            assert_eq!(*value, ttft, "the exemplar's value is the span's TTFT");
            assert!(ttft <= le, "{ttft} on the bucket le={le}");
            match le > CEILING {
                true => {
                    assert!(ttft > CEILING, "a request that met the ceiling on le={le}");
                    above += 1;
                }
                false => below += 1,
            }
        }
    }
    assert!(above >= 1, "exemplars above the ceiling: {found:?}");
    eprintln!("exemplars stored: {above} on TTFT buckets above the ceiling, {below} at or below");
    let e2e = exemplars(&classic, &format!("{}_bucket", family::E2E.name), 1).await;
    for (_, kept) in &e2e {
        for (labels, _) in kept {
            let trace = labels["trace_id"].as_str().expect("trace_id");
            assert!(
                spans.contains_key(trace),
                "E2E exemplar {labels} names no exported span"
            );
        }
    }

    // The protobuf scrape: the same exemplars' traces, on the native series.
    let on_native = exemplars(&native, family::TTFT.name, 1).await;
    for (_, kept) in &on_native {
        for (labels, _) in kept {
            assert!(spans.contains_key(labels["trace_id"].as_str().expect("trace_id")));
        }
    }

    // Native against classic: the same count and sum, and quantiles within one native bucket.
    let classic_sum = one(&classic, format!("sum({}_sum)", family::TTFT.name)).await;
    let native_sum = one(
        &native,
        format!("histogram_sum(sum({}))", family::TTFT.name),
    )
    .await;
    assert!(
        (classic_sum - native_sum).abs() < 1e-9,
        "sum {classic_sum} vs {native_sum}"
    );
    let classic_series = native.query(&format!("count({buckets})")).await;
    eprintln!("the native Prometheus kept {classic_series:?} classic bucket series");
    let error = 2f64.powf(1.0 / 8.0) - 1.0;
    for q in [0.25, 0.5, 0.9] {
        let from_classic = one(
            &classic,
            format!("histogram_quantile({q}, sum by (le) ({buckets}))"),
        )
        .await;
        let from_native = one(
            &native,
            format!("histogram_quantile({q}, sum({}))", family::TTFT.name),
        )
        .await;
        let off = (from_native / from_classic - 1.0).abs();
        eprintln!(
            "p{}: classic {from_classic:.4} s, native {from_native:.4} s ({:.2} %)",
            q * 100.0,
            off * 100.0
        );
        assert!(
            off <= error,
            "p{q}: native {from_native} vs classic {from_classic}: {off} > {error}"
        );
    }

    // OTLP: the last export (sent by the flush, after the load) is Prometheus's series.
    proxy.flush_metrics(Duration::from_secs(5)).await;
    let by_le = classic.query(&buckets).await;
    let prometheus_bucket = |le: f64| {
        let found = by_le.iter().find(|(labels, _)| {
            let at = labels["le"].as_str().expect("le");
            at.parse::<f64>().ok() == Some(le) || (at == "+Inf" && le.is_infinite())
        });
        found.map(|(_, v)| *v).expect("a bucket")
    };
    let classic_count = one(&classic, format!("sum({}_count)", family::TTFT.name)).await;
    for name in [
        "gen_ai.server.time_to_first_token",
        "tokentap.time_to_first_token",
    ] {
        let Some(metric::Data::Histogram(h)) = exported(&collector, name).data else {
            panic!("{name} is a histogram");
        };
        assert_eq!(h.data_points.len(), 1, "{name}: one series, model m");
        let point = &h.data_points[0];
        let model_key = match name.starts_with("gen_ai") {
            true => "gen_ai.request.model",
            false => "tokentap.model",
        };
        assert_eq!(
            attribute(&point.attributes, model_key).as_deref(),
            Some("m")
        );
        assert_eq!(point.count as f64, classic_count, "{name} count");
        assert!(
            (point.sum.unwrap_or_default() - classic_sum).abs() < 1e-9,
            "{name} sum"
        );
        let mut cumulative = 0;
        let edges = point.explicit_bounds.iter().copied().chain([f64::INFINITY]);
        for (edge, n) in edges.zip(&point.bucket_counts) {
            cumulative += n;
            assert_eq!(
                cumulative as f64,
                prometheus_bucket(edge),
                "{name} le={edge}"
            );
        }
    }
    let genai = exported(&collector, "gen_ai.server.time_to_first_token");
    let Some(metric::Data::Histogram(h)) = genai.data else {
        panic!("a histogram");
    };
    assert_eq!(
        attribute(&h.data_points[0].attributes, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    let Some(metric::Data::Sum(goodput)) = exported(&collector, "tokentap.goodput").data else {
        panic!("tokentap.goodput is a sum");
    };
    let good = one(&classic, format!("sum({})", family::GOODPUT.name)).await;
    let Some(number_data_point::Value::AsInt(n)) = goodput.data_points[0].value else {
        panic!("an int");
    };
    assert_eq!((n as f64, goodput.is_monotonic), (good, true));
}

/// `/metrics` in the format a scraper's `Accept` names: the text page for anyone else, byte for byte
/// without exemplars, and `Vary: accept` on each answer.
#[tokio::test]
async fn the_accept_header_picks_the_format_and_a_plain_scrape_has_no_exemplars() {
    let collector = Collector::start(Reply::Accept).await;
    let upstream = model_server().await;
    let yaml = format!(
        "traces: {{endpoint: \"{}\", interval: 10ms}}\n",
        collector.url()
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    let request = post(
        &proxy,
        CHAT,
        &chat_request("m").replace("\"m\"", "\"m\",\"x\":\"d5\""),
    );
    assert_eq!(send(&client(), request).await.status, 200);
    settle(&proxy).await;
    let addr = proxy.metrics_addr();
    let get = |accept: &str| {
        let accept = match accept {
            "" => String::new(),
            a => format!("accept: {a}\r\n"),
        };
        format!("GET /metrics HTTP/1.1\r\nhost: {addr}\r\n{accept}connection: close\r\n\r\n")
    };
    let fetch = |request: String| async move {
        let (head, body) = raw_split(&raw_exchange(addr, request.as_bytes()).await);
        let body = match head.to_ascii_lowercase().contains("chunked") {
            true => dechunk(&body).unwrap_or_default(),
            false => body,
        };
        (head.to_ascii_lowercase(), body)
    };
    let (head, text) = fetch(get("")).await;
    assert!(
        head.contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(head.contains("vary: accept"), "{head}");
    let text = String::from_utf8(text).expect("utf-8");
    assert!(!text.contains(" # {") && !text.contains("# EOF"), "{text}");
    let (head, open) = fetch(get(
        "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
    ))
    .await;
    assert!(
        head.contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    let open = String::from_utf8(open).expect("utf-8");
    let bucket = format!("{}_bucket{{", family::TTFT.name);
    assert!(
        open.lines()
            .any(|l| l.starts_with(&bucket) && l.contains(" # {trace_id=\"")),
        "{open}"
    );
    assert!(open.ends_with("# EOF\n"));
    let protobuf = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited";
    let (head, _) = fetch(get(protobuf)).await;
    assert!(head.contains("content-type: application/vnd.google.protobuf; proto=io.prometheus.client.metricfamily; encoding=delimited"), "{head}");
}
