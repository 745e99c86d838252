//! 200 realtime sessions held open through the tokentap binary beside ordinary streams: each session is
//! the real vLLM capture (compressed with context takeover both ways) replayed up to a response in
//! flight, so every session holds what metering it costs (two frame readers, two inflaters, an open
//! response's meter); then each ends with its done event and a close both ways. What the binary's
//! resident memory grew by per open session is printed (docs/lab/benchmark.md), nothing failed, and
//! its descriptors come back to where they were. All 200 come from one address, so its limits are
//! raised as a deployment behind one gateway raises them: `limits.max_sessions_per_client`, and the
//! client's share of `budgets.session_meters` (a compressed session's meter takes 112 KiB of it: the
//! default 16 MiB meters 146 such sessions, and the rest would be forwarded unmetered).
#![cfg(target_os = "linux")]

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::{rss_kib_of, start_binary};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

const SESSIONS: usize = 200;
const STREAMS: usize = 50;
const BOUND: Duration = Duration::from_secs(20);
const CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/realtime/vllm-tiny-qwen3-asr-session"
);

/// The capture: the client's handshake, the 101, and each direction's frames before the done event,
/// and from it on.
struct Capture {
    request: String,
    answer: Vec<u8>,
    client: [Vec<u8>; 2],
    upstream: [Vec<u8>; 2],
}

fn capture() -> Capture {
    let head = std::fs::read_to_string(format!("{CAPTURE}.handshake.http")).expect("head");
    let split = head.find("\r\n\r\n").expect("request") + 4;
    let frames = std::fs::read_to_string(format!("{CAPTURE}.frames.jsonl")).expect("frames");
    let (mut client, mut upstream) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    let mut after_done = 0;
    for line in frames.lines() {
        let f: Value = serde_json::from_str(line).expect("frame");
        let raw = f["raw"].as_str().expect("raw");
        let bytes = (0..raw.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&raw[i..i + 2], 16).expect("hex"));
        if f["payload"]
            .as_str()
            .is_some_and(|p| p.contains("transcription.done"))
        {
            after_done = 1;
        }
        match f["dir"].as_str() {
            Some("c2s") => client[after_done].extend(bytes),
            _ => upstream[after_done].extend(bytes),
        }
    }
    Capture {
        request: head[..split].to_owned(),
        answer: head.as_bytes()[split..].to_vec(),
        client,
        upstream,
    }
}

/// Reads an HTTP head (and a `content-length` body) byte by byte; the head.
async fn read_request(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8];
        if stream.read(&mut byte).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let length = (head.lines())
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_owned())
        })
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await?;
    Ok(head)
}

const SSE: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

