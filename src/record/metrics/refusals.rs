//! What tokentap's own limits turn away, counted: on the proxy port a connection beyond
//! `limits.max_connections`, a head too slow or too large, a request beyond
//! `limits.max_upstream_connections` or its connection's share of them; on the metrics port a connection beyond
//! `limits.max_metrics_connections`, an answer not taken within `timeouts.metrics_send`, a live view
//! refused for want of a place, a `Host` not allowed. None of these is a request, so none is in
//! `tokentap_requests_total`; each has its own series, all of them there from the start.

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

/// What tokentap's own limits turned away before a request could be counted, or instead of
/// forwarding it. Unlabelled, or labelled from a fixed set: nothing a client sends chooses a series.
#[derive(Clone)]
pub struct Refusals {
    /// Client connections closed at once because `limits.max_connections` were open.
    pub connections: IntCounter,
    /// Client connections closed because a request head was not complete in `client_header_read`.
    pub head_timeouts: IntCounter,
    /// HTTP/1.1 request heads hyper answered with 431 (or 414) because they were too large.
    pub header_too_large: IntCounter,
    /// Requests answered 503 because `limits.max_upstream_connections` were in progress.
    pub upstream_requests: IntCounter,
    /// Requests answered 503 because their client connection had `limits.max_upstream_per_connection`
    /// upstream requests in progress.
    pub connection_share: IntCounter,
    /// What the metrics port turned away: `tokentap_metrics_port_refused_total{reason}`.
    pub metrics_port: MetricsPortRefusals,
}

/// The values of `reason` on `tokentap_metrics_port_refused_total`, all exported from the start.
pub const METRICS_PORT_REASONS: [&str; 4] =
    ["max_connections", "send_timeout", "live_busy", "host"];

/// The metrics port's refusals, one counter per reason of [`METRICS_PORT_REASONS`].
#[derive(Clone)]
pub struct MetricsPortRefusals {
    /// Connections closed at once because `limits.max_metrics_connections` were open.
    pub connections: IntCounter,
    /// Connections closed because the client did not take an answer within `timeouts.metrics_send`.
    pub send_timeouts: IntCounter,
    /// `/api/v1/live` answered 503 because as many distinct views as it may hold were held or computing.
    pub live_busy: IntCounter,
    /// Requests answered 403 because their `Host` is not in `metrics.allowed_hosts`.
    pub host: IntCounter,
}

impl Refusals {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let counter = |name: &str, help: &str| -> Result<IntCounter, prometheus::Error> {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        Ok(Refusals {
            connections: counter(
                "tokentap_connections_refused_total",
                "Client connections closed at once because limits.max_connections were open.",
            )?,
            head_timeouts: counter(
                "tokentap_request_head_timeouts_total",
                "Client connections closed because a request head was not complete within timeouts.client_header_read.",
            )?,
            header_too_large: counter(
                "tokentap_request_header_too_large_total",
                "HTTP/1.1 request heads answered 431 (or 414) for being too large or having over 100 headers.",
            )?,
            upstream_requests: counter(
                "tokentap_upstream_requests_refused_total",
                "Requests answered 503 because limits.max_upstream_connections upstream requests were in progress.",
            )?,
            connection_share: counter(
                "tokentap_connection_share_refused_total",
                "Requests answered 503 because their client connection already had limits.max_upstream_per_connection upstream requests in progress.",
            )?,
            metrics_port: MetricsPortRefusals::register(registry)?,
        })
    }
}

impl MetricsPortRefusals {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let family = IntCounterVec::new(
            Opts::new(
                "tokentap_metrics_port_refused_total",
                "What the metrics port turned away, by reason: max_connections (limits.max_metrics_connections \
                 were open), send_timeout (an answer not taken within timeouts.metrics_send), live_busy \
                 (/api/v1/live answered 503: too many distinct views held), host (a Host not in \
                 metrics.allowed_hosts).",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(family.clone()))?;
        let [connections, send_timeouts, live_busy, host] =
            METRICS_PORT_REASONS.map(|reason| family.with_label_values(&[reason]));
        Ok(MetricsPortRefusals {
            connections,
            send_timeouts,
            live_busy,
            host,
        })
    }
}
