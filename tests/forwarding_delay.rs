//! tokentap's own delay per forwarded frame (`tokentap_forwarding_delay_seconds`): one observation for
//! every data frame that came from the upstream and was written to the client, over HTTP/1.1 and h2, and
//! none for an answer tokentap made itself. What the figures are worth against the wire is the benchmark's
//! job (docs/lab/benchmark.md); here only what is counted.

use crate::support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use support::*;
use tokentap::record::metrics::family;

const DELAY: &str = family::FORWARDING_DELAY.name;

/// Frames the upstream sends: the role chunk, `TOKENS` content chunks, `[DONE]`.
const TOKENS: usize = 6;
const FRAMES: f64 = (TOKENS + 2) as f64;

#[tokio::test]
async fn every_frame_forwarded_over_http1_is_observed_once() {
    let upstream = upstream(|_| token_stream(TOKENS, ms(5))).await;
    let proxy = proxy(&upstream.url(), "").await;
    for round in 1..=2 {
        let got = send(
            &client(),
            post(&proxy, "/v1/chat/completions", &chat_request("m")),
        )
        .await;
        assert_eq!((got.status, got.end), (200, Ok(())));
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        assert_eq!(m.get(&format!("{DELAY}_count"), &[]), FRAMES * round as f64);
        assert!(m.get(&format!("{DELAY}_sum"), &[]) > 0.0);
        assert_eq!(
            m.get(&format!("{DELAY}_bucket"), &[("le", "+Inf")]),
            FRAMES * round as f64
        );
    }
}

#[tokio::test]
async fn every_frame_forwarded_over_h2_is_observed_once() {
    let upstream = upstream(|_| token_stream(TOKENS, ms(5))).await;
    let proxy = proxy(&upstream.url(), "").await;
    let client = h2_client::<Full<Bytes>>();
    let response = client
        .request(post(&proxy, "/v1/chat/completions", &chat_request("m")))
        .await
        .expect("response head");
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.expect("whole body");
    assert!(!body.to_bytes().is_empty());
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(&format!("{DELAY}_count"), &[]), FRAMES);
}

#[tokio::test]
async fn an_answer_tokentap_made_itself_is_not_observed() {
    // Nothing listens on the upstream's port: tokentap answers 502 itself.
    let unused = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let url = format!("http://{}", unused.local_addr().expect("its address"));
    drop(unused);
    let proxy = proxy(&url, "").await;
    let got = send(
        &client(),
        post(&proxy, "/v1/chat/completions", &chat_request("m")),
    )
    .await;
    assert_eq!(got.status, 502);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert!(m.has(&format!("{DELAY}_count"), &[]), "exported from start");
    assert_eq!(m.get(&format!("{DELAY}_count"), &[]), 0.0);
}

/// A client that stops reading: what the upstream sends meanwhile waits in tokentap's upstream socket,
/// and the client's pause is the client's, not tokentap's: a frame counts from when it arrived or from
/// when hyper asked for it (the client's window open again), whichever is later. The client is h2
/// with a 1 KiB window that it leaves closed for 600 ms: only the frame or two hyper already held when
/// the window closed may show the pause. Counted from the arrival alone (before), nearly every frame
/// that waited in the upstream socket did: 1,950 of 2,002 here.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn frames_a_client_held_back_with_its_window_do_not_count_its_pause() {
    const TOKENS: usize = 2000;
    let upstream = upstream(|_| token_stream(TOKENS, ms(0))).await;
    let proxy = proxy(&upstream.url(), "").await;
    // The kernel turns receive timestamps on a moment after the first socket asks.
    tokio::time::sleep(ms(100)).await;

    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .http2_initial_stream_window_size(1024)
        .http2_initial_connection_window_size(1024)
        .build_http::<Full<Bytes>>();
    let response = client
        .request(post(&proxy, "/v1/chat/completions", &chat_request("m")))
        .await
        .expect("response head");
    assert_eq!(response.status(), 200);
    tokio::time::sleep(ms(600)).await;
    let body = response.into_body().collect().await.expect("whole body");
    assert_eq!(count(&body.to_bytes(), b"data: "), TOKENS + 2);
    settle(&proxy).await;

    let m = scrape(&proxy).await;
    let frames = m.get(&format!("{DELAY}_count"), &[]);
    let paused = frames - m.get(&format!("{DELAY}_bucket"), &[("le", "0.25")]);
    assert!(frames >= (TOKENS + 2) as f64, "{frames} frames");
    assert!(
        paused <= 4.0,
        "{paused} of {frames} frames show the client's pause as tokentap's own delay"
    );
}
