//! What a reload will not do (docs/operations.md, "Reload without a restart"; issue 49's LOW findings):
//! obey a form another site's page makes a browser post, run once per request in a storm of them, or
//! apply a file caught while it is still being written.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use tokentap::scripted::*;
use tokentap::{Config, Reloaded};

use crate::reload::{config_file, post_reload, reloads, start_from, yaml};
use crate::support::{self, *};

/// `POST /-/reload` with the headers a browser adds, to `running`'s metrics port.
async fn post_from_page(running: &tokentap::Running, headers: &[(&str, &str)]) -> (u16, String) {
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("http://{}/-/reload", running.metrics_addr()));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let received = send(
        &client(),
        request.body(Full::new(Bytes::new())).expect("request"),
    )
    .await;
    (
        received.status,
        String::from_utf8_lossy(&received.body).into_owned(),
    )
}

/// A page of another site that makes the browser post a form to the metrics port (it answers anyone who
/// reaches it) is refused, counted, and reloads nothing; the operator's own tools (curl and
/// configmap-reload send neither header) and a same-origin page still reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_site_post_is_refused_and_reloads_nothing() {
    let upstream = support::upstream(|_| content_stream(2, ms(1))).await;
    let path = config_file("cross-site");
    let text = yaml(&upstream.url(), "metrics: {enable_reload: true}\n");
    let running = start_from(&path, &text).await;
    let host = running.metrics_addr().to_string();
    let elsewhere = [
        vec![("sec-fetch-site", "cross-site")],
        vec![("sec-fetch-site", "same-site")],
        vec![("origin", "http://attacker.example")],
        vec![("origin", "null")],
    ];
    for headers in &elsewhere {
        let (status, body) = post_from_page(&running, headers).await;
        assert_eq!(status, 403, "{headers:?}: {body}");
    }
    let m = scrape(&running).await;
    let refused = m.get(
        "tokentap_metrics_port_refused_total",
        &[("reason", "cross_site")],
    );
    assert_eq!(refused, elsewhere.len() as f64);
    assert_eq!(reloads(&m, "success"), 0.0, "nothing was reloaded");

    let own_origin = format!("http://{host}");
    for headers in [
        vec![],
        vec![("sec-fetch-site", "same-origin")],
        vec![("origin", own_origin.as_str())],
    ] {
        let (status, body) = post_from_page(&running, &headers).await;
        assert_eq!(status, 200, "{headers:?}: {body}");
    }
    assert_eq!(reloads(&scrape(&running).await, "success"), 3.0);
    let _ = std::fs::remove_file(path);
}

/// 64 `POST /-/reload` at once are answered by a few reloads, not 64 (each reload reads the file
/// twice, 100 ms apart, so all but the first request or two arrive while one runs and wait for the
/// next): before, 16 clients made 5,398 reloads a second, threads 9 → 46. Every request is answered
/// `200`; at most 8 reloads ran (3 when nothing is descheduled: an eighth of the 64 is the margin).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_reload_requests_is_answered_by_a_few_reloads() {
    let upstream = support::upstream(|_| content_stream(2, ms(1))).await;
    let path = config_file("storm");
    let text = yaml(&upstream.url(), "metrics: {enable_reload: true}\n");
    let running = Arc::new(start_from(&path, &text).await);
    let mut asked = Vec::new();
    for _ in 0..64 {
        let running = running.clone();
        asked.push(tokio::spawn(async move {
            post_reload(&running, http::Method::POST).await
        }));
    }
    for ask in asked {
        let (status, body) = ask.await.expect("task");
        assert_eq!(status, 200, "{body}");
    }
    let ran = reloads(&scrape(&running).await, "success");
    println!("64 reload requests at once: {ran} reloads");
    assert!((1.0..=8.0).contains(&ran), "{ran} reloads for 64 requests");
    let _ = std::fs::remove_file(path);
}

