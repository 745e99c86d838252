//! `timeouts:` and `limits:`: how long a client or the upstream may take, and how much clients may
//! hold at once, on both ports; with the bounds the values must keep.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{invalid, values, ConfigError};

/// Every timeout is a duration above zero (`values::duration`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// Upstream TCP connect.
    #[serde(with = "values::duration")]
    pub connect: Duration,
    /// From forwarding a request to the upstream's response head (connect included).
    #[serde(with = "values::duration")]
    pub response_headers: Duration,
    /// Longest wait for the next upstream body frame, counted from the head or the last frame.
    #[serde(with = "values::duration")]
    pub idle: Duration,
    /// A client's request head must be complete within this, counted from the connection's start
    /// or from the first byte of a later request on a kept-alive connection (slowloris).
    #[serde(with = "values::duration")]
    pub client_header_read: Duration,
    /// A client connection with no request in progress is closed after this.
    #[serde(with = "values::duration")]
    pub client_idle: Duration,
    /// Longest wait for the next piece of a request body while it is forwarded (h1 and h2).
    #[serde(with = "values::duration")]
    pub request_body_idle: Duration,
    /// A body held whole before it is sent (`limits.hold_request_body_bytes`) must have arrived
    /// within this, counted from the request head, however steadily it trickles (and a client over
    /// its share of `budgets.held_bodies` waits for room within it too); else 408.
    #[serde(with = "values::duration")]
    pub held_request_body: Duration,
    /// An upstream connection unused for this long is closed; set below the upstream's own keep-alive.
    #[serde(with = "values::duration")]
    pub upstream_idle: Duration,
    /// Metrics port: once a client stops taking an answer (its socket is full), the rest must be taken
    /// within this, or the connection is closed.
    #[serde(with = "values::duration")]
    pub metrics_send: Duration,
    /// Metrics port: a request head must be complete within this, counted from the connection's start
    /// or the first byte of a later request (a scraper or probe sends its head at once).
    #[serde(with = "values::duration")]
    pub metrics_header_read: Duration,
    /// Metrics port: a connection with no request in progress is closed after this (a scraper
    /// reconnects cheaply).
    #[serde(with = "values::duration")]
    pub metrics_idle: Duration,
    /// An upgraded (WebSocket) session with no byte either way for this long is closed.
    #[serde(with = "values::duration")]
    pub session_idle: Duration,
}

/// Bounds on what clients may send and how many may connect at once.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Request line and headers (HTTP/1.1), or the header list size (h2); beyond it: 431.
    #[serde(with = "values::size")]
    pub max_request_header_bytes: usize,
    /// Request body; beyond it: 413.
    #[serde(with = "values::size")]
    pub max_request_body_bytes: u64,
    /// Client connections served at once; at it the oldest idle one is closed for a new one, and a new
    /// one is closed at once only when every one is busy.
    pub max_connections: usize,
    /// Upstream requests in progress at once (h1 requests and h2 streams alike); beyond it: 503.
    pub max_upstream_connections: usize,
    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS announced to each client connection.
    pub max_concurrent_streams: u32,
    /// Upstream requests one client connection may have in progress at once; `None`: the default
    /// share of `max_upstream_connections` ([`Limits::upstream_per_connection`]).
    pub max_upstream_per_connection: Option<usize>,
    /// Request bodies up to this size are read whole before an upstream slot is taken; 0: none.
    #[serde(with = "values::size")]
    pub hold_request_body_bytes: u64,
    /// Request bodies larger than `hold_request_body_bytes` one client address may be uploading at
    /// once (each holds an upstream slot while it does); beyond it: 503.
    pub max_streamed_uploads_per_client: usize,
    /// Connections served at once on the metrics port; at it the oldest idle one is closed for a new
    /// one (and, every one busy, a new one may still ask `/healthz` or `/readyz`).
    pub max_metrics_connections: usize,
    /// Upgraded (WebSocket) sessions open at once; beyond it an upgrade is answered 503 before
    /// anything goes upstream. A session holds no `max_upstream_connections` slot once upgraded.
    pub max_sessions: usize,
    /// Upgraded sessions one client address may have open at once (never above `max_sessions`);
    /// beyond it: 503.
    pub max_sessions_per_client: usize,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            response_headers: Duration::from_secs(600),
            idle: Duration::from_secs(600),
            client_header_read: Duration::from_secs(30),
            client_idle: Duration::from_secs(660),
            request_body_idle: Duration::from_secs(60),
            held_request_body: Duration::from_secs(60),
            upstream_idle: Duration::from_millis(1500),
            metrics_send: Duration::from_secs(60),
            metrics_header_read: Duration::from_secs(5),
            metrics_idle: Duration::from_secs(30),
            session_idle: Duration::from_secs(600),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_header_bytes: 64 << 10,
            max_request_body_bytes: 64 << 20,
            max_connections: 10_000,
            max_upstream_connections: 1024,
            max_concurrent_streams: 128,
            max_upstream_per_connection: None,
            hold_request_body_bytes: 1 << 20,
            max_streamed_uploads_per_client: 32,
            max_metrics_connections: 64,
            max_sessions: 1024,
            max_sessions_per_client: 128,
        }
    }
}

