//! The scripted upstream: an OpenAI-compatible chat endpoint that streams like vLLM (a role-only chunk at
//! once, content chunks after a prefill delay at a fixed rate, a usage chunk, `[DONE]`). Each chunk's JSON
//! carries `"bench_sent_ns"`, the instant it was handed to the socket on this process's clock, and the
//! response head carries `x-bench-recv-ns`, when the request reached the upstream: the load generator
//! runs in the same process, so client receive time − upstream send time is exact.
//!
//! The script comes with each request, in headers every proxy passes on: `x-bench-tokens`,
//! `x-bench-gap-us`, `x-bench-prefill-us`.

use std::convert::Infallible;
use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::time::{Instant, Sleep};

static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();

/// Connections the upstream has accepted: shows whether a proxy pools its upstream connections.
pub static ACCEPTED: AtomicU64 = AtomicU64::new(0);

/// Nanoseconds since this process's benchmark epoch (monotonic; shared by upstream and load generator).
pub fn now_ns() -> u64 {
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

pub const MODEL: &str = "bench-llama-8b";
const WORDS: [&str; 8] = [
    " the", " model", " streams", " tokens", " while", " latency", " stays", " low",
];

/// One stream's script, read from the request headers.
#[derive(Debug, Clone, Copy)]
pub struct Script {
    pub tokens: u32,
    pub gap: Duration,
    pub prefill: Duration,
}

impl Script {
    pub fn headers(&self, headers: &mut HeaderMap) {
        let mut put = |name: &'static str, value: u128| {
            if let Ok(v) = HeaderValue::from_str(&value.to_string()) {
                headers.insert(name, v);
            }
        };
        put("x-bench-tokens", self.tokens.into());
        put("x-bench-gap-us", self.gap.as_micros());
        put("x-bench-prefill-us", self.prefill.as_micros());
    }

    fn from_headers(headers: &HeaderMap) -> Script {
        let num = |name: &str, default: u64| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        Script {
            tokens: num("x-bench-tokens", 16) as u32,
            gap: Duration::from_micros(num("x-bench-gap-us", 20_000)),
            prefill: Duration::from_micros(num("x-bench-prefill-us", 0)),
        }
    }
}

/// Binds `127.0.0.1:0` and serves the script on it until the process ends; returns the address.
pub async fn spawn() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let _ = stream.set_nodelay(true);
            ACCEPTED.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let service = service_fn(serve);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

async fn serve(request: Request<Incoming>) -> Result<Response<ScriptedStream>, Infallible> {
    let recv_ns = now_ns();
    let script = Script::from_headers(request.headers());
    // Read the (small) request body so the connection stays reusable.
    let _ = request.into_body().collect().await;
    let mut response = Response::new(ScriptedStream::new(script));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&recv_ns.to_string()) {
        headers.insert("x-bench-recv-ns", v);
    }
    Ok(response)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Role,
    Content,
    Usage,
    Done,
    End,
}

pub struct ScriptedStream {
    script: Script,
    state: State,
    sent: u32,
    next: Instant,
    sleep: Pin<Box<Sleep>>,
    id: u64,
}

impl ScriptedStream {
    fn new(script: Script) -> Self {
        let next = Instant::now() + script.prefill;
        ScriptedStream {
            script,
            state: State::Role,
            sent: 0,
            next,
            sleep: Box::pin(tokio::time::sleep_until(next)),
            id: now_ns(),
        }
    }

    fn chunk(&self, choices: &str, extra: &str) -> Bytes {
        let mut out = Vec::with_capacity(320);
        let _ = write!(
            out,
            "data: {{\"id\":\"chatcmpl-{:016x}\",\"object\":\"chat.completion.chunk\",\"created\":1796207719,\"model\":\"{MODEL}\",\"choices\":[{choices}]{extra},\"bench_sent_ns\":{}}}\n\n",
            self.id,
            now_ns()
        );
        Bytes::from(out)
    }
}

impl Body for ScriptedStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        let bytes = match this.state {
            State::Role => {
                this.state = if this.script.tokens == 0 {
                    State::Usage
                } else {
                    State::Content
                };
                this.chunk(
                    r#"{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}"#,
                    "",
                )
            }
            State::Content => {
                if Instant::now() < this.next {
                    this.sleep.as_mut().reset(this.next);
                    ready!(this.sleep.as_mut().poll(cx));
                }
                let word = WORDS[this.sent as usize % WORDS.len()];
                this.sent += 1;
                let last = this.sent == this.script.tokens;
                let finish = if last { "\"length\"" } else { "null" };
                let choices = format!(
                    r#"{{"index":0,"delta":{{"content":"{word}"}},"logprobs":null,"finish_reason":{finish}}}"#
                );
                if last {
                    this.state = State::Usage;
                } else {
                    this.next += this.script.gap;
                }
                this.chunk(&choices, "")
            }
            State::Usage => {
                this.state = State::Done;
                let usage = format!(
                    r#","usage":{{"prompt_tokens":24,"total_tokens":{},"completion_tokens":{}}}"#,
                    24 + this.script.tokens,
                    this.script.tokens
                );
                this.chunk("", &usage)
            }
            State::Done => {
                this.state = State::End;
                Bytes::from_static(b"data: [DONE]\n\n")
            }
            State::End => return Poll::Ready(None),
        };
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }

    fn is_end_stream(&self) -> bool {
        self.state == State::End
    }
}
