//! Forwarding is transparent: the client gets the upstream's status, headers, body bytes and trailers
//! unchanged, and the upstream gets the client's request unchanged but for hop-by-hop headers and Host.

use crate::support;

use bytes::Bytes;
use http_body_util::Full;
use support::*;
use tokentap::record::metrics::family;

const VLLM: &[u8] = include_bytes!("fixtures/openai/vllm-0.32-chat-stream.sse");

/// The vLLM capture rewritten with CRLF line endings and SSE comments between events.
fn crlf_with_comments(capture: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(capture);
    let mut out = String::from(": keep-alive comment\r\n\r\n");
    for event in text.split("\n\n").filter(|e| !e.is_empty()) {
        out.push_str(&event.replace('\n', "\r\n"));
        out.push_str("\r\n\r\n: ping\r\n\r\n");
    }
    out.into_bytes()
}

#[tokio::test]
async fn stream_bytes_arrive_identical_whatever_the_frame_boundaries() {
    let bodies = [VLLM.to_vec(), crlf_with_comments(VLLM)];
    for (variant, body) in bodies.iter().enumerate() {
        for seed in 0..6u64 {
            let frames = random_frames(body, &mut Lcg(seed * 7919 + variant as u64), 97);
            let script = streamed(&frames);
            let upstream = upstream(move |_| script.clone()).await;
            let proxy = proxy(&upstream.url(), "").await;
            let got = send(
                &client(),
                post(&proxy, "/v1/chat/completions", &chat_request("tiny-llama")),
            )
            .await;
            assert_eq!(got.status, 200);
            assert_eq!(got.end, Ok(()));
            assert_eq!(
                got.body, *body,
                "variant {variant} seed {seed}: bytes differ"
            );
            assert_eq!(got.headers["content-type"], "text/event-stream");
            assert_eq!(got.headers["x-upstream"], "scripted");
            assert_eq!(got.headers["cache-control"], "no-cache");
            let mut names: Vec<&str> = got.headers.keys().map(|k| k.as_str()).collect();
            names.sort_unstable();
            // Exactly the upstream's headers; transfer-encoding is this hop's framing, nothing is added.
            assert_eq!(
                names,
                [
                    "cache-control",
                    "content-type",
                    "transfer-encoding",
                    "x-upstream"
                ]
            );
            settle(&proxy).await;
            let m = scrape(&proxy).await;
            // 16 content tokens in the capture: the usage chunk says so, and so do the chunks.
            assert_eq!(
                m.get(
                    family::OUTPUT_TOKENS.name,
                    &[("model", "tiny-llama"), ("api", "chat")]
                ),
                16.0
            );
            assert_eq!(
                m.get(&family::TTFT.count(), &[("model", "tiny-llama")]),
                1.0
            );
            assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
        }
    }
}

#[tokio::test]
async fn h2c_clients_get_the_same_bytes() {
    let frames = random_frames(VLLM, &mut Lcg(42), 200);
    let script = streamed(&frames);
    let upstream = upstream(move |_| script.clone()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let h2: TestClient = h2_client();
    let got = send(
        &h2,
        post(&proxy, "/v1/chat/completions", &chat_request("tiny-llama")),
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, VLLM);
    assert_eq!(got.end, Ok(()));
    assert_eq!(
        upstream.requests()[0].request_line(),
        "POST /v1/chat/completions HTTP/1.1"
    );
}

#[tokio::test]
async fn request_reaches_upstream_unchanged_but_for_hop_by_hop_headers() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let proxy = proxy(&upstream.url(), "").await;
    // A large body, sent in many frames, with the model at the end as the OpenAI SDK sends it.
    let prompt = "x".repeat(300_000);
    let body = format!("{{\"messages\":[{{\"role\":\"user\",\"content\":\"{prompt}\"}}],\"model\":\"late-model\"}}");
    let request = http::Request::post(format!(
        "http://{}/v1/chat/completions?trace=1&x=%20y",
        proxy.proxy_addr()
    ))
    .header("content-type", "application/json")
    .header("authorization", "Bearer sk-test")
    .header("x-custom", "one")
    .header("x-multi", "a")
    .header("x-multi", "b")
    .header("connection", "x-hop-secret")
    .header("x-hop-secret", "passes")
    .header("keep-alive", "timeout=5")
    .body(Full::new(Bytes::from(body.clone())))
    .expect("request");
    let got = send(&client(), request).await;
    assert_eq!(got.status, 200);
    let seen = &upstream.requests()[0];
    assert_eq!(
        seen.request_line(),
        "POST /v1/chat/completions?trace=1&x=%20y HTTP/1.1"
    );
    assert_eq!(seen.body, body.as_bytes());
    assert_eq!(seen.header("authorization"), ["Bearer sk-test"]);
    assert_eq!(seen.header("x-custom"), ["one"]);
    assert_eq!(seen.header("x-multi"), ["a", "b"]);
    // A client's `Connection` removes nothing beyond the fixed hop-by-hop set.
    assert_eq!(seen.header("x-hop-secret"), ["passes"]);
    assert!(seen.header("connection").is_empty());
    assert!(seen.header("keep-alive").is_empty());
    assert_eq!(seen.header("host"), [upstream.addr.to_string()]);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests("late-model", "200", "ok"), 1.0);
}

