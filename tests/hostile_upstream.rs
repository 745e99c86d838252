//! An upstream that answers what HTTP does not allow, or what tokentap cannot pass on: a status HTTP does
//! not define, a switch of protocols nobody asked for, informational (1xx) answers before the final one, a
//! zero-padded `Content-Length`. The client always gets a well-formed answer, and `/metrics` never counts
//! such an answer `ok` nor makes a label of a status that does not exist.

mod support;

use support::*;

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
    assert_eq!(
        m.get(
            "tokentap_requests_total",
            &[("status", "502"), ("outcome", "upstream_error")]
        ),
        1.0
    );
    assert!(!m.text.contains("\"999\""), "{}", m.text);
    assert_eq!(m.get("tokentap_goodput_requests_total", &[]), 0.0);
    assert_eq!(m.get("tokentap_requests_in_flight", &[]), 0.0);
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
    // A client asking for an upgrade: tokentap removes `Upgrade`, so the upstream was asked for none.
    let request = "GET /v1/realtime HTTP/1.1\r\nhost: t\r\nconnection: upgrade, close\r\nupgrade: websocket\r\n\r\n";
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
    assert_eq!(
        m.get(
            "tokentap_requests_total",
            &[("status", "502"), ("outcome", "upstream_error")]
        ),
        1.0
    );
    assert_eq!(m.get("tokentap_requests_total", &[("outcome", "ok")]), 0.0);
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
    assert_eq!(
        m.get(
            "tokentap_requests_total",
            &[("status", "200"), ("outcome", "ok")]
        ),
        2.0
    );
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
    let answer = raw_exchange(
        proxy.proxy_addr(),
        b"GET /v1/models HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n",
    )
    .await;
    let (head, body) = raw_split(&answer);
    assert!(head.contains("\r\ncontent-length: 2\r\n"), "{head}");
    assert_eq!(body, b"{}");
}

/// A response whose head is `head_bytes` long (one padding header), then a body of `body` bytes written
/// in one burst.
fn big_head_answer(head_bytes: usize, body: usize) -> Vec<u8> {
    let start = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {body}\r\nx-pad: "
    );
    let pad = head_bytes - start.len() - 4;
    let mut answer = start.into_bytes();
    answer.extend(std::iter::repeat_n(b'p', pad));
    answer.extend_from_slice(b"\r\n\r\n");
    answer.extend((0..body).map(|i| b"0123456789abcdef"[i % 16]));
    answer
}

#[tokio::test]
async fn a_response_head_over_max_response_header_bytes_is_answered_502_naming_the_limit() {
    let upstream = upstream(|_| vec![Step::Raw(big_head_answer(20_000, 10))]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 502);
    let body = String::from_utf8_lossy(&got.body);
    assert!(
        body.contains("larger than 16384 bytes (limits.max_response_header_bytes)"),
        "{body}"
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let labels = [("status", "502"), ("outcome", "upstream_error")];
    assert_eq!(m.get("tokentap_requests_total", &labels), 1.0);
    assert_eq!(m.get("tokentap_requests_in_flight", &[]), 0.0);

    // Raised, the same head passes with every byte.
    let raised = support::proxy(
        &upstream.url(),
        "limits: {max_response_header_bytes: 32KiB}",
    )
    .await;
    let got = send(&client(), post(&raised, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 200);
    assert!(got.headers["x-pad"].len() > 19_900);
    assert_eq!(got.body, b"0123456789");
}

#[tokio::test]
async fn heads_under_the_limit_and_bodies_far_larger_than_the_read_buffer_pass_whole() {
    // A 15 KiB head just fits the default 16 KiB buffer; the 1 MiB body written in one burst is read
    // through that buffer many times.
    let answer = big_head_answer(15 << 10, 1 << 20);
    let sent = answer.clone();
    let upstream = upstream(move |_| vec![Step::Raw(sent.clone())]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let request = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: t\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
        chat_request("m").len(),
        chat_request("m")
    );
    let got = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
    let (head, body) = raw_split(&got);
    assert_eq!(raw_status(&got), 200, "{head}");
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(body, answer[split..]);
    assert!(
        head.contains(&"p".repeat(15_000)),
        "the padding header arrived whole"
    );
}
