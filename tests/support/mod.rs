//! Test harness, one file a job; this file only re-exports, so a test file writes `use support::*;`.
//! - the scripted upstream is `tokentap::scripted` (raw HTTP/1.1 or TLS on loopback; faults are steps of
//!   its script; heads, chunks, OpenAI events), re-exported here with the two ways tests start it.
//! - `binary`: the built binary as a child process (signals, exit, log), blocking GETs and exchanges.
//! - `bodies`: request bodies: an agent's long history, bodies no agent sends.
//! - `held`: a request body held or streamed, and what the upstream saw when tokentap gave up on it.
//! - `fed`: a request body the test feeds by hand, to stall it on a stream.
//! - `proxy`: tokentap in-process, and what the test process holds (in flight, descriptors, memory).
//! - `client`: pooled h1/h2c clients, single h1/h2c connections to drop, what a client got.
//! - `raw`: raw bytes to the proxy port and the answer as bytes.
//! - `records`: the request records a test's tokentap writes, read back, and their JSON report.
//! - `scrape`: `/metrics` read back as samples.
//! - `scripts`: upstream scripts more than one suite answers with.
//! - `otlp`: a scripted OTLP/HTTP receiver (spans and metrics), decoding with the OpenTelemetry messages.
//! - `prometheus`: a real Prometheus on loopback scraping tokentap, and PromQL queries to it.
//! - `slot`: one test at a time that starts processes or loads the machine.
//! - `streams`: generated inputs (random cut points, proptest strategies).
//! - `tls`: the test TLS identity for an `https://` scripted upstream.
#![allow(dead_code)]

mod binary;
mod bodies;
mod client;
mod fed;
mod held;
mod otlp;
mod prometheus;
mod proxy;
mod raw;
mod records;
pub mod reloading;
mod scrape;
mod scripts;
mod slot;
pub mod streams;
mod tls;

// Each test binary uses a different part of the harness.
#[allow(unused_imports)]
pub use binary::*;
#[allow(unused_imports)]
pub use bodies::*;
#[allow(unused_imports)]
pub use client::*;
#[allow(unused_imports)]
pub use fed::*;
#[allow(unused_imports)]
pub use held::*;
#[allow(unused_imports)]
pub use otlp::*;
#[allow(unused_imports)]
pub use prometheus::*;
#[allow(unused_imports)]
pub use proxy::*;
#[allow(unused_imports)]
pub use raw::*;
#[allow(unused_imports)]
pub use records::*;
#[allow(unused_imports)]
pub use scrape::*;
#[allow(unused_imports)]
pub use scripts::*;
#[allow(unused_imports)]
pub use slot::*;
#[allow(unused_imports)]
pub use streams::{random_frames, Lcg};
#[allow(unused_imports)]
pub use tls::*;
#[allow(unused_imports)]
pub use tokentap::scripted::*;

use std::time::Duration;

/// A bound for a hang, not a timing: how long a test waits on the real clock for something that takes
/// milliseconds to seconds on a quiet machine (an answer, a process's start, a file's records) before it
/// calls it hung. A few times slower at load 10 is still far inside it; what is about time is measured
/// on tokio's paused clock or from recorded stamps instead (docs/testing.md, "Time in tests").
pub const HANG: Duration = Duration::from_secs(60);

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
    let scripted = Scripted::new(handler);
    let scripted = match tls {
        Some(acceptor) => scripted.tls(acceptor),
        None => scripted,
    };
    scripted
        .bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind the scripted upstream")
}

/// Waiting, in a test, for tokentap to close an upstream connection.
#[allow(async_fn_in_trait)]
pub trait WaitClosed {
    /// Waits (bounded by 5 s) until tokentap has closed upstream connection `i`; says when it did.
    async fn wait_closed(&self, i: usize) -> tokio::time::Instant;
    /// As `wait_closed`, with a bound of its own (on the paused clock it is virtual time).
    async fn wait_closed_within(&self, i: usize, bound: Duration) -> tokio::time::Instant;
}

impl WaitClosed for Upstream {
    async fn wait_closed(&self, i: usize) -> tokio::time::Instant {
        self.wait_closed_within(i, Duration::from_secs(5)).await
    }

    async fn wait_closed_within(&self, i: usize, bound: Duration) -> tokio::time::Instant {
        self.closed_within(i, bound)
            .await
            .expect("tokentap did not close the upstream connection")
    }
}