fn chunk(data: &str) -> Vec<u8> {
    let event = format!("data: {data}\n\n");
    format!("{:x}\r\n{event}\r\n", event.len()).into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_open_realtime_sessions_beside_streams_cost_little_and_leave_nothing_behind() {
    let capture = std::sync::Arc::new(capture());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let upstream_addr = listener.local_addr().expect("addr");
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let script = capture.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (script, mut go) = (script.clone(), go_rx.clone());
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let Ok(head) = read_request(&mut stream).await else {
                    return;
                };
                if !head.to_ascii_lowercase().contains("upgrade: websocket") {
                    // An ordinary stream: five content chunks 20 ms apart, usage, [DONE].
                    let _ = stream.write_all(SSE).await;
                    for i in 0..5 {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let delta = format!(
                            r#"{{"choices":[{{"index":0,"delta":{{"content":"t{i}"}}}}]}}"#
                        );
                        let _ = stream.write_all(&chunk(&delta)).await;
                    }
                    let usage = r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}"#;
                    let _ = stream.write_all(&chunk(usage)).await;
                    let _ = stream.write_all(&chunk("[DONE]")).await;
                    let _ = stream.write_all(b"0\r\n\r\n").await;
                    return;
                }
                let _ = stream.write_all(&script.answer).await;
                let _ = stream.write_all(&script.upstream[0]).await;
                let _ = go.wait_for(|go| *go).await;
                let _ = stream.write_all(&script.upstream[1]).await;
                let mut rest = Vec::new();
                let _ = stream.read_to_end(&mut rest).await;
            });
        }
    });
    let process = start_binary("realtime-soak", &format!("upstream: http://{upstream_addr}\nlisten: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nlimits: {{max_sessions: 1000, max_sessions_per_client: 1000}}\nbudgets: {{session_meters_per_client: 64MiB}}\n"), None);
    let pid = process.child.id();
    let fds = || std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let (fds_before, rss_before) = (fds(), rss_kib_of(pid));

    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let mut client = TcpStream::connect(&process.proxy).await.expect("connect");
        client
            .write_all(capture.request.as_bytes())
            .await
            .expect("handshake");
        client
            .write_all(&capture.client[0])
            .await
            .expect("client frames");
        let mut got = vec![0u8; capture.answer.len() + capture.upstream[0].len()];
        timeout(BOUND, client.read_exact(&mut got))
            .await
            .expect("in time")
            .expect("101 and frames");
        assert!(
            got[..capture.answer.len()] == capture.answer[..]
                && got[capture.answer.len()..] == capture.upstream[0][..]
        );
        sessions.push(client);
    }
    let streams: Vec<_> = (0..STREAMS)
        .map(|_| {
            let proxy = process.proxy.clone();
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(&proxy).await.expect("connect");
                stream
                    .write_all(&support::raw_chat("m", true))
                    .await
                    .expect("ask");
                let mut answer = Vec::new();
                timeout(BOUND, stream.read_to_end(&mut answer))
                    .await
                    .expect("in time")
                    .expect("answer");
                String::from_utf8_lossy(&answer).contains("[DONE]")
            })
        })
        .collect();
    let rss_open = rss_kib_of(pid);
    let open = process.metric("tokentap_sessions_in_flight");
    let responses_open = process
        .scrape()
        .get("tokentap_requests_in_flight", &[("api", "realtime")]);
    for stream in streams {
        assert!(
            stream.await.expect("stream task"),
            "a stream did not end whole"
        );
    }

    // Each session's done, then the client's close and the upstream's echo (in the capture), both ends.
    go_tx.send(true).expect("go");
    for mut client in sessions {
        client.write_all(&capture.client[1]).await.expect("close");
        let mut rest = vec![0u8; capture.upstream[1].len()];
        timeout(BOUND, client.read_exact(&mut rest))
            .await
            .expect("in time")
            .expect("done and echo");
        assert!(rest == capture.upstream[1]);
    }
    let mut metrics = process.scrape();
    for _ in 0..200 {
        if metrics.get("tokentap_sessions_in_flight", &[]) == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        metrics = process.scrape();
    }
    let per_session = (rss_open.saturating_sub(rss_before)) as f64 / SESSIONS as f64;
    eprintln!(
        "realtime soak: {SESSIONS} sessions open beside {STREAMS} streams: RSS {rss_before} KiB → {rss_open} KiB, {per_session:.1} KiB per open session; descriptors {fds_before} → {} after",
        fds()
    );
    assert_eq!(open, SESSIONS as f64);
    assert_eq!(
        responses_open, SESSIONS as f64,
        "each session has its response in flight"
    );
    let ok = [("api", "realtime"), ("outcome", "ok")];
    assert_eq!(
        metrics.get("tokentap_sessions_total", &ok),
        SESSIONS as f64,
        "{}",
        metrics.text
    );
    assert_eq!(
        metrics.get(
            "tokentap_requests_total",
            &[ok[0], ok[1], ("status", "200")]
        ),
        SESSIONS as f64
    );
    assert_eq!(
        metrics.get("tokentap_output_tokens_total", &ok[..1]),
        64.0 * SESSIONS as f64
    );
    assert_eq!(
        metrics.get(
            "tokentap_requests_total",
            &[("api", "chat"), ("outcome", "ok")]
        ),
        STREAMS as f64
    );
    assert_eq!(
        metrics.get("tokentap_session_messages_skipped_total", &[]),
        0.0
    );
    assert!(
        fds() <= fds_before + 2,
        "descriptors {fds_before} before, {} after",
        fds()
    );
    assert!(per_session < 256.0, "{per_session} KiB per open session");
}
