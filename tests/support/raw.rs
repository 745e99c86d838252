//! Raw clients: bytes no well-behaved client library would send, written to the proxy port as they
//! are, and the answer read back as bytes (status, head, dechunked body).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::chunked::{decode, Chunked};

/// Writes `request` as it is to the proxy port and reads the answer until the proxy closes the
/// connection (bounded by 5 s). Returns everything read.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("write request");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
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
