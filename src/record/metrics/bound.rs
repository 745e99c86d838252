//! The ceiling on the number of exported series, computed from the configuration.
//!
//! Every label is bounded: `model` by [`super::ModelLabels::max_values`], `api` by [`Api::ALL`], `status`
//! by [`super::status_labels`], `outcome`, `slo`, `token_source` and `reason` by their enums, and each
//! histogram exports its boundaries plus `+Inf`, `_sum` and `_count`. A (model, api) pair of a known API
//! can hold every family; the `other` API only `requests_total`, E2E, goodput and an E2E violation.
//! Counters and gauges without labels are one series each, counted as registered. With `tenants:`, the
//! request counters, goodput and the TTFT and E2E histograms hold one series per `tenant` value as
//! well. The sum is the most series the process can ever export, whatever clients and the upstream
//! send; above `metrics.max_series` tokentap refuses to start, naming the product that made it.

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

    /// The most series the process can export with `model_values` values of the `model` label,
    /// `tenant_values` of the `tenant` label (1 without it), `unlabelled` series without labels
    /// (tokentap's own counters and gauges) and, with `records`, the request_log writer's two
    /// dropped-record series.
    pub fn series_limit(
        &self,
        slo: &Slo,
        model_values: usize,
        tenant_values: usize,
        unlabelled: usize,
        records: bool,
    ) -> SeriesBound {
        let histogram = |boundaries: &[f64]| boundaries.len() + 3;
        let t = tenant_values;
        let statuses = status_labels().count();
        let requests = statuses * OUTCOMES * t;
        let slo_kinds = SloKind::ALL
            .iter()
            .filter(|&&kind| !slo.boundaries(kind).is_empty())
            .count();
        let e2e_slo = usize::from(!slo.boundaries(SloKind::E2e).is_empty());
        let known_api = histogram(&self.ttft) * t
            + 2 * histogram(&self.itl)
            + histogram(&self.tpot)
            + histogram(&self.e2e) * t
            + histogram(&self.generation)
            + histogram(&self.tokens_per_second)
            + 2 // input tokens, output tokens
            + t // goodput
            + inside::histograms(self).iter().map(|b| histogram(b)).sum::<usize>()
            + inside::COUNTERS
            + slo_kinds
            + TOKEN_SOURCES
            + requests;
        let other_api = histogram(&self.e2e) * t + t + e2e_slo + requests;
        let known_apis = Api::ALL.len() - 1;
        let per_model = known_apis * known_api + other_api;
        let fixed = Api::ALL.len()
            + known_apis * SKIP_REASONS
            + super::METRICS_PORT_REASONS.len()
            + unlabelled
            + if records { 2 } else { 0 };
        let total = model_values.saturating_mul(per_model).saturating_add(fixed);
        SeriesBound {
            total: i64::try_from(total).unwrap_or(i64::MAX),
            models: model_values,
            tenants: tenant_values,
            apis: Api::ALL.len(),
            statuses,
            outcomes: OUTCOMES,
            requests_total: model_values
                .saturating_mul(Api::ALL.len())
                .saturating_mul(requests),
        }
    }
}

/// The series limit and the caps it is the product of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesBound {
    pub total: i64,
    /// Values of the `model` label: `max_models` + `unknown`, `other`, `unadmitted`.
    pub models: usize,
    /// Values of the `tenant` label (1 without `tenants:`): `tenants.max` + `none`, `other`, `unadmitted`.
    pub tenants: usize,
    pub apis: usize,
    pub statuses: usize,
    pub outcomes: usize,
    /// The series of `tokentap_requests_total` alone: the product of the five caps.
    pub requests_total: usize,
}

impl SeriesBound {
    /// The product that makes the bound, for the start-up line and the refusal.
    pub fn describe(&self) -> String {
        let tenants = if self.tenants > 1 {
            format!(" × tenants {}", self.tenants)
        } else {
            String::new()
        };
        format!(
            "models {}{tenants} × apis {} × statuses {} × outcomes {} = {} series of tokentap_requests_total alone; {} series in all with the histograms' buckets",
            self.models, self.apis, self.statuses, self.outcomes, self.requests_total, self.total
        )
    }

    /// Refuses a bound above `max_series` (`metrics.max_series`), with the product that made it.
    pub fn check(&self, max_series: u64) -> Result<(), String> {
        if u64::try_from(self.total).unwrap_or(u64::MAX) <= max_series {
            return Ok(());
        }
        Err(format!(
            "metrics.max_series: the configuration allows up to {} series, above the budget of {max_series}: {}. Lower max_models or tenants.max, or raise metrics.max_series",
            self.total,
            self.describe()
        ))
    }
}
