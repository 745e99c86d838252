//! The series of tokentap's own upstream connections: how many are idle, how they were closed, and how
//! many requests were sent again because a reused connection closed without answering them. Unlabelled,
//! so each is one series.

use prometheus::{IntCounter, IntGauge};

use super::family;
use super::registry::Registrar;

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
    pub(super) fn register(rows: &Registrar<'_>) -> Result<Self, prometheus::Error> {
        Ok(UpstreamCounters {
            idle: rows.single_gauge(&family::UPSTREAM_IDLE)?,
            closed_by_upstream: rows.single_counter(&family::UPSTREAM_CLOSED_BY_UPSTREAM)?,
            expired: rows.single_counter(&family::UPSTREAM_EXPIRED)?,
            resent: rows.single_counter(&family::UPSTREAM_RESENT)?,
        })
    }
}
