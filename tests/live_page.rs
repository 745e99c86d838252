//! The live page on the metrics port (docs/live.md): `GET /` is the embedded page with its content type,
//! cache and content-security headers; `GET /api/v1/live` is its versioned JSON, whose figures agree with
//! `/metrics`; `ui.enabled: false` turns both off; the proxy port never answers them (its `/` is the
//! upstream's). The page's charts and figures in a real browser are tests/browser/.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::*;
use tokentap::record::metrics::family;
use tokentap::Running;

const MODEL: &str = "live-model";

fn get(addr: std::net::SocketAddr, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n").into_bytes()
}

/// Status, head and (dechunked) body of a GET on the metrics port.
async fn fetch(proxy: &Running, path: &str) -> (u16, String, Vec<u8>) {
    let addr = proxy.metrics_addr();
    let answer = raw_exchange(addr, &get(addr, path)).await;
    let (head, body) = raw_split(&answer);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(&body).unwrap_or_default()
    } else {
        body
    };
    (raw_status(&answer), head.to_ascii_lowercase(), body)
}

async fn send_requests(proxy: &Running, n: usize) {
    let client = client();
    for _ in 0..n {
        let got = send(
            &client,
            post(proxy, "/v1/chat/completions", &chat_request(MODEL)),
        )
        .await;
        assert_eq!(got.status, 200);
    }
    settle(proxy).await;
}

