//! An upstream that answers what HTTP does not allow, or what tokentap cannot pass on: a status HTTP does
//! not define, a switch of protocols nobody asked for, informational (1xx) answers before the final one, a
//! zero-padded `Content-Length`. The client always gets a well-formed answer, and `/metrics` never counts
//! such an answer `ok` nor makes a label of a status that does not exist.

use crate::support;

use support::*;
use tokentap::record::metrics::family;

const CHAT: &str = "/v1/chat/completions";

#[tokio::test]
async fn an_upstream_status_http_does_not_define_is_answered_502_and_counted_upstream_error() {
    let upstream = upstream(|_| {
        vec![Step::Raw(
            b"HTTP/1.1 999 Whatever\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
                .to_vec(),
        )]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 502);
    let body = String::from_utf8_lossy(&got.body);
    assert!(body.contains("status 999"), "{body}");
    assert!(body.contains("upstream_error"), "{body}");
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests_with("502", "upstream_error"), 1.0);
    assert!(!m.text.contains("\"999\""), "{}", m.text);
    assert_eq!(m.get(family::GOODPUT.name, &[]), 0.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test]
async fn an_unrequested_101_is_answered_502_and_the_upstream_connection_closed() {
    let upstream = upstream(|_| {
        vec![
            Step::Raw(
                b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n\x81\x05hello"
                    .to_vec(),
            ),
            Step::Sleep(ms(5_000)),
        ]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    // A client asking for an upgrade other than WebSocket: tokentap removes `Upgrade`, so the upstream
    // was asked for none.
    let request = "GET /v1/realtime HTTP/1.1\r\nhost: t\r\nconnection: upgrade, close\r\nupgrade: h2c\r\n\r\n";
    let answer = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
    let (head, body) = raw_split(&answer);
    assert_eq!(raw_status(&answer), 502, "{head}");
    assert!(
        String::from_utf8_lossy(&body).contains("no upgrade was asked for"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert!(!head.to_ascii_lowercase().contains("upgrade"), "{head}");
    assert!(upstream.requests()[0].header("upgrade").is_empty());
    upstream.wait_closed(0).await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests_with("502", "upstream_error"), 1.0);
    assert_eq!(m.get(family::REQUESTS.name, &[("outcome", "ok")]), 0.0);
}

#[tokio::test]
async fn informational_answers_are_dropped_and_the_final_response_arrives_intact() {
    let stream = format!("{}{DONE}", content_chunk("a"));
    let final_body = stream.clone();
    let upstream = upstream(move |_| {
        let mut steps = vec![
            Step::Raw(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec()),
            Step::Raw(
                b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n".to_vec(),
            ),
            sse_head(),
        ];
        steps.push(chunk(final_body.as_bytes()));
        steps.push(last_chunk());
        steps
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let request = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
        chat_request("m").len(),
        chat_request("m")
    );
    let answer = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
    let (head, body) = raw_split(&answer);
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert_eq!(count(&answer, b"HTTP/1.1 "), 1, "{head}");
    assert!(!head.to_ascii_lowercase().contains("link:"), "{head}");
    assert_eq!(dechunk(&body).as_deref(), Some(stream.as_bytes()));
    // The same over h2.
    let h2 = h2_client();
    let got = send(&h2, post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, stream.as_bytes());
    assert_eq!(got.end, Ok(()));
    assert!(got.headers.get("link").is_none());
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests_with("200", "ok"), 2.0);
    assert!(!m.text.contains("\"103\""));
}

#[tokio::test]
async fn an_upstream_content_length_with_leading_zeros_reaches_the_client_as_its_plain_decimal() {
    let upstream = upstream(|_| {
        vec![Step::Raw(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 0002\r\n\r\n{}"
                .to_vec(),
        )]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let answer = raw_exchange(proxy.proxy_addr(), GET_MODELS_AND_CLOSE).await;
    let (head, body) = raw_split(&answer);
    assert!(head.contains("\r\ncontent-length: 2\r\n"), "{head}");
    assert_eq!(body, b"{}");
}