#[tokio::test]
async fn dot_segments_are_removed_inside_the_prefix_and_the_query_is_untouched() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let proxy = proxy(&format!("{}/openai/", upstream.url()), "").await;
    let targets = [
        "/v1/./chat/completions?x=/../%2e%2e&y=%5C",
        "/v1/models/../chat/%2e/completions?x=/../%2e%2e&y=%5C",
        "http://other.example/v1/x/%2E%2e/chat/completions/.?x=/../%2e%2e&y=%5C",
    ];
    for target in targets {
        let body = chat_request("m");
        let request = format!(
            "POST {} HTTP/1.1\r\nhost: t\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            target,
            body.len()
        );
        let answer = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
        assert_eq!(raw_status(&answer), 200, "{target}");
    }
    let seen: Vec<String> = upstream
        .requests()
        .iter()
        .map(|r| r.request_line().to_owned())
        .collect();
    assert_eq!(
        seen,
        [
            "POST /openai/v1/chat/completions?x=/../%2e%2e&y=%5C HTTP/1.1",
            "POST /openai/v1/chat/completions?x=/../%2e%2e&y=%5C HTTP/1.1",
            "POST /openai/v1/chat/completions/?x=/../%2e%2e&y=%5C HTTP/1.1",
        ]
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(
        m.get(family::REQUESTS.name, &[("api", "chat"), ("status", "200")]),
        3.0
    );
}

#[tokio::test]
async fn upstream_connections_are_kept_alive_and_reused() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{\"ok\":true}")]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let client = client();
    for _ in 0..5 {
        let got = send(&client, post(&proxy, "/v1/models", "")).await;
        assert_eq!(got.body, b"{\"ok\":true}");
    }
    assert_eq!(upstream.requests().len(), 5);
    assert_eq!(
        upstream.connection_count(),
        1,
        "each request opened a new upstream connection"
    );
}

