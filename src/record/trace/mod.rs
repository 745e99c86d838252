//! Traces (`traces:`, docs/tracing.md): each finished request may become one OpenTelemetry span in the
//! trace its caller and its server already share, exported with OTLP/HTTP after the request has ended.
//! Nothing here runs on the forwarding path but [`context::ids_for`] at admission (the trace a request
//! joins, its span's id: `tap/identity.rs`) and, with `traces.propagate`, [`context::propagate`] on the
//! head sent upstream (`proxy/rewrite.rs`). The span itself is built by the emitter's span sink
//! (`record/emit/spans.rs`) from the finished request.
//!
//! - `context.rs`: `traceparent`/`tracestate`, the ids, the rewrite `propagate` makes;
//! - `sample.rs`: the decision at the end (a ratio, and every SLO miss, failure or sampling caller);
//! - `span.rs`: the span as a plain value;
//! - `otlp.rs`: the protobuf encoding (the OpenTelemetry project's messages);
//! - `export.rs`: the bounded queue and the background task that batches and posts;
//! - `post.rs`: the collector's HTTP connection.

use crate::govern::{Budget, Governor};
use std::sync::Arc;

use http::Uri;

use crate::config::Config;
use crate::record::metrics::SpanCounters;

pub mod context;
pub mod export;
pub mod otlp;
pub mod post;
pub mod sample;
pub mod span;

pub use context::{ids_for, propagate, TraceContext};
pub use export::SpanExporter;
pub use post::SetupError;
pub use sample::{Ending, Sampler};
pub use span::Span;

/// Traces for a running tokentap: the sampler, the exporter (shared with the shutdown, which flushes
/// it) and what every span says of the upstream.
pub struct Tracing {
    pub sampler: Sampler,
    pub exporter: Arc<SpanExporter>,
    /// The upstream's host and port (`server.address`, `server.port`).
    pub server: (String, u16),
}

impl Tracing {
    /// Starts the exporter when `traces:` is configured (on the current runtime).
    pub fn start(
        config: &Config, counters: SpanCounters, governor: &Governor,
    ) -> Result<Option<Self>, SetupError> {
        let Some(traces) = &config.traces else {
            return Ok(None);
        };
        let budget = governor.pool(Budget::Spans).clone();
        let exporter = Arc::new(SpanExporter::start(traces, counters, budget)?);
        Ok(Tracing::with_exporter(config, exporter))
    }

    /// Traces for `config` sent through an exporter already running (a reload that left `traces:` as
    /// it was); `None` without `traces:`.
    pub fn with_exporter(config: &Config, exporter: Arc<SpanExporter>) -> Option<Self> {
        let traces = config.traces.as_ref()?;
        Some(Tracing {
            sampler: Sampler::new(&traces.sample),
            exporter,
            server: server(&config.upstream),
        })
    }
}

/// The upstream's host (without an IPv6 literal's brackets) and port.
pub fn server(upstream: &Uri) -> (String, u16) {
    let host = upstream.host().unwrap_or_default();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let https = upstream.scheme_str() == Some("https");
    let port = upstream.port_u16().unwrap_or(if https { 443 } else { 80 });
    (host.to_owned(), port)
}
