//! tokentap never fails a request the upstream would have answered because of its own connection reuse.
//! Idle connections the upstream closed are noticed at once and never handed out, however many there are;
//! tokentap closes its idle connections before a server's keep-alive would; and a request that a reused
//! connection closed under, without a byte of answer, is sent once more on a new connection (and only
//! then: never after a response byte, never for a new connection, never for a body it does not hold),
//! and never a POST the upstream may have served: one it read and worked on before it closed.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use support::*;
use tokentap::record::metrics::family;
use tokentap::Running;

const RESENT: &str = family::UPSTREAM_RESENT.name;
const IDLE: &str = family::UPSTREAM_IDLE.name;
const CLOSED_BY_UPSTREAM: &str = family::UPSTREAM_CLOSED_BY_UPSTREAM.name;
const EXPIRED: &str = family::UPSTREAM_EXPIRED.name;

/// Answers after `wait` (so a burst overlaps and opens one upstream connection per request), then keeps
/// the connection `keep_alive` for the next request, as a server's keep-alive timer does.
fn answer_then_keep_alive(wait: Duration, keep_alive: Duration) -> Vec<Step> {
    vec![
        Step::Sleep(wait),
        json_response(200, "OK", "{\"ok\":true}"),
        Step::KeepAliveFor(keep_alive),
    ]
}

/// `n` requests at once; the statuses, and the error bodies of those that failed.
async fn burst(proxy: &Running, client: &TestClient, n: usize) -> (Vec<u16>, Vec<String>) {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (client, request) = (client.clone(), post(proxy, "/v1/models", ""));
            tokio::spawn(async move { send(&client, request).await })
        })
        .collect();
    let (mut statuses, mut errors) = (Vec::new(), Vec::new());
    for task in tasks {
        let got = task.await.expect("request task");
        if got.status != 200 {
            errors.push(String::from_utf8_lossy(&got.body).into_owned());
        }
        statuses.push(got.status);
    }
    (statuses, errors)
}

/// Scrapes until `name` reads `want` (20 ms apart, at most [`HANG`]); the last value read.
async fn wait_for(proxy: &Running, name: &str, want: f64) -> f64 {
    let mut last = f64::NAN;
    let since = tokio::time::Instant::now();
    while since.elapsed() < HANG {
        last = scrape(proxy).await.get(name, &[]);
        if last == want {
            break;
        }
        tokio::time::sleep(ms(20)).await;
    }
    last
}

/// A thousand idle connections, all closed by the upstream at once: tokentap notices every one (its own
/// idle timeout is an hour, so only noticing the close can empty the pool), and the requests after them
/// go out on new connections, none sent again. Each step waits for what the one before did, not for a
/// time: the upstream answers once the whole burst has arrived (so each request has a connection of its
/// own), and closes them all once tokentap holds all of them idle; the connections after that are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_the_upstream_closed_are_none_of_them_handed_out() {
    let _slot = slot();
    const N: usize = 1000;
    let arrived = Arc::new(AtomicUsize::new(0));
    let closing = Arc::new(AtomicBool::new(false));
    let (seen, close) = (arrived.clone(), closing.clone());
    let upstream = upstream(move |_| {
        let ok = json_response(200, "OK", "{\"ok\":true}");
        if seen.fetch_add(1, Ordering::SeqCst) >= N {
            return vec![ok];
        }
        let (seen, close) = (seen.clone(), close.clone());
        let close = once(move || close.load(Ordering::SeqCst), vec![Step::Close]);
        vec![once(
            move || seen.load(Ordering::SeqCst) >= N,
            vec![ok, close],
        )]
    })
    .await;
    let proxy = proxy(&upstream.url(), "timeouts:\n  upstream_idle: 1h\n").await;
    let client = client();
    let (statuses, errors) = burst(&proxy, &client, N).await;
    assert!(statuses.iter().all(|s| *s == 200), "{errors:?}");
    assert_eq!(upstream.connection_count(), N);
    assert_eq!(wait_for(&proxy, IDLE, N as f64).await, N as f64);
    let closed = std::time::Instant::now();
    closing.store(true, Ordering::SeqCst);
    assert_eq!(
        wait_for(&proxy, IDLE, 0.0).await,
        0.0,
        "closed idle connections stayed in the pool"
    );
    eprintln!(
        "pool empty {:?} after the upstream closed its {N} connections",
        closed.elapsed()
    );
    let m = scrape(&proxy).await;
    assert_eq!(m.get(CLOSED_BY_UPSTREAM, &[]), N as f64);
    assert_eq!(m.get(EXPIRED, &[]), 0.0);
    for i in 0..20 {
        let got = send(&client, post(&proxy, "/v1/models", "")).await;
        assert_eq!(
            got.status, 200,
            "request {i} after the lull: {:?}",
            got.body
        );
    }
    let m = scrape(&proxy).await;
    assert_eq!(
        m.get(RESENT, &[]),
        0.0,
        "a closed connection was handed out"
    );
}

