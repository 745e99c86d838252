//! WebSocket upgrades pass through tokentap (docs/forwarding.md, "WebSocket upgrades"): the handshake goes
//! upstream with its headers unchanged, the upstream's answer (a 101, or a refusal) comes back as it was
//! sent, and then the bytes pass both ways unchanged, at once, half-closes included; sessions have their
//! own cap, per-client share, idle timeout and close at shutdown, each refusal counted; any other
//! `Upgrade` is still dropped. A scripted upstream (raw TCP) shows the bytes; the `websockets` Python
//! package, where it is installed, shows a real client and server negotiating permessage-deflate through
//! tokentap.

use crate::support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use support::*;
use tokentap::record::metrics::family;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::timeout;

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const BOUND: Duration = Duration::from_secs(5);

/// The Sec-WebSocket-Accept for `key` (RFC 6455 §4.2.2: SHA-1 of key + GUID, base64).
pub(crate) fn accept_for(key: &str) -> String {
    let joined = format!("{key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, joined.as_bytes());
    base64(digest.as_ref())
}

fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A scripted WebSocket upstream: each connection's request head (as bytes) and its socket, handed to
/// the test, which writes the answer.
pub(crate) async fn ws_upstream() -> (SocketAddr, mpsc::UnboundedReceiver<(String, TcpStream)>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                if let Ok(head) = read_head(&mut stream).await {
                    let _ = tx.send((head, stream));
                }
            });
        }
    });
    (addr, rx)
}

/// Reads an HTTP head byte by byte (so nothing after it is taken), up to its blank line.
pub(crate) async fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 << 10 {
        let mut byte = [0u8];
        if stream.read(&mut byte).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

pub(crate) async fn next_conn(
    rx: &mut mpsc::UnboundedReceiver<(String, TcpStream)>,
) -> (String, TcpStream) {
    timeout(BOUND, rx.recv())
        .await
        .expect("the upstream got a connection")
        .expect("open")
}

/// The handshake a client sends, with `extra` header lines.
fn handshake(path: &str, extra: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: tokentap\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: realtime\r\n\
         Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n{extra}\r\n"
    )
}

/// What uvicorn (vLLM) answers to a handshake it accepts.
fn switching() -> String {
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\nSec-WebSocket-Extensions: permessage-deflate; \
         server_max_window_bits=12; client_max_window_bits=12\r\ndate: Mon, 07 Dec 2026 07:00:00 GMT\r\n\
         server: uvicorn\r\n\r\n",
        accept_for(KEY)
    )
}

/// A client through tokentap: the handshake sent, and the answer's head read.
async fn client(proxy: SocketAddr, request: &str) -> (String, TcpStream) {
    let mut stream = TcpStream::connect(proxy).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("send");
    let head = timeout(BOUND, read_head(&mut stream))
        .await
        .expect("an answer")
        .expect("head");
    (head, stream)
}

/// Reads exactly `n` bytes, bounded.
pub(crate) async fn read_n(stream: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut got = vec![0u8; n];
    timeout(BOUND, stream.read_exact(&mut got))
        .await
        .expect("in time")
        .expect("bytes");
    got
}

/// Reads until the peer ends its half; what came before.
pub(crate) async fn read_to_end(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut got = Vec::new();
    timeout(BOUND, stream.read_to_end(&mut got))
        .await
        .expect("an end in time")?;
    Ok(got)
}

