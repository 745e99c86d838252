//! What a config reload changes in the metrics, and how reloads are counted. A reload is checked
//! whole before anything changes ([`Metrics::bound_for`]: the series bound the new config would
//! allow, refused above `metrics.max_series` as at start), then applied ([`Metrics::reconfigure`]):
//! the histogram families whose boundaries changed (an SLO ceiling is a boundary) take the new ones,
//! each series carrying its counts over (`rebucket.rs`), the configured model and tenant names take their pinned places, the tenant
//! allowlist is replaced. Counters are never touched: `tokentap_slo_violations_total` and the goodput
//! counter run on through a reload.

use std::collections::HashSet;
use std::sync::PoisonError;
use std::time::SystemTime;

use prometheus::{Gauge, IntCounterVec};

use super::bound::{Boundaries, Caps};
use super::family;
use super::labels::ModelLabels;
use super::registry::Registrar;
use super::{Metrics, SeriesBound};
use crate::config::Config;

/// How a reload came out: the `result` label of `tokentap_config_reloads_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadResult {
    /// The file was read, checked and applied.
    Success,
    /// It could not be read, did not parse or failed a check: nothing changed.
    Failure,
    /// It was valid but changed a key that needs a restart: nothing changed.
    Refused,
}

impl ReloadResult {
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadResult::Success => family::RELOAD_RESULTS[0],
            ReloadResult::Failure => family::RELOAD_RESULTS[1],
            ReloadResult::Refused => family::RELOAD_RESULTS[2],
        }
    }
}

/// `tokentap_config_reloads_total{result}` and `tokentap_config_last_reload_success_timestamp_seconds`.
pub struct ConfigReloads {
    total: IntCounterVec,
    last_success: Gauge,
}

impl ConfigReloads {
    pub(super) fn register(rows: &Registrar<'_>) -> Result<Self, prometheus::Error> {
        let total = rows.fixed_counter(&family::CONFIG_RELOADS)?;
        for result in family::RELOAD_RESULTS {
            total.with_label_values(&[result]).reset();
        }
        let reloads = ConfigReloads {
            total,
            last_success: rows.single_float_gauge(&family::CONFIG_LAST_RELOAD)?,
        };
        // The config running from the start was loaded now, as Prometheus's own gauge says.
        reloads.stamp();
        Ok(reloads)
    }

    /// Counts one reload.
    pub fn count(&self, result: ReloadResult) {
        self.total.with_label_values(&[result.as_str()]).inc();
        if result == ReloadResult::Success {
            self.stamp();
        }
    }

    fn stamp(&self) {
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
        self.last_success
            .set(now.map_or(0.0, |since| since.as_secs_f64()));
    }
}

/// The tenant values `tenants.allow` admits; with an allowlist, the `tenants.slo` names are allowed too
/// (they have their own places anyway). Empty: any value answered 2xx.
pub(super) fn tenants_allowed(config: &Config) -> HashSet<String> {
    match config.tenants.as_ref().filter(|t| !t.allow.is_empty()) {
        Some(t) => (t.allow.iter().chain(config.slo.tenants.keys()))
            .cloned()
            .collect(),
        None => HashSet::new(),
    }
}

/// The model names always admitted: `slo.models` and `model_list.names`.
fn configured_models(config: &Config) -> impl Iterator<Item = &str> {
    let slo = config.slo.models.keys().map(String::as_str);
    slo.chain(config.model_list.names.iter().map(String::as_str))
}

impl Metrics {
    /// The series bound `config` would give this process (its caps, `max_models` and `tenants.max`,
    /// are the running ones': a reload cannot change them).
    pub fn bound_for(&self, config: &Config) -> SeriesBound {
        let distinct = |names: &mut dyn Iterator<Item = &str>| names.collect::<HashSet<_>>().len();
        let pinned = distinct(&mut configured_models(config));
        let models = ModelLabels::values_with(config.max_models, pinned);
        let tenants = config.tenants.as_ref().map_or(1, |t| {
            ModelLabels::values_with(t.max, config.slo.tenants.len())
        });
        Boundaries::of(config).series_limit(&Caps {
            slo: &config.slo,
            reserved_values: pinned + 3,
            places: models - pinned - 3,
            tenant_values: tenants,
            unlabelled: self.unlabelled,
            records: self.records.is_some(),
            max_series: config.metrics.max_series,
        })
    }

    /// Applies what `config` changes in the metrics (checked first with [`Metrics::bound_for`]); the
    /// names of the histogram families that took new boundaries.
    pub fn reconfigure(&self, config: &Config) -> Result<Vec<&'static str>, prometheus::Error> {
        let bound = self.bound_for(config);
        // Every histogram family with boundaries of its own is labelled by model, so registered there
        // (the figures' and the ITL's are clones of the same families).
        let rebucketed = self.families.rebucket(&Boundaries::of(config))?;
        if !rebucketed.is_empty() {
            self.rebuckets.bump();
        }
        self.models.pin(configured_models(config));
        self.models.set_budget(bound.costs.clone(), bound.budget());
        self.served.set_configured(configured_models(config));
        if let Some(tenants) = &self.tenants {
            tenants.pin(config.slo.tenants.keys().map(String::as_str));
        }
        *self
            .tenants_allowed
            .write()
            .unwrap_or_else(PoisonError::into_inner) = tenants_allowed(config);
        self.limit.set(bound.total);
        *self.bound.write().unwrap_or_else(PoisonError::into_inner) = bound;
        Ok(rebucketed)
    }
}
