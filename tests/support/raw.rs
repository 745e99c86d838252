//! Raw clients: bytes no well-behaved client library would send, written to the proxy port as they
//! are, and the answer read back as bytes (status, head, dechunked body).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use tokentap::scripted::{decode, Chunked};

/// A streamed chat request for `model` as the bytes an HTTP/1.1 client writes (`Connection: close`
/// when `close`, so the answer ends where the connection does).
pub fn raw_chat(model: &str, close: bool) -> Vec<u8> {
    let body = super::chat_request(model);
    let connection = if close { "connection: close\r\n" } else { "" };
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{connection}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A GET of `/v1/models` that asks the server to close the connection after its answer.
pub const GET_MODELS_AND_CLOSE: &[u8] =
    b"GET /v1/models HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n";

/// Connects to `addr` and writes `bytes` as they are (a head, part of a request), keeping the
/// connection for the test to go on with: write more, read, or leave.
pub async fn raw_send(addr: SocketAddr, bytes: &[u8]) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(bytes).await.expect("head");
    stream
}

/// Writes `request` as it is to the proxy port and reads the answer until the proxy closes the
/// connection (at most [`super::HANG`]). Returns everything read.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = raw_send(addr, request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(super::HANG, stream.read_to_end(&mut answer)).await;
    answer
}

/// The status code of a raw HTTP/1.1 answer, 0 when there is none.
pub fn raw_status(answer: &[u8]) -> u16 {
    answer
        .strip_prefix(b"HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| std::str::from_utf8(code).ok())
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// A raw HTTP/1.1 answer's head (up to the blank line) and body bytes.
pub fn raw_split(answer: &[u8]) -> (String, Vec<u8>) {
    match answer.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(at) => (
            String::from_utf8_lossy(&answer[..at]).into_owned(),
            answer[at + 4..].to_vec(),
        ),
        None => (String::from_utf8_lossy(answer).into_owned(), Vec::new()),
    }
}

/// How many times `needle` occurs in `haystack` (overlapping occurrences counted).
pub fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// Decodes a chunked body (as written by the proxy); None unless it is complete, well-formed, without
/// trailers and with nothing after it.
pub fn dechunk(body: &[u8]) -> Option<Vec<u8>> {
    match decode(body) {
        Chunked::Done {
            body: data,
            trailers,
            used,
        } if used == body.len() && trailers.is_empty() => Some(data),
        _ => None,
    }
}

/// A connection with a small receive buffer that asks for `target` and never reads: returned once the
/// answer's status line has arrived (its page was encoded and is being sent), or after ten minutes,
/// with the status (0: none came). Ten minutes: a live view of a long history takes seconds in a debug
/// build, and one computed beside others on a machine at load 20 took over a minute.
pub async fn ask_and_never_read(addr: SocketAddr, target: &str) -> (tokio::net::TcpStream, u16) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut stream = socket.connect(addr).await.expect("connect");
    let request = format!("GET {target} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("ask");
    let mut head = [0u8; 12];
    let status = tokio::time::timeout(Duration::from_secs(600), async {
        loop {
            match stream.peek(&mut head).await {
                Ok(12) => return raw_status(&head),
                Ok(0) | Err(_) => return 0,
                Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    })
    .await;
    (stream, status.unwrap_or(0))
}

/// Reads what `stream` still has, until its end or an error, within `bound`; the byte count, and
/// whether it ended (EOF or reset) within the bound.
pub async fn drain(stream: &mut tokio::net::TcpStream, bound: Duration) -> (usize, bool) {
    let mut total = 0;
    let mut buf = vec![0u8; 64 << 10];
    let ended = tokio::time::timeout(bound, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => total += n,
            }
        }
    })
    .await
    .is_ok();
    (total, ended)
}