/// tokentap's own pool hands a connection back when a response's body has been read to its end, whatever
/// marks that end: the last chunk of a chunked stream, a `content-length`, or no body at all (HEAD, 204,
/// 304), which the client's side never reads.
#[tokio::test]
async fn every_kind_of_response_end_hands_the_upstream_connection_back() {
    let upstream = upstream(|request| {
        let line = request.request_line().to_owned();
        if line.starts_with("HEAD") {
            vec![Step::Raw(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n"
                    .to_vec(),
            )]
        } else if line.contains("/no-content") {
            vec![Step::Raw(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec())]
        } else if line.contains("/not-modified") {
            vec![Step::Raw(
                b"HTTP/1.1 304 Not Modified\r\netag: \"x\"\r\n\r\n".to_vec(),
            )]
        } else if line.contains("/models") {
            vec![json_response(200, "OK", "{\"ok\":true}")]
        } else {
            ok_stream()
        }
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let client = client();
    let stream = || post(&proxy, "/v1/chat/completions", &chat_request("m"));
    let bare = |method: http::Method, path: &str| {
        http::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", proxy.proxy_addr()))
            .body(Full::new(Bytes::new()))
            .expect("request")
    };
    let streamed = send(&client, stream()).await;
    assert_eq!(streamed.status, 200);
    assert!(
        streamed.body.ends_with(b"data: [DONE]\n\n"),
        "{:?}",
        streamed.end
    );
    let head = send(&client, bare(http::Method::HEAD, "/v1/models")).await;
    assert_eq!((head.status, head.body.len()), (200, 0));
    assert_eq!(head.headers["content-length"], "11");
    let no_content = send(&client, bare(http::Method::GET, "/no-content")).await;
    assert_eq!((no_content.status, no_content.body.len()), (204, 0));
    let not_modified = send(&client, bare(http::Method::GET, "/not-modified")).await;
    assert_eq!((not_modified.status, not_modified.body.len()), (304, 0));
    let json = send(&client, bare(http::Method::GET, "/v1/models")).await;
    assert_eq!(json.body, b"{\"ok\":true}");
    let again = send(&client, stream()).await;
    assert_eq!(again.body, streamed.body);
    assert!(again.end.is_ok());
    assert_eq!(upstream.requests().len(), 6);
    assert_eq!(
        upstream.connection_count(),
        1,
        "a response end did not give the upstream connection back"
    );
}

/// An idle upstream connection that the model server closed (its keep-alive timeout, a restart) is noticed
/// when the next request would take it, and that request goes out on a new connection: the client never
/// sees the old connection's close.
#[tokio::test]
async fn an_idle_connection_the_upstream_closed_is_not_used_again() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{\"ok\":true}"), Step::Close]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let client = client();
    for round in 0..3 {
        let got = send(&client, post(&proxy, "/v1/models", "")).await;
        assert_eq!(
            (got.status, got.body.as_slice()),
            (200, &b"{\"ok\":true}"[..]),
            "round {round}"
        );
        // The upstream's FIN reaches tokentap while the connection is idle.
        tokio::time::sleep(ms(50)).await;
    }
    assert_eq!(upstream.connection_count(), 3);
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[("status", "200")]), 3.0);
}

