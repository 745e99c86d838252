//! Every limit, end to end: an oversized request head gets 431 and a body over the limit 413 (declared
//! up front: refused before the upstream is contacted; chunked: cut mid-way, so the upstream sees an
//! aborted request, never a complete truncated one); at `limits.max_connections` the oldest idle
//! connection makes room for a new client, counted, and only when every connection is busy is a new
//! client's connection closed at once and counted, while the streams already open carry on untouched.

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use support::*;
use tokentap::record::metrics::family;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CHAT: &str = "/v1/chat/completions";

fn ok_upstream_steps() -> Vec<Step> {
    vec![json_response(200, "OK", r#"{"choices":[]}"#)]
}

fn with_header(proxy: &tokentap::Running, bytes: usize) -> http::Request<Full<Bytes>> {
    let mut request = post(proxy, CHAT, &chat_request("m"));
    let value = http::HeaderValue::from_str(&"v".repeat(bytes)).expect("header value");
    request.headers_mut().insert("x-padding", value);
    request
}

#[tokio::test]
async fn a_request_head_over_the_limit_gets_431_and_is_not_forwarded() {
    let upstream = upstream(|_| ok_upstream_steps()).await;
    let yaml = "limits:\n  max_request_header_bytes: 8KiB\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let fits = send(&client(), with_header(&proxy, 4 << 10)).await;
    assert_eq!(fits.status, 200);
    let too_big = send(&client(), with_header(&proxy, 16 << 10)).await;
    assert_eq!(too_big.status, 431);
    assert_eq!(
        upstream.requests().len(),
        1,
        "only the head that fits went upstream"
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    // hyper refuses the head before a request exists: only the one forwarded is counted.
    assert_eq!(m.get(family::REQUESTS.name, &[]), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

/// Once settled, one request counted `status="413"` (its outcome `ok`: tokentap's answer went out
/// whole) and nothing left in flight; the scrape is returned for the caller's own checks.
async fn one_413_counted(proxy: &tokentap::Running) -> Metrics {
    settle(proxy).await;
    let m = scrape(proxy).await;
    let refused = [("status", "413"), ("outcome", "ok")];
    assert_eq!(m.get(family::REQUESTS.name, &refused), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    m
}

#[tokio::test]
async fn a_declared_body_over_the_limit_gets_413_without_contacting_the_upstream() {
    let upstream = upstream(|_| ok_upstream_steps()).await;
    let proxy = proxy(&upstream.url(), "limits:\n  max_request_body_bytes: 1KiB\n").await;
    let exactly = format!("{{\"model\":\"m\",\"pad\":\"{}\"}}", "x".repeat(1024 - 22));
    assert_eq!(exactly.len(), 1024);
    let fits = send(&client(), post(&proxy, CHAT, &exactly)).await;
    assert_eq!(fits.status, 200, "a body of exactly the limit passes");
    let over = format!("{exactly} ");
    let got = send(&client(), post(&proxy, CHAT, &over)).await;
    assert_eq!(got.status, 413);
    assert_eq!(got.headers["content-type"], "application/json");
    let json: serde_json::Value = serde_json::from_slice(&got.body).expect("JSON error");
    assert_eq!(json["error"]["type"], "invalid_request_error");
    assert_eq!(json["error"]["code"], 413);
    let message = json["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("limits.max_request_body_bytes"),
        "{message}"
    );
    assert_eq!(
        upstream.requests().len(),
        1,
        "the refused request never went upstream"
    );
    let m = one_413_counted(&proxy).await;
    assert_eq!(m.get(family::GOODPUT.name, &[]), 1.0, "only the 200");
}

#[tokio::test]
async fn a_chunked_body_growing_past_the_limit_is_cut_upstream_and_answered_413() {
    chunked_body_past_the_limit(true).await;
    chunked_body_past_the_limit(false).await;
}

/// Held (the default), the body is answered 413 before the upstream is contacted; streamed
/// (`hold_request_body_bytes: 0`), its upstream request is aborted.
async fn chunked_body_past_the_limit(held: bool) {
    let upstream = upstream(|_| ok_upstream_steps()).await;
    let yaml = format!(
        "limits:\n  max_request_body_bytes: 1KiB\n{}",
        hold_line(held)
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
    let mut stream = raw_send(proxy.proxy_addr(), head.as_bytes()).await;
    let piece = format!("{{\"model\":\"m\",\"pad\":\"{}", "x".repeat(500));
    let mut body_sent = 0;
    for _ in 0..3 {
        let chunk = format!("{:x}\r\n{piece}\r\n", piece.len());
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
        body_sent += piece.len();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(body_sent > 1024);
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "no answer");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert!(answer.contains("limits.max_request_body_bytes"), "{answer}");
    assert_upstream_let_go(&upstream, held, Duration::from_secs(10)).await;
    assert!(
        upstream.requests().is_empty(),
        "a truncated body was delivered as complete"
    );
    one_413_counted(&proxy).await;
}

/// A further client is accepted and closed at once (within 2 s): no answer, no request read.
async fn assert_a_newcomer_is_closed_at_once(proxy: &tokentap::Running) {
    let asked = tokio::time::Instant::now();
    let answer = raw_exchange(
        proxy.proxy_addr(),
        b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n",
    )
    .await;
    assert!(answer.is_empty(), "{answer:?}");
    assert!(asked.elapsed() < Duration::from_secs(2), "closed at once");
}

#[tokio::test]
async fn beyond_max_connections_a_new_connection_is_closed_at_once_counted_and_open_streams_carry_on(
) {
    let upstream = upstream(|_| content_stream(5, ms(100))).await;
    let proxy = proxy(&upstream.url(), "limits:\n  max_connections: 1\n").await;
    let (first, first_conn, response) = open_chat(&proxy).await;
    let mut first_body = response.into_body();
    assert_a_newcomer_is_closed_at_once(&proxy).await;
    assert_eq!(proxy.open_connections(), 1);
    let mut got = Vec::new();
    while let Some(frame) = first_body.frame().await {
        let frame = frame.expect("the open stream is not disturbed");
        if let Ok(data) = frame.into_data() {
            got.extend_from_slice(&data);
        }
    }
    assert!(got.ends_with(DONE.as_bytes()));
    assert_eq!(
        upstream.requests().len(),
        1,
        "the refused client sent nothing upstream"
    );
    drop(first);
    first_conn.abort();
    // The first connection is gone: a new client is served.
    let mut served = None;
    for _ in 0..100 {
        if proxy.open_connections() == 0 {
            served = Some(send(&client(), post(&proxy, CHAT, &chat_request("m"))).await);
            break;
        }
        tokio::time::sleep(ms(10)).await;
    }
    let served = served.expect("the first connection never closed");
    assert_eq!(served.status, 200);
    assert!(served.body.ends_with(DONE.as_bytes()));
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::CONNECTIONS_REFUSED.name, &[]), 1.0);
    assert_eq!(m.get(family::REQUESTS.name, &[("outcome", "ok")]), 2.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

/// A slow stream for a chat request, a quick JSON answer for anything else.
fn slow_chat_or_quick(request: &RecordedRequest) -> Vec<Step> {
    if !request.request_line().contains(CHAT) {
        return ok_upstream_steps();
    }
    content_stream(5, ms(100))
}

/// One quick request on a kept-alive connection: its status.
async fn quick(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>, proxy: &tokentap::Running,
) -> u16 {
    let request = http::Request::get(format!("http://{}/v1/models", proxy.proxy_addr()))
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = sender.send_request(request).await.expect("answered");
    let status = response.status().as_u16();
    response.into_body().collect().await.expect("body");
    status
}

#[tokio::test]
async fn at_max_connections_the_oldest_idle_connection_makes_room_and_busy_ones_are_never_reclaimed(
) {
    let upstream = upstream(slow_chat_or_quick).await;
    let proxy = proxy(&upstream.url(), "limits:\n  max_connections: 2\n").await;
    // Both places held: a connection that never sent a head, then a kept-alive one between requests.
    let mut silent = TcpStream::connect(proxy.proxy_addr())
        .await
        .expect("connect");
    tokio::time::sleep(ms(50)).await;
    let (mut a, a_conn) = open(&proxy).await;
    assert_eq!(quick(&mut a, &proxy).await, 200);
    // A new client is served at once: the silent connection, the oldest idle one, made room.
    let asked = tokio::time::Instant::now();
    let (mut c, _c_conn) = open(&proxy).await;
    assert_eq!(quick(&mut c, &proxy).await, 200);
    let (got, ended) = drain(&mut silent, Duration::from_secs(2)).await;
    assert_eq!((got, ended), (0, true), "the silent connection was closed");
    assert_eq!(
        quick(&mut a, &proxy).await,
        200,
        "the newer idle one still serves"
    );
    // Another: now the kept-alive connection is the oldest idle one, and is closed cleanly.
    let (mut d, _d_conn) = open(&proxy).await;
    assert_eq!(quick(&mut d, &proxy).await, 200);
    let closed = tokio::time::timeout(Duration::from_secs(2), a_conn).await;
    assert!(matches!(closed, Ok(Ok(Ok(())))), "{closed:?}");
    println!(
        "a new client at the cap of idle connections served within {:?}",
        asked.elapsed()
    );
    // Both places busy with streams: a further client is closed at once without an answer, and
    // neither stream is disturbed.
    let streams: Vec<_> = [&mut c, &mut d]
        .into_iter()
        .map(|sender| sender.send_request(post(&proxy, CHAT, &chat_request("m"))))
        .collect();
    let mut bodies = Vec::new();
    for stream in streams {
        bodies.push(stream.await.expect("head").into_body());
    }
    assert_a_newcomer_is_closed_at_once(&proxy).await;
    for body in bodies {
        let got = body.collect().await.expect("the stream is not disturbed");
        assert!(got.to_bytes().ends_with(DONE.as_bytes()));
    }
    assert_eq!(
        quick(&mut c, &proxy).await,
        200,
        "a busy connection serves on"
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::CONNECTIONS_RECLAIMED.name, &[]), 2.0);
    assert_eq!(m.get(family::CONNECTIONS_REFUSED.name, &[]), 1.0);
    assert_eq!(m.get(family::REQUESTS.name, &[("outcome", "ok")]), 7.0);
}

#[tokio::test]
async fn an_h2c_connection_with_a_stream_open_is_never_reclaimed_and_an_idle_one_is() {
    let upstream = upstream(slow_chat_or_quick).await;
    let proxy = proxy(&upstream.url(), "limits:\n  max_connections: 2\n").await;
    // The oldest connection is h2c with a stream open; the other an idle HTTP/1.1 one.
    let (_h2, h2_conn, response) = open_h2_chat(&proxy).await;
    let (mut a, a_conn) = open(&proxy).await;
    assert_eq!(quick(&mut a, &proxy).await, 200);
    // A newcomer takes the idle one's place, not the older h2c one's.
    let (mut c, _c_conn) = open(&proxy).await;
    assert_eq!(quick(&mut c, &proxy).await, 200);
    let closed = tokio::time::timeout(Duration::from_secs(2), a_conn).await;
    assert!(matches!(closed, Ok(Ok(Ok(())))), "{closed:?}");
    let got = response
        .into_body()
        .collect()
        .await
        .expect("the stream is not disturbed");
    assert!(got.to_bytes().ends_with(DONE.as_bytes()));
    // Its stream done, the h2c connection is idle and the oldest: the next newcomer takes its place.
    let (mut d, _d_conn) = open(&proxy).await;
    assert_eq!(quick(&mut d, &proxy).await, 200);
    let closed = tokio::time::timeout(Duration::from_secs(2), h2_conn).await;
    assert!(closed.is_ok(), "the idle h2c connection was not closed");
    assert_eq!(
        quick(&mut c, &proxy).await,
        200,
        "the newer idle one serves on"
    );
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::CONNECTIONS_RECLAIMED.name, &[]), 2.0);
    assert_eq!(m.get(family::CONNECTIONS_REFUSED.name, &[]), 0.0);
}

#[tokio::test]
async fn an_h2c_header_list_over_the_limit_gets_431_and_the_connection_serves_on() {
    let upstream = upstream(|_| ok_upstream_steps()).await;
    let yaml = "limits:\n  max_request_header_bytes: 8KiB\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let h2: TestClient = h2_client();
    let too_big = send(&h2, with_header(&proxy, 16 << 10)).await;
    assert_eq!(too_big.status, 431);
    assert_eq!(upstream.connection_count(), 0, "nothing was forwarded");
    let fits = send(&h2, with_header(&proxy, 4 << 10)).await;
    assert_eq!(fits.status, 200);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[]), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}
