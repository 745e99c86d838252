//! The series of tokentap's own upstream connections: how many are idle, how they were closed, and how
//! many requests were sent again because a reused connection closed without answering them. Unlabelled,
//! so each is one series.

use prometheus::{IntCounter, IntGauge, Registry};

#[derive(Clone)]
pub struct UpstreamCounters {
    /// Idle connections kept for the next request, as of now.
    pub idle: IntGauge,
    /// Idle connections closed because the upstream closed them (or sent something unasked).
    pub closed_by_upstream: IntCounter,
    /// Idle connections tokentap closed after `timeouts.upstream_idle`.
    pub expired: IntCounter,
    /// Requests sent a second time on a new connection.
    pub resent: IntCounter,
}

impl UpstreamCounters {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let counter = |name: &str, help: &str| -> Result<IntCounter, prometheus::Error> {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let idle = IntGauge::new(
            "tokentap_upstream_idle_connections",
            "Upstream connections kept open, unused, for the next request.",
        )?;
        registry.register(Box::new(idle.clone()))?;
        Ok(UpstreamCounters {
            idle,
            closed_by_upstream: counter(
                "tokentap_upstream_idle_closed_by_upstream_total",
                "Idle upstream connections the upstream closed (its keep-alive timeout, a restart); none of them is used again.",
            )?,
            expired: counter(
                "tokentap_upstream_idle_expired_total",
                "Idle upstream connections tokentap closed after timeouts.upstream_idle.",
            )?,
            resent: counter(
                "tokentap_upstream_requests_resent_total",
                "Requests sent again on a new connection because a reused one closed without answering them.",
            )?,
        })
    }
}
