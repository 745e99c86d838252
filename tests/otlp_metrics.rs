//! Metrics over OTLP (`otlp_metrics:`, docs/tracing.md) against the scripted receiver
//! (`support/otlp.rs`): with `temporality: delta` the exports add up to the page's totals exactly, bucket
//! for bucket, however the requests fell between them; a collector that is not there costs exports,
//! counted, and never a request. (That a cumulative export equals what a real Prometheus scraped is
//! `tests/exemplars.rs`.)

use crate::support;

use std::time::Duration;

use opentelemetry_proto::tonic::metrics::v1::metric;
use support::*;
use tokentap::record::metrics::family;

const CHAT: &str = "/v1/chat/completions";

async fn model_server() -> Upstream {
    upstream(|_| tokens_after(ms(2), 3)).await
}

async fn requests(proxy: &tokentap::Running, n: usize) {
    let client = client();
    for _ in 0..n {
        let got = send(&client, post(proxy, CHAT, &chat_request("m"))).await;
        assert_eq!(got.status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_exports_add_up_to_the_pages_totals_bucket_for_bucket() {
    let collector = Collector::start(Reply::Accept).await;
    let upstream = model_server().await;
    let yaml = format!(
        "otlp_metrics: {{endpoint: \"{}\", interval: 30ms, temporality: delta}}\n",
        collector.url()
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    for _ in 0..3 {
        requests(&proxy, 4).await;
        tokio::time::sleep(ms(100)).await;
    }
    settle(&proxy).await;
    proxy.flush_metrics(Duration::from_secs(5)).await;
    let (mut count, mut buckets, mut exports_with_points) = (0, Vec::<u64>::new(), 0);
    for export in collector.metrics() {
        let metrics = (export.resource_metrics.iter())
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics);
        for m in metrics.filter(|m| m.name == "tokentap.time_to_first_token") {
            let Some(metric::Data::Histogram(h)) = &m.data else {
                panic!("a histogram");
            };
            assert_eq!(h.aggregation_temporality, 1, "DELTA");
            for point in &h.data_points {
                exports_with_points += usize::from(point.count > 0);
                count += point.count;
                buckets.resize(point.bucket_counts.len(), 0);
                for (sum, n) in buckets.iter_mut().zip(&point.bucket_counts) {
                    *sum += n;
                }
            }
        }
    }
    assert!(
        exports_with_points >= 2,
        "the load fell into several exports"
    );
    let page = scrape(&proxy).await;
    assert_eq!(count as f64, page.get(&family::TTFT.count(), &[]));
    let mut cumulative = 0;
    let bucket = family::TTFT.bucket();
    // The page's edges in order: the OTLP buckets are the classic ones, one by one.
    let mut les: Vec<f64> = (page.label_values(&bucket, "le").iter())
        .map(|e| {
            if e == "+Inf" {
                f64::INFINITY
            } else {
                e.parse().expect("le")
            }
        })
        .collect();
    les.sort_by(f64::total_cmp);
    assert_eq!(les.len(), buckets.len(), "the same edges, +Inf included");
    for (le, n) in les.iter().zip(&buckets) {
        cumulative += n;
        let shown = if le.is_infinite() {
            "+Inf".to_owned()
        } else {
            le.to_string()
        };
        assert_eq!(
            cumulative as f64,
            page.get(&bucket, &[("le", &shown)]),
            "le={shown}"
        );
    }
    assert!(page.get(family::OTLP_METRIC_EXPORTS.name, &[]) >= 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_not_there_costs_exports_counted_never_a_request() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = format!("http://{}", listener.local_addr().expect("addr"));
    drop(listener);
    let upstream = model_server().await;
    let yaml = format!("otlp_metrics: {{endpoint: \"{dead}\", interval: 20ms, timeout: 200ms}}\n");
    let proxy = proxy(&upstream.url(), &yaml).await;
    requests(&proxy, 5).await;
    let mut failed = 0.0;
    for _ in 0..100 {
        let page = scrape(&proxy).await;
        failed = page.get(
            family::OTLP_METRIC_EXPORTS_DROPPED.name,
            &[("reason", "failed")],
        );
        if failed >= 3.0 {
            assert_eq!(page.get(family::OTLP_METRIC_EXPORTS.name, &[]), 0.0);
            assert_eq!(page.requests("m", "200", "ok"), 5.0);
            return;
        }
        tokio::time::sleep(ms(50)).await;
    }
    panic!("exports to a dead collector not counted as failed: {failed}");
}