impl Limits {
    /// Largest `max_request_header_bytes`: the HTTP/1.1 read buffer must hold the whole head.
    pub const MAX_HEADER_BYTES: usize = 256 << 10;
    /// Smallest `max_request_header_bytes`: hyper's minimum read buffer.
    pub const MIN_HEADER_BYTES: usize = 8 << 10;
    pub const MAX_CONNECTIONS: usize = 1_000_000;
    pub const MAX_METRICS_CONNECTIONS: usize = 10_000;

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let h = self.max_request_header_bytes;
        if !(Self::MIN_HEADER_BYTES..=Self::MAX_HEADER_BYTES).contains(&h) {
            let reason = "must be between 8KiB and 256KiB (8192 to 262144 bytes)";
            let key = "limits.max_request_header_bytes";
            return Err(invalid(key, "size", &h.to_string(), reason));
        }
        if self.max_request_body_bytes < 1 << 10 {
            let (key, value) = (
                "limits.max_request_body_bytes",
                self.max_request_body_bytes.to_string(),
            );
            return Err(invalid(
                key,
                "size",
                &value,
                "must be at least 1KiB (1024 bytes)",
            ));
        }
        if !(1..=Self::MAX_CONNECTIONS).contains(&self.max_connections) {
            let (key, value) = ("limits.max_connections", self.max_connections.to_string());
            return Err(invalid(
                key,
                "value",
                &value,
                "must be between 1 and 1000000",
            ));
        }
        let upstream = self.max_upstream_connections;
        if !(1..=Self::MAX_CONNECTIONS).contains(&upstream) {
            let key = "limits.max_upstream_connections";
            let reason = "must be between 1 and 1000000";
            return Err(invalid(key, "value", &upstream.to_string(), reason));
        }
        if self.max_concurrent_streams == 0 {
            let (key, reason) = ("limits.max_concurrent_streams", "must be at least 1");
            return Err(invalid(key, "value", "0", reason));
        }
        if let Some(share) = self.max_upstream_per_connection {
            if !(1..=upstream).contains(&share) {
                let key = "limits.max_upstream_per_connection";
                let reason =
                    format!("must be between 1 and limits.max_upstream_connections ({upstream})");
                return Err(invalid(key, "value", &share.to_string(), reason));
            }
        }
        if self.max_streamed_uploads_per_client == 0 {
            let (key, reason) = (
                "limits.max_streamed_uploads_per_client",
                "must be at least 1",
            );
            return Err(invalid(key, "value", "0", reason));
        }
        let sessions = self.max_sessions;
        if !(1..=Self::MAX_CONNECTIONS).contains(&sessions) {
            let key = "limits.max_sessions";
            let reason = "must be between 1 and 1000000";
            return Err(invalid(key, "value", &sessions.to_string(), reason));
        }
        if self.max_sessions_per_client == 0 {
            let (key, reason) = ("limits.max_sessions_per_client", "must be at least 1");
            return Err(invalid(key, "value", "0", reason));
        }
        let metrics = self.max_metrics_connections;
        if !(1..=Self::MAX_METRICS_CONNECTIONS).contains(&metrics) {
            let key = "limits.max_metrics_connections";
            let reason = "must be between 1 and 10000";
            return Err(invalid(key, "value", &metrics.to_string(), reason));
        }
        Ok(())
    }

    /// Upstream requests one client connection may have in progress at once: the configured value, or a
    /// sixteenth of `max_upstream_connections` (64 of the default 1,024), so that a few h2 connections
    /// cannot take every slot.
    pub fn upstream_per_connection(&self) -> usize {
        self.max_upstream_per_connection
            .unwrap_or((self.max_upstream_connections / 16).max(1))
    }

    /// The largest body held whole: `hold_request_body_bytes`, never above `max_request_body_bytes`.
    pub fn held_body_bytes(&self) -> u64 {
        self.hold_request_body_bytes
            .min(self.max_request_body_bytes)
    }
}
