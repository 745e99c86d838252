//! Graceful shutdown, driven in-process through `Running::shutdown` (what SIGTERM/SIGINT call): `/readyz`
//! turns 503 at once while `/healthz` stays 200, the proxy port stops taking connections, a stream in
//! flight runs to its end within the grace period, and what outlives the grace is cut and counted.

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use support::*;
use tokentap::record::metrics::family;
use tokio::net::TcpStream;
use tokio::time::Instant;

const CHAT: &str = "/v1/chat/completions";

/// What a shutdown running as a task left behind, once it has finished (within 60 s).
async fn finished(shutdown: tokio::task::JoinHandle<tokentap::Drained>) -> tokentap::Drained {
    tokio::time::timeout(Duration::from_secs(60), shutdown)
        .await
        .expect("shutdown never finished")
        .expect("task")
}

async fn get_status(proxy: &tokentap::Running, path: &str) -> u16 {
    let request = http::Request::get(format!("http://{}{path}", proxy.metrics_addr()))
        .body(Full::new(Bytes::new()))
        .expect("request");
    send(&client(), request).await.status
}

async fn refuses_connections(proxy: &tokentap::Running) -> bool {
    for _ in 0..100 {
        if TcpStream::connect(proxy.proxy_addr()).await.is_err() {
            return true;
        }
        tokio::time::sleep(ms(10)).await;
    }
    false
}

