//! Failure answers: a dead or slow upstream gets a clear 502/504, a broken upstream stream breaks the
//! client's stream too, and streams the decoder cannot read are still forwarded whole. The in-flight gauge
//! returns to 0 every time. (A client that leaves: `cancellation.rs`.)

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use support::*;
use tokentap::record::metrics::family;
use tokio::net::{TcpSocket, TcpStream};

const CHAT: &str = "/v1/chat/completions";

fn error_json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).expect("error body is JSON")
}

#[tokio::test]
async fn unreachable_upstream_answers_502_with_an_openai_error() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let proxy = proxy(&url, "").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 502);
    assert_eq!(got.headers["content-type"], "application/json");
    let json = error_json(&got.body);
    let message = json["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("unreachable") && message.contains(&url),
        "{message}"
    );
    assert_eq!(json["error"]["type"], "upstream_unreachable");
    let m = scrape(&proxy).await;
    // No upstream ever confirmed the name `m`: it takes no model label place.
    assert_eq!(m.requests("unadmitted", "502", "upstream_error"), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    assert_eq!(m.get(family::GOODPUT.name, &[]), 0.0);
}

#[tokio::test]
async fn upstream_connect_timeout_answers_504() {
    // A listener whose accept queue is full: further SYNs are dropped, so connecting hangs.
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let listener = socket.listen(1).expect("listen");
    let addr = listener.local_addr().expect("addr");
    let mut held = Vec::new();
    let mut saturated = false;
    for _ in 0..32 {
        match tokio::time::timeout(ms(200), TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => held.push(stream),
            _ => {
                saturated = true;
                break;
            }
        }
    }
    assert!(saturated, "could not fill the accept queue");
    let proxy = proxy(&format!("http://{addr}"), "timeouts:\n  connect: 300ms\n").await;
    let started = std::time::Instant::now();
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 504);
    assert_eq!(error_json(&got.body)["error"]["type"], "upstream_timeout");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the connect timeout did not cut the wait"
    );
    let m = scrape(&proxy).await;
    assert_eq!(m.requests_with("504", "timeout"), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    drop(held);
}

#[tokio::test]
async fn upstream_breaking_mid_stream_breaks_the_client_stream_and_counts_upstream_error() {
    let upstream = upstream(|_| {
        vec![
            sse_head(),
            chunk(ROLE_CHUNK.as_bytes()),
            chunk(content_chunk("a").as_bytes()),
            chunk(content_chunk("b").as_bytes()),
            Step::Sleep(ms(20)),
            Step::Close,
        ]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 200);
    assert!(
        got.end.is_err(),
        "the client saw a clean end of a broken stream"
    );
    let expected = format!("{ROLE_CHUNK}{}{}", content_chunk("a"), content_chunk("b"));
    assert_eq!(
        got.body,
        expected.as_bytes(),
        "bytes before the break must all arrive"
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests("m", "200", "upstream_error"), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    assert_eq!(m.get(family::GOODPUT.name, &[]), 0.0);
    // The two tokens that did arrive were generated and delivered: they count as output.
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, &[("model", "m")]), 2.0);
}

#[tokio::test]
async fn an_error_event_inside_a_200_stream_counts_upstream_error() {
    let upstream = upstream(|_| {
        vec![
            sse_head(),
            chunk(content_chunk("a").as_bytes()),
            chunk(b"data: {\"error\":{\"message\":\"engine died\",\"type\":\"InternalServerError\",\"code\":500}}\n\n"),
            chunk(DONE.as_bytes()),
            last_chunk(),
        ]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.end, Ok(()));
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests_with("200", "upstream_error"), 1.0);
    assert_eq!(m.get(family::GOODPUT.name, &[]), 0.0);
}

#[tokio::test]
async fn an_event_over_the_bound_stops_metering_but_every_byte_is_forwarded() {
    let huge = format!(
        "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
        "y".repeat(40_000)
    );
    let mut expected = Vec::new();
    let script = {
        let mut steps = vec![sse_head()];
        for part in [
            content_chunk("a"),
            huge.clone(),
            content_chunk("b"),
            DONE.to_owned(),
        ] {
            expected.extend_from_slice(part.as_bytes());
            for piece in part.as_bytes().chunks(4096) {
                steps.push(chunk(piece));
            }
        }
        steps.push(last_chunk());
        steps
    };
    let upstream = upstream(move |_| script.clone()).await;
    let proxy = proxy(&upstream.url(), "metering:\n  max_event_bytes: 16KiB\n").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.body, expected);
    assert_eq!(got.end, Ok(()));
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(
        m.get(
            family::METERING_SKIPPED.name,
            &[("api", "chat"), ("reason", "event_too_large")]
        ),
        1.0
    );
    assert_eq!(
        m.get(family::REQUESTS.name, &[("model", "m"), ("outcome", "ok")]),
        1.0
    );
    // No token count is guessed for a stream that could not be read to the end.
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, &[]), 0.0);
    assert_eq!(m.get(&family::TPOT.count(), &[]), 0.0);
    assert_eq!(m.get(&family::E2E.count(), &[("model", "m")]), 1.0);
}

#[tokio::test]
async fn garbage_in_an_event_stream_is_forwarded_whole_and_counted_as_skipped() {
    let garbage: Vec<u8> = b"data: {not json at all\n\ndata: \xff\xfe\x00\x01 binary\n\n".to_vec();
    let body = garbage.clone();
    let upstream = upstream(move |_| vec![sse_head(), chunk(&body), last_chunk()]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.body, garbage);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(
        m.get(
            family::METERING_SKIPPED.name,
            &[("reason", "malformed_event")]
        ),
        1.0
    );
    assert_eq!(m.get(family::REQUESTS.name, &[("outcome", "ok")]), 1.0);
}

#[tokio::test]
async fn health_and_metrics_endpoints_answer() {
    let upstream = upstream(|_| {
        vec![
            sse_head(),
            chunk(content_chunk("a").as_bytes()),
            chunk(content_chunk("b").as_bytes()),
            last_chunk(),
        ]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let client = client();
    send(&client, post(&proxy, CHAT, &chat_request("m"))).await;
    settle(&proxy).await;
    let get = |path: &str| {
        http::Request::get(format!("http://{}{path}", proxy.metrics_addr()))
            .body(Full::new(Bytes::new()))
            .expect("req")
    };
    let health = send(&client, get("/healthz")).await;
    assert_eq!(health.status, 200);
    let metrics = send(&client, get("/metrics")).await;
    assert_eq!(metrics.status, 200);
    assert!(metrics.headers["content-type"]
        .to_str()
        .unwrap_or_default()
        .starts_with("text/plain; version=0.0.4"));
    let text = String::from_utf8(metrics.body).expect("utf-8");
    for name in [
        family::TTFT.name,
        family::ITL.name,
        family::TPOT.name,
        family::E2E.name,
        family::IN_FLIGHT.name,
        family::GENERATION.name,
        family::TOKENS_PER_SECOND.name,
        family::MAX_GAP.name,
        family::REQUESTS.name,
        family::OUTPUT_TOKENS.name,
        family::GOODPUT.name,
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} missing from /metrics"
        );
    }
    assert_eq!(send(&client, get("/nope")).await.status, 404);
}
