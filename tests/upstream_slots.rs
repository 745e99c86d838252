//! Who may hold tokentap's upstream slots (`limits.max_upstream_connections`). A request body is read
//! whole before a slot is taken (up to `limits.hold_request_body_bytes`), so clients that upload slowly
//! hold none; one client connection holds at most `limits.max_upstream_per_connection`, so a few h2
//! connections cannot take every slot; and other clients are served meanwhile.

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use support::*;
use tokentap::record::metrics::family;
use tokio::sync::mpsc;

const CHAT: &str = "/v1/chat/completions";

/// The slow-upload attack, scaled down: 4 h2 connections × 8 streams that each send one byte of body and
/// stall, against 8 upstream slots. None of them takes a slot (their bodies are being held), so another
/// client is served at once, and the upstream never sees the stalled requests.
#[tokio::test]
async fn h2_streams_that_upload_slowly_hold_no_upstream_slot() {
    let upstream = upstream(|_| ok_stream()).await;
    let yaml = "limits:\n  max_upstream_connections: 8\n  max_upstream_per_connection: 8\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let mut feeds = Vec::new();
    let mut pending = Vec::new();
    for _ in 0..4 {
        let (sender, _conn) = open_h2::<Fed>(&proxy).await;
        for _ in 0..8 {
            let (feed, body) = mpsc::channel(1);
            feed.send(Bytes::from_static(b"{")).await.expect("feed");
            let request = http::Request::post(format!("http://{}{CHAT}", proxy.proxy_addr()))
                .header("content-type", "application/json")
                .body(Fed(body))
                .expect("request");
            let mut sender = sender.clone();
            pending.push(tokio::spawn(
                async move { sender.send_request(request).await },
            ));
            feeds.push(feed);
        }
    }
    tokio::time::sleep(ms(300)).await;
    for i in 0..10 {
        let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
        assert_eq!(got.status, 200, "request {i} of another client");
    }
    assert_eq!(
        upstream.requests().len(),
        10,
        "only the other client's requests"
    );
    assert_eq!(upstream.connection_count(), 1);
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::UPSTREAM_REFUSED.name, &[]), 0.0);
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 32.0);
    drop(feeds);
    for request in pending {
        request.abort();
    }
}

/// One h2 connection with ten streams waiting on slow answers gets its share of the upstream slots (3);
/// the rest are answered 503 at once and counted, while another connection is served beside it.
#[tokio::test]
async fn one_h2_connection_gets_only_its_share_of_the_upstream_slots() {
    let upstream = upstream(|request| {
        if String::from_utf8_lossy(&request.body).contains("\"other\"") {
            ok_stream()
        } else {
            slow_stream(ms(800))
        }
    })
    .await;
    let yaml = "limits:\n  max_upstream_connections: 20\n  max_upstream_per_connection: 3\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let (sender, _conn) = open_h2(&proxy).await;
    let streams: Vec<_> = (0..10)
        .map(|_| {
            let mut sender = sender.clone();
            let request = post(&proxy, CHAT, &chat_request("m"));
            tokio::spawn(async move {
                let response = sender.send_request(request).await.expect("head");
                let status = response.status().as_u16();
                let retry = response.headers().get("retry-after").cloned();
                let body = http_body_util::BodyExt::collect(response.into_body())
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                (status, retry, body)
            })
        })
        .collect();
    tokio::time::sleep(ms(200)).await;
    let other = send(&h2_client(), post(&proxy, CHAT, &chat_request("other"))).await;
    assert_eq!(other.status, 200, "another connection is served");
    let mut statuses = Vec::new();
    for stream in streams {
        let (status, retry, body) = stream.await.expect("task");
        if status == 503 {
            assert_eq!(retry.as_ref().map(|v| v.as_bytes()), Some(&b"1"[..]));
            let json: serde_json::Value = serde_json::from_slice(&body).expect("JSON error");
            assert_eq!(json["error"]["type"], "upstream_overloaded");
            let message = json["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("limits.max_upstream_per_connection"),
                "{message}"
            );
        }
        statuses.push(status);
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 503, 503, 503, 503, 503, 503, 503]);
    assert_eq!(upstream.requests().len(), 4);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::CONNECTION_SHARE_REFUSED.name, &[]), 7.0);
    assert_eq!(m.get(family::UPSTREAM_REFUSED.name, &[]), 0.0);
    let refused = [("status", "503"), ("outcome", "ok")];
    assert_eq!(m.get(family::REQUESTS.name, &refused), 7.0);
}

