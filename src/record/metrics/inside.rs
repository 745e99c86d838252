//! The families that say what is inside a TTFT (docs/metrics.md, "Inside the TTFT"): the reasoning a
//! user waited through, the prompt tokens the server's prefix cache served, and the server's own
//! timings beside tokentap's.
//!
//! The time to first answer and the reasoning time are figures (`record::figure`), observed with the
//! others. These are resolved only when a request has the figure, once per request: a deployment whose
//! server reports no timings and whose model does not reason exports none of these series.

use prometheus::IntCounterVec;

use super::rebucket::Rebucketable;

use super::family;
use super::registry::Registrar;
use super::Series;
use crate::record::server::{Outside, ServerTimings};

pub struct Inside {
    reasoning_tokens: IntCounterVec,
    cached_input_tokens: IntCounterVec,
    server_queue: Rebucketable,
    server_ttft: Rebucketable,
    server_prefill: Rebucketable,
    server_generation: Rebucketable,
    outside: Rebucketable,
    outside_clamped: IntCounterVec,
}

impl Inside {
    pub fn register(rows: &mut Registrar<'_>) -> Result<Self, prometheus::Error> {
        Ok(Inside {
            reasoning_tokens: rows.counter(&family::REASONING_TOKENS)?,
            cached_input_tokens: rows.counter(&family::CACHED_INPUT_TOKENS)?,
            server_queue: rows.histogram(&family::SERVER_QUEUE)?,
            server_ttft: rows.histogram(&family::SERVER_TTFT)?,
            server_prefill: rows.histogram(&family::SERVER_PREFILL)?,
            server_generation: rows.histogram(&family::SERVER_GENERATION)?,
            outside: rows.histogram(&family::OUTSIDE_SERVER)?,
            outside_clamped: rows.counter(&family::OUTSIDE_SERVER_CLAMPED)?,
        })
    }

    fn labels(series: &Series) -> [&str; 2] {
        [&*series.model, series.api.as_str()]
    }

    /// A finished request's token counts from the usage details, where it has them.
    pub fn count_tokens(&self, series: &Series, reasoning: Option<u64>, cached: Option<u64>) {
        let labels = Self::labels(series);
        if let Some(n) = reasoning.filter(|&n| n > 0) {
            self.reasoning_tokens.with_label_values(&labels).inc_by(n);
        }
        if let Some(n) = cached {
            self.cached_input_tokens
                .with_label_values(&labels)
                .inc_by(n);
        }
    }

    /// A finished request's server-reported timings, and the part of its TTFT outside the server.
    pub fn observe_server(
        &self, series: &Series, server: &ServerTimings, outside: Option<Outside>,
    ) {
        let labels = Self::labels(series);
        let families = [
            (&self.server_queue, server.queue),
            (&self.server_ttft, server.ttft),
            (&self.server_prefill, server.prefill),
            (&self.server_generation, server.generation),
            (&self.outside, outside.map(|o| o.duration)),
        ];
        for (family, value) in families {
            if let Some(value) = value {
                family
                    .with_label_values(&labels)
                    .observe(value.as_secs_f64());
            }
        }
        if outside.is_some_and(|o| o.clamped) {
            self.outside_clamped.with_label_values(&labels).inc();
        }
    }
}
