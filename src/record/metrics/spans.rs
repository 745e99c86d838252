//! The spans tokentap exported to an OpenTelemetry collector, and those it dropped, by reason
//! (docs/tracing.md). Registered whether or not `traces:` is on, all of them there from the start, so a
//! dashboard reads 0 rather than nothing.

use prometheus::IntCounter;

use super::family::{self, SPAN_DROP_REASONS};
use super::registry::Registrar;

/// `tokentap_spans_exported_total` and `tokentap_spans_dropped_total{reason}`, one counter per reason.
#[derive(Clone)]
pub struct SpanCounters {
    /// Spans the collector accepted.
    pub exported: IntCounter,
    /// Offered while `traces.queue` spans were waiting.
    pub queue_full: IntCounter,
    /// In an export that took longer than `traces.timeout`.
    pub timeout: IntCounter,
    /// Answered with a status other than 2xx, or named rejected in a partial success.
    pub rejected: IntCounter,
    /// In an export that found no connection, or whose connection broke before an answer.
    pub failed: IntCounter,
    /// Still queued when a shutdown's flush, or a replaced exporter's, ran out of time.
    pub shutdown: IntCounter,
    /// No room in the governor's `spans` budget (the request's client's share, or the cap).
    pub budget: IntCounter,
}

impl SpanCounters {
    pub(super) fn register(rows: &Registrar<'_>) -> Result<Self, prometheus::Error> {
        let dropped = rows.fixed_counter(&family::SPANS_DROPPED)?;
        let [queue_full, timeout, rejected, failed, shutdown, budget] =
            [0, 1, 2, 3, 4, 5].map(|i| dropped.with_label_values(&[SPAN_DROP_REASONS[i]]));
        Ok(SpanCounters {
            exported: rows.single_counter(&family::SPANS_EXPORTED)?,
            queue_full,
            timeout,
            rejected,
            failed,
            shutdown,
            budget,
        })
    }
}
