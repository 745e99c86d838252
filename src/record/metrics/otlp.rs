//! The metric exports tokentap pushed to an OpenTelemetry collector (`otlp_metrics:`), and those it
//! dropped, by reason (docs/tracing.md, "Metrics over OTLP"). Registered whether or not
//! `otlp_metrics:` is on, all of them there from the start, so a dashboard reads 0 rather than nothing.

use prometheus::IntCounter;

use super::family::{self, OTLP_METRIC_DROP_REASONS};
use super::registry::Registrar;

/// `tokentap_otlp_metric_exports_total` and `tokentap_otlp_metric_exports_dropped_total{reason}`.
#[derive(Clone)]
pub struct OtlpMetricCounters {
    pub exported: IntCounter,
    pub timeout: IntCounter,
    pub rejected: IntCounter,
    pub failed: IntCounter,
    pub skipped: IntCounter,
}

impl OtlpMetricCounters {
    pub(super) fn register(rows: &Registrar<'_>) -> Result<Self, prometheus::Error> {
        let dropped = rows.fixed_counter(&family::OTLP_METRIC_EXPORTS_DROPPED)?;
        let [timeout, rejected, failed, skipped] =
            [0, 1, 2, 3].map(|i| dropped.with_label_values(&[OTLP_METRIC_DROP_REASONS[i]]));
        Ok(OtlpMetricCounters {
            exported: rows.single_counter(&family::OTLP_METRIC_EXPORTS)?,
            timeout,
            rejected,
            failed,
            skipped,
        })
    }
}