#[tokio::test]
async fn trailers_pass_through() {
    let upstream = upstream(|_| {
        vec![
            Step::Raw(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntrailer: x-checksum\r\ntransfer-encoding: chunked\r\n\r\n".to_vec()),
            chunk(b"hello"),
            Step::Raw(b"0\r\nx-checksum: abc123\r\n\r\n".to_vec()),
        ]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let request = http::Request::get(format!("http://{}/files/1", proxy.proxy_addr()))
        .header("te", "trailers")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let got = send(&client(), request).await;
    assert_eq!(got.body, b"hello");
    let trailers = got.trailers.expect("trailers forwarded");
    assert_eq!(trailers["x-checksum"], "abc123");
    assert_eq!(upstream.requests()[0].header("te"), ["trailers"]);
}

#[tokio::test]
async fn response_trailers_reach_h1_clients_when_declared_and_h2_clients_all() {
    let upstream = upstream(|_| {
        vec![
            Step::Raw(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntrailer: x-checksum\r\ntransfer-encoding: chunked\r\n\r\n".to_vec()),
            chunk(b"hello"),
            Step::Raw(b"0\r\nx-checksum: abc123\r\nx-late: 1\r\n\r\n".to_vec()),
        ]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let h2 = h2_client();
    for (client, te, want) in [
        (client(), true, &[("x-checksum", "abc123")][..]),
        (client(), false, &[]),
        (h2, false, &[("x-checksum", "abc123"), ("x-late", "1")]),
    ] {
        let mut request = http::Request::get(format!("http://{}/files/1", proxy.proxy_addr()));
        if te {
            request = request.header("te", "trailers");
        }
        let got = send(
            &client,
            request.body(Full::new(Bytes::new())).expect("request"),
        )
        .await;
        assert_eq!(got.body, b"hello");
        assert_eq!(got.end, Ok(()));
        let got: Vec<(String, String)> = got
            .trailers
            .iter()
            .flatten()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or_default().to_owned()))
            .collect();
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(got, want, "te: trailers {te}");
    }
}

/// A request body of fixed frames, trailers included, without a known length.
struct Frames(std::collections::VecDeque<http_body::Frame<Bytes>>);

impl http_body::Body for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }
}

fn trailers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
    pairs
        .iter()
        .map(|(name, value)| {
            (
                http::HeaderName::from_static(name),
                http::HeaderValue::from_static(value),
            )
        })
        .collect()
}

#[tokio::test]
async fn request_trailers_reach_the_upstream_when_declared_in_trailer() {
    let upstream = upstream(|_| vec![json_response(200, "OK", "{}")]).await;
    let proxy = proxy(&upstream.url(), "").await;
    // HTTP/1.1: declared and valid as a trailer passes; undeclared, or a field that may not be a
    // trailer (Authorization), does not.
    let request = "POST /v1/embeddings HTTP/1.1\r\nhost: t\r\ntrailer: x-checksum, authorization\r\n\
        transfer-encoding: chunked\r\nconnection: close\r\n\r\n\
        5\r\nhello\r\n0\r\nx-checksum: abc\r\nx-undeclared: 1\r\nauthorization: Bearer late\r\n\r\n";
    let answer = raw_exchange(proxy.proxy_addr(), request.as_bytes()).await;
    assert_eq!(raw_status(&answer), 200);
    // h2: the same rule; without a `trailer` header nothing is declared, so nothing passes.
    let (mut h2, _conn) = open_h2(&proxy).await;
    for declared in [true, false] {
        let mut request =
            http::Request::post(format!("http://{}/v1/embeddings", proxy.proxy_addr()));
        if declared {
            request = request.header("trailer", "x-checksum");
        }
        let body = Frames(
            [
                http_body::Frame::data(Bytes::from_static(b"hello")),
                http_body::Frame::trailers(trailers(&[
                    ("x-checksum", "abc"),
                    ("x-undeclared", "1"),
                ])),
            ]
            .into(),
        );
        let response = h2
            .send_request(request.body(body).expect("request"))
            .await
            .expect("h2 response");
        assert_eq!(response.status(), 200);
    }
    let seen = upstream.requests();
    assert_eq!(seen.len(), 3);
    for (request, want) in seen
        .iter()
        .zip(["x-checksum: abc\r\n", "x-checksum: abc\r\n", ""])
    {
        assert_eq!(request.body, b"hello");
        assert_eq!(request.trailers, want, "{}", request.head);
    }
}

#[tokio::test]
async fn upstream_5xx_passes_through_and_is_never_goodput() {
    let body = r#"{"error":{"message":"overloaded","type":"server_error"}}"#;
    let upstream = upstream(move |_| vec![json_response(503, "Service Unavailable", body)]).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(
        &client(),
        post(&proxy, "/v1/chat/completions", &chat_request("m")),
    )
    .await;
    assert_eq!(got.status, 503);
    assert_eq!(got.body, body.as_bytes());
    assert_eq!(got.headers["x-upstream"], "scripted");
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    // The upstream never answered `m` with a 2xx: the name takes no model label place.
    assert_eq!(m.requests("unadmitted", "503", "ok"), 1.0);
    assert_eq!(m.get(family::GOODPUT.name, &[]), 0.0);
}

#[tokio::test]
async fn https_upstream_is_reached_with_a_configured_ca_bundle() {
    let (dir, acceptor) = (TLS_DIR, tls_acceptor());
    let frames = random_frames(VLLM, &mut Lcg(3), 300);
    let script = streamed(&frames);
    let upstream = upstream_with(move |_| script.clone(), Some(acceptor)).await;
    let url = format!("https://127.0.0.1:{}", upstream.addr.port());
    let proxy = proxy(&url, &format!("upstream_ca_file: {dir}/ca.pem\n")).await;
    let got = send(
        &client(),
        post(&proxy, "/v1/chat/completions", &chat_request("tiny-llama")),
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, VLLM);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(
        m.get(family::OUTPUT_TOKENS.name, &[("model", "tiny-llama")]),
        16.0
    );
}

#[tokio::test]
async fn https_upstream_with_an_untrusted_certificate_is_refused_with_502() {
    let (dir, acceptor) = (TLS_DIR, tls_acceptor());
    let upstream = upstream_with(|_| vec![json_response(200, "OK", "{}")], Some(acceptor)).await;
    // Trust only the server's own leaf as a "CA": verification must fail, and nothing is forwarded.
    let url = format!("https://127.0.0.1:{}", upstream.addr.port());
    let proxy = proxy(&url, &format!("upstream_ca_file: {dir}/server.pem\n")).await;
    let got = send(
        &client(),
        post(&proxy, "/v1/chat/completions", &chat_request("m")),
    )
    .await;
    assert_eq!(got.status, 502);
    assert!(upstream.requests().is_empty());
}
