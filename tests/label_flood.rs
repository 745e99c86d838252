//! Clients cannot flood the metrics or take the model labels: a model name takes a label place only once
//! the upstream answered it with a 2xx, idle names give their place back, unknown paths create no token
//! families, the `status` label is a closed set, the number of series never exceeds the exported limit,
//! and `/metrics` is encoded off the proxy's workers, one encoding shared by concurrent scrapes.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::*;
use tokentap::record::metrics::family;

const CHAT: &str = "/v1/chat/completions";

fn not_found() -> Vec<Step> {
    let body = r#"{"error":{"message":"The model does not exist.","type":"NotFoundError"}}"#;
    vec![json_response(404, "Not Found", body)]
}

/// A model server that serves `real` (and `other-real`) and answers 404 to every other name or path.
fn model_server(request: &RecordedRequest) -> Vec<Step> {
    let body = String::from_utf8_lossy(&request.body);
    let known_path = request
        .request_line()
        .starts_with("POST /v1/chat/completions ");
    let real = body.contains("\"model\":\"real\"") || body.contains("\"model\":\"other-real\"");
    if known_path && real {
        ok_stream()
    } else {
        not_found()
    }
}

/// The distinct values of `label` over the samples of `family`.
fn label_values<'a>(m: &'a Metrics, family: &str, label: &str) -> BTreeSet<&'a str> {
    let needle = format!("{label}=\"");
    m.text
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter_map(|l| l.split(needle.as_str()).nth(1))
        .filter_map(|rest| rest.split('"').next())
        .collect()
}

fn samples(m: &Metrics) -> usize {
    m.text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count()
}

const SMALL: &str = "max_models: 3\nbuckets: {ttft: [0.5], itl: [0.1], tpot: [0.1], e2e: [1], output_tokens_per_second: [10]}\n";

