//! Every timeout, end to end: what the client saw, when the upstream's connection was closed, and what
//! `/metrics` says. Upstream-side: `timeouts.response_headers` (504) and `timeouts.idle` (the client's
//! stream is broken, never ended cleanly). Client-side: `timeouts.client_header_read` (slowloris) and
//! `timeouts.client_idle` (kept-alive connections), neither of which ever cuts a request in progress;
//! the metrics port's own, shorter `metrics_header_read` and `metrics_idle`.
//! On tokio's paused clock, so the instants are exact (but for h2c, see below).

use crate::support;

use std::time::Duration;

use http_body_util::BodyExt;
use support::*;
use tokentap::record::metrics::family;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

const CHAT: &str = "/v1/chat/completions";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Waits (bounded) until tokentap has closed the upstream's connection `i`, and says when it did.
async fn upstream_closed(upstream: &Upstream, i: usize) -> Instant {
    upstream.wait_closed_within(i, secs(120)).await
}

fn assert_near(what: &str, got: Duration, want: Duration) {
    assert!(
        got >= want && got < want + ms(100),
        "{what}: {got:?}, expected {want:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_upstream_silent_past_response_headers_gets_a_504_and_its_connection_closed() {
    let upstream = upstream(|_| vec![Step::Sleep(secs(60)), sse_head(), last_chunk()]).await;
    let proxy = proxy(&upstream.url(), "timeouts:\n  response_headers: 2s\n").await;
    let sent = Instant::now();
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 504);
    assert_eq!(got.headers["content-type"], "application/json");
    let json: serde_json::Value = serde_json::from_slice(&got.body).expect("JSON error body");
    assert_eq!(json["error"]["type"], "upstream_timeout");
    let message = json["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("timeouts.response_headers"), "{message}");
    let closed = upstream_closed(&upstream, 0).await;
    assert_near("upstream closed after", closed - sent, secs(2));
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    // No answer confirmed the name `m`.
    let labels = [
        ("model", "unadmitted"),
        ("status", "504"),
        ("outcome", "timeout"),
    ];
    assert_eq!(m.get(family::REQUESTS.name, &labels), 1.0);
    assert_eq!(m.get(family::REQUESTS.name, &[]), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_stream_silent_past_idle_is_cut_and_the_client_stream_breaks() {
    let upstream = upstream(|_| {
        vec![
            sse_head(),
            chunk(ROLE_CHUNK.as_bytes()),
            chunk(content_chunk("a").as_bytes()),
            Step::Sleep(ms(300)),
            chunk(content_chunk("b").as_bytes()),
            Step::Sleep(secs(600)),
            chunk(content_chunk("never").as_bytes()),
            last_chunk(),
        ]
    })
    .await;
    let proxy = proxy(&upstream.url(), "timeouts:\n  idle: 5s\n").await;
    let sent = Instant::now();
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 200);
    let expected = format!("{ROLE_CHUNK}{}{}", content_chunk("a"), content_chunk("b"));
    assert_eq!(got.body, expected.as_bytes(), "every byte before the cut");
    assert!(got.end.is_err(), "a hung stream must not end cleanly");
    let closed = upstream_closed(&upstream, 0).await;
    // Cut 5 s after the last frame (which came 300 ms in), not 5 s after the head.
    assert_near("upstream closed after", closed - sent, ms(5300));
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let labels = [("model", "m"), ("status", "200"), ("outcome", "timeout")];
    assert_eq!(m.get(family::REQUESTS.name, &labels), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    // What was seen before the cut is kept; whole-request figures are not made up.
    let model = [("model", "m")];
    assert_eq!(m.get(&family::TTFT.count(), &model), 1.0);
    assert_eq!(m.get(&family::ITL.count(), &model), 1.0);
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, &model), 2.0);
    assert_eq!(m.get(&family::E2E.count(), &[]), 0.0);
    assert_eq!(m.get(family::GOODPUT.name, &[]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_slow_but_steady_stream_is_never_cut_by_idle() {
    let upstream = upstream(|_| content_stream(5, secs(4))).await;
    let yaml = "timeouts:\n  idle: 5s\n  client_header_read: 1s\n  client_idle: 2s\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.end, Ok(()));
    assert!(got.body.ends_with(DONE.as_bytes()));
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[("outcome", "ok")]), 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_long_wait_for_the_head_is_not_cut_by_the_client_timeouts() {
    let upstream = upstream(|_| {
        vec![
            Step::Sleep(secs(20)),
            json_response(200, "OK", r#"{"choices":[]}"#),
        ]
    })
    .await;
    let yaml = "timeouts:\n  client_header_read: 1s\n  client_idle: 2s\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!((got.status, got.end), (200, Ok(())));
}

#[tokio::test(start_paused = true)]
async fn a_client_trickling_its_request_head_is_disconnected_after_client_header_read() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let yaml = "timeouts:\n  client_header_read: 2s\n  client_idle: 60s\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let connected = Instant::now();
    let stream = TcpStream::connect(proxy.proxy_addr())
        .await
        .expect("connect");
    let (mut rd, mut wr) = stream.into_split();
    let trickle = tokio::spawn(async move {
        let _ = wr
            .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
            .await;
        for i in 0..20 {
            tokio::time::sleep(ms(500)).await;
            if wr
                .write_all(format!("x-slow-{i}: 1\r\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
        }
    });
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(secs(30), rd.read(&mut buf)).await;
    let closed = connected.elapsed();
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "expected the connection closed, got {read:?}"
    );
    assert_near("closed after", closed, secs(2));
    trickle.abort();
    assert_eq!(upstream.connection_count(), 0, "nothing was forwarded");
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[]), 0.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_kept_alive_connection_is_closed_after_client_idle_and_not_before() {
    let upstream = upstream(|_| vec![json_response(200, "OK", r#"{"choices":[]}"#)]).await;
    // The upstream connection is kept longer than the 10 s between the two requests.
    let yaml = "timeouts:\n  client_header_read: 2s\n  client_idle: 20s\n  upstream_idle: 1m\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let (mut sender, conn) = open(&proxy).await;
    for _ in 0..2 {
        // Two requests on one connection, 10 s apart: longer than client_header_read, shorter than
        // client_idle, so the connection must still be open for the second.
        let response = sender
            .send_request(post(&proxy, CHAT, &chat_request("m")))
            .await
            .expect("the kept-alive connection still serves");
        assert_eq!(response.status(), 200);
        response.into_body().collect().await.expect("body");
        tokio::time::sleep(secs(10)).await;
    }
    let idle_since = Instant::now() - secs(10);
    let closed = tokio::time::timeout(secs(60), conn).await;
    assert!(
        matches!(closed, Ok(Ok(Ok(())))),
        "the proxy did not close the idle connection cleanly: {closed:?}"
    );
    assert_near("closed after idling", idle_since.elapsed(), secs(20));
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[("outcome", "ok")]), 2.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    // The upstream side is a separate, pooled connection: both requests used it, and it stays open.
    assert_eq!(upstream.connection_count(), 1);
    assert_eq!(upstream.closed_at(0), None);
    for _ in 0..100 {
        if proxy.open_connections() == 0 {
            break;
        }
        tokio::time::sleep(ms(10)).await;
    }
    assert_eq!(
        proxy.open_connections(),
        0,
        "the connection's slot is freed"
    );
}

// On the real clock, so the figures are short and the bounds generous (closed after 1 s of idling: no
// sooner, and within ten times that): on tokio's paused clock an h2c request body does not arrive
// before the auto-advanced timers fire (also with the client-connection timers removed, so not theirs;
// the same exchange passes on the real clock).
#[tokio::test]
async fn an_h2c_connection_is_timed_by_client_idle_only_and_never_while_a_stream_runs() {
    let upstream = upstream(|_| content_stream(4, ms(500))).await;
    let yaml = "timeouts:\n  client_header_read: 200ms\n  client_idle: 1s\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let (mut sender, conn) = open_h2(&proxy).await;
    // A 2 s stream: beyond client_header_read and client_idle, and never cut by them.
    let response = sender
        .send_request(post(&proxy, CHAT, &chat_request("m")))
        .await
        .expect("head");
    assert_eq!(response.version(), http::Version::HTTP_2);
    let body = response.into_body().collect().await.expect("whole stream");
    assert!(body.to_bytes().ends_with(DONE.as_bytes()));
    let idle_since = Instant::now();
    let closed = tokio::time::timeout(secs(30), conn).await;
    assert!(closed.is_ok(), "the idle h2c connection was never closed");
    let waited = idle_since.elapsed();
    assert!(
        waited >= ms(900) && waited < secs(10),
        "closed after idling {waited:?}, client_idle 1s"
    );
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[("outcome", "ok")]), 1.0);
}

#[tokio::test(start_paused = true)]
async fn the_metrics_port_has_short_timers_of_its_own() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    // The proxy port's client timers are long: the metrics port does not use them.
    let yaml = "timeouts:\n  client_header_read: 2m\n  client_idle: 1h\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let addr = proxy.metrics_addr();
    // A connection that never sends a byte: closed after metrics_header_read (default 5 s).
    let connected = Instant::now();
    let mut silent = TcpStream::connect(addr).await.expect("connect");
    let mut buf = [0u8; 256];
    let read = tokio::time::timeout(secs(300), silent.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    assert_near(
        "a silent connection closed after",
        connected.elapsed(),
        secs(5),
    );
    // A scraper's kept-alive connection after its answer: closed after metrics_idle (default 30 s).
    let mut kept = TcpStream::connect(addr).await.expect("connect");
    kept.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("ask");
    let n = kept.read(&mut buf).await.expect("answer");
    assert_eq!(raw_status(&buf[..n]), 200);
    let answered = Instant::now();
    let read = tokio::time::timeout(secs(300), kept.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    assert_near(
        "an idle connection closed after",
        answered.elapsed(),
        secs(30),
    );
    assert_eq!(scrape(&proxy).await.get(family::REQUESTS.name, &[]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn the_metrics_port_timers_are_configured_apart() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let yaml = "timeouts:\n  metrics_header_read: 2s\n  metrics_idle: 7s\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let connected = Instant::now();
    let mut stream = TcpStream::connect(proxy.metrics_addr())
        .await
        .expect("connect");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n")
        .await
        .expect("partial head");
    let mut buf = [0u8; 256];
    let read = tokio::time::timeout(secs(30), stream.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    assert_near(
        "an unfinished head closed after",
        connected.elapsed(),
        secs(2),
    );
    let mut kept = TcpStream::connect(proxy.metrics_addr())
        .await
        .expect("connect");
    kept.write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("ask");
    let n = kept.read(&mut buf).await.expect("answer");
    assert_eq!(raw_status(&buf[..n]), 200);
    let answered = Instant::now();
    let read = tokio::time::timeout(secs(30), kept.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    assert_near(
        "an idle connection closed after",
        answered.elapsed(),
        secs(7),
    );
}