/// The issue's case, with tokentap's default idle timeout: a burst of 300, a lull longer than the
/// server's keep-alive, then requests. Every request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_and_lulls_past_the_servers_keep_alive_fail_nothing() {
    let _slot = slot();
    let upstream = upstream(|_| answer_then_keep_alive(ms(300), ms(500))).await;
    let proxy = proxy(&upstream.url(), "").await;
    let client = client();
    for round in 0..3 {
        let (statuses, errors) = burst(&proxy, &client, 300).await;
        assert!(
            statuses.iter().all(|s| *s == 200),
            "round {round}: {errors:?}"
        );
        tokio::time::sleep(ms(700)).await;
        for i in 0..5 {
            let got = send(&client, post(&proxy, "/v1/models", "")).await;
            assert_eq!(got.status, 200, "round {round}, request {i} after the lull");
        }
    }
}

/// A server that closes kept-alive connections after 2 s (gunicorn's default): tokentap's default idle
/// timeout (1.5 s) closes them first, so requests 1.6–1.9 s apart each go out on a new connection and the
/// server never closes one under a request.
#[tokio::test(start_paused = true)]
async fn the_default_idle_timeout_closes_before_a_two_second_keep_alive() {
    let upstream = upstream(|_| answer_then_keep_alive(Duration::ZERO, ms(2000))).await;
    let proxy = proxy(&upstream.url(), "").await;
    let client = client();
    for i in 0..4u64 {
        let got = send(&client, post(&proxy, "/v1/models", "")).await;
        assert_eq!(got.status, 200);
        tokio::time::sleep(ms(1600 + 100 * i)).await;
    }
    let m = scrape(&proxy).await;
    assert_eq!(upstream.connection_count(), 4);
    assert_eq!(m.get(EXPIRED, &[]), 4.0);
    assert_eq!(m.get(CLOSED_BY_UPSTREAM, &[]), 0.0);
    assert_eq!(m.get(RESENT, &[]), 0.0);
    // Within the idle timeout the connection is reused.
    send(&client, post(&proxy, "/v1/models", "")).await;
    tokio::time::sleep(ms(1000)).await;
    send(&client, post(&proxy, "/v1/models", "")).await;
    assert_eq!(upstream.connection_count(), 5);
}

/// Requests at the very edge of the server's keep-alive, with tokentap keeping connections longer (as it
/// did before `timeouts.upstream_idle`): whether the close is noticed first or crosses the request, every
/// request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_at_the_edge_of_the_servers_keep_alive_are_all_answered() {
    let upstream = upstream(|_| answer_then_keep_alive(Duration::ZERO, ms(200))).await;
    let proxy = proxy(&upstream.url(), "timeouts:\n  upstream_idle: 1m\n").await;
    let client = client();
    let mut lcg = Lcg(21);
    let mut failed = Vec::new();
    for i in 0..40 {
        let got = send(&client, post(&proxy, "/v1/models", "")).await;
        if got.status != 200 {
            failed.push((i, String::from_utf8_lossy(&got.body).into_owned()));
        }
        // 195 to 205 ms: around the upstream's 200 ms.
        tokio::time::sleep(Duration::from_micros(195_000 + lcg.next(10_000) as u64)).await;
    }
    assert!(failed.is_empty(), "{failed:?}");
}

