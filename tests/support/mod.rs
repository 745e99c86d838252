//! Test harness: a scripted upstream that speaks raw HTTP/1.1 over loopback (so a test controls every
//! byte, every pause and every reset, and sees when tokentap closes the connection), the proxy started
//! in-process, a client, and a small reader for the Prometheus text format.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokentap::{Config, Running};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;

/// One step of the upstream's answer.
#[derive(Clone, Debug)]
pub enum Step {
    /// Write these bytes as they are (one write, then flush).
    Raw(Vec<u8>),
    Sleep(Duration),
    /// Close the connection at once, whatever state the response is in.
    Close,
}

#[derive(Clone, Debug, Default)]
pub struct RecordedRequest {
    pub head: String,
    pub body: Vec<u8>,
}

impl RecordedRequest {
    pub fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or_default()
    }

    /// All values of a header (name compared case-insensitively).
    pub fn header(&self, name: &str) -> Vec<String> {
        self.head
            .lines()
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .filter(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
            .collect()
    }
}

#[derive(Debug, Default)]
pub struct ConnectionLog {
    pub requests: Vec<RecordedRequest>,
    /// When the proxy closed this connection while the script was still running or idle.
    pub closed_by_peer_at: Option<Instant>,
    /// When the script finished writing its last step.
    pub script_done_at: Option<Instant>,
}

type Handler = dyn Fn(&RecordedRequest) -> Vec<Step> + Send + Sync;

pub struct Upstream {
    pub addr: SocketAddr,
    pub connections: Arc<Mutex<Vec<Arc<Mutex<ConnectionLog>>>>>,
    pub peer_closed: Arc<Notify>,
}

impl Upstream {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn connection_count(&self) -> usize {
        self.connections.lock().map(|c| c.len()).unwrap_or_default()
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        let conns = self.connections.lock().expect("log");
        conns
            .iter()
            .flat_map(|c| c.lock().expect("log").requests.clone())
            .collect()
    }

    pub fn closed_at(&self, connection: usize) -> Option<Instant> {
        let conns = self.connections.lock().expect("log");
        conns
            .get(connection)
            .and_then(|c| c.lock().expect("log").closed_by_peer_at)
    }
}

/// Starts a scripted upstream on 127.0.0.1:0 that answers each request with `handler`'s steps.
pub async fn upstream(
    handler: impl Fn(&RecordedRequest) -> Vec<Step> + Send + Sync + 'static,
) -> Upstream {
    upstream_with(handler, None).await
}

/// As [`upstream`], over TLS when an acceptor is given.
pub async fn upstream_with(
    handler: impl Fn(&RecordedRequest) -> Vec<Step> + Send + Sync + 'static,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let connections: Arc<Mutex<Vec<Arc<Mutex<ConnectionLog>>>>> = Arc::default();
    let peer_closed = Arc::new(Notify::new());
    let handler: Arc<Handler> = Arc::new(handler);
    let (conns, notify) = (connections.clone(), peer_closed.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            stream.set_nodelay(true).ok();
            let log = Arc::new(Mutex::new(ConnectionLog::default()));
            conns.lock().expect("log").push(log.clone());
            let (handler, notify, tls) = (handler.clone(), notify.clone(), tls.clone());
            tokio::spawn(async move {
                match tls {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            serve_connection(stream, handler, log, notify).await;
                        }
                    }
                    None => serve_connection(stream, handler, log, notify).await,
                }
            });
        }
    });
    Upstream {
        addr,
        connections,
        peer_closed,
    }
}

async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    handler: Arc<Handler>,
    log: Arc<Mutex<ConnectionLog>>,
    notify: Arc<Notify>,
) {
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let Some(request) = read_request(&mut rd, &mut buf).await else {
            log.lock()
                .expect("log")
                .closed_by_peer_at
                .get_or_insert_with(Instant::now);
            notify.notify_waiters();
            return;
        };
        log.lock().expect("log").requests.push(request.clone());
        let steps = handler(&request);
        // Run the script while watching the read side: EOF there means the proxy closed the connection.
        let script = async {
            for step in steps {
                match step {
                    Step::Raw(bytes) => {
                        if wr.write_all(&bytes).await.is_err() || wr.flush().await.is_err() {
                            return false;
                        }
                    }
                    Step::Sleep(d) => tokio::time::sleep(d).await,
                    Step::Close => return false,
                }
            }
            true
        };
        let mut probe = [0u8; 1];
        let keep_going = tokio::select! {
            done = script => done,
            n = rd.read(&mut probe) => {
                if matches!(n, Ok(0) | Err(_)) {
                    log.lock().expect("log").closed_by_peer_at = Some(Instant::now());
                    notify.notify_waiters();
                }
                false
            }
        };
        log.lock().expect("log").script_done_at = Some(Instant::now());
        if !keep_going {
            let _ = wr.shutdown().await;
            return;
        }
    }
}

async fn read_request<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut Vec<u8>,
) -> Option<RecordedRequest> {
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let mut chunk = [0u8; 8192];
        let n = rd.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    buf.drain(..head_end);
    let request = RecordedRequest {
        head,
        body: Vec::new(),
    };
    let chunked = request
        .header("transfer-encoding")
        .iter()
        .any(|v| v.eq_ignore_ascii_case("chunked"));
    let length: usize = request
        .header("content-length")
        .first()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let body = if chunked {
        read_chunked(rd, buf).await?
    } else {
        read_exact_buffered(rd, buf, length).await?
    };
    Some(RecordedRequest { body, ..request })
}

async fn fill<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 65536];
    let n = rd.read(&mut chunk).await.ok()?;
    if n == 0 {
        return None;
    }
    buf.extend_from_slice(&chunk[..n]);
    Some(())
}

