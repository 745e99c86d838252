//! Hostile and malformed requests from clients: conflicting framing headers, header injection attempts,
//! a request target naming another host, bytes that are not UTF-8, and model names built to blow up the
//! label set or forge log lines. tokentap forwards or refuses each exactly as a correct HTTP proxy would
//! (malformed messages get a 400 from the HTTP layer and never reach the upstream), and `/metrics` stays
//! true and bounded.

use crate::support;

use support::*;
use tokentap::record::metrics::family;

const CHAT: &str = "/v1/chat/completions";

#[tokio::test]
async fn malformed_request_heads_are_refused_with_400_and_never_reach_the_upstream() {
    let upstream = upstream(|_| ok_stream()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let body = chat_request("m");
    let n = body.len();
    let cases: Vec<(&str, String)> = vec![
        (
            "two different content-lengths",
            format!("POST {CHAT} HTTP/1.1\r\nhost: t\r\ncontent-length: {n}\r\ncontent-length: 3\r\n\r\n{body}"),
        ),
        (
            "a transfer-encoding that does not end in chunked",
            format!("POST {CHAT} HTTP/1.1\r\nhost: t\r\ntransfer-encoding: gzip\r\n\r\n{body}"),
        ),
        (
            "a negative content-length",
            format!("POST {CHAT} HTTP/1.1\r\nhost: t\r\ncontent-length: -1\r\n\r\n{body}"),
        ),
        (
            "a bare CR inside a header value",
            format!("POST {CHAT} HTTP/1.1\r\nhost: t\r\nx-a: b\rx-injected: 1\r\ncontent-length: {n}\r\n\r\n{body}"),
        ),
        (
            "a NUL inside a header value",
            format!("POST {CHAT} HTTP/1.1\r\nhost: t\r\nx-a: b\0c\r\ncontent-length: {n}\r\n\r\n{body}"),
        ),
        (
            "an obs-fold continuation line",
            format!("POST {CHAT} HTTP/1.1\r\nhost: t\r\nx-a: b\r\n x-injected: 1\r\ncontent-length: {n}\r\n\r\n{body}"),
        ),
        (
            "whitespace between a header name and its colon",
            format!("POST {CHAT} HTTP/1.1\r\nhost: t\r\ncontent-length : {n}\r\n\r\n{body}"),
        ),
        (
            "a header name that is not a token",
            format!("POST {CHAT} HTTP/1.1\r\nhost: t\r\nx[a]: b\r\ncontent-length: {n}\r\n\r\n{body}"),
        ),
        (
            "a space inside the request target",
            format!("POST {CHAT} x HTTP/1.1\r\nhost: t\r\ncontent-length: {n}\r\n\r\n{body}"),
        ),
        (
            "a CR inside the request target",
            format!("POST {CHAT}\rx HTTP/1.1\r\nhost: t\r\ncontent-length: {n}\r\n\r\n{body}"),
        ),
    ];
    for (what, request) in &cases {
        let answer = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
        assert_eq!(
            raw_status(&answer),
            400,
            "{what}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
    assert_eq!(
        upstream.connection_count(),
        0,
        "a malformed request reached the upstream"
    );
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[]), 0.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test]
async fn content_length_beside_chunked_from_a_client_is_dropped_and_the_body_forwarded_chunked() {
    let upstream = upstream(|_| ok_stream()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let body = chat_request("m");
    // A smuggling attempt: by Content-Length the body is 4 bytes and the rest a second request.
    let smuggled = "GET /admin HTTP/1.1\r\nhost: t\r\n\r\n";
    let request = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: t\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n{smuggled}",
        body.len()
    );
    let answer = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
    let (head, got) = raw_split(&answer);
    assert_eq!(raw_status(&answer), 200, "{head}");
    assert_eq!(
        dechunk(&got).as_deref(),
        Some(format!("{}{DONE}", content_chunk("a")).as_bytes())
    );
    // RFC 9112 §6.3: Transfer-Encoding wins, and the connection is closed after the answer, so the
    // bytes after the chunked body are never read as a request.
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    assert_eq!(count(&answer, b"HTTP/1.1 "), 1, "a second answer came back");
    let seen = upstream.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body, body.as_bytes());
    assert!(
        seen[0].header("content-length").is_empty(),
        "{}",
        seen[0].head
    );
    assert_eq!(seen[0].header("transfer-encoding"), ["chunked"]);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[("model", "m")]), 1.0);
}