/// A body larger than `limits.hold_request_body_bytes` streams (its first part held until the size is
/// passed), and reaches the upstream whole and unchanged.
#[tokio::test]
async fn a_body_above_the_hold_size_streams_through_unchanged() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let proxy = proxy(
        &upstream.url(),
        "limits:\n  hold_request_body_bytes: 4KiB\n",
    )
    .await;
    let big = format!(
        "{{\"model\":\"m\",\"messages\":[{{\"role\":\"user\",\"content\":\"{}\"}}]}}",
        "y".repeat(100_000)
    );
    let got = send(&client(), post(&proxy, CHAT, &big)).await;
    assert_eq!(got.status, 200);
    assert_eq!(upstream.requests()[0].body, big.as_bytes());
    let small = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(small.status, 200);
    assert_eq!(upstream.requests()[1].body, chat_request("m").as_bytes());
}

/// The answer to a request on its own h2 connection, awaited in a task.
type Parked = tokio::task::JoinHandle<hyper::Result<http::Response<hyper::body::Incoming>>>;

/// Opens an h2 stream without a declared length whose body sends 1,500 bytes and stays unfinished,
/// holding that much of the held-bytes budget. Returns the body's feed (drop it to end the body) and
/// the task awaiting the stream's answer.
async fn park_an_unfinished_body(proxy: &tokentap::Running) -> (mpsc::Sender<Bytes>, Parked) {
    let (mut sender, _conn) = open_h2::<Fed>(proxy).await;
    let (feed, body) = mpsc::channel(1);
    feed.send(Bytes::from(vec![b' '; 1500]))
        .await
        .expect("feed");
    let request = http::Request::post(format!("http://{}{CHAT}", proxy.proxy_addr()))
        .body(Fed(body))
        .expect("request");
    (
        feed,
        tokio::spawn(async move { sender.send_request(request).await }),
    )
}

/// When a client's held bytes would pass its share of `budgets.held_bodies`, its body waits for room
/// instead of streaming onto an upstream slot: nothing of it goes upstream until the client's other
/// body is sent and its budget given back, then it is held whole, sent and answered. (Before the
/// budget, it streamed: its head went upstream before its body was whole, and such uploads took every
/// slot.) Another client never waits behind it: tests/governor.rs.
#[tokio::test]
async fn a_body_with_no_room_in_the_held_bytes_budget_waits_for_it_and_goes_upstream_whole() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let yaml =
        "limits:\n  hold_request_body_bytes: 2KiB\nbudgets: {held_bodies_per_client: 2KiB}\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    // One h2 stream holds the client's whole share with an unfinished body.
    let (feed, parked) = park_an_unfinished_body(&proxy).await;
    tokio::time::sleep(ms(200)).await;
    let body = format!("{{\"model\":\"m\",\"pad\":\"{}\"}}", "z".repeat(1000));
    let head = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let mut stream = raw_send(proxy.proxy_addr(), head.as_bytes()).await;
    stream.write_all(body.as_bytes()).await.expect("body");
    tokio::time::sleep(ms(300)).await;
    assert_eq!(
        upstream.connection_count(),
        0,
        "a body with no room in the budget went upstream"
    );
    // The first body ends: it is sent and answered, and its budget is given back to the waiting one.
    feed.send(Bytes::from_static(b"{}")).await.expect("feed");
    drop(feed);
    let first = tokio::time::timeout(Duration::from_secs(5), parked)
        .await
        .expect("the first request is answered")
        .expect("task")
        .expect("response");
    assert_eq!(first.status(), 200);
    let mut answer = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut answer))
        .await
        .expect("the waiting request is answered")
        .expect("answer");
    assert_eq!(&answer, b"HTTP/1.1 200");
    let bodies: Vec<Vec<u8>> = upstream.requests().into_iter().map(|r| r.body).collect();
    assert!(
        bodies.contains(&body.into_bytes()),
        "sent whole and unchanged"
    );
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::HELD_BYTES_WAITED.name, &[]), 1.0);
    assert_eq!(m.get(family::HELD_BYTES_REFUSED.name, &[]), 0.0);
}