/// A config file caught while an editor or `kubectl cp` is still writing it, cut at a line boundary,
/// may well parse (`tenants.allow` cut short did, and took effect). A reload reads the file twice,
/// 100 ms apart, and applies it only when both agree: here the first read finds the list cut short and
/// the second the whole of it, so nothing is applied and the reload says why; the next reload, of a
/// file written whole, applies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_still_being_written_when_read_is_not_applied() {
    let upstream = support::upstream(|_| content_stream(2, ms(1))).await;
    let path = config_file("half-written");
    let text = yaml(&upstream.url(), "");
    let tenants = |allow: &str| format!("{text}tenants:\n  header: x-tenant\n  allow: [{allow}]\n");
    let running = start_from(&path, &tenants("alpha")).await;
    let whole = tenants("alpha, beta, gamma");
    let cut = tenants("alpha, beta");
    assert!(
        Config::from_yaml_str(&cut).is_ok(),
        "the cut file parses on its own"
    );

    // The file as a writer leaves it: the first read sees it cut, every later one whole.
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = reads.clone();
    let (cut_text, whole_text) = (cut.clone(), whole.clone());
    running.reload_from(Arc::new(move || {
        let text = match counted.fetch_add(1, Ordering::SeqCst) {
            0 => &cut_text,
            _ => &whole_text,
        };
        Config::from_yaml_str(text).map_err(|e| e.to_string())
    }));
    match running.reload().await {
        Reloaded::Failed(why) => assert!(why.contains("changed while it was read"), "{why}"),
        other => panic!("a file read two ways was applied: {}", other.describe()),
    }
    let m = scrape(&running).await;
    assert_eq!((reloads(&m, "success"), reloads(&m, "failure")), (0.0, 1.0));

    // Written whole now: both reads agree, and it is applied.
    match running.reload().await {
        Reloaded::Applied { changed, .. } => assert_eq!(changed, ["tenants.allow"]),
        other => panic!("{}", other.describe()),
    }
    assert_eq!(reads.load(Ordering::SeqCst), 4, "two reads a reload");
    let _ = std::fs::remove_file(path);
}

/// A reload that changes `traces:` replaces the exporter; the old one sends what it holds (for at most
/// 5 s) and counts what it could not, instead of being aborted with its queue (before: 331 of 39,513
/// spans lost on one reload, uncounted). A hundred rounds of 5 requests, each followed by a reload that
/// changes the exporter, against a collector that takes 50 ms an export: every span sampled is either
/// exported (and the collector has it) or counted dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_across_a_hundred_exporter_replacing_reloads_are_all_exported_or_counted() {
    const ROUNDS: usize = 100;
    const REQUESTS: usize = 5;
    let collector = Collector::start(Reply::After(ms(50))).await;
    let upstream = support::upstream(|_| content_stream(2, ms(1))).await;
    let path = config_file("spans");
    let traces = |batch: usize| {
        format!(
            "traces: {{endpoint: \"{}\", interval: 10ms, batch: {batch}}}\n",
            collector.url()
        )
    };
    let base = yaml(&upstream.url(), "");
    let running = Arc::new(start_from(&path, &format!("{base}{}", traces(8))).await);
    for round in 0..ROUNDS {
        let mut asked = Vec::new();
        for _ in 0..REQUESTS {
            let running = running.clone();
            asked.push(tokio::spawn(async move {
                let request = post(&running, "/v1/chat/completions", &chat_request("m"));
                send(&client(), request).await.status
            }));
        }
        for ask in asked {
            assert_eq!(ask.await.expect("task"), 200);
        }
        let text = format!("{base}{}", traces(9 + round));
        std::fs::write(&path, text).expect("write config");
        match running.reload().await {
            Reloaded::Applied { changed, .. } => assert_eq!(changed, ["traces"]),
            other => panic!("{}", other.describe()),
        }
    }
    let sent = (ROUNDS * REQUESTS) as f64;
    let since = std::time::Instant::now();
    let (exported, dropped) = loop {
        let m = scrape(&running).await;
        let exported = m.get("tokentap_spans_exported_total", &[]);
        let dropped = m.get("tokentap_spans_dropped_total", &[]);
        if exported + dropped >= sent || since.elapsed() > std::time::Duration::from_secs(60) {
            break (exported, dropped);
        }
        tokio::time::sleep(ms(50)).await;
    };
    println!("{sent} spans across {ROUNDS} reloads: {exported} exported, {dropped} dropped");
    assert_eq!(exported + dropped, sent, "every span exported or counted");
    assert_eq!(collector.spans().len() as f64, exported);
    let _ = std::fs::remove_file(path);
}
