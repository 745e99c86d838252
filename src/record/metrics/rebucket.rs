//! A histogram family whose boundaries a reload may change: an SLO ceiling is a bucket boundary
//! (`bound.rs`), so a changed ceiling is a changed family. The family is registered once, as this
//! collector; a reload swaps the `HistogramVec` behind it for one with the new boundaries, and carries
//! what each series had counted over to it ([`Carried`]): `_count`, `_sum` and every bucket whose edge
//! both sets have go on from where they were, never reset, so `rate()` and the ratios built on `_count`
//! are exact across the reload. A new edge carries the count of the old edge below it (the old
//! observations between the two cannot be split): its series is new on the page, and `rate()` reads
//! only what it counts from then on. A removed edge's series ends. docs/operations.md says what that
//! does to `histogram_quantile` over a window that spans the reload.
//!
//! Beside the swapped family it keeps what does not depend on the boundaries: the native buckets of a
//! family served as a native histogram too (`native.rs`), which go on across a swap, and the exemplars
//! of a family that carries them (`exemplars.rs`), each placed again by its value. A series' child
//! ([`Child`]) observes into both its classic and its native buckets.
//!
//! A request resolves its children once ([`super::Series`]) and keeps them; each swap bumps
//! [`Rebuckets`]' generation, and a request whose children are older resolves them again from the
//! current family, so what it observes after the reload lands in the family the page shows.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use prometheus::core::{Collector, Desc};
use prometheus::{Histogram, HistogramOpts, HistogramVec, Opts};

use super::by_series::BySeries;
use super::exemplars::{Exemplar, Exemplars};
use super::family::{self, Family};
use super::native::{Native, Sparse};

/// One histogram family behind a swap.
#[derive(Clone)]
pub struct Rebucketable(Arc<Inner>);

struct Inner {
    desc: Desc,
    family: &'static Family,
    label_names: Vec<&'static str>,
    /// The family now, and its boundaries.
    current: RwLock<(HistogramVec, Vec<f64>)>,
    /// What each series (by its label values, in `label_names`' order) had counted in the families
    /// before the current one.
    carried: Mutex<HashMap<Vec<String>, Carried>>,
    /// Each series' native buckets, when the family is one of `family::NATIVE`.
    natives: Option<Mutex<BySeries<Arc<Native>>>>,
    /// Each series' exemplars, when the family is one of `family::EXEMPLARS`.
    exemplars: Option<Exemplars>,
}

/// One series of a family, as a request keeps it: its classic child and, for a native family, its
/// native buckets.
#[derive(Clone)]
pub struct Child {
    classic: Histogram,
    native: Option<Arc<Native>>,
}

impl Child {
    pub fn observe(&self, value: f64) {
        self.classic.observe(value);
        if let Some(native) = &self.native {
            native.observe(value);
        }
    }
}

/// One series' counts from the families a reload replaced, added to what the current one counts.
#[derive(Debug, Clone, Default, PartialEq)]
struct Carried {
    count: u64,
    sum: f64,
    /// The old edges and their cumulative counts, ascending (`+Inf` is `count`).
    below: Vec<(f64, u64)>,
}

