//! The ceiling on the number of exported series, computed from the configuration, and what each
//! (model, API) pair costs under it.
//!
//! Every label is bounded: `model` by [`super::ModelLabels`], `api` by [`Api::ALL`], `status` by
//! [`super::status_labels`], `outcome`, `slo`, `token_source` and `reason` by their enums, and each
//! histogram exports its boundaries plus `+Inf`, `_sum` and `_count`. The rows of [`family::ALL`] say
//! which labels each family has and whether the `other` API (a path no dialect knows) holds it; with
//! `tenants:`, the rows labelled `tenant` hold one series per `tenant` value as well. Counters and
//! gauges without labels are one series each, counted as registered.
//!
//! The bound is not the product of every label's values (500 LoRA adapters × 11 APIs × every status
//! would be millions, where each adapter is served on one or two APIs): the families without a model
//! label and every pair of the model values always counted (`unknown`, `other`, `unadmitted`, the
//! configured names) are counted up front, and the rest of `metrics.max_series` is a budget the other
//! names draw from, a (name, API) pair at a time, as they first come (`labels.rs`): what exists is
//! bounded, whatever clients and the upstream send.

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

    /// What one value of the `model` label costs the series budget: the series of every family
    /// labelled by model that it can hold under each API (with every value of `tenant_values`), and
    /// once per value the families labelled by model but not by API (the conversation families).
    pub fn pair_costs(&self, slo: &Slo, tenant_values: usize) -> PairCosts {
        let mut costs = PairCosts {
            per_api: [0; Api::ALL.len()],
            per_name: 0,
        };
        for family in family::ALL.iter().filter(|f| f.has(Label::Model)) {
            for api in apis(family) {
                let series = self.cell(family, api, slo, tenant_values);
                match family.has(Label::Api) {
                    true => costs.per_api[api as usize] += series,
                    false => costs.per_name += series,
                }
            }
        }
        costs
    }

    /// The series `family` holds for one value of `model` (if it has it) and one API.
    fn cell(&self, family: &Family, api: Api, slo: &Slo, tenant_values: usize) -> usize {
        let own = match family.kind {
            Kind::Histogram(buckets) => self.slice(buckets).len() + 3,
            Kind::Counter | Kind::Gauge => 1,
        };
        let judged = |kind: SloKind| !slo.boundaries(kind).is_empty();
        let values = |label: &Label| match label {
            Label::Model | Label::Api => 1,
            Label::Tenant => tenant_values,
            Label::Status => status_labels().count(),
            Label::Outcome => OUTCOMES,
            // A path no dialect knows is judged on its E2E alone.
            Label::Slo if api == Api::Other => usize::from(judged(SloKind::E2e)),
            Label::Slo => SloKind::ALL.into_iter().filter(|&k| judged(k)).count(),
            Label::TokenSource => TOKEN_SOURCES,
            Label::Reason(values) | Label::Result(values) | Label::Fixed(_, values) => values.len(),
            Label::Turn => crate::record::conversations::TURN_LABELS.len(),
            Label::Lookup => crate::record::conversations::LOOKUPS.len(),
        };
        own * family.labels.iter().map(values).product::<usize>()
    }

    /// The most series the process can export: the families without a `model` label (those with
    /// labels, `unlabelled` series without, and with `records` the request_log writer's dropped-record series), the
    /// `reserved` model values whose every pair is always counted (`unknown`, `other`, `unadmitted`
    /// and the pinned names), and the `places` other names may take, as far as `max_series` leaves
    /// room: a (name, API) pair that would go beyond it counts as `other` (`labels.rs`).
    pub fn series_limit(&self, caps: &Caps) -> SeriesBound {
        let costs = self.pair_costs(caps.slo, caps.tenant_values);
        let dropped = crate::logging::records::DROP_REASONS.len();
        let mut fixed = caps.unlabelled + if caps.records { dropped } else { 0 };
        for family in family::ALL
            .iter()
            .filter(|f| !f.labels.is_empty() && !f.has(Label::Model))
        {
            fixed += apis(family)
                .into_iter()
                .map(|api| self.cell(family, api, caps.slo, caps.tenant_values))
                .sum::<usize>();
        }
        let per_value = costs.per_name + costs.per_api.iter().sum::<usize>();
        let reserved = fixed.saturating_add(caps.reserved_values.saturating_mul(per_value));
        let max_series = usize::try_from(caps.max_series).unwrap_or(usize::MAX);
        let room = max_series.saturating_sub(reserved);
        let names = caps.places.saturating_mul(per_value);
        let total = reserved.saturating_add(names.min(room));
        SeriesBound {
            total: i64::try_from(total).unwrap_or(i64::MAX),
            reserved,
            reserved_values: caps.reserved_values,
            places: caps.places,
            tenants: caps.tenant_values,
            max_series,
            costs,
        }
    }
}