/// A large held body on a reused connection keeps a copy only for the keep-alive race (a close within
/// 100 ms of its last byte): once that is over, the copy and its share of the held-bytes budget go,
/// instead of waiting for the answer's head, which a non-streamed generation sends only at its end.
/// Here the first answer takes 1.5 s, and a second large body, which the budget has no room for while
/// the first's copy is kept, reaches the upstream long before it (before, only after it).
#[tokio::test]
async fn a_large_held_body_gives_its_budget_back_once_it_can_no_longer_be_sent_again() {
    let upstream = upstream(|r| match r.body.len() > 1000 {
        true => vec![Step::Sleep(ms(1500)), json_response(200, "OK", "{}")],
        false => vec![json_response(200, "OK", "{}")],
    })
    .await;
    let yaml =
        "limits:\n  hold_request_body_bytes: 300KiB\nbudgets: {held_bodies_per_client: 300KiB}\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let c = client();
    // A connection to reuse.
    assert_eq!(send(&c, post(&proxy, CHAT, "{}")).await.status, 200);
    let big = format!("{{\"model\":\"m\",\"pad\":\"{}\"}}", "z".repeat(200_000));
    let started = std::time::Instant::now();
    let (one, two) = (c.clone(), c.clone());
    let first_request = post(&proxy, CHAT, &big);
    let first = tokio::spawn(async move { send(&one, first_request).await });
    tokio::time::sleep(ms(300)).await;
    let second_request = post(&proxy, CHAT, &big);
    let second = tokio::spawn(async move { send(&two, second_request).await });
    let mut arrived = None;
    for _ in 0..100 {
        if upstream.requests().len() == 3 {
            arrived = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(ms(10)).await;
    }
    let arrived = arrived.expect("the second large body reached the upstream");
    assert!(
        arrived < ms(1200),
        "the second large body reached the upstream after {arrived:?}: the first's copy held the budget"
    );
    for answer in [first, second] {
        assert_eq!(answer.await.expect("task").status, 200);
    }
}

/// A body that finds no room in its client's share of the held-bytes budget within
/// `timeouts.request_body_idle` (no byte of it is read meanwhile) is answered `503` with
/// `Retry-After: 1`, counted, and never reaches the upstream; once the share has room, the next
/// request is served.
#[tokio::test]
async fn a_body_that_finds_no_room_in_time_is_answered_503_and_never_sent() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let yaml = "timeouts:\n  request_body_idle: 300ms\n\
                limits:\n  hold_request_body_bytes: 2KiB\n\
                budgets: {held_bodies_per_client: 2KiB}\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let (feed, parked) = park_an_unfinished_body(&proxy).await;
    // It keeps sending a byte now and then: a slow body, never idle, holding the client's share.
    let trickle = tokio::spawn(async move {
        for _ in 0..30 {
            tokio::time::sleep(ms(100)).await;
            if feed.send(Bytes::from_static(b" ")).await.is_err() {
                break;
            }
        }
    });
    tokio::time::sleep(ms(100)).await;
    let refused = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(refused.status, 503);
    assert_eq!(
        refused.headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    assert!(String::from_utf8_lossy(&refused.body).contains("budgets.held_bodies"));
    assert!(upstream.requests().is_empty());
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::HELD_BYTES_REFUSED.name, &[]), 1.0);
    assert_eq!(m.get(family::HELD_BYTES_WAITED.name, &[]), 1.0);
    // The slow body stops and is cut for going idle: its budget is given back.
    trickle.abort();
    let _ = parked.await;
    let served = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(served.status, 200);
}

