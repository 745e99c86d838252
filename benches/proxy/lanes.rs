//! The field's yardstick: the lanes of the public LLM-gateway benchmark (GetBusbar/benchmarking,
//! published at onthebench.ai), re-implemented here so tokentap is measured the way users compare
//! gateways, beside nginx, HAProxy, the stack's floor and the direct path, in the same interleaved rounds.
//!
//! The mock is the field's: a role chunk at once, then 64 content deltas 20 ms apart (`upstream.rs`, no
//! prefill). Three lanes, each at concurrency 1:
//!
//! - **TTFT probes**: each probe opens a fresh connection, sends a streaming request, and stops at the
//!   first frame of the answer (the role chunk), then closes. Its time runs from before the connect to
//!   the frame's arrival at the client (as the field's client reads it), so a proxy's cost per
//!   connection (accepting it, opening one upstream: the client's leaving mid-stream closed the last)
//!   is in it. Probes are [`PROBE_GAP`] apart, so each finds the proxy idle.
//! - **Keep-alive window**: one connection, non-streaming requests back to back (a whole JSON chat
//!   completion each), each timed from its send to its last byte; the first [`WARM_REQUESTS`] do not
//!   count.
//! - **Paced frames**: streams of the 64 paced deltas on one keep-alive connection; each delta's delay
//!   on the wire runs from the mock's write (the instant in its JSON) to the kernel's receive timestamp
//!   of the client read that brought it (`Stamped`), one clock: what the path holds a frame, with none
//!   of the harness's own scheduling in it.
//!
//! "Added" is a target's figure minus the direct path's in the same round; the table gives the median
//! over the rounds of each per-round figure (`lane_table.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;

use tokentap::proxy::upstream::Arrival;

use crate::load::{connect_stamped, sent_ns};
use crate::target::Kind;
use crate::upstream::{now_ns, Script};

/// The field's stream: 64 deltas 20 ms apart after the role chunk.
pub const PACED: Script = Script {
    tokens: 64,
    gap: Duration::from_millis(20),
    prefill: Duration::ZERO,
};

/// The pause between two TTFT probes: the last probe's connections are torn down, the proxy idle.
const PROBE_GAP: Duration = Duration::from_millis(3);
/// Keep-alive requests sent before the window counts (the proxy's upstream connection is opened).
const WARM_REQUESTS: usize = 20;
/// Longest a probe, a request or a stream may take before it counts as an error.
const LIMIT: Duration = Duration::from_secs(10);

/// The field's request body (`max_tokens` as its load sends it).
const BODY: &str = concat!(
    r#"{"model":"bench-llama-8b","messages":[{"role":"user","content":"Say something."}],"#,
    r#""max_tokens":16,"stream":true}"#
);
const JSON_BODY: &str = concat!(
    r#"{"model":"bench-llama-8b","messages":[{"role":"user","content":"Say something."}],"#,
    r#""max_tokens":16}"#
);

/// How much each lane does per target per round.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub probes: usize,
    pub requests: usize,
    pub streams: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Self {
        if quick {
            Sizes {
                probes: 40,
                requests: 100,
                streams: 1,
            }
        } else {
            Sizes {
                probes: 300,
                requests: 1000,
                streams: 3,
            }
        }
    }
}

/// One target's lanes in one round, in nanoseconds.
#[derive(Debug, Default, Clone)]
pub struct LaneRun {
    pub ttft_ns: Vec<u64>,
    pub request_ns: Vec<u64>,
    pub frame_ns: Vec<u64>,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl LaneRun {
    fn error(&mut self, what: impl std::fmt::Display) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what.to_string());
        }
    }
}

/// The three lanes against `target`, one after the other.
pub async fn run(target: SocketAddr, sizes: Sizes) -> LaneRun {
    let mut run = LaneRun::default();
    for _ in 0..sizes.probes {
        match tokio::time::timeout(LIMIT, probe(target)).await {
            Ok(Ok(ns)) => run.ttft_ns.push(ns),
            Ok(Err(e)) => run.error(format!("probe: {e}")),
            Err(_) => run.error("probe: timed out"),
        }
        tokio::time::sleep(PROBE_GAP).await;
    }
    match tokio::time::timeout(
        LIMIT * 4,
        window(target, sizes.requests, &mut run.request_ns),
    )
    .await
    {
        Ok(Ok(())) => {}
        Ok(Err(e)) => run.error(format!("keep-alive window: {e}")),
        Err(_) => run.error("keep-alive window: timed out"),
    }
    for _ in 0..sizes.streams {
        match tokio::time::timeout(LIMIT, paced(target, &mut run.frame_ns)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => run.error(format!("paced stream: {e}")),
            Err(_) => run.error("paced stream: timed out"),
        }
    }
    run
}

