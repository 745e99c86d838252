//! Removing a retired model's or tenant's series from a family: what the registry does for every
//! family labelled by them, and a histogram whose boundaries a reload may change (`rebucket.rs`) does
//! for the family it currently serves. Its own file, so neither of the two imports the other.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};

/// Removes every series of `family` whose `label` is one of `names`.
pub(super) fn purge_by<T: MetricVecBuilder>(
    family: &MetricVec<T>, label: &str, names: &HashSet<Arc<str>>,
) {
    for gathered in family.collect() {
        for metric in gathered.get_metric() {
            let labels: HashMap<&str, &str> = metric
                .get_label()
                .iter()
                .map(|pair| (pair.name(), pair.value()))
                .collect();
            if labels.get(label).is_some_and(|m| names.contains(*m)) {
                // Err only when the series is already gone.
                let _ = family.remove(&labels);
            }
        }
    }
}
