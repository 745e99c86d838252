//! Header lines are kept as they were sent, in both directions over HTTP/1.1: the same names in the same
//! order with the same case, less the hop-by-hop ones (and `Host`, set to the upstream's in its place).
//! Both ends here are raw sockets, so every assertion is on the exact bytes of a message head.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Writes `request` to the proxy port and returns the response head it answers with (up to, not
/// including, the blank line), the body not read. The connection stays open until the head is in.
async fn response_head(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("write request");
    let mut got = Vec::new();
    let read = async {
        loop {
            if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                return String::from_utf8_lossy(&got[..at]).into_owned();
            }
            let mut buf = [0u8; 4096];
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return String::from_utf8_lossy(&got).into_owned(),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("a response head within 5 s")
}

/// The header lines of a head (the request or status line left out).
fn lines(head: &str) -> Vec<&str> {
    head.trim_end_matches("\r\n\r\n")
        .split("\r\n")
        .skip(1)
        .collect()
}

fn raw_answer(head: &str, body: &str) -> Vec<Step> {
    vec![Step::Raw(format!("{head}\r\n\r\n{body}").into_bytes())]
}

/// The head a client gets for `GET path` through tokentap from an upstream that answers with `answer`.
async fn head_through(answer: Vec<Step>, path: &str) -> String {
    let upstream = upstream(move |_| answer.clone()).await;
    let proxy = proxy(&upstream.url(), "").await;
    response_head(proxy.proxy_addr(), get(path).as_bytes()).await
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: tokentap.test\r\n\r\n")
}

#[tokio::test]
async fn response_header_lines_keep_their_order_and_case_without_the_hop_by_hop_ones() {
    let head = head_through(
        raw_answer(
            "HTTP/1.1 200 Fine\r\nServer: Test/1.0\r\nX-Request-ID: abc\r\nConnection: keep-alive, X-Hop\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\nKeep-Alive: timeout=5\r\n\
             Set-Cookie: a=1\r\nset-cookie: b=2\r\nX-Hop: secret\r\nX-Mixed-CASE: yes\r\nVary: Origin",
            "{}",
        ),
        "/v1/models",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200 Fine\r\n"), "{head}");
    // No `Date` either: tokentap adds nothing the upstream did not send.
    assert_eq!(
        lines(&head),
        [
            "Server: Test/1.0",
            "X-Request-ID: abc",
            "Content-Type: application/json",
            "Content-Length: 2",
            "Set-Cookie: a=1",
            "set-cookie: b=2",
            "X-Mixed-CASE: yes",
            "Vary: Origin",
        ]
    );
}

#[tokio::test]
async fn a_chunked_response_keeps_its_transfer_encoding_line_where_the_upstream_put_it() {
    let head = head_through(
        vec![
            Step::Raw(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\
                  Content-Length: 99\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n\r\n"
                    .to_vec(),
            ),
            chunk(DONE.as_bytes()),
            last_chunk(),
        ],
        "/v1/chat/completions",
    )
    .await;
    // The Content-Length beside chunked is dropped (RFC 9112 §6.3); the rest is as the upstream sent it.
    assert_eq!(
        lines(&head),
        [
            "Content-Type: text/event-stream",
            "Transfer-Encoding: chunked",
            "Cache-Control: no-cache",
            "X-Accel-Buffering: no",
        ]
    );
}

#[tokio::test]
async fn a_transfer_coding_other_than_chunked_stays_named_in_place() {
    let head = head_through(
        vec![
            Step::Raw(
                b"HTTP/1.1 200 OK\r\nX-First: 1\r\nTransfer-Encoding: gzip,chunked\r\nX-Last: 2\r\n\r\n"
                    .to_vec(),
            ),
            chunk(b"not really gzip"),
            last_chunk(),
        ],
        "/files/1",
    )
    .await;
    assert_eq!(
        lines(&head),
        ["X-First: 1", "Transfer-Encoding: gzip,chunked", "X-Last: 2"]
    );
}

#[tokio::test]
async fn an_empty_bodys_content_length_is_written_last() {
    // hyper's HTTP/1 encoder writes the length of a body that has already ended itself, after the
    // other headers: the one place a kept header moves. Pinned here so a hyper change shows.
    let head = head_through(
        raw_answer(
            "HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 0\r\nX-B: 2",
            "",
        ),
        "/v1/models",
    )
    .await;
    assert_eq!(lines(&head), ["X-A: 1", "X-B: 2", "Content-Length: 0"]);
}

#[tokio::test]
async fn repeats_of_one_name_apart_from_each_other_are_sent_together_at_the_first() {
    // http::HeaderMap keeps the values of one name together: the one thing about order that changes.
    let head = head_through(
        raw_answer(
            "HTTP/1.1 200 OK\r\nX-A: 1\r\nX-B: 2\r\nx-a: 3\r\nContent-Length: 0",
            "",
        ),
        "/v1/models",
    )
    .await;
    assert_eq!(
        lines(&head),
        ["X-A: 1", "x-a: 3", "X-B: 2", "Content-Length: 0"]
    );
}

#[tokio::test]
async fn request_header_lines_reach_the_upstream_in_order_and_case_with_host_in_place() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let body = chat_request("m");
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nUser-Agent: Raw/1\r\nHOST: tokentap.test\r\n\
         Content-Type: application/json\r\nConnection: keep-alive, X-Hop\r\nX-Hop: secret\r\n\
         Content-Length: {}\r\nProxy-Connection: keep-alive\r\nx-MIXED-case: 1\r\n\
         Authorization: Bearer k\r\naccept: */*\r\n\r\n{body}",
        body.len()
    );
    let head = response_head(proxy.proxy_addr(), request.as_bytes()).await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    let seen = &upstream.requests()[0];
    assert_eq!(seen.request_line(), "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(
        lines(&seen.head),
        [
            "User-Agent: Raw/1",
            &format!("HOST: {}", upstream.addr),
            "Content-Type: application/json",
            // Named by the client's `Connection`, yet not hop-by-hop: it passes, in its place.
            "X-Hop: secret",
            &format!("Content-Length: {}", body.len()),
            "x-MIXED-case: 1",
            "Authorization: Bearer k",
            "accept: */*",
        ]
    );
    assert_eq!(seen.body, body.as_bytes());
}