/// What the upstream does with the second request it gets (on the connection the first left open).
#[derive(Clone, Copy, Debug)]
enum Second {
    Close,
    Reset,
    /// Part of a response head, then a close.
    PartialHead,
    /// Reads the request, works on it for 2 s, then closes (FIN) without a byte of answer.
    WorksThenCloses,
    /// As `WorksThenCloses`, with a reset (SO_LINGER 0).
    WorksThenResets,
}

/// How long a server works on the request before `WorksThenCloses` and `WorksThenResets`.
const WORK: Duration = Duration::from_secs(2);

/// An upstream that answers its first request and keeps the connection, meets the second with `second`,
/// and answers every later one.
fn closes_under_the_second(
    second: Second, answer: fn(&RecordedRequest) -> Vec<Step>,
) -> impl Fn(&RecordedRequest) -> Vec<Step> + Send + Sync + 'static {
    let seen = Arc::new(AtomicUsize::new(0));
    move |request| match (seen.fetch_add(1, Ordering::SeqCst), second) {
        (1, Second::Close) => vec![Step::Close],
        (1, Second::Reset) => vec![Step::Reset],
        (1, Second::PartialHead) => vec![Step::Raw(b"HTTP/1.1 200 OK\r\n".to_vec()), Step::Close],
        (1, Second::WorksThenCloses) => vec![Step::Sleep(WORK), Step::Close],
        (1, Second::WorksThenResets) => vec![Step::Sleep(WORK), Step::Reset],
        _ => answer(request),
    }
}

fn answer_any(request: &RecordedRequest) -> Vec<Step> {
    if request.request_line().starts_with("GET") {
        vec![json_response(200, "OK", "{\"data\":[]}")]
    } else if String::from_utf8_lossy(&request.body).contains("\"stream\":true") {
        ok_stream()
    } else {
        vec![json_response(200, "OK", "{\"choices\":[]}")]
    }
}

type Make = fn(&Running) -> http::Request<Full<Bytes>>;

fn get(proxy: &Running, path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(format!("http://{}{path}", proxy.proxy_addr()))
        .body(Full::new(Bytes::new()))
        .expect("request")
}

fn json_post(proxy: &Running) -> http::Request<Full<Bytes>> {
    post(
        proxy,
        "/v1/chat/completions",
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
    )
}

fn streamed_post(proxy: &Running) -> http::Request<Full<Bytes>> {
    post(proxy, "/v1/chat/completions", &chat_request("m"))
}

/// Sends `make`'s request twice on one client (tokentap keeping idle upstream connections for `idle`)
/// to an upstream that closes under the second as `second` says. The second is answered as the first
/// was, sent again once on a new connection byte for byte as it first went, and counted resent; the
/// scrape is returned for the caller's own checks.
async fn assert_sent_again_once(second: Second, make: Make, idle: &str, what: &str) -> Metrics {
    let upstream = upstream(closes_under_the_second(second, answer_any)).await;
    let proxy = proxy(
        &upstream.url(),
        &format!("timeouts:\n  upstream_idle: {idle}\n"),
    )
    .await;
    let client = client();
    let first = send(&client, make(&proxy)).await;
    assert_eq!(first.status, 200, "{what}");
    let again = send(&client, make(&proxy)).await;
    assert_eq!(again.status, 200, "{what}: {:?}", again.body);
    assert_eq!(again.body, first.body, "{what}");
    let requests = upstream.requests();
    assert_eq!(requests.len(), 3, "{what}");
    assert_eq!(requests[1].raw_head, requests[2].raw_head, "{what}");
    assert_eq!(requests[1].body, requests[2].body, "{what}");
    assert_eq!(upstream.connection_count(), 2, "{what}");
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(RESENT, &[]), 1.0, "{what}");
    m
}

