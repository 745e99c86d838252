//! TLS on the proxy's listener (`listen_tls:`): HTTP/1.1 and h2 clients over TLS get the very bytes and
//! leave the very counts that plain-TCP clients do; ALPN picks h2 when offered; `reload()` rotates the
//! certificate for new handshakes while open connections and streams carry on; bad files are refused at
//! start naming the key, the path and what is wrong; a handshake that fails (garbage, plain HTTP, a
//! silent client, an untrusted certificate, no common protocol) is counted by reason and never touches
//! another client; a client's identity (tenant from its bearer token) is read over TLS as over TCP.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use support::*;
use tokentap::config::Config;
use tokentap::record::metrics::family;
use tokentap::{Reloaded, Running};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

const VLLM: &[u8] = include_bytes!("fixtures/openai/vllm-0.32-chat-stream.sse");

fn fixture(name: &str) -> PathBuf {
    Path::new(TLS_DIR).join(name)
}

/// `listen_tls:` with the two files.
fn listen_tls(cert: &Path, key: &str) -> String {
    format!(
        "listen_tls: {{cert_file: {}, key_file: {key}}}\n",
        cert.display()
    )
}

/// The test server certificate and key.
fn served() -> String {
    listen_tls(
        &fixture("server.pem"),
        &fixture("server.key").display().to_string(),
    )
}

/// A client trusting the CA in `ca` (a fixture's name) and offering `alpn`.
fn client_config(ca: &str, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(fixture(ca)).expect("ca") {
        roots.add(cert.expect("ca cert")).expect("root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS connection to the proxy port, or the handshake's error.
async fn tls_connect(
    proxy: &Running, ca: &str, alpn: &[&[u8]],
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(proxy.proxy_addr()).await?;
    let name = ServerName::try_from("localhost").expect("name");
    let connector = tokio_rustls::TlsConnector::from(client_config(ca, alpn));
    connector.connect(name, tcp).await
}

/// The protocol ALPN chose and the server's own certificate, as the client saw them.
fn negotiated(stream: &TlsStream<TcpStream>) -> (Option<Vec<u8>>, Vec<u8>) {
    let session = stream.get_ref().1;
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    let leaf = session.peer_certificates().expect("certificates")[0].to_vec();
    (alpn, leaf)
}

fn leaf_of(pem: &str) -> Vec<u8> {
    CertificateDer::pem_file_iter(fixture(pem))
        .expect("pem")
        .next()
        .expect("a certificate")
        .expect("cert")
        .to_vec()
}

/// A chat request for `model` in the form each version sends: origin-form with `Host` on HTTP/1.1,
/// an `https` URI (its `:scheme` and `:authority`) on h2.
fn chat(proxy: &Running, h2: bool, model: &str) -> http::Request<Full<Bytes>> {
    let addr = proxy.proxy_addr();
    let uri = match h2 {
        true => format!("https://localhost:{}/v1/chat/completions", addr.port()),
        false => "/v1/chat/completions".to_owned(),
    };
    let mut request = http::Request::post(uri)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(chat_request(model))))
        .expect("request");
    if !h2 {
        let host = http::HeaderValue::from_str(&format!("localhost:{}", addr.port()));
        request
            .headers_mut()
            .insert("host", host.expect("host value"));
    }
    request
}

/// One HTTP connection over `stream`, driven by a task of its own.
enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    async fn over(stream: TlsStream<TcpStream>) -> Sender {
        let io = TokioIo::new(stream);
        match negotiated(io.inner()).0.as_deref() {
            Some(b"h2") => {
                let (sender, conn) = http2::handshake(TokioExecutor::new(), io)
                    .await
                    .expect("h2 handshake");
                tokio::spawn(conn);
                Sender::H2(sender)
            }
            _ => {
                let (sender, conn) = http1::handshake(io).await.expect("h1 handshake");
                tokio::spawn(conn);
                Sender::H1(sender)
            }
        }
    }

    fn h2(&self) -> bool {
        matches!(self, Sender::H2(_))
    }

    async fn head(&mut self, request: http::Request<Full<Bytes>>) -> Answer {
        match self {
            Sender::H1(s) => s.send_request(request).await,
            Sender::H2(s) => s.send_request(request).await,
        }
        .expect("answer head")
    }

    /// A chat request for `model`: its status and its whole body.
    async fn chat(&mut self, proxy: &Running, model: &str) -> (u16, Bytes) {
        let answer = self.head(chat(proxy, self.h2(), model)).await;
        (answer.status().as_u16(), body_bytes(answer).await)
    }
}