#[tokio::test]
async fn a_chunked_request_keeps_its_transfer_encoding_and_te_trailers_in_place() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let request =
        "POST /v1/completions HTTP/1.1\r\nHost: tokentap.test\r\nTransfer-Encoding: chunked\r\n\
                   TE: trailers, deflate\r\nConnection: TE\r\nX-After: 1\r\n\r\n\
                   5\r\nhello\r\n0\r\n\r\n";
    let head = response_head(proxy.proxy_addr(), request.as_bytes()).await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    let seen = &upstream.requests()[0];
    assert_eq!(
        lines(&seen.head),
        [
            &format!("Host: {}", upstream.addr),
            "Transfer-Encoding: chunked",
            "TE: trailers",
            "X-After: 1",
            // RFC 9110 §10.1.4: whoever sends `TE` names it in `Connection`, for this hop as for the last
            // (in the case the client wrote the name).
            "Connection: TE",
        ]
    );
    assert_eq!(seen.body, b"hello");
}

/// An h2 client sends `te: trailers` with no `Connection` (h2 has none); over HTTP/1.1 it needs one, so
/// the upstream gets `Connection: TE` beside it. A request without `TE` gets no `Connection` line.
#[tokio::test]
async fn an_h2_clients_te_trailers_reaches_the_upstream_named_in_connection() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let h2: TestClient = h2_client();
    let request = http::Request::get(format!("http://{}/v1/models", proxy.proxy_addr()))
        .header("te", "trailers")
        .body(Full::new(Bytes::new()))
        .expect("request");
    assert_eq!(send(&h2, request).await.status, 200);
    let plain = http::Request::get(format!("http://{}/v1/models", proxy.proxy_addr()))
        .body(Full::new(Bytes::new()))
        .expect("request");
    assert_eq!(send(&h2, plain).await.status, 200);
    let seen = upstream.requests();
    assert_eq!(seen[0].header("te"), ["trailers"], "{}", seen[0].head);
    assert_eq!(seen[0].header("connection"), ["TE"], "{}", seen[0].head);
    assert!(seen[1].header("connection").is_empty(), "{}", seen[1].head);
}

