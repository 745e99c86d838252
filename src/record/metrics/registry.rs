//! Registering the families from their rows (`family.rs`) into one registry: each histogram with the
//! boundaries its row names (`bound.rs`), and those labelled by model (and tenant) kept, so that a
//! retired model or tenant value is removed from every family that has it.

use prometheus::core::Collector;
use prometheus::{HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry};
use std::collections::HashSet;
use std::sync::Arc;

use super::bound::Boundaries;
use super::family::{Family, Kind, Label, ALL};
use super::purge::purge_by;
use super::rebucket::Rebucketable;

/// A registered family with a `model` label, kept so that a retired model (or tenant) value is removed
/// from every family that has it.
enum Labelled {
    Histogram(Rebucketable),
    Counter(IntCounterVec),
}

/// Registers families from their rows into one registry, and keeps those labelled by model for
/// [`Registered::purge`].
pub struct Registrar<'a> {
    registry: &'a Registry,
    boundaries: &'a Boundaries,
    tenants: bool,
    labelled: Vec<(&'static Family, Labelled)>,
}

/// The model- and tenant-labelled families, for retirement.
pub struct Registered {
    labelled: Vec<(&'static Family, Labelled)>,
}

impl<'a> Registrar<'a> {
    pub fn new(registry: &'a Registry, boundaries: &'a Boundaries, tenants: bool) -> Self {
        Registrar {
            registry,
            boundaries,
            tenants,
            labelled: Vec::new(),
        }
    }

    fn opts(family: &Family) -> Opts {
        Opts::new(family.name, family.help)
    }

    fn keep<C: Collector + Clone + 'static>(&self, c: C) -> Result<C, prometheus::Error> {
        self.registry.register(Box::new(c.clone()))?;
        Ok(c)
    }

    pub fn histogram(
        &mut self, family: &'static Family,
    ) -> Result<Rebucketable, prometheus::Error> {
        let Kind::Histogram(buckets) = family.kind else {
            return Err(prometheus::Error::Msg(format!(
                "{} is not a histogram",
                family.name
            )));
        };
        let names = family.label_names(self.tenants);
        let h = Rebucketable::new(family, names, self.boundaries.get(buckets))?;
        let h = self.keep(h)?;
        if family.has(Label::Model) {
            self.labelled.push((family, Labelled::Histogram(h.clone())));
        }
        Ok(h)
    }

    pub fn counter(&mut self, family: &'static Family) -> Result<IntCounterVec, prometheus::Error> {
        let names = family.label_names(self.tenants);
        let c = self.keep(IntCounterVec::new(Self::opts(family), &names)?)?;
        if family.has(Label::Model) {
            self.labelled.push((family, Labelled::Counter(c.clone())));
        }
        Ok(c)
    }

    pub fn gauge(&mut self, family: &'static Family) -> Result<IntGaugeVec, prometheus::Error> {
        let names = family.label_names(self.tenants);
        self.keep(IntGaugeVec::new(Self::opts(family), &names)?)
    }

    /// A counter with labels other than `model`: nothing to retire.
    pub fn fixed_counter(
        &self, family: &'static Family,
    ) -> Result<IntCounterVec, prometheus::Error> {
        debug_assert!(!family.has(Label::Model), "{}", family.name);
        let names = family.label_names(self.tenants);
        self.keep(IntCounterVec::new(Self::opts(family), &names)?)
    }

    /// A collector of its own (families whose values are read from elsewhere when gathered).
    pub fn collector<C: Collector + Clone + 'static>(&self, c: C) -> Result<C, prometheus::Error> {
        self.keep(c)
    }

    /// An unlabelled counter.
    pub fn single_counter(
        &self, family: &'static Family,
    ) -> Result<prometheus::IntCounter, prometheus::Error> {
        self.keep(prometheus::IntCounter::with_opts(Self::opts(family))?)
    }

    /// An unlabelled gauge.
    pub fn single_gauge(
        &self, family: &'static Family,
    ) -> Result<prometheus::IntGauge, prometheus::Error> {
        self.keep(prometheus::IntGauge::with_opts(Self::opts(family))?)
    }

    /// An unlabelled gauge of a fractional value (a timestamp).
    pub fn single_float_gauge(
        &self, family: &'static Family,
    ) -> Result<prometheus::Gauge, prometheus::Error> {
        self.keep(prometheus::Gauge::with_opts(Self::opts(family))?)
    }

    /// An unlabelled histogram.
    pub fn single_histogram(
        &self, family: &'static Family,
    ) -> Result<prometheus::Histogram, prometheus::Error> {
        let Kind::Histogram(buckets) = family.kind else {
            return Err(prometheus::Error::Msg(format!(
                "{} is not a histogram",
                family.name
            )));
        };
        let opts = HistogramOpts::from(Self::opts(family)).buckets(self.boundaries.get(buckets));
        self.keep(prometheus::Histogram::with_opts(opts)?)
    }

    /// Registers every row of [`ALL`] labelled by model that no field claimed: a per-request family
    /// that is one row and one [`Registered::histogram`] or [`Registered::counter`] where it is
    /// observed.
    pub fn finish(mut self) -> Result<Registered, prometheus::Error> {
        for &family in ALL {
            let claimed = self.labelled.iter().any(|(f, _)| f.name == family.name);
            if claimed || !family.has(Label::Model) {
                continue;
            }
            match family.kind {
                Kind::Histogram(_) => drop(self.histogram(family)?),
                Kind::Counter => drop(self.counter(family)?),
                Kind::Gauge => {
                    return Err(prometheus::Error::Msg(format!(
                        "{}: a gauge labelled by model has no place",
                        family.name
                    )))
                }
            }
        }
        Ok(Registered {
            labelled: self.labelled,
        })
    }
}

impl Registered {
    fn find(&self, family: &'static Family) -> Option<&Labelled> {
        self.labelled
            .iter()
            .find(|(f, _)| f.name == family.name)
            .map(|(_, registered)| registered)
    }

    /// A registered histogram row labelled by model (every one is: see [`Registrar::finish`]).
    pub fn histogram(&self, family: &'static Family) -> Option<&Rebucketable> {
        match self.find(family)? {
            Labelled::Histogram(h) => Some(h),
            Labelled::Counter(_) => None,
        }
    }

    /// A registered counter row labelled by model.
    pub fn counter(&self, family: &'static Family) -> Option<&IntCounterVec> {
        match self.find(family)? {
            Labelled::Counter(c) => Some(c),
            Labelled::Histogram(_) => None,
        }
    }

    /// Gives every histogram family the boundaries `boundaries` name for it (a reload's); the names of
    /// those whose boundaries changed, each now empty.
    pub fn rebucket(
        &self, boundaries: &Boundaries,
    ) -> Result<Vec<&'static str>, prometheus::Error> {
        let mut changed = Vec::new();
        for (family, registered) in &self.labelled {
            if let (Labelled::Histogram(h), Kind::Histogram(buckets)) = (registered, family.kind) {
                if h.rebucket(&boundaries.get(buckets))? {
                    changed.push(family.name);
                }
            }
        }
        Ok(changed)
    }

    /// Removes every series whose `label` is one of `names`, from every family that has that label.
    pub fn purge(&self, label: Label, names: &HashSet<Arc<str>>) {
        for (family, registered) in &self.labelled {
            if !family.has(label) {
                continue;
            }
            match registered {
                Labelled::Histogram(h) => h.purge(label.name(), names),
                Labelled::Counter(c) => purge_by(c, label.name(), names),
            }
        }
    }
}