/// A reused connection closed (FIN) or reset as the next request arrives, its idle timer firing at that
/// moment: a streamed POST, a JSON POST and a GET are each answered, sent again once on a new connection,
/// byte for byte as the first time, and counted.
#[tokio::test]
async fn a_reused_connection_closed_under_a_request_has_it_sent_again_and_answered() {
    let kinds: [(&str, Make); 3] = [
        ("streamed POST", streamed_post),
        ("JSON POST", json_post),
        ("GET", |p| get(p, "/v1/models")),
    ];
    for second in [Second::Close, Second::Reset] {
        for (kind, make) in kinds {
            let what = format!("{kind}, {second:?}");
            let m = assert_sent_again_once(second, make, "1m", &what).await;
            assert_eq!(
                m.get(family::REQUESTS.name, &[("status", "200")]),
                2.0,
                "{what}"
            );
        }
    }
}

/// A POST the upstream read, worked on for 2 s and then closed (FIN) or reset the connection under,
/// without a byte of answer, may have been served (a generation run, a tool called): it is never sent
/// again. The upstream sees it once, and the client gets the 502.
#[tokio::test(start_paused = true)]
async fn a_post_the_upstream_worked_on_before_it_closed_is_never_sent_again() {
    let kinds: [(&str, Make); 2] = [("JSON POST", json_post), ("streamed POST", streamed_post)];
    for second in [Second::WorksThenCloses, Second::WorksThenResets] {
        for (kind, make) in kinds {
            let what = format!("{kind}, {second:?}");
            let upstream = upstream(closes_under_the_second(second, answer_any)).await;
            let proxy = proxy(&upstream.url(), "timeouts:\n  upstream_idle: 1h\n").await;
            let client = client();
            assert_eq!(send(&client, make(&proxy)).await.status, 200, "{what}");
            let got = send(&client, make(&proxy)).await;
            assert_eq!(got.status, 502, "{what}: {:?}", got.body);
            let requests = upstream.requests();
            assert_eq!(requests.len(), 2, "{what}: the POST arrived more than once");
            assert_eq!(upstream.connection_count(), 1, "{what}");
            assert_eq!(scrape(&proxy).await.get(RESENT, &[]), 0.0, "{what}");
        }
    }
}

/// A request its sender called idempotent (its method, or an `Idempotency-Key` or `X-Idempotency-Key`
/// header) may be served twice: read, worked on for 2 s and closed or reset under, it is sent again on a
/// new connection, byte for byte, and answered.
#[tokio::test(start_paused = true)]
async fn an_idempotent_request_the_upstream_worked_on_before_it_closed_is_sent_again() {
    fn keyed(proxy: &Running, name: &'static str) -> http::Request<Full<Bytes>> {
        let mut request = json_post(proxy);
        let key = http::HeaderValue::from_static("3f1c2a9e-req-1");
        request.headers_mut().insert(name, key);
        request
    }
    let kinds: [(&str, Make); 3] = [
        ("GET", |p| get(p, "/v1/models")),
        ("POST with Idempotency-Key", |p| keyed(p, "idempotency-key")),
        ("POST with X-Idempotency-Key", |p| {
            keyed(p, "x-idempotency-key")
        }),
    ];
    for second in [Second::WorksThenCloses, Second::WorksThenResets] {
        for (kind, make) in kinds {
            let what = format!("{kind}, {second:?}");
            assert_sent_again_once(second, make, "1h", &what).await;
        }
    }
}

