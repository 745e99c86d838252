//! Fault injection: an upstream that resets, closes, trickles bytes one at a time or sends garbage, and
//! malformed HTTP from it. Each case says what the client saw, what the upstream saw (and when tokentap
//! closed its connection) and what `/metrics` says; in every case the in-flight gauge returns to 0 and
//! nothing panics. (A client that vanishes at each phase: `cancellation.rs`.)

use crate::support;

use support::*;
use tokentap::record::metrics::family;

const CHAT: &str = "/v1/chat/completions";

fn requests(m: &Metrics, status: &str, outcome: &str) -> f64 {
    m.requests_with(status, outcome)
}

fn all_requests(m: &Metrics) -> f64 {
    m.get(family::REQUESTS.name, &[])
}

fn error_type(body: &[u8]) -> String {
    let json: serde_json::Value = serde_json::from_slice(body).expect("error body is JSON");
    json["error"]["type"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

// ---- the upstream misbehaves --------------------------------------------------------------------

#[tokio::test]
async fn upstream_reset_before_the_head_answers_502_and_counts_upstream_error() {
    let upstream = upstream(|_| vec![Step::Sleep(ms(10)), Step::Reset]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let body = chat_request("m");
    let got = send(&client(), post(&proxy, CHAT, &body)).await;
    assert_eq!(got.status, 502);
    assert_eq!(error_type(&got.body), "upstream_error");
    let seen = upstream.requests();
    assert_eq!(
        seen.len(),
        1,
        "the upstream got the request once, not retried"
    );
    assert_eq!(seen[0].body, body.as_bytes());
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests("unadmitted", "502", "upstream_error"), 1.0);
    assert_eq!(all_requests(&m), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test]
async fn upstream_reset_mid_stream_breaks_the_client_stream_after_every_byte_before_it() {
    let mut faults = token_stream(0, ms(50));
    faults.truncate(2);
    let mut expected = ROLE_CHUNK.as_bytes().to_vec();
    for text in ["a", "b"] {
        let event = content_chunk(text);
        faults.push(chunk(event.as_bytes()));
        expected.extend_from_slice(event.as_bytes());
    }
    faults.push(Step::Sleep(ms(20)));
    faults.push(Step::Reset);
    let upstream = upstream(move |_| faults.clone()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, expected);
    assert!(got.end.is_err(), "a reset stream must not end cleanly");
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(requests(&m, "200", "upstream_error"), 1.0);
    assert_eq!(all_requests(&m), 1.0);
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, &[]), 2.0);
    assert_eq!(m.get(&family::TTFT.count(), &[]), 1.0);
    assert_eq!(m.get(&family::E2E.count(), &[]), 0.0);
    assert_eq!(m.get(family::GOODPUT.name, &[]), 0.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test]
async fn upstream_closing_without_an_answer_gives_502() {
    let upstream = upstream(|_| vec![Step::Close]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 502);
    assert_eq!(upstream.requests().len(), 1);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(requests(&m, "502", "upstream_error"), 1.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn upstream_trickling_one_byte_at_a_time_is_forwarded_whole_and_metered_exactly() {
    // The whole answer, head included, one byte a millisecond.
    let events = [
        ROLE_CHUNK.to_owned(),
        content_chunk("a"),
        content_chunk("b"),
        content_chunk("c"),
        usage_chunk(4, 3),
        DONE.to_owned(),
    ];
    let body: Vec<u8> = events.concat().into_bytes();
    let mut raw =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    let mut first_token_end = 0;
    for (i, event) in events.iter().enumerate() {
        raw.extend_from_slice(format!("{:x}\r\n", event.len()).as_bytes());
        raw.extend_from_slice(event.as_bytes());
        if i == 1 {
            first_token_end = raw.len() - 1; // the blank line that completes the first content event
        }
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let upstream = upstream(move |_| vec![Step::Trickle(raw.clone(), ms(1))]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, body);
    assert_eq!(got.end, Ok(()));
    assert!(got.frames.len() > 100, "bytes were held back and batched");
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(requests(&m, "200", "ok"), 1.0);
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, &[]), 3.0);
    assert_eq!(m.get(family::INPUT_TOKENS.name, &[]), 4.0);
    assert_eq!(m.get(&family::ITL.count(), &[]), 2.0);
    // Byte k is written k ms after the request: TTFT is the arrival of the first token's last byte.
    let ttft = m.get(&family::TTFT.sum(), &[]);
    let expected = first_token_end as f64 / 1000.0;
    assert!(
        (ttft - expected).abs() <= 0.0015,
        "TTFT {ttft}, expected {expected}"
    );
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

#[tokio::test]
async fn garbage_instead_of_a_response_head_gives_502() {
    for garbage in [
        &b"\x00\xff\xfeSSH-2.0-OpenSSH\r\n\r\n"[..],
        b"HTTP/1.1 2OO OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbad header line\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-a: b\x00c\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-a: b\rx-injected: 1\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 7\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
    ] {
        let upstream = upstream(move |_| vec![Step::Raw(garbage.to_vec())]).await;
        let proxy = proxy(&upstream.url(), "").await;
        let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
        let shown = String::from_utf8_lossy(garbage);
        assert_eq!(got.status, 502, "{shown:?}");
        assert_eq!(error_type(&got.body), "upstream_error", "{shown:?}");
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        assert_eq!(requests(&m, "502", "upstream_error"), 1.0, "{shown:?}");
        assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    }
}

#[tokio::test]
async fn broken_framing_mid_body_breaks_the_client_stream() {
    let good = content_chunk("a");
    let cases: Vec<(&str, Vec<Step>)> = vec![
        (
            "invalid chunk size",
            vec![
                sse_head(),
                chunk(good.as_bytes()),
                Step::Raw(b"zz\r\nxx\r\n".to_vec()),
            ],
        ),
        (
            "content-length longer than the body",
            vec![
                Step::Raw(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{good}",
                        good.len() + 100
                    )
                    .into_bytes(),
                ),
                Step::Sleep(ms(10)),
                Step::Close,
            ],
        ),
        (
            "chunked body cut before its last chunk",
            vec![
                sse_head(),
                chunk(good.as_bytes()),
                Step::Sleep(ms(10)),
                Step::Close,
            ],
        ),
    ];
    for (what, faults) in cases {
        let upstream = upstream(move |_| faults.clone()).await;
        let proxy = proxy(&upstream.url(), "").await;
        let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
        assert_eq!(got.status, 200, "{what}");
        assert_eq!(got.body, good.as_bytes(), "{what}");
        assert!(got.end.is_err(), "{what}: the client saw a clean end");
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        assert_eq!(requests(&m, "200", "upstream_error"), 1.0, "{what}");
        assert_eq!(m.get(family::OUTPUT_TOKENS.name, &[]), 1.0, "{what}");
        assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0, "{what}");
    }
}

#[tokio::test]
async fn upstream_sending_both_content_length_and_chunked_is_read_as_chunked_and_the_length_dropped(
) {
    // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and an intermediary forwarding such a
    // message must remove the Content-Length first.
    let events = format!("{}{}{DONE}", content_chunk("a"), content_chunk("b"));
    let mut raw = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 7\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    if let Step::Raw(bytes) = chunk(events.as_bytes()) {
        raw.extend_from_slice(&bytes);
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let upstream = upstream(move |_| vec![Step::Raw(raw.clone())]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let answer = raw_exchange(
        proxy.proxy_addr(),
        format!(
            "POST {CHAT} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
            chat_request("m").len(),
            chat_request("m")
        )
        .as_bytes(),
    )
    .await;
    let (head, body) = raw_split(&answer);
    assert_eq!(raw_status(&answer), 200, "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(!lower.contains("content-length"), "{head}");
    assert!(lower.contains("transfer-encoding: chunked"), "{head}");
    assert_eq!(dechunk(&body).as_deref(), Some(events.as_bytes()));
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(requests(&m, "200", "ok"), 1.0);
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, &[]), 2.0);
}

#[tokio::test]
async fn a_body_that_is_not_an_event_stream_under_an_sse_content_type_is_forwarded_and_skipped() {
    let cases: [&[u8]; 4] = [
        br#"{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":9}}"#,
        b"{\"a\":1}\n{\"b\":2}\n",
        b"\x00\x01\x02\xff\xfe binary \x00",
        b"<html><body>502 Bad Gateway</body></html>\r\n\r\n",
    ];
    for body in cases {
        let upstream = upstream(move |_| vec![sse_head(), chunk(body), last_chunk()]).await;
        let proxy = proxy(&upstream.url(), "").await;
        let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
        let shown = String::from_utf8_lossy(body);
        assert_eq!(got.body, body, "{shown:?}");
        assert_eq!(got.end, Ok(()), "{shown:?}");
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        assert_eq!(requests(&m, "200", "ok"), 1.0, "{shown:?}");
        assert_eq!(
            m.get(
                family::METERING_SKIPPED.name,
                &[("api", "chat"), ("reason", "malformed_event")]
            ),
            1.0,
            "{shown:?}"
        );
        assert_eq!(m.get(family::OUTPUT_TOKENS.name, &[]), 0.0, "{shown:?}");
        assert_eq!(m.get(&family::TTFT.count(), &[]), 0.0);
        assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
    }
}

#[tokio::test]
async fn a_data_line_of_many_megabytes_is_forwarded_whole_with_metering_off() {
    const LINE: usize = 8 << 20;
    let mut body = content_chunk("a").into_bytes();
    body.extend_from_slice(b"data: {\"choices\":[{\"delta\":{\"content\":\"");
    body.resize(body.len() + LINE, b'z');
    body.extend_from_slice(b"\"}}]}\n\n");
    body.extend_from_slice(content_chunk("b").as_bytes());
    body.extend_from_slice(DONE.as_bytes());
    let script: Vec<Step> = std::iter::once(sse_head())
        .chain(body.chunks(64 << 10).map(chunk))
        .chain(std::iter::once(last_chunk()))
        .collect();
    let upstream = upstream(move |_| script.clone()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.body.len(), body.len());
    assert!(got.body == body, "the bytes changed on the way");
    assert_eq!(got.end, Ok(()));
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(requests(&m, "200", "ok"), 1.0);
    assert_eq!(
        m.get(
            family::METERING_SKIPPED.name,
            &[("reason", "event_too_large")]
        ),
        1.0
    );
    // The token before the huge line was seen; no count is guessed for the rest.
    assert_eq!(m.get(&family::TTFT.count(), &[]), 1.0);
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, &[]), 0.0);
}

#[tokio::test]
async fn nul_bytes_and_invalid_utf8_in_events_are_forwarded_and_counted_as_skipped() {
    for bad in [
        &b"data: {\"choices\":[{\"delta\":{\"content\":\"a\x00b\"}}]}\n\n"[..],
        b"data: \x00\n\n",
        b"data: {\"choices\":[{\"delta\":{\"content\":\"\xc3\x28\"}}]}\n\n",
        b"\x00data: x\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"\xed\xa0\x80\"}}]}\n\n",
    ] {
        let mut body = content_chunk("a").into_bytes();
        body.extend_from_slice(bad);
        body.extend_from_slice(content_chunk("b").as_bytes());
        let script = vec![sse_head(), chunk(&body), last_chunk()];
        let upstream = upstream(move |_| script.clone()).await;
        let proxy = proxy(&upstream.url(), "").await;
        let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
        let shown = String::from_utf8_lossy(bad);
        assert_eq!(got.body, body, "{shown:?}");
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        assert_eq!(requests(&m, "200", "ok"), 1.0, "{shown:?}");
        assert_eq!(
            m.get(
                family::METERING_SKIPPED.name,
                &[("reason", "malformed_event")]
            ),
            1.0,
            "{shown:?}"
        );
        assert_eq!(m.get(&family::TTFT.count(), &[]), 1.0);
        assert_eq!(m.get(family::OUTPUT_TOKENS.name, &[]), 0.0);
    }
}

#[tokio::test]
async fn a_transfer_coding_other_than_chunked_is_kept_for_the_client_to_decode() {
    // tokentap decodes only `chunked`: the bytes under any other transfer coding pass as they are, so the
    // client must still be told about that coding, or it would take gzip bytes for the body.
    let gzip_bytes = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03not really gzip".to_vec();
    let mut raw = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: gzip, chunked\r\n\r\n".to_vec();
    if let Step::Raw(bytes) = chunk(&gzip_bytes) {
        raw.extend_from_slice(&bytes);
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let upstream = upstream(move |_| vec![Step::Raw(raw.clone())]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let answer = raw_exchange(proxy.proxy_addr(), GET_MODELS_AND_CLOSE).await;
    let (head, body) = raw_split(&answer);
    assert_eq!(raw_status(&answer), 200, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: gzip, chunked"),
        "{head}"
    );
    assert_eq!(dechunk(&body), Some(gzip_bytes));
}
