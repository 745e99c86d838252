//! The load generator: K users, each on its own keep-alive HTTP/1.1 connection, sending streaming chat
//! requests back to back until the phase ends. Every SSE event is timestamped when its bytes arrive; the
//! upstream's send time inside it gives the exact delivery latency of that chunk. The clients' sockets
//! also give the kernel's receive timestamp of each read (tokentap's own `Stamped`), so each chunk's
//! latency is known twice: to the client's parse, and to the client's socket (which leaves out the
//! harness's own scheduling, the same on every path).
//!
//! Only requests sent after the warm-up count toward latency figures; only events received inside the
//! measuring window `[warmup, duration)` count toward throughput, so the proxy's CPU can be read over the
//! very same window.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokentap::proxy::upstream::{Arrival, Stamped};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::upstream::{now_ns, Script};

#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub target: SocketAddr,
    pub users: usize,
    pub script: Script,
    /// Users start spread over this much time, so connections are not opened in one burst.
    pub ramp: Duration,
    pub warmup: Duration,
    /// No new request is sent after this (from the phase start); streams already open finish.
    pub duration: Duration,
}

/// What the users saw, merged.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    /// Per content chunk: client receive − upstream send, ns.
    pub chunk_ns: Vec<u64>,
    /// Per stamped event (the role chunk, each content chunk, the usage chunk): its bytes reaching the
    /// client's socket (the kernel's receive timestamp) − upstream send, ns; empty where the socket gives
    /// no timestamps.
    pub socket_ns: Vec<u64>,
    /// Per request: first content chunk received − request sent, ns (client TTFT).
    pub ttft_ns: Vec<u64>,
    /// Per request: what the path adds to TTFT: (upstream got the request − client sent it) + first
    /// content chunk's delivery latency. The upstream's prefill is not in it.
    pub ttft_path_ns: Vec<u64>,
    /// Client-side gaps between consecutive content chunks, ns.
    pub itl_ns: Vec<u64>,
    /// Events (any kind) received inside the measuring window.
    pub window_events: u64,
    pub requests_ok: u64,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl Samples {
    fn merge(&mut self, other: Samples) {
        self.chunk_ns.extend(other.chunk_ns);
        self.socket_ns.extend(other.socket_ns);
        self.ttft_ns.extend(other.ttft_ns);
        self.ttft_path_ns.extend(other.ttft_path_ns);
        self.itl_ns.extend(other.itl_ns);
        self.window_events += other.window_events;
        self.requests_ok += other.requests_ok;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    fn error(&mut self, what: impl std::fmt::Display) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what.to_string());
        }
    }
}

const REQUEST_BODY: &str = concat!(
    r#"{"model":"bench-llama-8b","stream":true,"stream_options":{"include_usage":true},"#,
    r#""max_tokens":4096,"messages":[{"role":"system","content":"You are a helpful assistant."},"#,
    r#"{"role":"user","content":"Write a long story about a proxy that measures every token."}]}"#
);

/// Runs one phase to its end (bounded: `duration` + one stream + `grace`) and returns the merged samples.
pub async fn run(spec: Spec, grace: Duration) -> Samples {
    let start = now_ns();
    let mut users = JoinSet::new();
    for i in 0..spec.users {
        users.spawn(user(spec, i, start, None));
    }
    let hard_stop =
        spec.duration + spec.script.prefill + spec.script.gap * spec.script.tokens + grace;
    let mut all = Samples::default();
    let deadline = tokio::time::Instant::now() + hard_stop;
    loop {
        match tokio::time::timeout_at(deadline, users.join_next()).await {
            Ok(Some(Ok(samples))) => all.merge(samples),
            Ok(Some(Err(err))) => all.error(format!("user task: {err}")),
            Ok(None) => break,
            Err(_) => {
                let left = users.len();
                all.errors += left as u64;
                all.first_error
                    .get_or_insert(format!("{left} users still streaming at the hard stop"));
                users.shutdown().await;
                break;
            }
        }
    }
    all
}

/// Opens `users` long streams and keeps them open until the returned set is dropped or shut down;
/// `open` counts streams that have received their first content chunk.
pub fn hold(spec: Spec, open: Arc<AtomicUsize>, first_user: usize) -> JoinSet<Samples> {
    let start = now_ns();
    let mut users = JoinSet::new();
    for i in 0..spec.users {
        users.spawn(user(spec, first_user + i, start, Some(open.clone())));
    }
    users
}

/// One HTTP/1.1 connection (nodelay) driven by its own task; the benchmark's only client handshake.
pub async fn connect(target: SocketAddr) -> Result<SendRequest<Full<Bytes>>, String> {
    Ok(connect_stamped(target).await?.0)
}

/// A connection as [`connect`], and when the bytes of its last read reached its socket.
pub async fn connect_stamped(
    target: SocketAddr,
) -> Result<(SendRequest<Full<Bytes>>, Arc<Arrival>), String> {
    let stream = TcpStream::connect(target)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let arrival = Arc::<Arrival>::default();
    let stream = Stamped::new(stream, arrival.clone());
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok((sender, arrival))
}