impl Carried {
    /// The old observations at or below `edge`: exact at an old edge, the old edge below it otherwise.
    fn at_or_below(&self, edge: f64) -> u64 {
        let i = self.below.partition_point(|&(e, _)| e <= edge);
        i.checked_sub(1).map_or(0, |i| self.below[i].1)
    }
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
        let native = family::NATIVE.iter().any(|f| f.name == family.name);
        let exemplars = family::EXEMPLARS.iter().any(|(f, _)| f.name == family.name);
        Ok(Rebucketable(Arc::new(Inner {
            desc,
            family,
            label_names,
            current: RwLock::new((vec, buckets)),
            carried: Mutex::default(),
            natives: native.then(Mutex::default),
            exemplars: exemplars.then(Exemplars::default),
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

    pub fn with_label_values(&self, values: &[&str]) -> Child {
        let classic = {
            let current = self
                .0
                .current
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            current.0.with_label_values(values)
        };
        let native = self.0.natives.as_ref().map(|natives| {
            let mut natives = natives.lock().unwrap_or_else(PoisonError::into_inner);
            natives.get_or_insert_with(values, Arc::default).clone()
        });
        Child { classic, native }
    }

    /// Sets `exemplar` on the bucket its value falls in, in the series `values`, when the family
    /// carries exemplars.
    pub fn exemplify(&self, values: &[&str], exemplar: Exemplar) {
        let Some(exemplars) = &self.0.exemplars else {
            return;
        };
        let current = self
            .0
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        exemplars.set(values, &current.1, exemplar);
    }

    /// A gathered series' exemplars, by bucket (none for a family that carries none).
    pub fn exemplars_of(&self, metric: &prometheus::proto::Metric) -> Vec<(usize, Exemplar)> {
        let Some(exemplars) = &self.0.exemplars else {
            return Vec::new();
        };
        exemplars.of(&self.values_of(metric))
    }

    /// A gathered series' native buckets, when the family is native.
    pub fn native_of(&self, metric: &prometheus::proto::Metric) -> Option<Sparse> {
        let natives = self.0.natives.as_ref()?;
        let natives = natives.lock().unwrap_or_else(PoisonError::into_inner);
        natives.get(&self.values_of(metric)).map(|n| n.snapshot())
    }

    /// A series' label values, in the family's label order, borrowed from the gathered series.
    fn values_of<'m>(&self, metric: &'m prometheus::proto::Metric) -> Vec<&'m str> {
        let pairs = metric.get_label();
        (self.0.label_names.iter())
            .map(|name| {
                let pair = pairs.iter().find(|p| p.name() == *name);
                pair.map_or("", |p| p.value())
            })
            .collect()
    }

    /// The family's row.
    pub fn family(&self) -> &'static Family {
        self.0.family
    }

    /// Whether the family is served as a native histogram too.
    pub fn native(&self) -> bool {
        self.0.natives.is_some()
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

    /// Replaces the family with one bounded by `buckets`, when they differ from its own, each series
    /// carrying over what it had counted; true if it did.
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
        // What the page showed until now (earlier carries included) is carried whole.
        let shown = self.with_carried(current.0.collect());
        let mut carried = self.carried();
        carried.clear();
        for metric in shown.iter().flat_map(|f| f.get_metric()) {
            let key = self.key(metric);
            let h = metric.get_histogram();
            let below = (h.get_bucket().iter())
                .map(|b| (b.upper_bound(), b.cumulative_count()))
                .collect();
            let values: Vec<&str> = key.iter().map(String::as_str).collect();
            // The series stays on the page even before its next observation.
            vec.with_label_values(&values);
            let (count, sum) = (h.get_sample_count(), h.get_sample_sum());
            carried.insert(key, Carried { count, sum, below });
        }
        *current = (vec, buckets.to_vec());
        if let Some(exemplars) = &self.0.exemplars {
            exemplars.rebucket(buckets);
        }
        Ok(true)
    }

    /// Removes every series whose `label` is one of `names` (a retired model or tenant), with what it
    /// carried: if the name comes back, its series start from zero.
    pub fn purge(&self, label: &str, names: &HashSet<Arc<str>>) {
        super::purge::purge_by(&self.current(), label, names);
        let Some(i) = self.0.label_names.iter().position(|&n| n == label) else {
            return;
        };
        self.carried()
            .retain(|key, _| !key.get(i).is_some_and(|v| names.contains(v.as_str())));
        if let Some(natives) = &self.0.natives {
            let mut natives = natives.lock().unwrap_or_else(PoisonError::into_inner);
            natives.retain(|key, _| !key.get(i).is_some_and(|v| names.contains(&**v)));
        }
        if let Some(exemplars) = &self.0.exemplars {
            exemplars.purge(i, names);
        }
    }

    fn carried(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<String>, Carried>> {
        self.0
            .carried
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A series' label values, in the family's label order.
    fn key(&self, metric: &prometheus::proto::Metric) -> Vec<String> {
        let pairs = metric.get_label();
        (self.0.label_names.iter())
            .map(|name| {
                let pair = pairs.iter().find(|p| p.name() == *name);
                pair.map_or_else(String::new, |p| p.value().to_owned())
            })
            .collect()
    }

    /// `families` (the current family, collected) with each series' carried counts added.
    fn with_carried(
        &self, mut families: Vec<prometheus::proto::MetricFamily>,
    ) -> Vec<prometheus::proto::MetricFamily> {
        let carried = self.carried();
        if carried.is_empty() {
            return families;
        }
        for family in &mut families {
            for metric in family.mut_metric() {
                let Some(old) = carried.get(&self.key(metric)) else {
                    continue;
                };
                let mut h = metric.get_histogram().clone();
                h.set_sample_count(h.get_sample_count() + old.count);
                h.set_sample_sum(h.get_sample_sum() + old.sum);
                let mut buckets = h.get_bucket().to_vec();
                for bucket in &mut buckets {
                    let more = old.at_or_below(bucket.upper_bound());
                    bucket.set_cumulative_count(bucket.cumulative_count() + more);
                }
                h.set_bucket(buckets);
                metric.set_histogram(h);
            }
        }
        families
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
        self.with_carried(self.current().collect())
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

    fn page(registry: &prometheus::Registry) -> Vec<(f64, u64)> {
        let gathered = registry.gather();
        assert_eq!(gathered.len(), 1, "one family on the page throughout");
        let hist = gathered[0].get_metric()[0].get_histogram();
        let mut page: Vec<(f64, u64)> = (hist.get_bucket().iter())
            .map(|b| (b.upper_bound(), b.cumulative_count()))
            .collect();
        page.push((f64::INFINITY, hist.get_sample_count()));
        page
    }

    #[test]
    fn a_swap_takes_the_new_edges_and_carries_every_count_over() {
        let h = Rebucketable::new(&family::TTFT, vec!["model"], vec![0.5, 1.0]).unwrap();
        let registry = prometheus::Registry::new();
        registry.register(Box::new(h.clone())).unwrap();
        for v in [0.2, 0.7, 3.0] {
            h.with_label_values(&["m"]).observe(v);
        }
        assert!(!h.rebucket(&[0.5, 1.0]).unwrap(), "the same edges: kept");
        assert!(h.rebucket(&[0.5, 0.75, 1.0]).unwrap());
        // 0.75 is new: it carries what 0.5 counted (the 0.7 cannot be placed), and counts from now.
        let inf = f64::INFINITY;
        assert_eq!(page(&registry), [(0.5, 1), (0.75, 1), (1.0, 2), (inf, 3)]);
        h.with_label_values(&["m"]).observe(0.7);
        assert_eq!(page(&registry), [(0.5, 1), (0.75, 2), (1.0, 3), (inf, 4)]);
        // A second reload carries the first one's counts too; a removed edge's series is gone.
        assert!(h.rebucket(&[0.75, 2.0]).unwrap());
        h.with_label_values(&["m"]).observe(1.5);
        assert_eq!(page(&registry), [(0.75, 2), (2.0, 4), (inf, 5)]);
        let gathered = registry.gather();
        let sum = gathered[0].get_metric()[0].get_histogram().get_sample_sum();
        assert!((sum - (0.2 + 0.7 + 3.0 + 0.7 + 1.5)).abs() < 1e-9, "{sum}");
        // A retired name takes what it carried with it.
        let names: HashSet<Arc<str>> = [Arc::from("m")].into_iter().collect();
        h.purge("model", &names);
        h.with_label_values(&["m"]).observe(0.1);
        assert_eq!(page(&registry), [(0.75, 1), (2.0, 1), (inf, 1)]);
    }
}
