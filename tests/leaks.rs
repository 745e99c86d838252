//! Nothing leaks: rounds of faults (resets, garbage, hangs cut by clients that leave, oversized events,
//! non-SSE bodies, clients that reset mid-stream) leave the in-flight gauge at 0, the process's open file
//! descriptors where they were after the first rounds, and its memory flat. Its own test binary, with
//! one test, so no other test's sockets move the counts.

mod support;

use std::time::Duration;

use support::*;
use tokentap::record::metrics::family;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ROUNDS: usize = 10;

fn script(case: &str) -> Vec<Step> {
    let ok = || -> Vec<Step> {
        vec![
            sse_head(),
            chunk(ROLE_CHUNK.as_bytes()),
            chunk(content_chunk("a").as_bytes()),
            chunk(usage_chunk(3, 1).as_bytes()),
            chunk(DONE.as_bytes()),
            last_chunk(),
        ]
    };
    match case {
        "ok" => ok(),
        "reset-before-head" => vec![Step::Reset],
        "reset-mid-stream" => {
            let mut s = ok();
            s.truncate(3);
            s.push(Step::Reset);
            s
        }
        "garbage" => vec![Step::Raw(b"\x00\xffnot http\r\n\r\n".to_vec())],
        "hang" => vec![
            sse_head(),
            chunk(ROLE_CHUNK.as_bytes()),
            Step::Sleep(Duration::from_secs(30)),
        ],
        "huge" => {
            let line = format!("data: {}\n\n", "x".repeat(1 << 20));
            let mut s: Vec<Step> = vec![sse_head()];
            s.extend(line.as_bytes().chunks(64 << 10).map(chunk));
            s.push(last_chunk());
            s
        }
        "not-sse" => vec![
            sse_head(),
            chunk(b"<html>oops</html>"),
            last_chunk(),
        ],
        "trickle" => vec![Step::Trickle(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 14\r\n\r\ndata: [DONE]\n\n"
                .to_vec(),
            Duration::ZERO,
        )],
        _ => vec![Step::Close],
    }
}

const CASES: &[&str] = &[
    "ok",
    "reset-before-head",
    "reset-mid-stream",
    "garbage",
    "hang",
    "huge",
    "not-sse",
    "trickle",
    "client-resets",
];

/// Sends one request for `case`; the hang and client-resets cases leave early.
async fn run_case(proxy: &tokentap::Running, client: &TestClient, case: &str) {
    let path = format!("/v1/chat/completions?case={case}");
    match case {
        "hang" => {
            let sent = send(client, post(proxy, &path, &chat_request("m")));
            let _ = tokio::time::timeout(Duration::from_millis(100), sent).await;
        }
        "client-resets" => {
            let body = chat_request("m");
            let mut stream = TcpStream::connect(proxy.proxy_addr())
                .await
                .expect("connect");
            let request = format!(
                "POST /v1/chat/completions?case=ok HTTP/1.1\r\nhost: t\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(request.as_bytes()).await.expect("write");
            let mut buf = [0u8; 64];
            let _ = stream.read(&mut buf).await;
            stream.set_zero_linger().ok();
        }
        _ => {
            send(client, post(proxy, &path, &chat_request("m"))).await;
        }
    }
}

async fn round(proxy: &tokentap::Running, client: &TestClient) {
    for case in CASES {
        run_case(proxy, client, case).await;
    }
    settle(proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_leave_no_request_in_flight_no_open_descriptor_and_no_memory_behind() {
    let upstream = upstream(|request| {
        let line = request.request_line();
        let case = line
            .split("case=")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or("");
        script(case)
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let client = client();
    for _ in 0..2 {
        round(&proxy, &client).await;
    }
    let (fds_before, rss_before) = (open_fds(), rss_kib());
    for _ in 0..ROUNDS {
        round(&proxy, &client).await;
    }
    // Closed sockets can take a moment to leave the table; wait for that, bounded.
    let mut fds_after = open_fds();
    for _ in 0..50 {
        if fds_after <= fds_before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        fds_after = open_fds();
    }
    let rss_after = rss_kib();
    let m = scrape(&proxy).await;
    let total = ((ROUNDS + 2) * CASES.len()) as f64;
    assert_eq!(m.get(family::REQUESTS.name, &[]), total, "{}", m.text);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    assert_eq!(proxy.in_flight(), 0);
    // A few pooled keep-alive connections may come and go; a leak would add one or more per round.
    assert!(
        fds_after <= fds_before + 4,
        "open descriptors grew from {fds_before} to {fds_after} over {ROUNDS} rounds"
    );
    // Each round pushes over a MiB through the proxy; a leak of any body would show as several MiB.
    assert!(
        rss_after < rss_before + 8 * 1024,
        "resident memory grew from {rss_before} KiB to {rss_after} KiB over {ROUNDS} rounds"
    );
    eprintln!(
        "after {ROUNDS} rounds of {} faults: fds {fds_before} -> {fds_after}, RSS {rss_before} -> {rss_after} KiB",
        CASES.len()
    );
}