/// Every counter and histogram count on the page, by series: what a request leaves counted. Left out:
/// the scrapes' own count, and the frames' delay, whose count follows how the upstream's bytes fell
/// into reads.
fn counted(m: &Metrics) -> BTreeMap<String, String> {
    m.text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| {
            let name = series.split('{').next().unwrap_or_default();
            (name.ends_with("_total") || name.ends_with("_count"))
                && name != family::ENCODES.name
                && name != family::FORWARDING_DELAY.count()
        })
        .map(|(series, value)| (series.to_owned(), value.to_owned()))
        .collect()
}

#[tokio::test]
async fn http1_and_h2_over_tls_get_the_same_bytes_and_counts_as_over_plain_tcp() {
    let frames = random_frames(VLLM, &mut Lcg(44), 150);
    let script = streamed(&frames);
    let upstream = upstream(move |_| script.clone()).await;
    // Idle upstream connections kept an hour: whether one outlived the default 1.5 s (counted in
    // tokentap_upstream_idle_expired_total) is how slow the machine was, not a difference of TLS.
    let keep = "timeouts: {upstream_idle: 1h}\n";
    let plain = proxy(&upstream.url(), keep).await;
    let tls = proxy(&upstream.url(), &format!("{}{keep}", served())).await;

    for h2 in [false, true] {
        let got = send(
            &if h2 { h2_client() } else { client() },
            post(&plain, "/v1/chat/completions", &chat_request("tiny-llama")),
        )
        .await;
        assert_eq!((got.status, got.body.as_slice()), (200, VLLM));
    }
    // A client that offers both gets h2; one that offers only HTTP/1.1 gets it; one that offers none
    // is served HTTP/1.1 all the same.
    for (offered, chosen) in [
        (&[&b"h2"[..], b"http/1.1"][..], Some(&b"h2"[..])),
        (&[&b"http/1.1"[..]][..], Some(&b"http/1.1"[..])),
    ] {
        let stream = tls_connect(&tls, "ca.pem", offered)
            .await
            .expect("handshake");
        let (alpn, leaf) = negotiated(&stream);
        assert_eq!((alpn.as_deref(), leaf), (chosen, leaf_of("server.pem")));
        let mut sender = Sender::over(stream).await;
        assert_eq!(sender.h2(), chosen == Some(b"h2"));
        let (status, body) = sender.chat(&tls, "tiny-llama").await;
        assert_eq!((status, body.as_ref()), (200, VLLM), "{offered:?}");
    }
    let stream = tls_connect(&tls, "ca.pem", &[]).await.expect("handshake");
    assert_eq!(negotiated(&stream).0, None);
    let (status, body) = Sender::over(stream).await.chat(&tls, "other").await;
    assert_eq!((status, body.as_ref()), (200, VLLM), "no ALPN");
    // The same two requests through the plain port, for the comparison.
    let got = send(
        &client(),
        post(&plain, "/v1/chat/completions", &chat_request("other")),
    )
    .await;
    assert_eq!(got.body, VLLM);

    settle(&plain).await;
    settle(&tls).await;
    let (plain_counts, tls_counts) = (scrape(&plain).await, scrape(&tls).await);
    let tokens = [("model", "tiny-llama"), ("api", "chat")];
    assert_eq!(tls_counts.get(family::OUTPUT_TOKENS.name, &tokens), 32.0);
    assert_eq!(counted(&tls_counts), counted(&plain_counts));
    assert_eq!(
        tls_counts.get(family::TLS_HANDSHAKE_FAILURES.name, &[]),
        0.0
    );
}

/// Copies `cert` and `key` (fixtures) to the paths `listen_tls` reads, as a Secret's update does.
fn install(dir: &Path, cert: &str, key: &str) {
    std::fs::copy(fixture(cert), dir.join("tls.crt")).expect("copy cert");
    std::fs::copy(fixture(key), dir.join("tls.key")).expect("copy key");
}

