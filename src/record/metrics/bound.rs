//! The ceiling on the number of exported series, computed from the configuration.
//!
//! Every label is bounded: `model` by [`super::ModelLabels::max_values`], `api` by [`Api::ALL`], `status`
//! by [`super::status_labels`], `outcome`, `slo`, `token_source` and `reason` by their enums, and each
//! histogram exports its boundaries plus `+Inf`, `_sum` and `_count`. The rows of [`family::ALL`] say
//! which labels each family has and whether the `other` API (a path no dialect knows) holds it; with
//! `tenants:`, the rows labelled `tenant` hold one series per `tenant` value as well. Counters and
//! gauges without labels are one series each, counted as registered. The sum is the most series the process can ever export, whatever clients and the upstream
//! send; above `metrics.max_series` tokentap refuses to start, naming the product that made it.

use crate::config::{ByKind, Config, Slo, SloKind};
use crate::record::api::Api;
use crate::record::tokens::TokenSource;

use super::family::{self, Apis, Buckets, Family, Kind, Label};
use super::status_labels;

/// The values of the `outcome` label (`record::outcome::Outcome`).
const OUTCOMES: usize = 4;
/// The values of the `token_source` label (`tokens::TokenSource`).
const TOKEN_SOURCES: usize = TokenSource::ALL.len();

/// The bucket boundaries of each histogram: the configured buckets plus every SLO ceiling of its kind.
pub struct Boundaries {
    pub ttft: Vec<f64>,
    /// The waits with ceilings of their own ([`Buckets::Wait`]: the time to first answer, to first
    /// tool call): the TTFT buckets and each kind's ceilings.
    pub waits: ByKind<Vec<f64>>,
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
            waits: ByKind::from_fn(|kind| with_boundaries(&b.ttft, &slo.boundaries(kind))),
            itl: with_boundaries(&b.itl, &slo.boundaries(SloKind::Itl)),
            tpot: with_boundaries(&b.tpot, &slo.boundaries(SloKind::Tpot)),
            e2e: with_boundaries(&b.e2e, &slo.boundaries(SloKind::E2e)),
            generation: b.e2e.clone(),
            tokens_per_second: b.output_tokens_per_second.clone(),
        }
    }

    /// The boundaries a histogram row names.
    pub fn get(&self, buckets: Buckets) -> Vec<f64> {
        self.slice(buckets).to_vec()
    }

    fn slice(&self, buckets: Buckets) -> &[f64] {
        match buckets {
            Buckets::Ttft => &self.ttft,
            Buckets::Wait(kind) => &self.waits[kind],
            Buckets::Itl => &self.itl,
            Buckets::Tpot => &self.tpot,
            Buckets::E2e => &self.e2e,
            Buckets::Generation => &self.generation,
            Buckets::TokensPerSecond => &self.tokens_per_second,
            Buckets::Forwarding => &super::forwarding::BUCKETS,
            Buckets::PromptTokens => &family::PROMPT_TOKEN_BUCKETS,
            Buckets::Think => &family::THINK_BUCKETS,
            Buckets::Turns => &family::TURN_BUCKETS,
            Buckets::Session => &family::SESSION_BUCKETS,
        }
    }

    /// The most series the process can export with `model_values` values of the `model` label,
    /// `tenant_values` of the `tenant` label (1 without it), `unlabelled` series without labels
    /// (tokentap's own counters and gauges, counted as registered) and, with `records`, the
    /// request_log writer's two dropped-record series. Every labelled row of [`family::ALL`] counts
    /// the product of its labels' values, for each API it holds series for.
    pub fn series_limit(
        &self, slo: &Slo, model_values: usize, tenant_values: usize, unlabelled: usize,
        records: bool,
    ) -> SeriesBound {
        let statuses = status_labels().count();
        let slo_kinds = SloKind::ALL
            .iter()
            .filter(|&&kind| !slo.boundaries(kind).is_empty())
            .count();
        let e2e_slo = usize::from(!slo.boundaries(SloKind::E2e).is_empty());
        // The series one row holds for one value of `model` (if it has it) and one API.
        let cell = |family: &Family, api: Api| -> usize {
            let own = match family.kind {
                Kind::Histogram(buckets) => self.slice(buckets).len() + 3,
                Kind::Counter | Kind::Gauge => 1,
            };
            let values = |label: &Label| match label {
                Label::Model | Label::Api => 1,
                Label::Tenant => tenant_values,
                Label::Status => statuses,
                Label::Outcome => OUTCOMES,
                Label::Slo if api == Api::Other => e2e_slo,
                Label::Slo => slo_kinds,
                Label::TokenSource => TOKEN_SOURCES,
                Label::Reason(values) | Label::Result(values) | Label::Fixed(_, values) => {
                    values.len()
                }
                Label::Turn => crate::record::conversations::TURN_LABELS.len(),
                Label::Lookup => crate::record::conversations::LOOKUPS.len(),
            };
            own * family.labels.iter().map(values).product::<usize>()
        };
        let apis = |family: &Family| -> Vec<Api> {
            match (family.has(Label::Api), family.apis) {
                (false, _) => vec![Api::Other],
                (true, Apis::Every) => Api::ALL.to_vec(),
                (true, Apis::Known) => Api::ALL.into_iter().filter(|a| *a != Api::Other).collect(),
            }
        };
        let (mut per_model, mut fixed) = (0, 0);
        for family in family::ALL.iter().filter(|f| !f.labels.is_empty()) {
            let series: usize = apis(family).into_iter().map(|api| cell(family, api)).sum();
            match family.has(Label::Model) {
                true => per_model += series,
                false => fixed += series,
            }
        }
        let dropped = crate::logging::records::DROP_REASONS.len();
        let fixed = fixed + unlabelled + if records { dropped } else { 0 };
        let requests = statuses * OUTCOMES * tenant_values;
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