/// What makes the series bound: the label caps and the budget.
pub struct Caps<'a> {
    pub slo: &'a Slo,
    /// Model values whose every pair is counted up front: `unknown`, `other`, `unadmitted` and the
    /// pinned names.
    pub reserved_values: usize,
    /// Places under `max_models` for names that are not pinned.
    pub places: usize,
    /// Values of the `tenant` label (1 without `tenants:`).
    pub tenant_values: usize,
    /// Series without labels (tokentap's own counters and gauges), as registered.
    pub unlabelled: usize,
    /// `request_log:` is on: its writer's dropped-record series, one per reason.
    pub records: bool,
    /// `metrics.max_series`.
    pub max_series: u64,
}

/// The APIs a family holds series for.
fn apis(family: &Family) -> Vec<Api> {
    match (family.has(Label::Api), family.apis) {
        (false, _) => vec![Api::Other],
        (true, Apis::Every) => Api::ALL.to_vec(),
        (true, Apis::Known) => Api::ALL.into_iter().filter(|a| *a != Api::Other).collect(),
    }
}

/// What a (model name, API) pair costs the series budget: the series the name can hold under each
/// API (indexed by `Api as usize`), and once per name those of the families without an `api` label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairCosts {
    pub per_api: [usize; Api::ALL.len()],
    pub per_name: usize,
}

impl PairCosts {
    /// The series a name holds with the pairs `apis` (a bit per API) counted.
    pub fn of(&self, apis: u16) -> usize {
        if apis == 0 {
            return 0;
        }
        let pairs: usize = (0..self.per_api.len())
            .filter(|i| apis & (1 << i) != 0)
            .map(|i| self.per_api[i])
            .sum();
        self.per_name + pairs
    }

    /// The most a pair can cost, its first one counted with the families without an `api` label.
    pub fn dearest(&self) -> usize {
        self.per_name + self.per_api.iter().copied().max().unwrap_or(0)
    }
}

/// The series limit and what makes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesBound {
    /// The most series the page can hold.
    pub total: i64,
    /// Counted up front: the families without a `model` label and every pair of the reserved values.
    pub reserved: usize,
    /// `unknown`, `other`, `unadmitted` and the pinned names.
    pub reserved_values: usize,
    /// Places under `max_models` for the names that are not pinned.
    pub places: usize,
    /// Values of the `tenant` label (1 without `tenants:`): `tenants.max` + `none`, `other`, `unadmitted`.
    pub tenants: usize,
    /// `metrics.max_series`.
    pub max_series: usize,
    pub costs: PairCosts,
}

impl SeriesBound {
    /// The series the names that are not pinned may share: what `metrics.max_series` leaves.
    pub fn budget(&self) -> usize {
        usize::try_from(self.total)
            .unwrap_or(usize::MAX)
            .saturating_sub(self.reserved)
    }

    /// How the bound is made, for the start-up line and `check-config`.
    pub fn describe(&self) -> String {
        let tenants = match self.tenants {
            1 => String::new(),
            n => format!(" with {n} tenant values"),
        };
        let chat = self.costs.per_api[Api::Chat as usize] + self.costs.per_name;
        let pairs = self.budget() / self.costs.dearest().max(1);
        format!(
            "at most {} series: {} for the families without a model label and the {} model values always \
             counted (unknown, other, unadmitted and the configured names), and {} shared by up to {} \
             other names as their (model, api) pairs first come{tenants}; a model's first pair takes up \
             to {chat} series (chat), so at least {pairs} pairs fit; a pair beyond that counts as model \
             \"other\"",
            self.total,
            self.reserved,
            self.reserved_values,
            self.budget(),
            self.places,
        )
    }

    /// Refuses a configuration whose model values always counted (and the families without a model
    /// label) alone would take more than `max_series`, naming what makes them.
    pub fn check(&self, max_series: u64) -> Result<(), String> {
        if u64::try_from(self.reserved).unwrap_or(u64::MAX) <= max_series {
            return Ok(());
        }
        Err(format!(
            "metrics.max_series: the {} model values always counted (unknown, other, unadmitted and the \
             names under slo.models and model_list.names), each up to {} series{}, and the families \
             without a model label take {} series, above the budget of {max_series}. Name fewer models \
             in slo.models and model_list.names, lower tenants.max, or raise metrics.max_series",
            self.reserved_values,
            self.costs.of(u16::MAX),
            match self.tenants {
                1 => String::new(),
                n => format!(" with {n} tenant values"),
            },
            self.reserved,
        ))
    }
}
