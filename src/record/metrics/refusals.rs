//! What tokentap's own limits turn away, counted: on the proxy port a connection beyond
//! `limits.max_connections` (or the idle one that made room for it), a head too slow or too large, a TLS handshake that failed, a request beyond
//! `limits.max_upstream_connections` or its connection's share of them, a WebSocket upgrade beyond
//! `limits.max_sessions` or its client's share (beside them, the sessions open); on the metrics port a connection beyond
//! `limits.max_metrics_connections` (or the idle one that made room for it), an answer not taken within `timeouts.metrics_send`, a live view
//! refused for want of a place, a `Host` not allowed. None of these is a request, so none is in
//! `tokentap_requests_total`; each has its own series, all of them there from the start.

use prometheus::{IntCounter, IntGauge};

use super::family;
use super::registry::Registrar;

/// What tokentap's own limits turned away before a request could be counted, or instead of
/// forwarding it. Unlabelled, or labelled from a fixed set: nothing a client sends chooses a series.
#[derive(Clone)]
pub struct Refusals {
    /// Client connections closed at once because `limits.max_connections` were open, every one busy.
    pub connections: IntCounter,
    /// Idle client connections closed at `limits.max_connections` to make room for a new one.
    pub reclaimed: IntCounter,
    /// Client connections closed because a request head was not complete in `client_header_read`.
    pub head_timeouts: IntCounter,
    /// HTTP/1.1 request heads hyper answered with 431 (or 414) because they were too large.
    pub header_too_large: IntCounter,
    /// Client connections to a `listen_tls` listener closed before their handshake completed, one
    /// counter per reason of [`TLS_HANDSHAKE_REASONS`], in its order.
    pub tls_handshakes: [IntCounter; TLS_HANDSHAKE_REASONS.len()],
    /// Requests answered 503 because `limits.max_upstream_connections` were in progress.
    pub upstream_requests: IntCounter,
    /// Requests answered 503 because their client connection had `limits.max_upstream_per_connection`
    /// upstream requests in progress.
    pub connection_share: IntCounter,
    /// Requests answered 503 because their client's share of the `held_bodies` budget had no room for
    /// their body in time.
    pub held_bytes: IntCounter,
    /// Requests whose body waited for room in their client's share of the `held_bodies` budget.
    pub held_bytes_waited: IntCounter,
    /// Requests answered 503 at `limits.max_streamed_uploads_per_client`.
    pub uploads_per_client: IntCounter,
    /// WebSocket upgrades refused, and the sessions open.
    pub sessions: SessionCounts,
    /// What the metrics port turned away: `tokentap_metrics_port_refused_total{reason}`.
    pub metrics_port: MetricsPortRefusals,
}

/// The upgraded sessions: those refused (`tokentap_sessions_refused_total{reason}`, one counter per
/// reason of [`SESSION_REFUSED_REASONS`]) and those open, the bound the refusals are counted against.
#[derive(Clone)]
pub struct SessionCounts {
    /// Upgrades answered 503 because `limits.max_sessions` sessions were open.
    pub full: IntCounter,
    /// Upgrades answered 503 because their client address had `limits.max_sessions_per_client` open.
    pub per_client: IntCounter,
    /// `tokentap_sessions_in_flight`.
    pub open: IntGauge,
}

pub use super::family::SESSION_REFUSED_REASONS;

pub use super::family::METRICS_PORT_REASONS;

pub use super::family::TLS_HANDSHAKE_REASONS;

/// The metrics port's refusals, one counter per reason of [`METRICS_PORT_REASONS`].
#[derive(Clone)]
pub struct MetricsPortRefusals {
    /// Connections refused because `limits.max_metrics_connections` were open, every one busy: closed
    /// at once, or, in a probe place, answered 503 for anything but `/healthz` and `/readyz`.
    pub connections: IntCounter,
    /// Connections closed because the client did not take an answer within `timeouts.metrics_send`.
    pub send_timeouts: IntCounter,
    /// `/api/v1/live` answered 503 because as many distinct views as it may hold were held or computing.
    pub live_busy: IntCounter,
    /// Requests answered 403 because their `Host` is not in `metrics.allowed_hosts`.
    pub host: IntCounter,
    /// Idle connections closed at `limits.max_metrics_connections` to make room for a new one.
    pub reclaimed: IntCounter,
    /// `POST /-/reload` answered 403 because a browser said it came from another site.
    pub cross_site: IntCounter,
}

impl Refusals {
    pub(super) fn register(rows: &Registrar<'_>) -> Result<Self, prometheus::Error> {
        Ok(Refusals {
            connections: rows.single_counter(&family::CONNECTIONS_REFUSED)?,
            reclaimed: rows.single_counter(&family::CONNECTIONS_RECLAIMED)?,
            head_timeouts: rows.single_counter(&family::HEAD_TIMEOUTS)?,
            header_too_large: rows.single_counter(&family::HEADER_TOO_LARGE)?,
            tls_handshakes: {
                let failures = rows.fixed_counter(&family::TLS_HANDSHAKE_FAILURES)?;
                std::array::from_fn(|i| failures.with_label_values(&[TLS_HANDSHAKE_REASONS[i]]))
            },
            upstream_requests: rows.single_counter(&family::UPSTREAM_REFUSED)?,
            connection_share: rows.single_counter(&family::CONNECTION_SHARE_REFUSED)?,
            held_bytes: rows.single_counter(&family::HELD_BYTES_REFUSED)?,
            held_bytes_waited: rows.single_counter(&family::HELD_BYTES_WAITED)?,
            uploads_per_client: rows.single_counter(&family::UPLOADS_PER_CLIENT_REFUSED)?,
            sessions: SessionCounts::register(rows)?,
            metrics_port: MetricsPortRefusals::register(rows)?,
        })
    }
}

impl SessionCounts {
    fn register(rows: &Registrar<'_>) -> Result<Self, prometheus::Error> {
        let refused = rows.fixed_counter(&family::SESSIONS_REFUSED)?;
        let [full, per_client] =
            [0, 1].map(|i| refused.with_label_values(&[SESSION_REFUSED_REASONS[i]]));
        Ok(SessionCounts {
            full,
            per_client,
            open: rows.single_gauge(&family::SESSIONS_IN_FLIGHT)?,
        })
    }
}

impl MetricsPortRefusals {
    pub(super) fn register(rows: &Registrar<'_>) -> Result<Self, prometheus::Error> {
        let family = rows.fixed_counter(&family::METRICS_PORT_REFUSED)?;
        let [connections, send_timeouts, live_busy, host, reclaimed, cross_site] =
            [0, 1, 2, 3, 4, 5].map(|i| family.with_label_values(&[METRICS_PORT_REASONS[i]]));
        Ok(MetricsPortRefusals {
            connections,
            send_timeouts,
            live_busy,
            host,
            reclaimed,
            cross_site,
        })
    }
}
