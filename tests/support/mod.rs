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
    /// The trailer section of a chunked body, as its lines came (each ending in CRLF).
    pub trailers: String,
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
        ..RecordedRequest::default()
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
    let (body, trailers) = if chunked {
        read_chunked(rd, buf).await?
    } else {
        (read_exact_buffered(rd, buf, length).await?, String::new())
    };
    Some(RecordedRequest {
        body,
        trailers,
        ..request
    })
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

async fn read_chunked<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut Vec<u8>,
) -> Option<(Vec<u8>, String)> {
    let mut body = Vec::new();
    let mut trailers = String::new();
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
                let line: Vec<u8> = buf.drain(..pos + 2).collect();
                if pos == 0 {
                    return Some((body, trailers));
                }
                trailers.push_str(&String::from_utf8_lossy(&line));
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

/// A raw HTTP/1.1 connection to the proxy that the test can drop, as a client that goes away does:
/// abort the returned task (and drop the sender) to close it.
pub async fn open(
    proxy: &Running,
) -> (
    hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<()>,
) {
    let stream = tokio::net::TcpStream::connect(proxy.proxy_addr())
        .await
        .expect("connect");
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    (sender, task)
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

// ---- faults: what the plain script cannot do ----------------------------------------------------

/// One step of a faulty upstream's answer.
#[derive(Clone, Debug)]
pub enum Fault {
    /// A plain scripted step.
    Step(Step),
    /// Write these bytes one at a time, pausing between them.
    Trickle(Vec<u8>, Duration),
    /// Abort the connection with a TCP reset (SO_LINGER 0), whatever state the response is in.
    Reset,
}

impl From<Step> for Fault {
    fn from(step: Step) -> Self {
        Fault::Step(step)
    }
}

/// Starts an upstream like [`upstream`] whose script may also trickle bytes and reset the connection.
/// Each connection's log records its requests and when tokentap closed it.
pub async fn faulty_upstream(
    handler: impl Fn(&RecordedRequest) -> Vec<Fault> + Send + Sync + 'static,
) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let connections: Arc<Mutex<Vec<Arc<Mutex<ConnectionLog>>>>> = Arc::default();
    let peer_closed = Arc::new(Notify::new());
    let handler = Arc::new(handler);
    let (conns, notify) = (connections.clone(), peer_closed.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            stream.set_nodelay(true).ok();
            let log = Arc::new(Mutex::new(ConnectionLog::default()));
            conns.lock().expect("log").push(log.clone());
            let (handler, notify) = (handler.clone(), notify.clone());
            tokio::spawn(async move {
                let (mut rd, mut wr) = stream.into_split();
                let mut buf = Vec::new();
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
                    let faults = handler(&request);
                    let script = async {
                        for fault in faults {
                            match fault {
                                Fault::Step(Step::Raw(bytes)) => {
                                    if wr.write_all(&bytes).await.is_err() {
                                        return Some(false);
                                    }
                                }
                                Fault::Step(Step::Sleep(d)) => tokio::time::sleep(d).await,
                                Fault::Step(Step::Close) => return Some(false),
                                Fault::Trickle(bytes, pause) => {
                                    for b in bytes {
                                        if wr.write_all(&[b]).await.is_err() {
                                            return Some(false);
                                        }
                                        tokio::time::sleep(pause).await;
                                    }
                                }
                                Fault::Reset => return None,
                            }
                        }
                        Some(true)
                    };
                    let mut probe = [0u8; 1];
                    let outcome = tokio::select! {
                        done = script => done,
                        n = rd.read(&mut probe) => {
                            if matches!(n, Ok(0) | Err(_)) {
                                log.lock().expect("log").closed_by_peer_at = Some(Instant::now());
                                notify.notify_waiters();
                            }
                            Some(false)
                        }
                    };
                    log.lock().expect("log").script_done_at = Some(Instant::now());
                    match outcome {
                        Some(true) => continue,
                        Some(false) => {
                            let _ = wr.shutdown().await;
                            return;
                        }
                        None => {
                            if let Ok(stream) = rd.reunite(wr) {
                                stream.set_zero_linger().ok();
                            }
                            return;
                        }
                    }
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

impl Upstream {
    /// Waits (bounded by 5 s) until tokentap has closed upstream connection `i`; says when it did.
    pub async fn wait_closed(&self, i: usize) -> Instant {
        self.wait_closed_within(i, Duration::from_secs(5)).await
    }

    /// As [`Upstream::wait_closed`], with a bound of its own (on the paused clock it is virtual time).
    pub async fn wait_closed_within(&self, i: usize, bound: Duration) -> Instant {
        tokio::time::timeout(bound, async {
            loop {
                let notified = self.peer_closed.notified();
                if let Some(at) = self.closed_at(i) {
                    return at;
                }
                notified.await;
            }
        })
        .await
        .expect("tokentap did not close the upstream connection")
    }
}

// ---- raw clients: bytes no well-behaved client library would send ----------------------------------

/// Writes `request` as it is to the proxy port and reads the answer until the proxy closes the
/// connection (bounded by 5 s). Returns everything read.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("write request");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    answer
}

/// The status code of a raw HTTP/1.1 answer, 0 when there is none.
pub fn raw_status(answer: &[u8]) -> u16 {
    answer
        .strip_prefix(b"HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| std::str::from_utf8(code).ok())
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// A raw HTTP/1.1 answer's head (up to the blank line) and body bytes.
pub fn raw_split(answer: &[u8]) -> (String, Vec<u8>) {
    match answer.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(at) => (
            String::from_utf8_lossy(&answer[..at]).into_owned(),
            answer[at + 4..].to_vec(),
        ),
        None => (String::from_utf8_lossy(answer).into_owned(), Vec::new()),
    }
}

/// Decodes a chunked body (as written by the proxy); None when it is not complete and well-formed.
pub fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&body[..line_end]).ok()?.trim(), 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return (body == b"\r\n").then_some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size..)?.strip_prefix(b"\r\n")?;
    }
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Resident set size of this process in KiB.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

// ---- generated streams, for property tests ------------------------------------------------------

/// Strategies for OpenAI-style event streams mixing well-formed events with hostile ones.
pub mod streams {
    use proptest::prelude::*;

    /// One piece of a stream, good or hostile: token, role, text-completion and usage chunks, [DONE],
    /// comments with lone-CR endings, tool calls, error events, invalid JSON, invalid UTF-8, NUL bytes, a
    /// BOM, padding events of varied size and plain random bytes.
    pub fn piece() -> impl Strategy<Value = Vec<u8>> {
        let text = prop_oneof![
            "[a-z ]{0,8}",
            "[\\PC]{0,4}",
            Just("\\\"quoted\\\" \\u00e9 \\n".to_owned()),
        ];
        prop_oneof![
            text.clone().prop_map(|t| format!(
                "data: {{\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}}}}]}}\n\n"
            )
            .into_bytes()),
            Just(
                b"data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
                    .to_vec()
            ),
            text.prop_map(|t| format!("data: {{\"choices\":[{{\"text\":\"{t}\"}}]}}\r\n\r\n").into_bytes()),
            (0u64..1000, 0u64..1000).prop_map(|(p, c)| format!(
                "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{p},\"completion_tokens\":{c}}}}}\n\n"
            )
            .into_bytes()),
            Just(b"data: [DONE]\n\n".to_vec()),
            Just(b": ping\r\r".to_vec()),
            Just(b"event: x\nid: 7\nretry: 10\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{}]}}]}\n\n".to_vec()),
            Just(b"data: {\"error\":{\"message\":\"boom\"}}\n\n".to_vec()),
            Just(b"data: {not json\n\n".to_vec()),
            Just(b"data: {\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}]}\n\n".to_vec()),
            Just(b"data: \x00\x00\n\n".to_vec()),
            Just(b"\xEF\xBB\xBF".to_vec()),
            (0usize..600).prop_map(|n| format!("data: {{\"pad\":\"{}\"}}\n\n", "x".repeat(n)).into_bytes()),
            prop::collection::vec(any::<u8>(), 0..24),
        ]
    }

    /// A stream of up to `max_pieces` pieces.
    pub fn stream(max_pieces: usize) -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(piece(), 0..max_pieces).prop_map(|pieces| pieces.concat())
    }

    /// Cut points, applied with [`cut`].
    pub fn splits() -> impl Strategy<Value = Vec<usize>> {
        prop::collection::vec(any::<usize>(), 0..40)
    }

    /// Cuts `data` at the given points (taken modulo its length + 1, sorted, deduplicated).
    pub fn cut<'a>(data: &'a [u8], points: &[usize]) -> Vec<&'a [u8]> {
        let mut at: Vec<usize> = points
            .iter()
            .map(|p| p % (data.len() + 1))
            .chain([0, data.len()])
            .collect();
        at.sort_unstable();
        at.dedup();
        at.windows(2).map(|w| &data[w[0]..w[1]]).collect()
    }
}