#[tokio::test]
async fn an_invalid_chunk_in_a_client_body_is_answered_400_and_the_upstream_request_dropped() {
    let upstream = upstream(|_| ok_stream()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let request = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{{\"mod\r\nzz\r\n"
    );
    let answer = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
    assert_eq!(
        raw_status(&answer),
        400,
        "{}",
        String::from_utf8_lossy(&answer)
    );
    if upstream.connection_count() > 0 {
        upstream.wait_closed(0).await;
    }
    assert!(
        upstream.requests().is_empty(),
        "a broken body was completed"
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests_with("400", "cancelled"), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test]
async fn an_absolute_target_or_a_forged_host_never_sends_the_request_anywhere_but_the_upstream() {
    let upstream = upstream(|_| ok_stream()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let body = chat_request("m");
    for target in [
        format!("http://169.254.169.254{CHAT}?q=1"),
        format!("http://user:pw@evil.example:81{CHAT}?q=1"),
        format!("{CHAT}?q=1"),
    ] {
        let request = format!(
            "POST {target} HTTP/1.1\r\nhost: evil.example\r\nx-forwarded-host: evil.example\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let answer = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
        assert_eq!(raw_status(&answer), 200, "{target}");
    }
    let seen = upstream.requests();
    assert_eq!(seen.len(), 3);
    for request in &seen {
        assert_eq!(request.request_line(), format!("POST {CHAT}?q=1 HTTP/1.1"));
        assert_eq!(request.header("host"), [upstream.addr.to_string()]);
        // Not a hop-by-hop header: it is the upstream's to judge, and passes unchanged.
        assert_eq!(request.header("x-forwarded-host"), ["evil.example"]);
    }
}

#[tokio::test]
async fn header_values_that_are_not_utf8_pass_through_byte_for_byte_both_ways() {
    let upstream = upstream(|_| {
        vec![
            Step::Raw(b"HTTP/1.1 204 No Content\r\nx-bin: \xff\xfe\x80\r\n\r\n".to_vec()),
            Step::Close,
        ]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let request = b"GET /v1/models HTTP/1.1\r\nhost: t\r\nx-bin: caf\xe9 \xff\x80\r\nconnection: close\r\n\r\n";
    let answer = raw_exchange(proxy.proxy_addr(), request).await;
    assert_eq!(raw_status(&answer), 204);
    assert_eq!(
        count(&answer, b"\r\nx-bin: \xff\xfe\x80\r\n"),
        1,
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let seen = upstream.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        count(&seen[0].raw_head, b"\r\nx-bin: caf\xe9 \xff\x80\r\n"),
        1
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(
        m.get(
            family::REQUESTS.name,
            &[("api", "other"), ("status", "204"), ("outcome", "ok")]
        ),
        1.0
    );
}

#[tokio::test(start_paused = true)]
async fn hostile_model_names_never_grow_the_label_set_past_its_cap_or_forge_lines() {
    let upstream = upstream(|_| ok_stream()).await;
    let proxy = proxy(&upstream.url(), "max_models: 5\n").await;
    let client = client();
    let mut names: Vec<String> = vec![
        "evil\"} 1\n# TYPE forged counter\nforged_total 1\n".to_owned(),
        "line\nbreak".to_owned(),
        "tab\tand\u{7f}del".to_owned(),
        "x".repeat(201),
        "ünï©ødé-模型".to_owned(),
    ];
    names.extend((0..200).map(|i| format!("model-{i}")));
    for name in &names {
        let body = serde_json::json!({"model": name, "messages": [], "stream": true}).to_string();
        let got = send(&client, post(&proxy, CHAT, &body)).await;
        assert_eq!(got.status, 200);
    }
    // Not a string, not valid UTF-8, not JSON at all: no name, so the response's model counts.
    for body in [
        &b"{\"model\":42}"[..],
        b"{\"model\":\"\xff\xfe\"}",
        b"\x00\x01not json",
    ] {
        let request = http::Request::post(format!("http://{}{CHAT}", proxy.proxy_addr()))
            .body(http_body_util::Full::new(bytes::Bytes::from_static(body)))
            .expect("request");
        assert_eq!(send(&client, request).await.status, 200);
    }
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let total = (names.len() + 3) as f64;
    assert_eq!(m.get(family::REQUESTS.name, &[]), total);
    let models: std::collections::BTreeSet<&str> = m
        .text
        .lines()
        .filter(|l| l.starts_with("tokentap_requests_total{"))
        .filter_map(|l| l.split("model=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .collect();
    // The first five admissible names, and `other` for the rest: names with control characters (never
    // a real model's, and able to forge a log line), names over 200 bytes, names past the cap, and the
    // response's model `m` taken by the requests without a readable name.
    let expected: std::collections::BTreeSet<&str> = [
        "other",
        "ünï©ødé-模型",
        "model-0",
        "model-1",
        "model-2",
        "model-3",
    ]
    .into();
    assert_eq!(models, expected);
    for line in m.text.lines() {
        assert!(
            line.starts_with("tokentap_")
                || line.starts_with("# HELP tokentap_")
                || line.starts_with("# TYPE tokentap_"),
            "a forged line in the exposition: {line:?}"
        );
    }
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test]
async fn a_target_that_would_leave_the_upstream_path_prefix_is_refused_with_400_and_never_forwarded(
) {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let proxy = proxy(&format!("{}/openai/", upstream.url()), "").await;
    let targets = [
        "GET /../admin/secret",
        "GET /%2e%2e/admin/secret",
        "GET /.%2E/admin/secret",
        "GET /a/../../x",
        "GET /v1/./../../admin",
        "GET http://other.example/../admin",
        "GET /a\\..\\..\\admin",
        "GET /a%5C..%5c..%5Cadmin",
        "GET /..%2Fadmin",
        "GET /v1/x%2f%2e%2e%2f%2e%2e%2fadmin",
        "OPTIONS *",
    ];
    for target in targets {
        let request = format!("{target} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n");
        let answer = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
        let (head, body) = raw_split(&answer);
        assert_eq!(raw_status(&answer), 400, "{target}: {head}");
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains("invalid_request_error"), "{target}: {body}");
    }
    // The same over h2, where the target is the `:path` pseudo-header.
    let h2 = h2_client();
    let request = http::Request::get(format!("http://{}/../admin/secret", proxy.proxy_addr()))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    assert_eq!(send(&h2, request).await.status, 400);
    assert_eq!(
        upstream.connection_count(),
        0,
        "a target outside the prefix reached the upstream"
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests_with("400", "ok"), (targets.len() + 1) as f64);
}

#[tokio::test]
async fn a_clients_connection_header_cannot_strip_identity_headers_but_an_upstreams_still_strips() {
    let upstream = upstream(|_| {
        vec![Step::Raw(
            b"HTTP/1.1 200 OK\r\nconnection: x-internal-route\r\nx-internal-route: node-7\r\nx-kept: 1\r\ncontent-length: 2\r\n\r\n{}"
                .to_vec(),
        )]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    // What an auth gateway in front of tokentap added, and a client trying to have it removed.
    let request = "GET /v1/models HTTP/1.1\r\nhost: t\r\n\
        connection: Authorization, X-Forwarded-For, x-authenticated-user, keep-alive, close\r\n\
        authorization: Bearer from-gateway\r\nx-forwarded-for: 203.0.113.9\r\n\
        x-authenticated-user: alice\r\nkeep-alive: timeout=5\r\n\r\n";
    let answer = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
    let (head, body) = raw_split(&answer);
    assert_eq!(raw_status(&answer), 200, "{head}");
    assert_eq!(body, b"{}");
    let head = head.to_ascii_lowercase();
    assert!(!head.contains("x-internal-route"), "{head}");
    assert!(head.contains("\r\nx-kept: 1\r\n"), "{head}");
    let seen = &upstream.requests()[0];
    assert_eq!(seen.header("authorization"), ["Bearer from-gateway"]);
    assert_eq!(seen.header("x-forwarded-for"), ["203.0.113.9"]);
    assert_eq!(seen.header("x-authenticated-user"), ["alice"]);
    assert!(seen.header("keep-alive").is_empty(), "{}", seen.head);
    assert!(seen.header("connection").is_empty(), "{}", seen.head);
}

#[tokio::test]
async fn connect_and_transfer_codings_other_than_chunked_are_answered_501_and_never_forwarded() {
    let upstream = upstream(|_| ok_stream()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let body = chat_request("m");
    let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let cases: Vec<(&str, String)> = vec![
        (
            "CONNECT",
            "CONNECT 169.254.169.254:443 HTTP/1.1\r\nhost: 169.254.169.254:443\r\nconnection: close\r\n\r\n".to_owned(),
        ),
        (
            "gzip before chunked",
            format!("POST {CHAT} HTTP/1.1\r\nhost: t\r\ntransfer-encoding: gzip, chunked\r\nconnection: close\r\n\r\n{chunked}"),
        ),
        (
            "two transfer-encoding lines",
            format!("POST {CHAT} HTTP/1.1\r\nhost: t\r\ntransfer-encoding: identity\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{chunked}"),
        ),
    ];
    for (what, request) in &cases {
        let answer = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
        let (head, body) = raw_split(&answer);
        assert_eq!(raw_status(&answer), 501, "{what}: {head}");
        assert!(
            String::from_utf8_lossy(&body).contains("not_implemented"),
            "{what}"
        );
    }
    assert_eq!(
        upstream.connection_count(),
        0,
        "a refused request reached the upstream"
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests_with("501", "ok"), cases.len() as f64);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test]
async fn an_h2c_upgrade_request_is_forwarded_as_a_plain_request_without_upgrade() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let proxy = proxy(&upstream.url(), "").await;
    // Then a second request on the same connection: it stays an HTTP/1.1 connection. (A WebSocket
    // handshake is passed on instead: tests/websocket.rs.)
    let request = "GET /v1/models HTTP/1.1\r\nhost: t\r\nconnection: Upgrade, HTTP2-Settings\r\n\
        upgrade: h2c\r\nhttp2-settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n\
        GET /v1/models HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n";
    let answer = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
    let text = String::from_utf8_lossy(&answer);
    assert_eq!(count(&answer, b"HTTP/1.1 200 OK\r\n"), 2, "{text}");
    assert!(!text.to_ascii_lowercase().contains("upgrade"), "{text}");
    assert!(text.ends_with("{}"), "{text}");
    assert_eq!(upstream.requests().len(), 2);
    let seen = &upstream.requests()[0];
    assert!(seen.header("upgrade").is_empty(), "{}", seen.head);
    assert!(seen.header("http2-settings").is_empty(), "{}", seen.head);
    assert!(seen.header("connection").is_empty(), "{}", seen.head);
}

#[tokio::test]
async fn a_content_length_with_leading_zeros_goes_upstream_as_its_plain_decimal() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let request = "POST /v1/embeddings HTTP/1.1\r\nhost: t\r\ncontent-length: 007\r\nconnection: close\r\n\r\n{\"a\":1}";
    let answer = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
    assert_eq!(raw_status(&answer), 200);
    let seen = &upstream.requests()[0];
    assert_eq!(seen.header("content-length"), ["7"], "{}", seen.head);
    assert_eq!(seen.body, b"{\"a\":1}");
}

#[tokio::test]
async fn an_h2_connect_is_answered_501_and_never_forwarded() {
    let upstream = upstream(|_| ok_stream()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let (mut h2, _conn) = open_h2(&proxy).await;
    let request = http::Request::connect("169.254.169.254:443")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let response = h2.send_request(request).await.expect("h2 response");
    assert_eq!(response.status(), 501);
    assert_eq!(upstream.connection_count(), 0);
}