async fn user(spec: Spec, index: usize, start: u64, open: Option<Arc<AtomicUsize>>) -> Samples {
    let mut samples = Samples::default();
    let offset = spec.ramp.mul_f64(index as f64 / spec.users.max(1) as f64);
    tokio::time::sleep(offset).await;
    let warmup_ns = start + spec.warmup.as_nanos() as u64;
    let end_ns = start + spec.duration.as_nanos() as u64;
    let mut sender: Option<(SendRequest<Full<Bytes>>, Arc<Arrival>)> = None;
    let mut failures = 0u32;
    while now_ns() < end_ns && failures < 50 {
        let mut s = match sender.take() {
            Some(s) => s,
            None => match connect_stamped(spec.target).await {
                Ok(s) => s,
                Err(e) => {
                    samples.error(e);
                    failures += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        if s.0.ready().await.is_err() {
            continue;
        }
        match stream_once(
            &mut s.0,
            &s.1,
            &spec,
            warmup_ns,
            end_ns,
            &mut samples,
            open.as_deref(),
        )
        .await
        {
            Ok(()) => sender = Some(s),
            Err(e) => {
                samples.error(e);
                failures += 1;
            }
        }
    }
    samples
}

/// The path every request is sent to: `/v1/chat/completions`, or `BENCH_PATH` (a path no dialect
/// serves, such as `/v1/unread`, measures the forwarding without the meter: the meter's own part is
/// the difference).
fn request_path() -> String {
    std::env::var("BENCH_PATH").unwrap_or_else(|_| "/v1/chat/completions".to_owned())
}

async fn stream_once(
    sender: &mut SendRequest<Full<Bytes>>, arrival: &Arrival, spec: &Spec, warmup_ns: u64,
    end_ns: u64, samples: &mut Samples, open: Option<&AtomicUsize>,
) -> Result<(), String> {
    let mut request = Request::post(request_path())
        .header(header::HOST, "bench.local")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "text/event-stream")
        .body(Full::new(Bytes::from_static(REQUEST_BODY.as_bytes())))
        .map_err(|e| format!("request: {e}"))?;
    spec.script.headers(request.headers_mut());
    let sent = now_ns();
    let measured = sent >= warmup_ns;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("send: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("status {}", response.status()));
    }
    let upstream_recv = response
        .headers()
        .get("x-bench-recv-ns")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut body = response.into_body();
    let mut carry: Vec<u8> = Vec::with_capacity(512);
    let mut contents = 0u32;
    let mut last_content: Option<u64> = None;
    let mut done = false;
    let mut local_chunks: Vec<u64> = Vec::new();
    let mut local_socket: Vec<u64> = Vec::new();
    let mut local_itl: Vec<u64> = Vec::new();
    let mut ttft = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("body: {e}"))?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        let now = now_ns();
        // Its connection reads only once this frame is taken, so the last read is the one that brought it.
        let landed = arrival
            .waited()
            .map(|waited| now.saturating_sub(u64::try_from(waited.as_nanos()).unwrap_or(0)));
        carry.extend_from_slice(data);
        let mut consumed = 0;
        while let Some(end) = memchr::memmem::find(&carry[consumed..], b"\n\n") {
            let event = &carry[consumed..consumed + end];
            consumed += end + 2;
            if (warmup_ns..end_ns).contains(&now) {
                samples.window_events += 1;
            }
            if event == b"data: [DONE]" {
                done = true;
                continue;
            }
            if let Some((landed, sent_at)) = landed.zip(sent_ns(event)) {
                local_socket.push(landed.saturating_sub(sent_at));
            }
            let is_content = memchr::memmem::find(event, b"\"delta\":{\"content\"").is_some();
            if !is_content {
                continue;
            }
            let sent_at = sent_ns(event).ok_or("chunk without bench_sent_ns")?;
            contents += 1;
            if contents == 1 {
                ttft = Some((now - sent, now.saturating_sub(sent_at)));
                if let Some(open) = open {
                    open.fetch_add(1, Ordering::Relaxed);
                }
            }
            local_chunks.push(now.saturating_sub(sent_at));
            if let Some(last) = last_content {
                local_itl.push(now - last);
            }
            last_content = Some(now);
        }
        carry.drain(..consumed);
    }
    if !done || contents != spec.script.tokens {
        return Err(format!(
            "short stream: {contents}/{} tokens, [DONE] {done}",
            spec.script.tokens
        ));
    }
    samples.requests_ok += 1;
    if measured {
        samples.chunk_ns.extend(local_chunks);
        samples.socket_ns.extend(local_socket);
        samples.itl_ns.extend(local_itl);
        if let Some((ttft, first_delivery)) = ttft {
            samples.ttft_ns.push(ttft);
            if let Some(recv) = upstream_recv {
                samples
                    .ttft_path_ns
                    .push(recv.saturating_sub(sent) + first_delivery);
            }
        }
    }
    Ok(())
}

pub fn sent_ns(event: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"bench_sent_ns\":";
    let at = memchr::memmem::rfind(event, KEY)? + KEY.len();
    let digits = event[at..].iter().take_while(|b| b.is_ascii_digit());
    let mut n = 0u64;
    let mut any = false;
    for &d in digits {
        n = n * 10 + u64::from(d - b'0');
        any = true;
    }
    any.then_some(n)
}