/// The JSON once a snapshot shows `requests` finished requests of MODEL (bounded wait).
async fn live_with(proxy: &Running, requests: u64) -> Value {
    for _ in 0..100 {
        let (status, _, body) = fetch(proxy, "/api/v1/live").await;
        assert_eq!(status, 200);
        let view: Value = serde_json::from_slice(&body).expect("JSON");
        let shown = view["models"]
            .as_array()
            .and_then(|m| m.iter().find(|e| e["model"] == MODEL))
            .map(|e| e["current"]["requests"].as_u64());
        if shown == Some(Some(requests)) {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no snapshot showed {requests} requests within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_port_serves_the_embedded_page_with_its_headers() {
    let upstream = upstream(|_| ok_stream()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let (status, head, body) = fetch(&proxy, "/").await;
    assert_eq!(status, 200);
    assert!(
        head.contains("content-type: text/html; charset=utf-8"),
        "{head}"
    );
    assert!(head.contains("cache-control: no-cache"), "{head}");
    assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    assert!(
        head.contains("content-security-policy: default-src 'none'"),
        "{head}"
    );
    // Scripts run only by hash (no inline script anyone slips in can), and no other site may frame it.
    let policy = head
        .lines()
        .find_map(|l| l.strip_prefix("content-security-policy: "))
        .expect("a policy");
    let script_src = policy
        .split("; ")
        .find_map(|d| d.strip_prefix("script-src "))
        .expect("script-src");
    assert!(
        script_src.split(' ').all(|s| s.starts_with("'sha256-")),
        "{policy}"
    );
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert!(head.contains("x-frame-options: deny"), "{head}");
    let html = String::from_utf8(body).expect("utf-8 page");
    assert!(html.contains("<title>tokentap live</title>"));
    assert!(html.contains("uPlot"), "uPlot is inlined");
    assert!(html.len() < 256 << 10, "{} bytes", html.len());
    let (status, head, _) = fetch(&proxy, "/api/v1/live").await;
    assert_eq!(status, 200);
    assert!(head.contains("content-type: application/json"), "{head}");
    assert!(head.contains("cache-control: no-store"), "{head}");
    let (status, _, body) = fetch(&proxy, "/nothing").await;
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("/api/v1/live"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_shows_each_model_as_metrics_counts_it() {
    let upstream = upstream(|_| ok_stream()).await;
    let proxy = proxy(&upstream.url(), "slo: {ttft: 1s}\nui: {interval: 1s}\n").await;
    send_requests(&proxy, 3).await;
    let view = live_with(&proxy, 3).await;
    assert_eq!(view["version"], 1);
    assert_eq!(view["interval_seconds"], 1.0);
    assert_eq!(view["history_seconds"], 1800.0);
    let entry = &view["models"][0];
    assert_eq!(entry["model"], MODEL);
    assert_eq!(entry["tenant"], Value::Null);
    assert_eq!(entry["ceilings"]["ttft"], 1.0);
    let metrics = scrape(&proxy).await;
    let requests = metrics.get(family::REQUESTS.name, &[("model", MODEL)]);
    assert_eq!(entry["current"]["requests"].as_f64(), Some(requests));
    let ttft_count = metrics.get(&family::TTFT.count(), &[("model", MODEL)]);
    assert_eq!(
        entry["current"]["quantiles"]["ttft"]["count"].as_f64(),
        Some(ttft_count)
    );
    assert_eq!(entry["current"]["goodput_ratio"], 1.0);
    let points = view["time"].as_array().map_or(0, Vec::len);
    for series in [
        "requests_per_second",
        "goodput_ratio",
        "output_tokens_per_second",
    ] {
        assert_eq!(
            entry["series"][series].as_array().map(Vec::len),
            Some(points),
            "{series}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_outside_interval_and_history_is_a_400_naming_it() {
    let upstream = upstream(|_| ok_stream()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let (status, _, body) = fetch(&proxy, "/api/v1/live?window=2h").await;
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).starts_with("window: \"2h\" must be between"));
    let (status, _, body) = fetch(&proxy, "/api/v1/live?window=5m").await;
    assert_eq!(status, 200);
    let view: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(view["window_seconds"], 300.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_enabled_false_turns_the_page_and_its_json_off() {
    let upstream = upstream(|_| ok_stream()).await;
    let proxy = proxy(&upstream.url(), "ui: {enabled: false}\n").await;
    for path in ["/", "/api/v1/live"] {
        let (status, _, body) = fetch(&proxy, path).await;
        assert_eq!(status, 404, "{path}");
        assert!(!String::from_utf8_lossy(&body).contains("/api/v1/live"));
    }
    assert_eq!(fetch(&proxy, "/metrics").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_port_forwards_slash_to_the_upstream_not_the_page() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{\"upstream\":true}")]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let addr = proxy.proxy_addr();
    let answer = raw_exchange(addr, &get(addr, "/")).await;
    let (_, body) = raw_split(&answer);
    assert_eq!(raw_status(&answer), 200);
    assert!(String::from_utf8_lossy(&body).contains("upstream"));
    assert_eq!(upstream.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_tenant_label_each_tenant_gets_its_entry_and_its_own_ceilings() {
    let upstream = upstream(|_| ok_stream()).await;
    let yaml = "max_models: 4\nslo: {ttft: 1s}\ntenants: {header: x-tenant-id, max: 4, slo: {vip: {ttft: 250ms}}}\nui: {interval: 1s}\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let client = client();
    for tenant in ["vip", "batch", "batch"] {
        let mut request = post(&proxy, "/v1/chat/completions", &chat_request(MODEL));
        let value = http::HeaderValue::from_static(tenant);
        request.headers_mut().insert("x-tenant-id", value);
        assert_eq!(send(&client, request).await.status, 200);
    }
    settle(&proxy).await;
    let view = live_with(&proxy, 3).await;
    let tenants: Vec<(String, u64, f64)> = view["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .map(|e| {
            assert_eq!(e["model"], MODEL);
            let name = e["tenant"].as_str().unwrap_or_default().to_owned();
            let requests = e["current"]["requests"].as_u64().unwrap_or(0);
            (
                name,
                requests,
                e["ceilings"]["ttft"].as_f64().unwrap_or(0.0),
            )
        })
        .collect();
    assert_eq!(
        tenants,
        [("batch".to_owned(), 2, 1.0), ("vip".to_owned(), 1, 0.25)]
    );
    let metrics = scrape(&proxy).await;
    let vip = metrics.get(family::REQUESTS.name, &[("tenant", "vip")]);
    assert_eq!(vip, 1.0);
}

/// A stand-in Prometheus: every instant query answers one sample of model `llama` worth `value`.
async fn prometheus_answering(value: &'static str) -> Upstream {
    upstream(move |_| {
        let body = format!(
            r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{"model":"llama"}},"value":[1764752442.5,"{value}"]}}]}}}}"#
        );
        vec![json_response(200, "OK", &body)]
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ui_prometheus_there_is_no_fleet_table() {
    let upstream = upstream(|_| ok_stream()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let (status, _, body) = fetch(&proxy, "/api/v1/fleet").await;
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("ui.prometheus is not set"));
    let (_, _, body) = fetch(&proxy, "/api/v1/live").await;
    let view: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(view["fleet"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_table_reads_the_rules_from_prometheus_at_most_every_five_seconds() {
    let prometheus = prometheus_answering("0.75").await;
    let upstream = upstream(|_| ok_stream()).await;
    let yaml = format!("ui: {{prometheus: {}/}}\n", prometheus.url());
    let proxy = proxy(&upstream.url(), &yaml).await;
    let (_, _, body) = fetch(&proxy, "/api/v1/live").await;
    let view: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(view["fleet"], true, "the page is told to show the table");

    let (status, head, body) = fetch(&proxy, "/api/v1/fleet").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(head.contains("content-type: application/json"), "{head}");
    let fleet: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(fleet["version"], 1);
    assert_eq!(fleet["prometheus"], prometheus.url().as_str());
    assert_eq!(
        (fleet["up"].as_f64(), fleet["targets"].as_f64()),
        (Some(0.75), Some(0.75))
    );
    let columns = fleet["columns"].as_array().expect("columns");
    let goodput = columns
        .iter()
        .position(|c| c["record"] == "model:tokentap_goodput:ratio_rate5m")
        .expect("a goodput column");
    assert_eq!(columns[goodput]["unit"], "share");
    assert_eq!(fleet["models"][0]["model"], "llama");
    assert_eq!(fleet["models"][0]["values"][goodput], 0.75);
    // Three instant queries of the fleet, one a column: one round.
    let asked = prometheus.requests();
    assert_eq!(asked.len(), 3 + columns.len());
    assert!(asked
        .iter()
        .all(|r| r.request_line().starts_with("GET /api/v1/query?query=")));
    // However many browsers refresh meanwhile, Prometheus is not asked again within 5 s.
    for _ in 0..5 {
        let (status, _, again) = fetch(&proxy, "/api/v1/fleet").await;
        assert_eq!((status, again), (200, body.clone()));
    }
    assert_eq!(prometheus.requests().len(), asked.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_that_fails_is_a_502_that_says_what_it_answered() {
    let prometheus = upstream(|_| {
        vec![json_response(
            503,
            "Service Unavailable",
            "not ready\x1b[2J",
        )]
    })
    .await;
    let upstream = upstream(|_| ok_stream()).await;
    let yaml = format!("ui: {{prometheus: {}}}\n", prometheus.url());
    let proxy = proxy(&upstream.url(), &yaml).await;
    let (status, _, body) = fetch(&proxy, "/api/v1/fleet").await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("/api/v1/query?query=count(up"), "{text}");
    assert!(
        text.contains("503") && text.contains("not Prometheus' API answer"),
        "{text}"
    );
    // The proxy still serves, and the page's own figures too.
    let got = send(
        &client(),
        post(&proxy, "/v1/chat/completions", &chat_request(MODEL)),
    )
    .await;
    assert_eq!(got.status, 200);
    let (status, _, _) = fetch(&proxy, "/api/v1/live").await;
    assert_eq!(status, 200);
    // The failure is kept as long as an answer: one query asked, not one per refresh.
    let _ = fetch(&proxy, "/api/v1/fleet").await;
    assert_eq!(prometheus.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ceilings_follow_a_reload() {
    let upstream = upstream(|_| ok_stream()).await;
    let path = crate::reload::config_file("live-ceilings");
    let config = |ttft: &str| {
        let extra = format!("slo: {{ttft: {ttft}}}\nui: {{interval: 1s}}\n");
        crate::reload::yaml(&upstream.url(), &extra)
    };
    let proxy = crate::reload::start_from(&path, &config("2s")).await;
    send_requests(&proxy, 1).await;
    proxy.snapshot_live();
    let view = live_with(&proxy, 1).await;
    assert_eq!(view["models"][0]["ceilings"]["ttft"], 2.0);

    let reloaded = crate::reload::reload(&proxy, &path, &config("150ms")).await;
    assert!(
        matches!(reloaded, tokentap::Reloaded::Applied { .. }),
        "{reloaded:?}"
    );
    // The same snapshot, read again: the ceilings are the reload's at once.
    let view = live_with(&proxy, 1).await;
    assert_eq!(view["models"][0]["ceilings"]["ttft"], 0.15);
    let _ = std::fs::remove_file(&path);
}