/// A frame as a client sends it (masked) or a server does (unmasked).
pub(crate) fn frame(first: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut f = vec![first];
    let bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n @ 0..=125 => f.push(bit | n as u8),
        n @ 126..=0xffff => {
            f.push(bit | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(bit | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(key) => {
            f.extend_from_slice(&key);
            f.extend(payload.iter().zip(key.iter().cycle()).map(|(b, k)| b ^ k));
        }
        None => f.extend_from_slice(payload),
    }
    f
}

/// An open session through `proxy` to the scripted upstream: (client, upstream, the upstream's head).
async fn session(
    proxy: SocketAddr, rx: &mut mpsc::UnboundedReceiver<(String, TcpStream)>,
) -> (TcpStream, TcpStream, String) {
    let request = handshake("/v1/realtime?model=m", "");
    let mut to_proxy = TcpStream::connect(proxy).await.expect("connect");
    to_proxy.write_all(request.as_bytes()).await.expect("send");
    let (head, mut upstream) = next_conn(rx).await;
    upstream
        .write_all(switching().as_bytes())
        .await
        .expect("101");
    let answer = timeout(BOUND, read_head(&mut to_proxy))
        .await
        .expect("101 in time")
        .expect("head");
    assert!(answer.starts_with("HTTP/1.1 101 "), "{answer}");
    (to_proxy, upstream, head)
}

#[tokio::test]
async fn the_handshake_and_every_frame_pass_byte_identical_both_ways() {
    let (upstream_addr, mut rx) = ws_upstream().await;
    let proxy = proxy(&format!("http://{upstream_addr}"), "").await;
    let request = handshake(
        "/v1/realtime?model=m",
        "Authorization: Bearer k\r\nX-Extra: 1\r\n",
    );
    let mut client_side = TcpStream::connect(proxy.proxy_addr())
        .await
        .expect("connect");
    client_side
        .write_all(request.as_bytes())
        .await
        .expect("send");
    let (head, mut upstream) = next_conn(&mut rx).await;
    // The handshake as the client sent it, but for Host (the upstream's, as for every request).
    let want = request.replace("Host: tokentap", &format!("Host: {upstream_addr}"));
    assert_eq!(head, want);

    // The 101 and the server's first frame in one write: the bytes hyper read past the head go on.
    let created = frame(0x81, br#"{"type":"session.created","id":"sess-1"}"#, None);
    let mut first = switching().into_bytes();
    first.extend_from_slice(&created);
    upstream.write_all(&first).await.expect("101");
    assert_eq!(
        read_n(&mut client_side, first.len()).await,
        first,
        "101 and frame unchanged"
    );

    // Client to upstream: a fragmented text message (text, continuation, final continuation) with a
    // ping between its fragments, a compressed (RSV1) frame, a large binary frame, written in odd cuts.
    let key = [0x12, 0x34, 0x56, 0x78];
    let mut up = Vec::new();
    up.extend(frame(0x01, b"{\"type\":\"session.up", Some(key)));
    up.extend(frame(0x89, b"ping!", Some(key)));
    up.extend(frame(0x00, b"date\",\"model\":", Some(key)));
    up.extend(frame(0x80, b"\"m\"}", Some(key)));
    up.extend(frame(
        0xC1,
        &[0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00],
        Some(key),
    ));
    up.extend(frame(0x82, &vec![7u8; 70_000], Some(key)));
    for piece in up.chunks(997) {
        client_side.write_all(piece).await.expect("client frames");
    }
    assert_eq!(
        read_n(&mut upstream, up.len()).await,
        up,
        "client frames unchanged"
    );

    // Upstream to client: a pong, deltas, a fragmented message, a 16-bit length frame.
    let mut down = Vec::new();
    down.extend(frame(0x8A, b"ping!", None));
    for i in 0..50 {
        down.extend(frame(
            0x81,
            format!("{{\"type\":\"transcription.delta\",\"delta\":\"{i}\"}}").as_bytes(),
            None,
        ));
    }
    down.extend(frame(0x01, b"part one ", None));
    down.extend(frame(0x80, &vec![b'x'; 300], None));
    for piece in down.chunks(61) {
        upstream.write_all(piece).await.expect("upstream frames");
    }
    assert_eq!(
        read_n(&mut client_side, down.len()).await,
        down,
        "upstream frames unchanged"
    );

    let metrics = scrape(&proxy).await;
    assert_eq!(metrics.get(family::SESSIONS_IN_FLIGHT.name, &[]), 1.0);
    // Close both ways: the client's close frame, the upstream's echo, both TCP ends.
    let close = frame(0x88, &[0x03, 0xe8], Some(key));
    client_side.write_all(&close).await.expect("close");
    assert_eq!(read_n(&mut upstream, close.len()).await, close);
    let echo = frame(0x88, &[0x03, 0xe8], None);
    upstream.write_all(&echo).await.expect("echo");
    drop(upstream);
    assert_eq!(read_to_end(&mut client_side).await.expect("the end"), echo);
    drop(client_side);
    let requests = [("status", "1xx"), ("api", "other"), ("outcome", "ok")];
    let metrics = once_no_session_is_open(&proxy).await;
    assert_eq!(
        metrics.get("tokentap_requests_total", &requests),
        1.0,
        "{}",
        metrics.text
    );
}

/// The scrape once no session is counted open (within 2 s); panics if one still is.
pub(crate) async fn once_no_session_is_open(proxy: &tokentap::Running) -> Metrics {
    for _ in 0..100 {
        let metrics = scrape(proxy).await;
        if metrics.get(family::SESSIONS_IN_FLIGHT.name, &[]) == 0.0 {
            return metrics;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("sessions still counted open");
}

#[tokio::test]
async fn a_half_close_passes_and_the_other_direction_runs_on() {
    let (upstream_addr, mut rx) = ws_upstream().await;
    let proxy = proxy(&format!("http://{upstream_addr}"), "").await;
    let (mut client_side, mut upstream, _) = session(proxy.proxy_addr(), &mut rx).await;
    let last = frame(0x88, &[0x03, 0xe8], Some([1, 2, 3, 4]));
    client_side.write_all(&last).await.expect("close frame");
    client_side.shutdown().await.expect("FIN");
    assert_eq!(
        read_to_end(&mut upstream).await.expect("the client's end"),
        last
    );
    // The upstream still talks after the client's FIN, and the client still hears it.
    let late = frame(0x81, b"still here", None);
    upstream.write_all(&late).await.expect("late frame");
    assert_eq!(read_n(&mut client_side, late.len()).await, late);
    drop(upstream);
    assert_eq!(read_to_end(&mut client_side).await.expect("the end"), b"");
}

#[tokio::test]
async fn a_client_that_vanishes_or_an_upstream_that_closes_ends_the_session_on_both_sides() {
    let (upstream_addr, mut rx) = ws_upstream().await;
    let proxy = proxy(&format!("http://{upstream_addr}"), "").await;
    // The client vanishes mid-message (a reset: unread bytes on close).
    let (mut client_side, mut upstream, _) = session(proxy.proxy_addr(), &mut rx).await;
    upstream
        .write_all(&frame(0x81, &vec![b'a'; 1000], None))
        .await
        .expect("frame");
    client_side
        .write_all(&frame(0x01, b"half a mess", Some([9, 9, 9, 9])))
        .await
        .expect("part");
    drop(client_side);
    let seen = timeout(BOUND, async {
        let mut sink = vec![0u8; 4096];
        loop {
            match upstream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(seen.is_ok(), "the upstream saw the client's end");
    // A half-close until the upstream ends its side too, as a WebSocket server does at its peer's end.
    drop(upstream);
    // The upstream closes: the client sees its end after every byte it sent.
    let (mut client_side, mut upstream, _) = session(proxy.proxy_addr(), &mut rx).await;
    let going = frame(0x88, &[0x03, 0xf4], None);
    upstream.write_all(&going).await.expect("close 1012");
    drop(upstream);
    assert_eq!(read_to_end(&mut client_side).await.expect("the end"), going);
    // Only the client's end closes the session: until then it was a half-close.
    assert_eq!(
        scrape(&proxy)
            .await
            .get(family::SESSIONS_IN_FLIGHT.name, &[]),
        1.0
    );
    drop(client_side);
    once_no_session_is_open(&proxy).await;
}

#[tokio::test]
async fn a_refused_upgrade_reaches_the_client_as_the_upstream_sent_it() {
    let (upstream_addr, mut rx) = ws_upstream().await;
    let proxy = proxy(&format!("http://{upstream_addr}"), "").await;
    // vLLM without a realtime route (websockets' own refusal), and a 426 with a body.
    let refusals = [
        "HTTP/1.1 403 Forbidden\r\nDate: Mon, 07 Dec 2026 07:00:00 GMT\r\nConnection: close\r\n\
         Content-Length: 0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
            .to_owned(),
        "HTTP/1.1 426 Upgrade Required\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nContent-Length: 13\r\n\r\nversion: 13\r\n"
            .to_owned(),
    ];
    for refusal in refusals {
        let request = handshake("/v1/realtime", "");
        let mut client_side = TcpStream::connect(proxy.proxy_addr())
            .await
            .expect("connect");
        client_side
            .write_all(request.as_bytes())
            .await
            .expect("send");
        let (_, mut upstream) = next_conn(&mut rx).await;
        upstream
            .write_all(refusal.as_bytes())
            .await
            .expect("refusal");
        drop(upstream);
        // Even an empty body's Content-Length stays in its line (elsewhere hyper writes it last).
        let want = refusal.clone();
        let got = read_n(&mut client_side, want.len()).await;
        assert_eq!(String::from_utf8_lossy(&got), want);
    }
    let metrics = scrape(&proxy).await;
    for status in ["403", "4xx"] {
        let ok = [("status", status), ("outcome", "ok")];
        assert_eq!(
            metrics.get("tokentap_requests_total", &ok),
            1.0,
            "{}",
            metrics.text
        );
    }
    assert_eq!(metrics.get(family::SESSIONS_IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test]
async fn sessions_beyond_the_cap_or_the_clients_share_are_refused_before_the_upstream_and_counted()
{
    let (upstream_addr, mut rx) = ws_upstream().await;
    let refused = family::SESSIONS_REFUSED.name;
    for (yaml, reason) in [
        ("limits: {max_sessions: 1}\n", "max_sessions"),
        (
            "limits: {max_sessions: 5, max_sessions_per_client: 1}\n",
            "per_client",
        ),
    ] {
        let proxy = proxy(&format!("http://{upstream_addr}"), yaml).await;
        let (_client, _upstream, _) = session(proxy.proxy_addr(), &mut rx).await;
        let (head, _) = client(proxy.proxy_addr(), &handshake("/v1/realtime", "")).await;
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(
            head.to_ascii_lowercase().contains("retry-after: 1"),
            "{head}"
        );
        assert!(
            rx.try_recv().is_err(),
            "the refused handshake went upstream"
        );
        let metrics = scrape(&proxy).await;
        assert_eq!(metrics.get(refused, &[("reason", reason)]), 1.0, "{yaml}");
        assert_eq!(metrics.get(refused, &[]), 1.0, "{yaml}");
        assert_eq!(
            metrics.get("tokentap_requests_total", &[("status", "503")]),
            1.0
        );
    }
}

/// On tokio's paused clock: the traffic's pauses and the idle timer are exact, so a busy machine cannot
/// stretch a 150 ms pause past the 300 ms timer.
#[tokio::test(start_paused = true)]
async fn a_session_silent_both_ways_for_session_idle_is_closed() {
    let (upstream_addr, mut rx) = ws_upstream().await;
    let yaml = "timeouts: {session_idle: 300ms, client_idle: 100ms, client_header_read: 100ms}\n";
    let proxy = proxy(&format!("http://{upstream_addr}"), yaml).await;
    let (mut client_side, mut upstream, _) = session(proxy.proxy_addr(), &mut rx).await;
    // Traffic every 150 ms keeps it open past client_idle and session_idle alike.
    let started = tokio::time::Instant::now();
    for i in 0..4u8 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let f = frame(0x81, &[b'0' + i], None);
        upstream.write_all(&f).await.expect("frame");
        assert_eq!(read_n(&mut client_side, f.len()).await, f);
    }
    let quiet = tokio::time::Instant::now();
    assert_eq!(read_to_end(&mut client_side).await.expect("closed"), b"");
    let closed = quiet.elapsed();
    assert!(started.elapsed() >= Duration::from_millis(600));
    assert!(
        closed >= Duration::from_millis(300) && closed < Duration::from_millis(310),
        "closed {closed:?} after the last byte"
    );
    assert_eq!(read_to_end(&mut upstream).await.unwrap_or_default(), b"");
}

/// On tokio's paused clock, so the frame sent 100 ms into the 300 ms grace is within it on any machine.
#[tokio::test(start_paused = true)]
async fn a_shutdown_closes_open_sessions_with_1001_going_away_after_the_grace() {
    let (upstream_addr, mut rx) = ws_upstream().await;
    let proxy = proxy(
        &format!("http://{upstream_addr}"),
        "shutdown_grace: 300ms\n",
    )
    .await;
    let (mut client_side, mut upstream, _) = session(proxy.proxy_addr(), &mut rx).await;
    let started = tokio::time::Instant::now();
    let drained = tokio::spawn(proxy.shutdown());
    // Still relayed during the grace.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let f = frame(0x81, b"during the grace", None);
    upstream.write_all(&f).await.expect("frame");
    assert_eq!(read_n(&mut client_side, f.len()).await, f);
    // Then each side gets a close frame 1001 "going away" and the end of the connection.
    let to_client = read_to_end(&mut client_side).await.expect("closed");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(to_client, b"\x88\x0c\x03\xe9going away");
    let to_upstream = read_to_end(&mut upstream).await.expect("closed");
    assert_eq!(to_upstream[..2], [0x88, 0x8c], "a masked close frame");
    let key = &to_upstream[2..6];
    let payload: Vec<u8> = (to_upstream[6..].iter())
        .zip(key.iter().cycle())
        .map(|(b, k)| b ^ k)
        .collect();
    assert_eq!(payload, b"\x03\xe9going away");
    timeout(BOUND, drained)
        .await
        .expect("drained")
        .expect("task");
}

#[tokio::test]
async fn any_other_upgrade_is_still_dropped_and_the_plain_request_answered() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{\"ok\":true}")]).await;
    let proxy = proxy(&upstream.url(), "").await;
    for request in [
        "GET /v1/models HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n".to_owned(),
        format!("POST /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\n\r\n"),
        "GET /v1/models HTTP/1.0\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n".to_owned(),
    ] {
        let (head, _) = client(proxy.proxy_addr(), &request).await;
        assert!(head.starts_with("HTTP/1.1 200 ") || head.starts_with("HTTP/1.0 200 "), "{head}");
    }
    let seen = upstream.requests();
    assert_eq!(seen.len(), 3);
    for request in seen {
        let head = request.head.to_ascii_lowercase();
        for hop in ["\r\nupgrade:", "\r\nconnection:", "\r\nhttp2-settings:"] {
            assert!(!head.contains(hop), "{hop:?} went upstream: {head}");
        }
    }
}

/// A Python with the `websockets` package: `TOKENTAP_WEBSOCKETS_PYTHON`, `python3`, or the conformance
/// suite's client venv; `None` (the test skips, saying so) when none has it.
pub(crate) fn websockets_python() -> Option<String> {
    let home = std::env::var("HOME").unwrap_or_default();
    let candidates = [
        std::env::var("TOKENTAP_WEBSOCKETS_PYTHON").unwrap_or_default(),
        "python3".to_owned(),
        format!("{home}/.cache/tokentap-conformance/clients/bin/python"),
    ];
    candidates
        .into_iter()
        .filter(|c| !c.is_empty())
        .find(|python| {
            std::process::Command::new(python)
                .args(["-c", "import websockets.asyncio.client"])
                .output()
                .is_ok_and(|out| out.status.success())
        })
}

#[tokio::test]
async fn a_real_client_and_server_negotiate_permessage_deflate_through_tokentap() {
    let _slot = slot();
    let Some(python) = websockets_python() else {
        eprintln!("SKIPPED websocket real client: no python with `websockets` (pip install websockets, or set TOKENTAP_WEBSOCKETS_PYTHON)");
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/websocket/echo.py");
    let (_server, port) = python_server(&python, &[script, "server"]).await;
    let proxy = proxy(&format!("http://127.0.0.1:{port}"), "").await;
    let url = format!("ws://{}/v1/realtime", proxy.proxy_addr());
    let client = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&python)
            .args([script, "client", &url])
            .output()
    });
    let out = timeout(Duration::from_secs(30), client)
        .await
        .expect("client in time")
        .expect("task")
        .expect("client ran");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    let extension = got["extension"].as_str().unwrap_or_default();
    assert!(extension.starts_with("permessage-deflate"), "{got}");
    for ok in ["fragmented_ok", "binary_ok", "pong"] {
        assert_eq!(got[ok], true, "{got}");
    }
    assert_eq!(got["close_code"], 1000, "{got}");
}

/// A child process killed when the test ends, however it ends.
/// A Python test server (`args`: its script and arguments) started with `python`, and the port it
/// prints on its first line (within 20 s); killed when the handle is dropped.
pub(crate) async fn python_server(python: &str, args: &[&str]) -> (Killed, u16) {
    assert_held("python_server");
    let mut server = Killed(
        std::process::Command::new(python)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python server"),
    );
    let stdout = server.0.stdout.take().expect("stdout");
    let port = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).map(|_| line)
    });
    let port = timeout(Duration::from_secs(20), port)
        .await
        .expect("port in time");
    let port = port
        .expect("task")
        .expect("a line")
        .trim()
        .parse()
        .expect("a port");
    (server, port)
}

pub(crate) struct Killed(pub(crate) std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_accept_key_is_rfc_6455s_example() {
    assert_eq!(accept_for(KEY), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}