async fn read_exact_buffered<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut Vec<u8>,
    n: usize,
) -> Option<Vec<u8>> {
    while buf.len() < n {
        fill(rd, buf).await?;
    }
    Some(buf.drain(..n).collect())
}

async fn read_chunked<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(pos) = buf.windows(2).position(|w| w == b"\r\n") {
                break pos;
            }
            fill(rd, buf).await?;
        };
        let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        buf.drain(..line_end + 2);
        if size == 0 {
            // Trailers (if any) end with an empty line.
            loop {
                let pos = loop {
                    if let Some(pos) = buf.windows(2).position(|w| w == b"\r\n") {
                        break pos;
                    }
                    fill(rd, buf).await?;
                };
                buf.drain(..pos + 2);
                if pos == 0 {
                    return Some(body);
                }
            }
        }
        let data = read_exact_buffered(rd, buf, size + 2).await?;
        body.extend_from_slice(&data[..size]);
    }
}

// ---- building responses -------------------------------------------------------------------------

pub fn sse_head() -> Step {
    Step::Raw(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nx-upstream: scripted\r\ntransfer-encoding: chunked\r\n\r\n".to_vec())
}

/// One chunk of a chunked body.
pub fn chunk(data: &[u8]) -> Step {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    Step::Raw(out)
}

pub fn last_chunk() -> Step {
    Step::Raw(b"0\r\n\r\n".to_vec())
}

pub fn json_response(status: u16, reason: &str, body: &str) -> Step {
    Step::Raw(
        format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nx-upstream: scripted\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn content_chunk(text: &str) -> String {
    format!("data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n")
}

pub const ROLE_CHUNK: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n";

pub fn usage_chunk(prompt: u64, completion: u64) -> String {
    format!("data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{}}}}}\n\n", prompt + completion)
}

pub const DONE: &str = "data: [DONE]\n\n";

// ---- the proxy and its client -------------------------------------------------------------------

/// Starts tokentap in-process in front of `upstream_url`, both ports on 127.0.0.1:0, with extra YAML.
pub async fn proxy(upstream_url: &str, extra_yaml: &str) -> Running {
    let yaml = format!(
        "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {upstream_url}\n{extra_yaml}"
    );
    let config = Config::from_yaml_str(&yaml).expect("test config");
    tokentap::start(&config).await.expect("start tokentap")
}

pub type TestClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// What the client got.
#[derive(Debug)]
pub struct Received {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub frames: Vec<Bytes>,
    pub body: Vec<u8>,
    /// Err when the body broke off instead of ending cleanly.
    pub end: Result<(), String>,
    pub trailers: Option<http::HeaderMap>,
}

pub async fn send(client: &TestClient, request: http::Request<Full<Bytes>>) -> Received {
    let response = client.request(request).await.expect("response head");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let mut body = response.into_body();
    let (mut frames, mut all, mut trailers) = (Vec::new(), Vec::new(), None);
    let end = loop {
        match body.frame().await {
            None => break Ok(()),
            Some(Err(err)) => break Err(err.to_string()),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    all.extend_from_slice(&data);
                    frames.push(data);
                }
                Err(frame) => trailers = frame.into_trailers().ok(),
            },
        }
    };
    Received {
        status,
        headers,
        frames,
        body: all,
        end,
        trailers,
    }
}

pub fn post(proxy: &Running, path: &str, body: &str) -> http::Request<Full<Bytes>> {
    http::Request::post(format!("http://{}{path}", proxy.proxy_addr()))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request")
}

pub fn chat_request(model: &str) -> String {
    format!("{{\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}],\"model\":\"{model}\",\"stream\":true}}")
}

// ---- metrics ------------------------------------------------------------------------------------

pub async fn scrape(proxy: &Running) -> Metrics {
    let response = client()
        .request(
            http::Request::get(format!("http://{}/metrics", proxy.metrics_addr()))
                .body(Full::new(Bytes::new()))
                .expect("request"),
        )
        .await
        .expect("scrape");
    let text = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .to_vec(),
    )
    .expect("utf-8 exposition");
    Metrics::parse(&text)
}

/// The samples of one scrape: (name, labels) → value.
pub struct Metrics {
    pub text: String,
    samples: Vec<(String, HashMap<String, String>, f64)>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut samples = Vec::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let (series, value) = line.rsplit_once(' ').expect("sample line");
            let value: f64 = value.parse().expect("sample value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let rest = rest.trim_end_matches('}');
                    let labels = rest
                        .split("\",")
                        .filter(|kv| !kv.is_empty())
                        .filter_map(|kv| kv.split_once('='))
                        .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
                        .collect();
                    (name.to_owned(), labels)
                }
                None => (series.to_owned(), HashMap::new()),
            };
            samples.push((name, labels, value));
        }
        Metrics {
            text: text.to_owned(),
            samples,
        }
    }

    /// Sum of every sample of `name` whose labels include all of `labels`.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| *v)
            .sum()
    }

    pub fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.samples.iter().any(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
    }
}

/// Waits (bounded) until the proxy has no request in flight.
pub async fn settle(proxy: &Running) {
    for _ in 0..200 {
        if proxy.in_flight() == 0 {
            return;
        }
        tokio::time::sleep(ms(10)).await;
    }
}

/// A deterministic generator for split points (no rand dependency).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, bound: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % bound.max(1)
    }
}

/// Cuts `data` into frames at random points.
pub fn random_frames(data: &[u8], rng: &mut Lcg, max_frame: usize) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let n = 1 + rng.next(max_frame.min(rest.len()));
        let (head, tail) = rest.split_at(n.min(rest.len()));
        frames.push(head.to_vec());
        rest = tail;
    }
    frames
}
