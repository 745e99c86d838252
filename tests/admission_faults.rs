//! Label admission fails closed. The upstream's model list decides which names take a `model` place
//! (tests/admission.rs); these are the moments it is not there: before its first answer names are
//! pending, not admitted; an answer that cannot be read (503, 429, a body that is not a list, a refusal
//! once a list was seen) keeps the last list; and a new list takes back the places of names it lacks
//! once no request holds them. Against an upstream that answers every name 200, as a gateway does.

use crate::admission::{asked, flood_from, label_values, requested_model, stream_naming, LIST};
use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::*;
use tokentap::record::metrics::family;

const CHAT: &str = "/v1/chat/completions";

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Waits (at most 10 s) until the upstream has had `n` requests whose line starts with `line`, and a
/// moment more for tokentap to act on the last answer.
async fn wait_asked(upstream: &Upstream, line: &str, n: usize) {
    for _ in 0..200 {
        if asked(upstream, line) >= n {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the upstream was not asked {line:?} {n} times within 10 s");
}

async fn send_ok(proxy: &tokentap::Running, model: &str) {
    let got = send(&client(), post(proxy, CHAT, &chat_request(model))).await;
    assert_eq!((got.status, got.end), (200, Ok(())), "{model}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_that_cannot_be_read_at_a_refresh_is_kept_and_junk_takes_no_place() {
    // The list once, then at each refresh: 503, 429, a page that is not a list, and a refusal.
    let rounds = AtomicUsize::new(0);
    let upstream = upstream(move |request: &RecordedRequest| {
        let line = request.request_line();
        if line.starts_with("GET /api/tags ") {
            return vec![json_response(404, "Not Found", "{}")];
        }
        if !line.starts_with("GET /v1/models ") {
            return stream_naming(&requested_model(request));
        }
        match rounds.fetch_add(1, Ordering::SeqCst) {
            0 => vec![json_response(200, "OK", LIST)],
            1 => vec![json_response(503, "Service Unavailable", "{}")],
            2 => vec![json_response(429, "Too Many Requests", "{}")],
            3 => vec![json_response(200, "OK", "<html>busy</html>")],
            _ => vec![json_response(401, "Unauthorized", "{}")],
        }
    })
    .await;
    let yaml = "model_list: {enabled: true, refresh: 1s}\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    listed(&proxy, 2.0).await;
    send_ok(&proxy, "real-model").await;
    // The 503 round: nine made-up names answered 200 during it.
    wait_asked(&upstream, "GET /api/tags ", 1).await;
    flood_from(&proxy, 0, 9).await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(
        m.get(family::MODELS_LISTED.name, &[]),
        2.0,
        "the list stays"
    );
    let models = label_values(&m, family::REQUESTS.name);
    println!("model labels after the 503 round: {models:?}");
    assert_eq!(models, set(&["real-model", "unadmitted"]));
    // 429, not a list, and twice a refusal (401 on /v1/models, 404 on /api/tags): the list stays.
    wait_asked(&upstream, "GET /api/tags ", 5).await;
    flood_from(&proxy, 9, 9).await;
    send_ok(&proxy, "real-model").await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::MODELS_LISTED.name, &[]), 2.0);
    let models = label_values(&m, family::REQUESTS.name);
    assert_eq!(models, set(&["real-model", "unadmitted"]));
    assert_eq!(
        m.get(family::REQUESTS.name, &[("model", "unadmitted")]),
        18.0
    );
    let real = [("model", "real-model"), ("status", "200")];
    assert_eq!(m.get(family::REQUESTS.name, &real), 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_answered_before_the_first_list_take_no_place_and_the_listed_model_gets_its_own() {
    // The list's answer takes a second, as a busy server's might at start.
    let upstream = upstream(|request: &RecordedRequest| {
        if request.request_line().starts_with("GET /v1/models ") {
            return vec![
                Step::Sleep(Duration::from_secs(1)),
                json_response(200, "OK", LIST),
            ];
        }
        stream_naming(&requested_model(request))
    })
    .await;
    let proxy = proxy(&upstream.url(), "model_list: {enabled: true}\n").await;
    flood_from(&proxy, 0, 100).await;
    settle(&proxy).await;
    let before = scrape(&proxy).await;
    println!(
        "after 100 made-up names in the first moments: models listed {}, {} series",
        before.get(family::MODELS_LISTED.name, &[]),
        before.get(family::SERIES.name, &[])
    );
    listed(&proxy, 2.0).await;
    send_ok(&proxy, "real-model").await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let series = m.get(family::SERIES.name, &[]);
    println!("and once the list came and the real model was asked: {series} series");
    let models = label_values(&m, family::REQUESTS.name);
    assert_eq!(models, set(&["real-model", "unadmitted"]));
    assert_eq!(
        m.get(family::REQUESTS.name, &[("model", "unadmitted")]),
        100.0
    );
    assert_eq!(
        m.get(family::REQUESTS.name, &[("model", "real-model")]),
        1.0
    );
    assert!(series < 1_000.0, "{series} series");
}

/// A stream for `model` that sends one token, then holds until `release` is set (at most 10 s).
fn held_stream(model: &str, release: Arc<AtomicBool>) -> Vec<Step> {
    let mut steps = stream_naming(model);
    let hold = Step::Each(
        0..400,
        Arc::new(move |_| match release.load(Ordering::SeqCst) {
            true => Vec::new(),
            false => vec![Step::Sleep(Duration::from_millis(25))],
        }),
    );
    steps.insert(2, hold);
    steps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_that_drops_a_name_takes_its_place_back_once_no_request_holds_it() {
    // No list at first (404 on both paths), then one, then another that drops `second`.
    let phase = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(AtomicBool::new(false));
    let (now, held) = (phase.clone(), release.clone());
    let upstream = upstream(move |request: &RecordedRequest| {
        let line = request.request_line();
        if line.starts_with("GET ") {
            let list = match now.load(Ordering::SeqCst) {
                0 => return vec![json_response(404, "Not Found", "{}")],
                1 => r#"{"data":[{"id":"real"},{"id":"second"}]}"#,
                _ => r#"{"data":[{"id":"real"},{"id":"third"},{"id":"fourth"}]}"#,
            };
            return vec![json_response(200, "OK", list)];
        }
        let model = requested_model(request);
        match String::from_utf8_lossy(&request.body).contains("hold") {
            true => held_stream(&model, held.clone()),
            false => stream_naming(&model),
        }
    })
    .await;
    let yaml = "max_models: 2\nmodel_list: {enabled: true, refresh: 1s}\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    listed(&proxy, 0.0).await;
    send_ok(&proxy, "early").await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(label_values(&m, family::REQUESTS.name), set(&["early"]));
    // A list that lacks `early`: its place and its series are given back.
    phase.store(1, Ordering::SeqCst);
    listed(&proxy, 2.0).await;
    let m = scrape(&proxy).await;
    assert!(!m.text.contains("model=\"early\""), "{}", m.text);
    assert_eq!(m.get(family::LABELS_RETIRED.name, &[]), 1.0);
    for name in ["real", "second", "early"] {
        send_ok(&proxy, name).await;
    }
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let models = label_values(&m, family::REQUESTS.name);
    assert_eq!(models, set(&["real", "second", "unadmitted"]));
    // A request for `second` in flight (its first token counted) when a list drops it.
    let stream = {
        let body =
            r#"{"model":"second","stream":true,"messages":[{"role":"user","content":"hold"}]}"#;
        let request = post(&proxy, CHAT, body);
        tokio::spawn(async move { send(&client(), request).await })
    };
    for _ in 0..200 {
        let m = scrape(&proxy).await;
        if m.get(&family::TTFT.count(), &[("model", "second")]) == 2.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    phase.store(2, Ordering::SeqCst);
    listed(&proxy, 3.0).await;
    // Its series stay while it runs, and its place with them: `third` finds none free. A new request
    // for `second` is unadmitted.
    for name in ["second", "third"] {
        send_ok(&proxy, name).await;
    }
    let m = scrape(&proxy).await;
    assert!(m.has(family::REQUESTS.name, &[("model", "second")]));
    assert_eq!(m.get(family::REQUESTS.name, &[("model", "other")]), 1.0);
    assert_eq!(
        m.get(family::REQUESTS.name, &[("model", "unadmitted")]),
        2.0
    );
    release.store(true, Ordering::SeqCst);
    let got = tokio::time::timeout(Duration::from_secs(10), stream)
        .await
        .expect("the held stream ended")
        .expect("stream task");
    assert_eq!((got.status, got.end), (200, Ok(())));
    assert_eq!(count(&got.body, b"[DONE]"), 1);
    settle(&proxy).await;
    // It ended: the next scrape gives its place back, and `third` takes it.
    let m = scrape(&proxy).await;
    assert!(!m.text.contains("model=\"second\""), "{}", m.text);
    assert_eq!(m.get(family::LABELS_RETIRED.name, &[]), 2.0);
    send_ok(&proxy, "third").await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[("model", "third")]), 1.0);
}
