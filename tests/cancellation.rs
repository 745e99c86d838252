//! The client leaves: the one home of these tests. At every phase of a request (in its head, while
//! uploading its body, before the response head, during the wait for the first token, mid-stream, during
//! keep-alive comments; with a FIN or a reset) tokentap closes the upstream connection at once, counts the
//! request `cancelled` exactly once, keeps what it had already observed (TTFT, gaps, a missed TTFT
//! ceiling) and never counts goodput or E2E.

use crate::support;

use std::time::Duration;

use http_body_util::BodyExt;
use support::*;
use tokentap::record::metrics::family;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

const CHAT: &str = "/v1/chat/completions";

async fn upstream_closed(upstream: &Upstream, i: usize) -> Instant {
    upstream
        .wait_closed_within(i, Duration::from_secs(30))
        .await
}

#[tokio::test(start_paused = true)]
async fn a_client_leaving_during_the_ttft_wait_closes_the_upstream_and_counts_the_missed_ttft() {
    let upstream = upstream(|_| {
        vec![
            sse_head(),
            chunk(ROLE_CHUNK.as_bytes()),
            Step::Sleep(Duration::from_secs(30)),
            chunk(content_chunk("late").as_bytes()),
            last_chunk(),
        ]
    })
    .await;
    let proxy = proxy(&upstream.url(), "slo:\n  ttft: 1s\n").await;
    let (sender, conn, response) = open_chat(&proxy).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let role = body.frame().await.expect("frame").expect("data");
    assert_eq!(
        role.data_ref().map(|d| d.to_vec()),
        Some(ROLE_CHUNK.as_bytes().to_vec())
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let left_at = Instant::now();
    drop(body);
    drop(sender);
    conn.abort();
    let closed = upstream_closed(&upstream, 0).await;
    assert!(
        closed - left_at < ms(50),
        "closed {:?} after",
        closed - left_at
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let labels = [("model", "m"), ("status", "200"), ("outcome", "cancelled")];
    assert_eq!(m.get(family::REQUESTS.name, &labels), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    // No token was seen, so no TTFT; but the 3 s it had waited already missed the 1 s ceiling.
    assert_eq!(m.get(&family::TTFT.count(), &[]), 0.0);
    assert_eq!(
        m.get(
            family::SLO_VIOLATIONS.name,
            &[("model", "m"), ("slo", "ttft")]
        ),
        1.0
    );
    assert_eq!(m.get(family::GOODPUT.name, &[]), 0.0);
}

/// Opens a connection and sends a chat request's head declaring a 100,000-byte body and the first
/// bytes of that body, as a client part way through its upload.
async fn part_way_through_an_upload(proxy: &tokentap::Running) -> TcpStream {
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n";
    let mut stream = raw_send(proxy.proxy_addr(), head.as_bytes()).await;
    stream
        .write_all(br#"{"model":"m","messages":[{"role":"user","content":"hello"#)
        .await
        .expect("part of the body");
    stream
}

/// One request counted `cancelled`, nothing in flight, no goodput; nothing reached the upstream, so
/// nothing confirmed the name `m`: it is `unadmitted`.
fn assert_one_unadmitted_cancel(m: &Metrics) {
    let labels = [("model", "unadmitted"), ("outcome", "cancelled")];
    assert_eq!(m.get(family::REQUESTS.name, &labels), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    assert_eq!(m.get(family::GOODPUT.name, &[]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_client_leaving_while_uploading_a_streamed_body_closes_the_upstream_and_counts_cancelled()
{
    let upstream = upstream(|_| vec![json_response(200, "OK", r#"{"choices":[]}"#)]).await;
    // A body that is not held (here none is) streams upstream as it arrives.
    let proxy = proxy(&upstream.url(), "limits:\n  hold_request_body_bytes: 0\n").await;
    let stream = part_way_through_an_upload(&proxy).await;
    // The head goes upstream at once; wait until the upstream has its connection open.
    tokio::time::timeout(Duration::from_secs(5), async {
        while upstream.connection_count() == 0 {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await
    .expect("the request was not forwarded while its body streamed");
    tokio::time::sleep(ms(100)).await;
    let left_at = Instant::now();
    drop(stream);
    let closed = upstream_closed(&upstream, 0).await;
    assert!(
        closed - left_at < ms(50),
        "closed {:?} after",
        closed - left_at
    );
    assert!(
        upstream.requests().is_empty(),
        "a truncated body was delivered as complete"
    );
    settle(&proxy).await;
    assert_one_unadmitted_cancel(&scrape(&proxy).await);
}

/// A body held until whole (the default, up to `limits.hold_request_body_bytes`): a client that leaves
/// while uploading it never reaches the upstream at all.
#[tokio::test(start_paused = true)]
async fn a_client_leaving_while_uploading_a_held_body_never_reaches_the_upstream() {
    let upstream = upstream(|_| vec![json_response(200, "OK", r#"{"choices":[]}"#)]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let stream = part_way_through_an_upload(&proxy).await;
    tokio::time::sleep(ms(100)).await;
    drop(stream);
    settle(&proxy).await;
    assert_eq!(upstream.connection_count(), 0, "the upstream was contacted");
    assert_one_unadmitted_cancel(&scrape(&proxy).await);
}

#[tokio::test(start_paused = true)]
async fn client_leaving_mid_stream_closes_the_upstream_at_once_and_counts_cancelled() {
    let upstream = upstream(|_| token_stream(200, ms(50))).await;
    let proxy = proxy(&upstream.url(), "slo:\n  ttft: 1s\n").await;
    let (sender, conn, response) = open_chat(&proxy).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut frames = 0;
    while frames < 4 {
        body.frame().await.expect("frame").expect("data");
        frames += 1;
    }
    assert_eq!(proxy.in_flight(), 1);
    let left_at = Instant::now();
    drop(body);
    drop(sender);
    conn.abort();
    let _ = conn.await;
    let closed_at = upstream.wait_closed(0).await;
    // Closed before the upstream's next token was due: the model server stops generating at once.
    assert!(
        closed_at.duration_since(left_at) < ms(50),
        "closed {:?} after the client left",
        closed_at - left_at
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests("m", "200", "cancelled"), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    // What was observed before the client left is kept: its TTFT, and its gaps.
    assert_eq!(m.get(&family::TTFT.count(), &[("model", "m")]), 1.0);
    assert!(m.get(&family::ITL.count(), &[("model", "m")]) >= 1.0);
    assert_eq!(m.get(family::GOODPUT.name, &[]), 0.0);
    assert_eq!(m.get(&family::E2E.count(), &[]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn client_leaving_before_the_response_head_closes_the_upstream_and_counts_cancelled() {
    let upstream = upstream(|_| {
        let mut steps = vec![Step::Sleep(Duration::from_secs(10))];
        steps.extend(token_stream(200, ms(50)));
        steps
    })
    .await;
    let proxy = proxy(&upstream.url(), "slo:\n  ttft: 500ms\n").await;
    let (mut sender, conn) = open(&proxy).await;
    let waited = tokio::time::timeout(
        ms(2000),
        sender.send_request(post(&proxy, CHAT, &chat_request("m"))),
    )
    .await;
    assert!(waited.is_err(), "no head was due before 10 s");
    let left_at = Instant::now();
    drop(sender);
    conn.abort();
    let _ = conn.await;
    let closed_at = upstream.wait_closed(0).await;
    assert!(closed_at.duration_since(left_at) < ms(50));
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests("unadmitted", "none", "cancelled"), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_client_leaving_during_keep_alive_comments_is_cancelled_not_skipped() {
    let upstream = upstream(|_| {
        let mut s: Vec<Step> = vec![sse_head()];
        for _ in 0..20 {
            s.push(chunk(b": keep-alive\n\n"));
            s.push(Step::Sleep(Duration::from_secs(1)));
        }
        s.push(last_chunk());
        s
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let client = client();
    let sent = send(&client, post(&proxy, CHAT, &chat_request("m")));
    assert!(tokio::time::timeout(Duration::from_secs(3), sent)
        .await
        .is_err());
    drop(client);
    upstream.wait_closed(0).await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests_with("200", "cancelled"), 1.0);
    assert_eq!(m.get(family::METERING_SKIPPED.name, &[]), 0.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

// ---- a raw client vanishes (FIN or reset) at each phase of a request ------------------------------

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Half of the request head sent.
    InRequestHead,
    /// Head sent, 10 of 1000 body bytes sent, the body streamed as it comes (no body held).
    InRequestBody,
    /// Head sent, 10 of 1000 body bytes sent, the body held until whole (the default).
    InHeldRequestBody,
    /// Whole request sent, no response head yet.
    BeforeResponseHead,
    /// Response head and role chunk received, no token yet (waiting for the first token).
    BeforeFirstToken,
    /// Three tokens received.
    MidStream,
}

/// Runs one request from a raw client that goes away at `phase` (with a FIN, or a reset when `reset`).
async fn vanish(phase: Phase, reset: bool) {
    let upstream = upstream(move |_| {
        let faults = token_stream(100, ms(50));
        let delay = if matches!(phase, Phase::BeforeResponseHead) {
            Duration::from_secs(10)
        } else {
            Duration::ZERO
        };
        let mut all = vec![Step::Sleep(delay)];
        all.extend(faults.into_iter().take(2));
        if matches!(phase, Phase::BeforeFirstToken) {
            all.push(Step::Sleep(Duration::from_secs(10)));
        }
        all.extend(token_stream(100, ms(50)).into_iter().skip(2));
        all
    })
    .await;
    let config = match phase {
        Phase::InRequestBody => "limits:\n  hold_request_body_bytes: 0\n",
        _ => "",
    };
    let proxy = proxy(&upstream.url(), config).await;
    let body = chat_request("m");
    let head = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        match phase {
            Phase::InRequestBody | Phase::InHeldRequestBody => 1000,
            _ => body.len(),
        }
    );
    let mut stream = TcpStream::connect(proxy.proxy_addr())
        .await
        .expect("connect");
    let mut read = Vec::new();
    match phase {
        Phase::InRequestHead => {
            stream
                .write_all(&head.as_bytes()[..head.len() / 2])
                .await
                .expect("write");
            tokio::time::sleep(ms(100)).await;
        }
        Phase::InRequestBody => {
            stream.write_all(head.as_bytes()).await.expect("write");
            stream
                .write_all(&body.as_bytes()[..10])
                .await
                .expect("write");
            // The request is forwarded as soon as its head is read: wait for the upstream to have it open.
            for _ in 0..100 {
                if upstream.connection_count() > 0 {
                    break;
                }
                tokio::time::sleep(ms(10)).await;
            }
            tokio::time::sleep(ms(50)).await;
        }
        Phase::InHeldRequestBody => {
            stream.write_all(head.as_bytes()).await.expect("write");
            stream
                .write_all(&body.as_bytes()[..10])
                .await
                .expect("write");
            tokio::time::sleep(ms(100)).await;
            assert_eq!(
                upstream.connection_count(),
                0,
                "a held body went upstream before it was whole"
            );
        }
        _ => {
            stream.write_all(head.as_bytes()).await.expect("write");
            stream.write_all(body.as_bytes()).await.expect("write");
            let wanted = match phase {
                Phase::BeforeResponseHead => 0,
                Phase::BeforeFirstToken => 1,
                _ => 4,
            };
            let deadline = Instant::now() + Duration::from_secs(5);
            while count(&read, b"data: ") < wanted && Instant::now() < deadline {
                let mut buf = [0u8; 4096];
                match tokio::time::timeout(ms(200), stream.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => read.extend_from_slice(&buf[..n]),
                    Err(_) => {}
                }
            }
            assert!(
                count(&read, b"data: ") >= wanted,
                "{phase:?}: never got there"
            );
            if wanted == 0 {
                tokio::time::sleep(ms(200)).await;
            }
        }
    }
    if reset {
        stream.set_zero_linger().ok();
    }
    let left_at = Instant::now();
    drop(stream);
    let what = format!("{phase:?}, reset {reset}");
    match phase {
        Phase::InRequestHead | Phase::InHeldRequestBody => {
            tokio::time::sleep(ms(100)).await;
            assert_eq!(upstream.connection_count(), 0, "{what}");
        }
        _ => {
            let closed_at = upstream.wait_closed(0).await;
            assert!(
                closed_at.saturating_duration_since(left_at) < Duration::from_secs(1),
                "{what}: upstream closed {:?} after the client left",
                closed_at.saturating_duration_since(left_at)
            );
        }
    }
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0, "{what}");
    let (status, ttft, tokens) = match phase {
        Phase::InRequestHead => {
            assert_eq!(
                m.get(family::REQUESTS.name, &[]),
                0.0,
                "{what}: no request was read"
            );
            return;
        }
        // tokentap answers a body that broke off with 400 (the client, gone, never reads it).
        Phase::InRequestBody | Phase::InHeldRequestBody => ("400", 0.0, 0.0),
        Phase::BeforeResponseHead => ("none", 0.0, 0.0),
        Phase::BeforeFirstToken => ("200", 0.0, 0.0),
        Phase::MidStream => ("200", 1.0, 3.0),
    };
    assert_eq!(m.get(family::REQUESTS.name, &[]), 1.0, "{what}");
    assert_eq!(m.requests_with(status, "cancelled"), 1.0, "{what}");
    assert_eq!(m.get(&family::TTFT.count(), &[]), ttft, "{what}");
    assert!(m.get(family::OUTPUT_TOKENS.name, &[]) >= tokens, "{what}");
    assert_eq!(m.get(family::GOODPUT.name, &[]), 0.0, "{what}");
    assert_eq!(m.get(&family::E2E.count(), &[]), 0.0, "{what}");
}

/// On tokio's paused clock, as the rest: each phase is reached by the script's time, not by how soon
/// a busy machine got there.
#[tokio::test(start_paused = true)]
async fn a_client_vanishing_at_any_phase_closes_the_upstream_and_is_counted_once() {
    for phase in [
        Phase::InRequestHead,
        Phase::InRequestBody,
        Phase::InHeldRequestBody,
        Phase::BeforeResponseHead,
        Phase::BeforeFirstToken,
        Phase::MidStream,
    ] {
        for reset in [false, true] {
            vanish(phase, reset).await;
        }
    }
}