fn request(body: &'static str, json: bool) -> Result<Request<Full<Bytes>>, String> {
    let mut request = Request::post("/v1/chat/completions")
        .header(header::HOST, "bench.local")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, "Bearer bench-token");
    if json {
        request = request.header("x-bench-json", "1");
    }
    let mut request = request
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .map_err(|e| e.to_string())?;
    PACED.headers(request.headers_mut());
    Ok(request)
}

/// A streaming request on a new connection: the answer's body (its head was a success), and when the
/// connection's reads reached its socket.
async fn stream(target: SocketAddr) -> Result<(Incoming, Arc<Arrival>), String> {
    let (mut sender, arrival) = connect_stamped(target).await?;
    let response = sender
        .send_request(request(BODY, false)?)
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("status {}", response.status()));
    }
    Ok((response.into_body(), arrival))
}

/// One TTFT probe on a fresh connection: from before the connect to the first frame of the answer.
pub async fn probe(target: SocketAddr) -> Result<u64, String> {
    let started = now_ns();
    let (mut body, _) = stream(target).await?;
    loop {
        match body.frame().await {
            Some(Ok(frame)) if frame.data_ref().is_some_and(|d| !d.is_empty()) => {
                return Ok(now_ns() - started)
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("the answer ended before its first frame".into()),
        }
    }
}

/// Whole JSON answers back to back on one connection; the ones after the warm-up timed into `times`.
async fn window(target: SocketAddr, requests: usize, times: &mut Vec<u64>) -> Result<(), String> {
    let (mut sender, _) = connect_stamped(target).await?;
    for i in 0..WARM_REQUESTS + requests {
        let started = now_ns();
        exchange(&mut sender).await?;
        if i >= WARM_REQUESTS {
            times.push(now_ns() - started);
        }
    }
    Ok(())
}

async fn exchange(sender: &mut SendRequest<Full<Bytes>>) -> Result<(), String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request(JSON_BODY, true)?)
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("status {}", response.status()));
    }
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    if body.to_bytes().is_empty() {
        return Err("an empty answer".into());
    }
    Ok(())
}

/// One paced stream: each content delta's delay from the mock's write to the client's socket.
async fn paced(target: SocketAddr, delays: &mut Vec<u64>) -> Result<(), String> {
    let (mut body, arrival) = stream(target).await?;
    let mut carry: Vec<u8> = Vec::with_capacity(1024);
    let mut deltas = 0u32;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string())?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        let now = now_ns();
        // The connection reads only once this frame is taken: the last read brought it.
        let landed = arrival.waited().map_or(now, |waited| {
            now.saturating_sub(u64::try_from(waited.as_nanos()).unwrap_or(0))
        });
        carry.extend_from_slice(data);
        let mut consumed = 0;
        while let Some(end) = memchr::memmem::find(&carry[consumed..], b"\n\n") {
            let event = &carry[consumed..consumed + end];
            consumed += end + 2;
            if memchr::memmem::find(event, b"\"delta\":{\"content\"").is_none() {
                continue;
            }
            let sent = sent_ns(event).ok_or("a delta without bench_sent_ns")?;
            delays.push(landed.saturating_sub(sent));
            deltas += 1;
        }
        carry.drain(..consumed);
    }
    if deltas != PACED.tokens {
        return Err(format!("{deltas}/{} deltas", PACED.tokens));
    }
    Ok(())
}

/// Every target's lanes, round after round, each round in a rotated order (each target takes each
/// position in turn); `progress` hears which target a round is at.
pub async fn rounds(
    kinds: &[Kind], addr: impl Fn(Kind) -> SocketAddr, rounds: usize, sizes: Sizes,
    progress: impl Fn(&str),
) -> Vec<Vec<(Kind, LaneRun)>> {
    let mut all = Vec::new();
    for round in 0..rounds {
        let mut order = kinds.to_vec();
        order.rotate_left(round % kinds.len().max(1));
        let mut this = Vec::new();
        for kind in order {
            progress(&format!("lanes round {} {}", round + 1, kind.name()));
            this.push((kind, run(addr(kind), sizes).await));
        }
        all.push(this);
    }
    all
}