#[tokio::test]
async fn h2_clients_get_the_upstreams_order_in_lowercase() {
    // HTTP/2 requires lowercase field names; the order is still the upstream's.
    let upstream = upstream(|_| {
        raw_answer(
            "HTTP/1.1 200 OK\r\nX-Zeta: 1\r\nConnection: keep-alive\r\nContent-Type: application/json\r\n\
             Content-Length: 2\r\nX-Alpha: 2",
            "{}",
        )
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let h2: TestClient = h2_client();
    let request = http::Request::get(format!("http://{}/v1/models", proxy.proxy_addr()))
        .header("x-second", "b")
        .header("x-first", "a")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let got = send(&h2, request).await;
    let names: Vec<&str> = got.headers.keys().map(|k| k.as_str()).collect();
    assert_eq!(
        names,
        ["x-zeta", "content-type", "content-length", "x-alpha"]
    );
    let seen = &upstream.requests()[0];
    assert_eq!(
        lines(&seen.head),
        [
            "x-second: b",
            "x-first: a",
            &format!("host: {}", upstream.addr)
        ]
    );
}

#[tokio::test]
async fn an_http10_client_gets_a_chunked_response_without_transfer_encoding() {
    // HTTP/1.0 has no chunked coding: hyper leaves the kept header out and ends the body by closing.
    let upstream = upstream(|_| {
        vec![
            Step::Raw(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nX-After: 1\r\n\r\n"
                    .to_vec(),
            ),
            chunk(DONE.as_bytes()),
            last_chunk(),
        ]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let answer = raw_exchange(
        proxy.proxy_addr(),
        b"GET /v1/completions HTTP/1.0\r\nHost: tokentap.test\r\n\r\n",
    )
    .await;
    let (head, body) = raw_split(&answer);
    assert!(head.starts_with("HTTP/1.0 200 OK\r\n"), "{head}");
    assert_eq!(
        lines(&head),
        ["Content-Type: text/event-stream", "X-After: 1"]
    );
    assert_eq!(body, DONE.as_bytes());
}

#[tokio::test]
async fn a_get_with_a_chunked_body_reaches_the_upstream_with_its_body() {
    // With its Transfer-Encoding removed, hyper's client sent a GET without a body and dropped the bytes.
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let request = "GET /v1/models HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
                   5\r\nhello\r\n0\r\n\r\n";
    let head = response_head(proxy.proxy_addr(), request.as_bytes()).await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    let seen = &upstream.requests()[0];
    assert_eq!(
        lines(&seen.head),
        [
            &format!("Host: {}", upstream.addr),
            "Transfer-Encoding: chunked"
        ]
    );
    assert_eq!(seen.body, b"hello");
}

/// An h2 client may send `cookie` as several fields (RFC 9113 §8.2.3); an HTTP/1.1 server reads one line
/// (most keep only the first or the last of several). They reach the upstream joined with "; ", in order,
/// where the first was. An HTTP/1.1 client's lines are left as they came.
#[tokio::test]
async fn an_h2_clients_cookie_fields_reach_the_upstream_as_one_line() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let h2: TestClient = h2_client();
    let request = http::Request::get(format!("http://{}/v1/models", proxy.proxy_addr()))
        .header("x-before", "1")
        .header("cookie", "session=abc")
        .header("cookie", "theme=dark")
        .header("x-after", "2")
        .header("cookie", "lang=en")
        .body(Full::new(Bytes::new()))
        .expect("request");
    assert_eq!(send(&h2, request).await.status, 200);
    let seen = &upstream.requests()[0];
    assert_eq!(
        seen.header("cookie"),
        ["session=abc; theme=dark; lang=en"],
        "{}",
        seen.head
    );
    let names: Vec<&str> = seen
        .head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':').map(|(n, _)| n))
        .filter(|n| n.starts_with("x-") || *n == "cookie")
        .collect();
    assert_eq!(names, ["x-before", "cookie", "x-after"]);

    let raw = "GET /v1/models HTTP/1.1\r\nhost: x\r\ncookie: a=1\r\ncookie: b=2\r\n\r\n";
    let _ = response_head(proxy.proxy_addr(), raw.as_bytes()).await;
    assert_eq!(upstream.requests()[1].header("cookie"), ["a=1", "b=2"]);
}