#[tokio::test(start_paused = true)]
async fn shutdown_turns_unready_at_once_refuses_new_clients_and_lets_a_stream_finish() {
    let upstream = upstream(|_| token_stream(10, ms(300))).await;
    let proxy = proxy(&upstream.url(), "shutdown_grace: 30s\n").await;
    assert_eq!(get_status(&proxy, "/readyz").await, 200);
    let (_sender, _conn, response) = open_chat(&proxy).await;
    let mut body = response.into_body();
    let mut got = Vec::new();
    let first = body.frame().await.expect("frame").expect("data");
    got.extend_from_slice(first.data_ref().expect("data"));

    let started = Instant::now();
    let drained = tokio::spawn(proxy.shutdown());
    assert_eq!(get_status(&proxy, "/readyz").await, 503, "unready at once");
    assert_eq!(get_status(&proxy, "/healthz").await, 200, "still alive");
    assert!(
        refuses_connections(&proxy).await,
        "new connections still accepted"
    );

    while let Some(frame) = body.frame().await {
        let frame = frame.expect("the stream in flight is not cut within the grace");
        if let Ok(data) = frame.into_data() {
            got.extend_from_slice(&data);
        }
    }
    let mut expected = ROLE_CHUNK.to_owned();
    for i in 0..10 {
        expected.push_str(&content_chunk(&format!("t{i}")));
    }
    expected.push_str(DONE);
    assert_eq!(String::from_utf8_lossy(&got), expected);
    assert_eq!(finished(drained).await.cut, 0);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown waited {:?} after the last request had ended",
        started.elapsed()
    );
    let m = scrape(&proxy).await;
    let labels = [("model", "m"), ("status", "200"), ("outcome", "ok")];
    assert_eq!(m.get(family::REQUESTS.name, &labels), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    assert_eq!(proxy.open_connections(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_stream_outliving_the_grace_is_cut_broken_and_counted_timeout() {
    let upstream = upstream(|_| token_stream(200, ms(50))).await;
    let proxy = proxy(&upstream.url(), "shutdown_grace: 2s\n").await;
    let (_sender, _conn, response) = open_chat(&proxy).await;
    let mut body = response.into_body();
    for _ in 0..3 {
        body.frame().await.expect("frame").expect("data");
    }
    let started = Instant::now();
    let drained = tokio::spawn(proxy.shutdown());
    let end = loop {
        match body.frame().await {
            None => break Ok(()),
            Some(Err(err)) => break Err(err),
            Some(Ok(_)) => {}
        }
    };
    assert!(end.is_err(), "a cut stream must not end cleanly");
    let cut_after = started.elapsed();
    assert!(
        cut_after >= Duration::from_secs(2) && cut_after < Duration::from_secs(2) + ms(100),
        "cut after {cut_after:?}, grace 2s"
    );
    assert_eq!(finished(drained).await.cut, 1);
    let closed = upstream.wait_closed(0).await - started;
    assert!(closed < Duration::from_secs(2) + ms(100), "{closed:?}");
    let m = scrape(&proxy).await;
    let labels = [("model", "m"), ("status", "200"), ("outcome", "timeout")];
    assert_eq!(m.get(family::REQUESTS.name, &labels), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    assert_eq!(
        m.get(&family::TTFT.count(), &[("model", "m")]),
        1.0,
        "what was observed before the cut is kept"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_still_waiting_for_its_head_when_the_grace_runs_out_gets_503() {
    let upstream = upstream(|_| {
        let mut steps = vec![Step::Sleep(Duration::from_secs(60))];
        steps.extend(token_stream(1, ms(10)));
        steps
    })
    .await;
    let proxy = proxy(&upstream.url(), "shutdown_grace: 1s\n").await;
    let waiting = tokio::spawn({
        let request = post(&proxy, CHAT, &chat_request("m"));
        async move { send(&client(), request).await }
    });
    tokio::time::sleep(ms(100)).await;
    let drained = proxy.shutdown().await;
    assert_eq!(drained.cut, 1);
    let got = waiting.await.expect("task");
    assert_eq!(got.status, 503);
    let json: serde_json::Value = serde_json::from_slice(&got.body).expect("JSON");
    assert_eq!(json["error"]["type"], "shutting_down");
    let m = scrape(&proxy).await;
    let labels = [("status", "503"), ("outcome", "timeout")];
    assert_eq!(m.get(family::REQUESTS.name, &labels), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn an_idle_proxy_shuts_down_at_once() {
    let upstream = upstream(|_| token_stream(1, ms(10))).await;
    let proxy = proxy(&upstream.url(), "").await;
    // A kept-alive client connection with no request in progress does not hold the shutdown up.
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.end, Ok(()));
    shuts_down_at_once(&proxy).await;
}

/// Shuts `proxy` down and checks that nothing was cut and nothing held it up (on the paused clock, a
/// connection holding the shutdown would take the grace's 30 s exactly).
async fn shuts_down_at_once(proxy: &tokentap::Running) {
    let started = Instant::now();
    let drained = proxy.shutdown().await;
    assert_eq!(drained.cut, 0);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

// On the real clock, so the bounds are generous: on tokio's paused clock an h2c request body does not
// arrive before the auto-advanced timers fire (also with the client-connection timers removed, so not
// theirs; the same exchange passes on the real clock).
#[tokio::test]
async fn an_h2c_stream_in_flight_finishes_within_the_grace() {
    let upstream = upstream(|_| token_stream(5, ms(400))).await;
    let proxy = proxy(&upstream.url(), "shutdown_grace: 30s\n").await;
    let (_sender, conn, response) = open_h2_chat(&proxy).await;
    let started = Instant::now();
    let drained = tokio::spawn(proxy.shutdown());
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the stream is not cut");
    assert!(body.to_bytes().ends_with(DONE.as_bytes()));
    assert_eq!(finished(drained).await.cut, 0);
    // The stream's own 2 s, not the 30 s grace (h2c: on the real clock; see timeouts.rs).
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // GOAWAY: the connection ends once its stream has.
    tokio::time::timeout(Duration::from_secs(5), conn)
        .await
        .expect("the h2c connection stayed open after shutdown")
        .ok();
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[("outcome", "ok")]), 1.0);
}

/// An h2 client that reads nothing while it has no request (a sync client between two calls: httpx's
/// `Client(http2=True)`) never answers the PING of the GOAWAY that a graceful shutdown sends, and held
/// every shutdown for its whole grace period (30 s). Such a connection, with nothing in progress, is
/// closed at once; an h2 stream in flight still finishes (the test above).
#[tokio::test(start_paused = true)]
async fn an_idle_h2_client_that_never_reads_does_not_hold_the_shutdown() {
    use tokio::io::AsyncWriteExt;
    let upstream = upstream(|_| token_stream(1, ms(10))).await;
    let proxy = proxy(&upstream.url(), "shutdown_grace: 30s\n").await;
    let mut idle = TcpStream::connect(proxy.proxy_addr())
        .await
        .expect("connect");
    // The preface and an empty SETTINGS frame: an h2 connection, then nothing ever read or sent.
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    idle.write_all(&hello).await.expect("preface");
    tokio::time::sleep(ms(100)).await;
    shuts_down_at_once(&proxy).await;
}