#[tokio::test]
async fn a_config_reload_serves_a_rotated_certificate_to_new_handshakes_while_open_connections_carry_on(
) {
    let dir = std::env::temp_dir().join(format!("tokentap-tls-rotate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    install(&dir, "server.pem", "server.key");
    let upstream = upstream(|_| content_stream(40, ms(10))).await;
    let yaml = listen_tls(
        &dir.join("tls.crt"),
        &dir.join("tls.key").display().to_string(),
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    assert!(proxy.certificates().is_some(), "listen_tls");
    // The config as `proxy` built it: a reload that reads the same file (SIGHUP, POST /-/reload).
    let same = format!(
        "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {}\nmodel_list: {{enabled: false}}\n{yaml}",
        upstream.url()
    );
    let reload = || proxy.reload_with(Config::from_yaml_str(&same).map_err(|e| e.to_string()));

    let h2 = &[&b"h2"[..]][..];
    let mut open_h2 = Sender::over(tls_connect(&proxy, "ca.pem", h2).await.expect("old")).await;
    assert_eq!(open_h2.chat(&proxy, "m").await.0, 200);
    // A stream in progress (40 tokens, 10 ms apart) on an HTTP/1.1 connection across the rotation.
    let h1 = &[&b"http/1.1"[..]][..];
    let mut open_h1 = Sender::over(tls_connect(&proxy, "ca.pem", h1).await.expect("old")).await;
    let streaming = open_h1.head(chat(&proxy, false, "m")).await;

    // A broken pair changes nothing.
    install(&dir, "server.pem", "rotated.key");
    let Reloaded::Failed(refused) = reload().await else {
        panic!("a mismatched pair fails the reload");
    };
    assert!(
        refused.contains("listen_tls.key_file")
            && refused.contains("is not the key of the certificate"),
        "{refused}"
    );
    let still = tls_connect(&proxy, "ca.pem", h2)
        .await
        .expect("the old pair");
    assert_eq!(negotiated(&still).1, leaf_of("server.pem"));

    install(&dir, "rotated.pem", "rotated.key");
    let reloaded = reload().await;
    assert!(
        matches!(
            reloaded,
            Reloaded::Applied {
                certificates: true,
                ..
            }
        ),
        "{reloaded:?}"
    );
    let fresh = tls_connect(&proxy, "rotated-ca.pem", h2)
        .await
        .expect("new");
    assert_eq!(negotiated(&fresh).1, leaf_of("rotated.pem"));
    let (status, _) = Sender::over(fresh).await.chat(&proxy, "m").await;
    assert_eq!(status, 200);
    let untrusted = tls_connect(&proxy, "ca.pem", h2).await;
    assert!(
        untrusted.is_err(),
        "a client of the old CA refuses the new one"
    );

    // What was open before carries on: the stream ends whole, the h2 connection takes a new request.
    assert_eq!(streaming.status(), 200);
    let body = body_bytes(streaming).await;
    assert_eq!(count(&body, b"data: "), 40 + 1, "40 tokens, [DONE]");
    assert_eq!(open_h2.chat(&proxy, "m").await.0, 200);

    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.requests("m", "200", "ok"), 4.0);
    let alert = [("reason", "client_alert")];
    assert_eq!(m.get(family::TLS_HANDSHAKE_FAILURES.name, &alert), 1.0);
    let result = |r| m.get("tokentap_config_reloads_total", &[("result", r)]);
    assert_eq!((result("failure"), result("success")), (1.0, 1.0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_pair_that_cannot_be_served_is_refused_at_start_naming_key_path_and_problem() {
    let (cert, key) = (fixture("server.pem"), fixture("server.key"));
    let cases = [
        (
            listen_tls(&cert, &fixture("rotated.key").display().to_string()),
            "listen_tls.key_file",
            "rotated.key: is not the key of the certificate in",
        ),
        (
            listen_tls(&cert, &fixture("ca.pem").display().to_string()),
            "listen_tls.key_file",
            "ca.pem: holds no private key",
        ),
        (
            listen_tls(&key, &key.display().to_string()),
            "listen_tls.cert_file",
            "server.key: holds no certificate",
        ),
        (
            listen_tls(&fixture("README.md"), &key.display().to_string()),
            "listen_tls.cert_file",
            "README.md: is not PEM",
        ),
    ];
    for (yaml, named, problem) in cases {
        let config = format!("listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\n{yaml}");
        let config = tokentap::Config::from_yaml_str(&config).expect("the files are there");
        let Err(refused) = tokentap::start(&config).await else {
            panic!("started with {yaml}");
        };
        let refused = refused.to_string();
        assert!(
            refused.starts_with(named) && refused.contains(problem),
            "{refused}"
        );
    }
    for (yaml, said) in [
        (
            listen_tls(&fixture("absent.pem"), &key.display().to_string()),
            "listen_tls.cert_file: invalid path",
        ),
        (
            format!("listen_tls: {{cert_file: {}}}\n", cert.display()),
            "listen_tls.key_file: invalid path \"\": required",
        ),
    ] {
        let refused = tokentap::Config::from_yaml_str(&yaml).expect_err("refused");
        assert!(refused.to_string().contains(said), "{refused}");
    }
}

#[tokio::test]
async fn a_failed_handshake_is_counted_by_reason_and_never_touches_another_client() {
    let upstream = upstream(|_| content_stream(20, ms(10))).await;
    let yaml = format!("{}timeouts: {{client_header_read: 300ms}}\n", served());
    let proxy = proxy(&upstream.url(), &yaml).await;
    // A client in the middle of a stream while the others fail.
    let h2 = &[&b"h2"[..]][..];
    let mut good = Sender::over(tls_connect(&proxy, "ca.pem", h2).await.expect("good")).await;
    let streaming = good.head(chat(&proxy, true, "m")).await;

    // Plain HTTP to the TLS port is answered 400 saying so (as nginx does), then closed; garbage is
    // closed.
    let plain = raw_exchange(proxy.proxy_addr(), &raw_chat("m", false)).await;
    let (head, said) = raw_split(&plain);
    assert_eq!(raw_status(&plain), 400, "{head}");
    assert_eq!(
        String::from_utf8_lossy(&said),
        "This port speaks HTTPS: a plain HTTP request was sent to it. Use https:// for this address.\n"
    );
    let garbage = raw_send(proxy.proxy_addr(), &[0x16, 0x03, 0x01, 0xff, 0xff, 0, 0, 0]).await;
    // Silent, and half a ClientHello then nothing (a slowloris): both given up at 300 ms.
    let silent = TcpStream::connect(proxy.proxy_addr()).await.expect("tcp");
    let half = raw_send(proxy.proxy_addr(), &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).await;
    // Gone mid-handshake.
    let mut gone = TcpStream::connect(proxy.proxy_addr()).await.expect("tcp");
    gone.write_all(&[0x16, 0x03, 0x01]).await.expect("write");
    drop(gone);
    // A certificate the client does not trust, and no protocol in common.
    assert!(tls_connect(&proxy, "rotated-ca.pem", h2).await.is_err());
    assert!(tls_connect(&proxy, "ca.pem", &[b"spdy/3"]).await.is_err());

    let body = body_bytes(streaming).await;
    assert_eq!(count(&body, b"data: "), 20 + 1, "the good stream is whole");
    assert_eq!(good.chat(&proxy, "m").await.0, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let m = scrape(&proxy).await;
    let failed = |reason| m.get(family::TLS_HANDSHAKE_FAILURES.name, &[("reason", reason)]);
    let by_reason = [
        "timeout",
        "closed",
        "not_tls",
        "plain_http",
        "client_alert",
        "incompatible",
        "other",
    ]
    .map(|r| (r, failed(r)));
    assert_eq!(
        by_reason,
        [
            ("timeout", 2.0),
            ("closed", 1.0),
            ("not_tls", 1.0),
            ("plain_http", 1.0),
            ("client_alert", 1.0),
            ("incompatible", 1.0),
            ("other", 0.0)
        ]
    );
    assert_eq!(m.requests("m", "200", "ok"), 2.0);
    assert_eq!(m.get(family::HEAD_TIMEOUTS.name, &[]), 0.0);
    drop((garbage, silent, half));
}

#[tokio::test]
async fn the_tenant_is_read_from_the_bearer_token_over_tls_as_over_tcp() {
    let upstream = upstream(|_| content_stream(3, ms(1))).await;
    let key = "Yx3Qm0v8pH2wN5rT7sK9dL4fJ6gB1cZ+aE0uI2oR8yA=";
    let tenants =
        format!("max_models: 4\ntenants: {{bearer_hash: true, hash_key: \"{key}\", max: 4}}\n");
    let plain = proxy(&upstream.url(), &tenants).await;
    let tls = proxy(&upstream.url(), &format!("{tenants}{}", served())).await;
    let bearer = "Bearer sk-tenant-over-tls";
    let mut request = post(&plain, "/v1/chat/completions", &chat_request("m"));
    request
        .headers_mut()
        .insert("authorization", http::HeaderValue::from_static(bearer));
    assert_eq!(send(&client(), request).await.status, 200);
    for alpn in [&b"h2"[..], b"http/1.1"] {
        let stream = tls_connect(&tls, "ca.pem", &[alpn]).await.expect("tls");
        let mut sender = Sender::over(stream).await;
        let mut request = chat(&tls, sender.h2(), "m");
        request
            .headers_mut()
            .insert("authorization", http::HeaderValue::from_static(bearer));
        let answer = sender.head(request).await;
        assert_eq!(answer.status(), 200);
        body_bytes(answer).await;
    }
    settle(&plain).await;
    settle(&tls).await;
    let tenant_of = |m: &Metrics| {
        m.text
            .lines()
            .find(|l| l.starts_with(family::REQUESTS.name) && l.contains("tenant=\"t-"))
            .and_then(|l| l.split("tenant=\"").nth(1))
            .map(|rest| rest[..14].to_owned())
    };
    let (plain_m, tls_m) = (scrape(&plain).await, scrape(&tls).await);
    let tenant = tenant_of(&plain_m).expect("a tenant over TCP");
    assert_eq!(tenant_of(&tls_m), Some(tenant.clone()));
    let requests = tls_m.get(family::REQUESTS.name, &[("tenant", &tenant)]);
    assert_eq!(requests, 2.0);
}
