//! Cancellation at the phases `failures.rs` does not cover: a client that leaves while it is still
//! uploading its request body, and one that leaves during the wait for the first token (after the
//! response head and vLLM's role-only chunk). Each time tokentap closes the upstream connection at once,
//! counts the request `cancelled`, keeps what it had already observed and never counts goodput.

mod support;

use std::time::Duration;

use http_body_util::BodyExt;
use support::*;
use tokio::io::AsyncWriteExt;
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
    let (mut sender, conn) = open(&proxy).await;
    let response = sender
        .send_request(post(&proxy, CHAT, &chat_request("m")))
        .await
        .expect("head");
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
    assert_eq!(m.get("tokentap_requests_total", &labels), 1.0);
    assert_eq!(m.get("tokentap_requests_in_flight", &[]), 0.0);
    // No token was seen, so no TTFT; but the 3 s it had waited already missed the 1 s ceiling.
    assert_eq!(
        m.get("tokentap_time_to_first_token_seconds_count", &[]),
        0.0
    );
    assert_eq!(
        m.get(
            "tokentap_slo_violations_total",
            &[("model", "m"), ("slo", "ttft")]
        ),
        1.0
    );
    assert_eq!(m.get("tokentap_goodput_requests_total", &[]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_client_leaving_while_uploading_its_body_closes_the_upstream_and_counts_cancelled() {
    let upstream = upstream(|_| vec![json_response(200, "OK", r#"{"choices":[]}"#)]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let mut stream = TcpStream::connect(proxy.proxy_addr())
        .await
        .expect("connect");
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.expect("head");
    stream
        .write_all(br#"{"model":"m","messages":[{"role":"user","content":"hello"#)
        .await
        .expect("part of the body");
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
    let m = scrape(&proxy).await;
    // Nothing reached the upstream, so nothing confirmed the name `m`.
    let labels = [("model", "unadmitted"), ("outcome", "cancelled")];
    assert_eq!(m.get("tokentap_requests_total", &labels), 1.0);
    assert_eq!(m.get("tokentap_requests_in_flight", &[]), 0.0);
    assert_eq!(m.get("tokentap_goodput_requests_total", &[]), 0.0);
}
