//! A histogram family whose boundaries a reload may change: an SLO ceiling is a bucket boundary
//! (`bound.rs`), so a changed ceiling is a changed family. The family is registered once, as this
//! collector; a reload swaps the `HistogramVec` behind it for one with the new boundaries, which starts
//! from zero (the old one's counts cannot be split at a new edge). The exposition sees one family
//! throughout, its series reset together, as a restart would reset them (docs/operations.md says what
//! that does to `rate()`).
//!
//! A request resolves its children once ([`super::Series`]) and keeps them; each swap bumps
//! [`Rebuckets`]' generation, and a request whose children are older resolves them again from the
//! current family, so what it observes after the reload lands in the family the page shows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};

use prometheus::core::{Collector, Desc};
use prometheus::{Histogram, HistogramOpts, HistogramVec, Opts};

use super::family::Family;

/// One histogram family behind a swap.
#[derive(Clone)]
pub struct Rebucketable(std::sync::Arc<Inner>);

struct Inner {
    desc: Desc,
    family: &'static Family,
    label_names: Vec<&'static str>,
    /// The family now, and its boundaries.
    current: RwLock<(HistogramVec, Vec<f64>)>,
}

impl Rebucketable {
    pub fn new(
        family: &'static Family, label_names: Vec<&'static str>, buckets: Vec<f64>,
    ) -> Result<Self, prometheus::Error> {
        let desc = Desc::new(
            family.name.to_owned(),
            family.help.to_owned(),
            label_names.iter().map(|&n| n.to_owned()).collect(),
            Default::default(),
        )?;
        let vec = build(family, &label_names, buckets.clone())?;
        Ok(Rebucketable(std::sync::Arc::new(Inner {
            desc,
            family,
            label_names,
            current: RwLock::new((vec, buckets)),
        })))
    }

    /// The family as it is now (a handle: observations through it land in this family).
    pub fn current(&self) -> HistogramVec {
        let current = self
            .0
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        current.0.clone()
    }

    pub fn with_label_values(&self, values: &[&str]) -> Histogram {
        let current = self
            .0
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        current.0.with_label_values(values)
    }

    /// The boundaries it has now.
    pub fn buckets(&self) -> Vec<f64> {
        let current = self
            .0
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        current.1.clone()
    }

    /// Replaces the family with an empty one bounded by `buckets`, when they differ from its own;
    /// true if it did.
    pub fn rebucket(&self, buckets: &[f64]) -> Result<bool, prometheus::Error> {
        if self.buckets() == buckets {
            return Ok(false);
        }
        let vec = build(self.0.family, &self.0.label_names, buckets.to_vec())?;
        let mut current = self
            .0
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *current = (vec, buckets.to_vec());
        Ok(true)
    }
}

fn build(
    family: &Family, label_names: &[&str], buckets: Vec<f64>,
) -> Result<HistogramVec, prometheus::Error> {
    let opts = HistogramOpts::from(Opts::new(family.name, family.help)).buckets(buckets);
    HistogramVec::new(opts, label_names)
}

impl Collector for Rebucketable {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.0.desc]
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.current().collect()
    }
}

/// How many times a reload swapped histogram families: a request whose children were resolved at an
/// older count resolves them again.
#[derive(Default)]
pub struct Rebuckets(AtomicU64);

impl Rebuckets {
    pub fn generation(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Called after the families were swapped.
    pub(super) fn bump(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::metrics::family;

    #[test]
    fn a_swap_keeps_one_family_on_the_page_with_the_new_boundaries_from_zero() {
        let h = Rebucketable::new(&family::TTFT, vec!["model"], vec![0.5, 1.0]).unwrap();
        let registry = prometheus::Registry::new();
        registry.register(Box::new(h.clone())).unwrap();
        h.with_label_values(&["m"]).observe(0.7);
        assert!(!h.rebucket(&[0.5, 1.0]).unwrap(), "the same edges: kept");
        assert!(h.rebucket(&[0.5, 0.75, 1.0]).unwrap());
        h.with_label_values(&["m"]).observe(0.7);
        let gathered = registry.gather();
        assert_eq!(gathered.len(), 1);
        let hist = gathered[0].get_metric()[0].get_histogram();
        let edges: Vec<f64> = hist.get_bucket().iter().map(|b| b.upper_bound()).collect();
        assert_eq!(edges, vec![0.5, 0.75, 1.0]);
        assert_eq!(
            hist.get_sample_count(),
            1,
            "the new family starts from zero"
        );
        assert_eq!(hist.get_bucket()[1].cumulative_count(), 1);
    }
}
