//! The governor's budgets on the page (`src/govern/`): each budget's use and cap
//! (`tokentap_budget_bytes{budget,state}`) and its refusals (`tokentap_budget_refusals_total`), read
//! from the governor when a page is gathered; and what was not metered because a budget was spent
//! (`tokentap_unmetered_total{budget,reason}`), counted when the request or session ends.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, IntGaugeVec, Opts};

use super::family::{self, BUDGET_STATES};
use super::registry::Registrar;
use crate::govern::{Budget, Governor, Spent, SPENT_REASONS};

/// Where the page finds the governor, once the running tokentap has one ([`Budgets::register`]).
pub(super) type GovernorSlot = Arc<OnceLock<Arc<Governor>>>;

/// The budget families: all their series are there from the start.
#[derive(Clone)]
pub struct Budgets {
    unmetered: IntCounterVec,
}

/// Reads the governor's figures into the budget gauges and counters at each gather.
#[derive(Clone)]
struct Figures {
    governor: GovernorSlot,
    bytes: IntGaugeVec,
    refusals: IntCounterVec,
    /// One gather at a time brings the counters up to the governor's.
    gathering: Arc<Mutex<()>>,
}

impl Budgets {
    /// Registers the families; their figures come from `governor` once [`Budgets::watch`] is told it.
    pub(super) fn register(
        rows: &Registrar<'_>,
    ) -> Result<(Self, GovernorSlot), prometheus::Error> {
        let opts = |f: &family::Family| Opts::new(f.name, f.help);
        let bytes = IntGaugeVec::new(opts(&family::BUDGET_BYTES), &["budget", "state"])?;
        let refusals = IntCounterVec::new(opts(&family::BUDGET_REFUSALS), &["budget", "reason"])?;
        for budget in Budget::ALL {
            for state in BUDGET_STATES {
                bytes.with_label_values(&[budget.as_str(), state]);
            }
            for reason in SPENT_REASONS {
                refusals.with_label_values(&[budget.as_str(), reason]);
            }
        }
        let governor = Arc::new(OnceLock::new());
        rows.collector(Figures {
            governor: governor.clone(),
            bytes,
            refusals,
            gathering: Arc::default(),
        })?;
        let unmetered = rows.fixed_counter(&family::UNMETERED)?;
        for budget in Budget::ALL {
            for reason in SPENT_REASONS {
                unmetered.with_label_values(&[budget.as_str(), reason]);
            }
        }
        Ok((Budgets { unmetered }, governor))
    }

    /// A request or session that was not metered whole because `budget` was spent.
    pub fn count_unmetered(&self, budget: Budget, spent: Spent) {
        (self.unmetered)
            .with_label_values(&[budget.as_str(), spent.as_str()])
            .inc();
    }
}

impl Collector for Figures {
    fn desc(&self) -> Vec<&Desc> {
        let mut descs = self.bytes.desc();
        descs.extend(self.refusals.desc());
        descs
    }

    fn collect(&self) -> Vec<MetricFamily> {
        if let Some(governor) = self.governor.get() {
            let _one = self
                .gathering
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for (budget, figures) in Budget::ALL.iter().zip(governor.figures()) {
                let name = budget.as_str();
                let gauge = |state, value: u64| {
                    let value = i64::try_from(value).unwrap_or(i64::MAX);
                    self.bytes.with_label_values(&[name, state]).set(value);
                };
                gauge("used", figures.used);
                gauge("cap", figures.cap);
                for (reason, refused) in SPENT_REASONS.iter().zip(figures.refused) {
                    let counter = self.refusals.with_label_values(&[name, reason]);
                    counter.inc_by(refused.saturating_sub(counter.get()));
                }
            }
        }
        let mut families = self.bytes.collect();
        families.extend(self.refusals.collect());
        families
    }
}
