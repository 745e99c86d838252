//! The ceiling on the number of exported series, computed from the configuration.
//!
//! Every label is bounded: `model` by [`super::ModelLabels::max_values`], `api` by [`Api::ALL`], `status`
//! by [`super::status_labels`], `outcome`, `slo`, `token_source` and `reason` by their enums, and each
//! histogram exports its boundaries plus `+Inf`, `_sum` and `_count`. A (model, api) pair of a known API
//! can hold every family; the `other` API only `requests_total`, E2E, goodput and an E2E violation.
//! Counters and gauges without labels are one series each, counted as registered. The sum is the most
//! series the process can ever export, whatever clients and the upstream send.

use crate::config::{Config, Slo, SloKind};
use crate::record::api::Api;

use super::{inside, status_labels};

/// The gauge holding the ceiling.
pub const LIMIT: &str = "tokentap_metrics_series_limit";
/// The values of the `outcome` label (`record::outcome::Outcome`).
const OUTCOMES: usize = 4;
/// The values of the `token_source` label (`tokens::TokenSource`).
const TOKEN_SOURCES: usize = 4;
/// The values of the `reason` label of `tokentap_metering_skipped_total` (`record::finished::SkipReason`).
const SKIP_REASONS: usize = 2;

/// The bucket boundaries of each histogram: the configured buckets plus every SLO ceiling of its kind.
pub struct Boundaries {
    pub ttft: Vec<f64>,
    /// The time to first answer: the TTFT buckets and its own ceilings.
    pub time_to_first_answer: Vec<f64>,
    /// Inter-token latency and the max inter-token gap.
    pub itl: Vec<f64>,
    pub tpot: Vec<f64>,
    pub e2e: Vec<f64>,
    pub generation: Vec<f64>,
    pub tokens_per_second: Vec<f64>,
}

pub(super) fn with_boundaries(base: &[f64], extra: &[f64]) -> Vec<f64> {
    let mut all: Vec<f64> = base.iter().chain(extra).copied().collect();
    all.sort_by(f64::total_cmp);
    all.dedup();
    all
}

impl Boundaries {
    pub fn of(config: &Config) -> Self {
        let (b, slo) = (&config.buckets, &config.slo);
        Boundaries {
            ttft: with_boundaries(&b.ttft, &slo.boundaries(SloKind::Ttft)),
            time_to_first_answer: with_boundaries(
                &b.ttft,
                &slo.boundaries(SloKind::TimeToFirstAnswer),
            ),
            itl: with_boundaries(&b.itl, &slo.boundaries(SloKind::Itl)),
            tpot: with_boundaries(&b.tpot, &slo.boundaries(SloKind::Tpot)),
            e2e: with_boundaries(&b.e2e, &slo.boundaries(SloKind::E2e)),
            generation: b.e2e.clone(),
            tokens_per_second: b.output_tokens_per_second.clone(),
        }
    }

    /// The most series the process can export with `model_values` values of the `model` label and
    /// `unlabelled` series without labels (tokentap's own counters and gauges).
    pub fn series_limit(&self, slo: &Slo, model_values: usize, unlabelled: usize) -> i64 {
        let histogram = |boundaries: &[f64]| boundaries.len() + 3;
        let requests = status_labels().count() * OUTCOMES;
        let slo_kinds = SloKind::ALL
            .iter()
            .filter(|&&kind| !slo.boundaries(kind).is_empty())
            .count();
        let e2e_slo = usize::from(!slo.boundaries(SloKind::E2e).is_empty());
        let known_api = histogram(&self.ttft)
            + 2 * histogram(&self.itl)
            + histogram(&self.tpot)
            + histogram(&self.e2e)
            + histogram(&self.generation)
            + histogram(&self.tokens_per_second)
            + 3 // input tokens, output tokens, goodput
            + inside::histograms(self).iter().map(|b| histogram(b)).sum::<usize>()
            + inside::COUNTERS
            + slo_kinds
            + TOKEN_SOURCES
            + requests;
        let other_api = histogram(&self.e2e) + 1 + e2e_slo + requests;
        let known_apis = Api::ALL.len() - 1;
        let per_model = known_apis * known_api + other_api;
        let fixed = Api::ALL.len() + known_apis * SKIP_REASONS + unlabelled;
        i64::try_from(model_values * per_model + fixed).unwrap_or(i64::MAX)
    }
}