#[tokio::test]
async fn a_flood_of_junk_names_and_paths_stays_under_the_series_limit_and_the_real_model_keeps_its_label(
) {
    let upstream = upstream(model_server).await;
    let proxy = proxy(&upstream.url(), SMALL).await;
    let client = client();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..16 {
        let (client, addr) = (client.clone(), proxy.proxy_addr());
        tasks.spawn(async move {
            for i in 0..125 {
                let n = worker * 1000 + i;
                let path = match n % 3 {
                    0 => CHAT.to_owned(),
                    1 => format!("/junk/{n}"),
                    _ => format!("/v1/{n}/completions"),
                };
                let body = chat_request(&format!("junk-{n}"));
                let request = http::Request::post(format!("http://{addr}{path}"))
                    .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                    .expect("request");
                assert_eq!(send(&client, request).await.status, 404);
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("flood worker");
    }
    let got = send(&client, post(&proxy, CHAT, &chat_request("real"))).await;
    assert_eq!((got.status, got.end), (200, Ok(())));
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[]), 2001.0);
    let real = [("model", "real"), ("api", "chat"), ("status", "200")];
    assert_eq!(m.get(family::REQUESTS.name, &real), 1.0);
    assert_eq!(
        m.get(
            family::OUTPUT_TOKENS.name,
            &[("model", "real"), ("api", "chat")]
        ),
        1.0
    );
    // Not one junk name took a place: they all count as `unadmitted`.
    let models = label_values(&m, family::REQUESTS.name, "model");
    assert_eq!(models, BTreeSet::from(["real", "unadmitted"]));
    assert_eq!(
        m.get(family::REQUESTS.name, &[("model", "unadmitted")]),
        2000.0
    );
    let limit = m.get(family::SERIES_LIMIT.name, &[]);
    assert_eq!(samples(&m) as f64, m.get(family::SERIES.name, &[]));
    assert!(
        (samples(&m) as f64) <= limit,
        "{} series, limit {limit}",
        samples(&m)
    );
    // The limit with these buckets: 6 model values (3 names, unknown, other, unadmitted);
    // 9 known APIs, each with at most 7 × 4 histogram series + 3 + 5 token sources + 22 × 4 requests = 124, and
    // what is inside a TTFT, the time to the first tool call and the time to the response head (9
    // more histograms × 4, 3 more counters) = 163; the `other` API's 4 + 1 + 88 = 93; the
    // conversation families, by model and turn but not by API: 6 turns × 4 (TTFT) + 6 × 11 (prompt
    // tokens) + 17 (think time) = 107; plus the three lookup results and the nine reasons a list is
    // not read, in-flight per API, skipped metering per API and reason, the metrics port's six
    // refusal reasons, the spans' six drop reasons, the budgets' 60 (ten budgets: two states, two
    // refusal reasons, two unmetered reasons), the OTLP metric exports' four, the sessions' two refusal reasons, the seven
    // reasons a TLS handshake failed, the three reasons a session's message is skipped, the config
    // reloads' three results, the capture's four segment results and six reasons a connection is not
    // metered, and the unlabelled counters, gauges and histograms (their buckets carry only `le`). Each known API has the session families too (duration 12 + 3, responses 11 + 3, four
    // outcomes).
    let unlabelled = m
        .text
        .lines()
        .filter(|l| l.starts_with("tokentap_") && (!l.contains('{') || l.contains("_bucket{le=\"")))
        .count();
    assert_eq!(
        limit,
        (6 * (10 * (163 + 15 + 14 + 4) + 93 + 107)
            + 11
            + 20
            + 6
            + 6
            + 60
            + 4
            + 2
            + 7
            + 3
            + 3
            + 9
            + 3
            + 4
            + 6
            + unlabelled) as f64
    );
}

#[tokio::test]
async fn an_admitted_model_keeps_its_label_on_errors_and_unconfirmed_names_never_take_a_place() {
    let upstream = upstream(|request| {
        let body = String::from_utf8_lossy(&request.body);
        if body.contains("\"model\":\"real\"") && body.contains("overloaded") {
            let error = r#"{"error":{"message":"overloaded","type":"server_error"}}"#;
            vec![json_response(503, "Service Unavailable", error)]
        } else {
            model_server(request)
        }
    })
    .await;
    let proxy = proxy(&upstream.url(), "max_models: 1\n").await;
    let client = client();
    let overloaded =
        r#"{"model":"real","stream":true,"messages":[{"role":"user","content":"overloaded"}]}"#;
    // Before any 2xx, the name is unconfirmed; the 503 takes no place.
    assert_eq!(
        send(&client, post(&proxy, CHAT, overloaded)).await.status,
        503
    );
    assert_eq!(
        send(&client, post(&proxy, CHAT, &chat_request("nope")))
            .await
            .status,
        404
    );
    assert_eq!(
        send(&client, post(&proxy, CHAT, &chat_request("real")))
            .await
            .status,
        200
    );
    assert_eq!(
        send(&client, post(&proxy, CHAT, overloaded)).await.status,
        503
    );
    assert_eq!(
        send(&client, post(&proxy, CHAT, &chat_request("other-real")))
            .await
            .status,
        200
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let count = |model: &str, status: &str| {
        m.get(
            family::REQUESTS.name,
            &[("model", model), ("status", status)],
        )
    };
    assert_eq!(count("unadmitted", "503"), 1.0);
    assert_eq!(count("unadmitted", "404"), 1.0);
    assert_eq!(count("real", "200"), 1.0);
    assert_eq!(
        count("real", "503"),
        1.0,
        "an admitted name keeps its label"
    );
    assert_eq!(count("other", "200"), 1.0, "the one place is taken");
}

#[tokio::test(start_paused = true)]
async fn a_model_label_idle_past_model_idle_is_retired_and_its_place_freed() {
    let upstream = upstream(|_| ok_stream()).await;
    let yaml = "max_models: 1\nmetrics: {model_idle: 10m}\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let client = client();
    for model in ["first", "second"] {
        let got = send(&client, post(&proxy, CHAT, &chat_request(model))).await;
        assert_eq!(got.status, 200);
    }
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let models = label_values(&m, family::REQUESTS.name, "model");
    assert_eq!(models, BTreeSet::from(["first", "other"]));
    tokio::time::sleep(Duration::from_secs(9 * 60)).await;
    let m = scrape(&proxy).await;
    assert!(m.has(family::REQUESTS.name, &[("model", "first")]));
    // Past model_idle: the next name that needs the place retires `first`, whose series all go.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let got = send(&client, post(&proxy, CHAT, &chat_request("second"))).await;
    assert_eq!(got.status, 200);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert!(!m.text.contains("model=\"first\""), "{}", m.text);
    assert_eq!(m.get(family::REQUESTS.name, &[("model", "second")]), 1.0);
    assert_eq!(m.get(family::LABELS_RETIRED.name, &[]), 1.0);
    // A scrape retires too; a name that comes back starts from zero.
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    let m = scrape(&proxy).await;
    assert!(!m.text.contains("model=\"second\""));
    assert_eq!(m.get(family::LABELS_RETIRED.name, &[]), 2.0);
    let got = send(&client, post(&proxy, CHAT, &chat_request("first"))).await;
    assert_eq!(got.status, 200);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[("model", "first")]), 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_path_no_dialect_knows_gets_no_token_families() {
    let upstream = upstream(|_| vec![json_response(200, "OK", r#"{"data":[]}"#)]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let body = r#"{"model":"embedder","input":"x"}"#;
    assert_eq!(
        send(&client(), post(&proxy, "/v1/embeddings", body))
            .await
            .status,
        200
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let other = [("api", "other")];
    assert_eq!(m.get(family::REQUESTS.name, &other), 1.0);
    assert_eq!(m.get(&family::E2E.count(), &other), 1.0);
    assert!(m.has(family::GOODPUT.name, &other));
    for family in [
        &family::TTFT.count(),
        &family::ITL.count(),
        &family::TPOT.count(),
        &family::GENERATION.count(),
        &family::TOKENS_PER_SECOND.count(),
        &family::MAX_GAP.count(),
        family::INPUT_TOKENS.name,
        family::OUTPUT_TOKENS.name,
    ] {
        assert!(!m.has(family, &[]), "{family} exported for an unknown path");
    }
}

#[tokio::test(start_paused = true)]
async fn uncommon_upstream_statuses_are_counted_under_their_class() {
    let upstream = upstream(|request| {
        let code = request.request_line().split('/').nth(2).unwrap_or("500");
        let code = code.split(' ').next().unwrap_or("500").to_owned();
        vec![Step::Raw(
            format!("HTTP/1.1 {code} Odd\r\ncontent-length: 0\r\n\r\n").into_bytes(),
        )]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let client = client();
    for code in ["207", "418", "429", "599"] {
        let request = http::Request::get(format!("http://{}/status/{code}", proxy.proxy_addr()))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .expect("request");
        send(&client, request).await;
    }
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let statuses = label_values(&m, family::REQUESTS.name, "status");
    assert_eq!(statuses, BTreeSet::from(["2xx", "429", "4xx", "5xx"]));
}

#[tokio::test]
async fn concurrent_scrapes_all_answer_while_a_stream_keeps_flowing() {
    let upstream = upstream(|request| {
        if !request.request_line().contains("slow") {
            return ok_stream();
        }
        content_stream(40, ms(5))
    })
    .await;
    let proxy = proxy(&upstream.url(), "max_models: 50\n").await;
    let client = client();
    // Fifty models: a page of some thousands of series to encode.
    for i in 0..50 {
        let got = send(&client, post(&proxy, CHAT, &chat_request(&format!("m{i}")))).await;
        assert_eq!(got.status, 200);
    }
    let stream = {
        let request = post(&proxy, "/slow/v1/chat/completions", &chat_request("m0"));
        let client = client.clone();
        tokio::spawn(async move { send(&client, request).await })
    };
    let metrics_url = format!("http://{}/metrics", proxy.metrics_addr());
    let mut rounds = 0;
    while !stream.is_finished() && rounds < 50 {
        rounds += 1;
        let mut scrapes = tokio::task::JoinSet::new();
        for _ in 0..16 {
            let (client, url) = (client.clone(), metrics_url.clone());
            scrapes.spawn(async move {
                let request = http::Request::get(url)
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .expect("request");
                send(&client, request).await
            });
        }
        while let Some(page) = scrapes.join_next().await {
            let page = page.expect("scrape task");
            assert_eq!((page.status, page.end), (200, Ok(())));
            let m = Metrics::parse(std::str::from_utf8(&page.body).expect("utf-8"));
            assert_eq!(samples(&m) as f64, m.get(family::SERIES.name, &[]));
        }
    }
    let got = tokio::time::timeout(Duration::from_secs(20), stream)
        .await
        .expect("the stream finished")
        .expect("stream task");
    assert_eq!((got.status, got.end), (200, Ok(())));
    assert_eq!(count(&got.body, b"\"content\":\"t"), 40);
    let m = scrape(&proxy).await;
    assert!(m.get(family::ENCODES.name, &[]) <= (rounds * 16 + 1) as f64);
}