/// A body larger than the hold size streams and holds an upstream slot while its client uploads it:
/// one client address may have `limits.max_streamed_uploads_per_client` such uploads unfinished at once.
/// A third is answered `503` at once, never sent; once one upload is finished, another is taken.
#[tokio::test]
async fn a_client_address_has_at_most_its_share_of_unfinished_streamed_uploads() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let yaml = "limits:\n  hold_request_body_bytes: 1KiB\n  max_streamed_uploads_per_client: 2\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let body = format!("{{\"model\":\"m\",\"pad\":\"{}\"}}", "z".repeat(4000));
    let (first, rest) = body.as_bytes().split_at(2000);
    let head = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let mut uploading = Vec::new();
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(proxy.proxy_addr())
            .await
            .expect("connect");
        stream.write_all(head.as_bytes()).await.expect("head");
        stream.write_all(first).await.expect("first half");
        uploading.push(stream);
    }
    for _ in 0..50 {
        if upstream.connection_count() == 2 {
            break;
        }
        tokio::time::sleep(ms(20)).await;
    }
    assert_eq!(
        upstream.connection_count(),
        2,
        "both uploads stream upstream"
    );
    let mut third = tokio::net::TcpStream::connect(proxy.proxy_addr())
        .await
        .expect("connect");
    third.write_all(head.as_bytes()).await.expect("head");
    third.write_all(first).await.expect("first half");
    let mut answer = vec![0u8; 12];
    tokio::time::timeout(Duration::from_secs(5), third.read_exact(&mut answer))
        .await
        .expect("the third is answered at once")
        .expect("read");
    assert_eq!(&answer, b"HTTP/1.1 503");
    assert_eq!(
        upstream.connection_count(),
        2,
        "the third never went upstream"
    );
    // One upload finishes: its client's place is free again.
    let mut done = uploading.remove(0);
    done.write_all(rest).await.expect("the rest");
    let mut answer = [0u8; 12];
    done.read_exact(&mut answer).await.expect("answer");
    assert_eq!(&answer, b"HTTP/1.1 200");
    let mut next = tokio::net::TcpStream::connect(proxy.proxy_addr())
        .await
        .expect("connect");
    next.write_all(head.as_bytes()).await.expect("head");
    next.write_all(body.as_bytes()).await.expect("body");
    next.read_exact(&mut answer).await.expect("answer");
    assert_eq!(&answer, b"HTTP/1.1 200");
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::UPLOADS_PER_CLIENT_REFUSED.name, &[]), 1.0);
}

/// A client that sends `Expect: 100-continue` waits for `100 Continue` before its body: tokentap, which
/// reads the body whole first, sends it at once, and the request is answered.
#[tokio::test]
async fn a_client_waiting_for_100_continue_gets_it_and_is_answered() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let body = chat_request("m");
    let head = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let mut stream = raw_send(proxy.proxy_addr(), head.as_bytes()).await;
    let mut interim = [0u8; 25];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut interim))
        .await
        .expect("no 100 Continue")
        .expect("read");
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    stream.write_all(body.as_bytes()).await.expect("body");
    let mut answer = [0u8; 12];
    stream.read_exact(&mut answer).await.expect("answer");
    assert_eq!(&answer, b"HTTP/1.1 200");
    assert_eq!(upstream.requests()[0].body, body.as_bytes());
}

/// Holding a body moves nothing in the timeline: TTFT starts when the request head arrives, so a body
/// that takes 300 ms to come is 300 ms of the client's wait for its first token, and the request's E2E
/// holds it too.
#[tokio::test]
async fn ttft_starts_at_the_head_while_the_body_is_held() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = upstream(|_| ok_stream()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let body = chat_request("m");
    let head = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let mut stream = raw_send(proxy.proxy_addr(), head.as_bytes()).await;
    tokio::time::sleep(ms(300)).await;
    assert!(
        upstream.requests().is_empty(),
        "the request went upstream before its body was whole"
    );
    stream.write_all(body.as_bytes()).await.expect("body");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
        .await
        .expect("answer within 5 s")
        .expect("read");
    assert_eq!(raw_status(&answer), 200);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let ttft = family::TTFT.name;
    assert_eq!(m.get(&format!("{ttft}_count"), &[]), 1.0);
    let seconds = m.get(&format!("{ttft}_sum"), &[]);
    assert!(
        seconds >= 0.3,
        "TTFT {seconds} s left out the body's 300 ms"
    );
    assert!(m.get(&family::E2E.sum(), &[]) >= 0.3);
}