/// Once any byte of an answer came back, the request is the upstream's to have answered: it is never
/// sent again, and the client gets the 502.
#[tokio::test]
async fn a_request_is_never_sent_again_after_a_response_byte() {
    let upstream = upstream(closes_under_the_second(Second::PartialHead, answer_any)).await;
    let proxy = proxy(&upstream.url(), "timeouts:\n  upstream_idle: 1m\n").await;
    let client = client();
    assert_eq!(send(&client, json_post(&proxy)).await.status, 200);
    let got = send(&client, json_post(&proxy)).await;
    assert_eq!(got.status, 502);
    assert_eq!(upstream.requests().len(), 2, "the request was sent again");
    assert_eq!(scrape(&proxy).await.get(RESENT, &[]), 0.0);
}

/// A new connection that closes without answering is the upstream's answer: not sent again.
#[tokio::test]
async fn a_request_on_a_new_connection_is_never_sent_again() {
    let upstream = upstream(|_| vec![Step::Close]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(&client(), json_post(&proxy)).await;
    assert_eq!(got.status, 502);
    assert_eq!(upstream.requests().len(), 1);
    assert_eq!(upstream.connection_count(), 1);
    assert_eq!(scrape(&proxy).await.get(RESENT, &[]), 0.0);
}

/// A body tokentap does not hold (here it holds none) cannot be sent again once it was written.
#[tokio::test]
async fn a_request_whose_body_is_not_held_is_never_sent_again() {
    let upstream = upstream(closes_under_the_second(Second::Close, answer_any)).await;
    let yaml = "timeouts:\n  upstream_idle: 1m\nlimits:\n  hold_request_body_bytes: 0\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    let client = client();
    assert_eq!(send(&client, json_post(&proxy)).await.status, 200);
    let got = send(&client, json_post(&proxy)).await;
    assert_eq!(got.status, 502);
    assert_eq!(upstream.requests().len(), 2);
    assert_eq!(scrape(&proxy).await.get(RESENT, &[]), 0.0);
}

/// A request sent again that fails again is the upstream's answer: it is not tried a third time, the
/// client gets the 502, and the one resend is counted.
#[tokio::test]
async fn a_request_whose_resend_fails_too_is_not_sent_a_third_time() {
    let seen = Arc::new(AtomicUsize::new(0));
    let upstream = upstream(move |request| match seen.fetch_add(1, Ordering::SeqCst) {
        1 | 2 => vec![Step::Close],
        _ => answer_any(request),
    })
    .await;
    let proxy = proxy(&upstream.url(), "timeouts:\n  upstream_idle: 1m\n").await;
    let client = client();
    assert_eq!(send(&client, json_post(&proxy)).await.status, 200);
    let got = send(&client, json_post(&proxy)).await;
    assert_eq!(got.status, 502, "{:?}", got.body);
    assert_eq!(upstream.requests().len(), 3, "sent more than twice");
    assert_eq!(upstream.connection_count(), 2);
    assert_eq!(scrape(&proxy).await.get(RESENT, &[]), 1.0);
    // The next request is answered on a new connection.
    assert_eq!(send(&client, json_post(&proxy)).await.status, 200);
}

/// An idle connection the upstream aborts with a reset (RST, not FIN) is noticed as promptly as a close,
/// and the next request goes out on a new connection, not sent again.
#[tokio::test]
async fn an_idle_connection_the_upstream_resets_is_dropped_and_never_handed_out() {
    let upstream = upstream(|_| {
        vec![
            json_response(200, "OK", "{\"ok\":true}"),
            Step::KeepAliveThenReset(ms(100)),
        ]
    })
    .await;
    let proxy = proxy(&upstream.url(), "timeouts:\n  upstream_idle: 1m\n").await;
    let client = client();
    assert_eq!(send(&client, get(&proxy, "/v1/models")).await.status, 200);
    assert_eq!(wait_for(&proxy, CLOSED_BY_UPSTREAM, 1.0).await, 1.0);
    assert_eq!(scrape(&proxy).await.get(IDLE, &[]), 0.0);
    assert_eq!(send(&client, get(&proxy, "/v1/models")).await.status, 200);
    assert_eq!(upstream.connection_count(), 2);
    assert_eq!(scrape(&proxy).await.get(RESENT, &[]), 0.0);
}
