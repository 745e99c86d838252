//! One request's series: its label values, resolved once, and the children of the families it writes
//! to, each resolved the first time the request writes to it and kept by row (a figure's histogram by
//! its [`Figure`]), so no observation looks a series up by its labels again. A family a request never
//! writes to gets no series from it (a request with no reasoning adds no reasoning-time series).

use std::sync::Arc;

use super::family::{self, Apis, Family, Label};
use super::rebucket::Child;
use super::Metrics;
use crate::record::api::Api;
use crate::record::figure::Figure;

/// One request's labelled children.
pub struct Series {
    pub model: Arc<str>,
    /// The `tenant` label value, when `tenants:` is configured.
    pub tenant: Option<Arc<str>>,
    pub api: Api,
    /// Each figure's histogram, once observed.
    figures: [Option<Child>; Figure::COUNT],
    itl: Option<Child>,
    /// The families' generation the children were resolved at (`rebucket.rs`): older ones are
    /// resolved again, so an observation after a reload lands in the family the page shows.
    generation: u64,
}

impl Metrics {
    /// A request's series with its `tenant` label (from [`Metrics::tenant_label`]); with `tenants:`
    /// configured, `None` is the `none` tenant.
    /// Its model counts as `other` when the name's pair with `api` is new and does not fit in the series
    /// budget, even once idle names are retired (`labels.rs`).
    pub fn series_of(&self, model: Arc<str>, tenant: Option<Arc<str>>, api: Api) -> Series {
        let tenant = (self.tenants.as_ref()).map(|t| tenant.unwrap_or_else(|| t.none()));
        let fits = |model: &str| self.models.take_pair(model, api);
        let model = match fits(&model) || (self.retire() > 0 && fits(&model)) {
            true => model,
            false => self.models.overflow(),
        };
        Series {
            model,
            tenant,
            api,
            figures: Default::default(),
            itl: None,
            generation: self.rebuckets.generation(),
        }
    }

    pub fn series(&self, model: Arc<str>, api: Api) -> Series {
        self.series_of(model, None, api)
    }
}

impl Series {
    /// Whether the request's path is one a dialect knows: only then does it have the token-level
    /// families (`Apis::Known`), so a path a client makes up never creates them.
    pub fn known(&self) -> bool {
        self.api != Api::Other
    }

    /// Observes `value` (in the figure's unit) on `figure`'s histogram.
    pub fn observe(&mut self, metrics: &Metrics, figure: Figure, value: f64) {
        self.follow(metrics);
        if self.figures[figure as usize].is_none() {
            if figure.row().histogram.is_none() {
                return;
            }
            let family = family::of_figure(figure);
            let resolved = (self.labels(None).of(family))
                .zip(metrics.figure_histograms[figure as usize].as_ref())
                .map(|(values, vec)| vec.with_label_values(&values));
            self.figures[figure as usize] = resolved;
        }
        if let Some(histogram) = &self.figures[figure as usize] {
            histogram.observe(value);
        }
    }

    /// Observes `value` on `figure`'s histogram without keeping the child: a figure observed once, at
    /// the request's end.
    pub fn observe_once(&self, metrics: &Metrics, figure: Figure, value: f64) {
        let current = self.generation == metrics.rebuckets.generation();
        if let Some(histogram) = self.figures[figure as usize].as_ref().filter(|_| current) {
            return histogram.observe(value);
        }
        if figure.row().histogram.is_none() {
            return;
        }
        let family = family::of_figure(figure);
        if let (Some(values), Some(vec)) = (
            self.labels(None).of(family),
            metrics.figure_histograms[figure as usize].as_ref(),
        ) {
            vec.with_label_values(&values).observe(value);
        }
    }

    /// Observes one inter-token gap.
    pub fn observe_gap(&mut self, metrics: &Metrics, seconds: f64) {
        self.follow(metrics);
        if self.itl.is_none() {
            let labels = self.labels(None);
            self.itl = labels
                .of(&family::ITL)
                .map(|values| metrics.itl.with_label_values(&values));
        }
        if let Some(itl) = &self.itl {
            itl.observe(seconds);
        }
    }

    /// Forgets the children resolved before a reload swapped the histogram families.
    fn follow(&mut self, metrics: &Metrics) {
        let generation = metrics.rebuckets.generation();
        if self.generation != generation {
            self.figures = Default::default();
            self.itl = None;
            self.generation = generation;
        }
    }

    /// The label values of this request, for any family labelled by model, API, (when configured)
    /// tenant and `turn`.
    pub(super) fn labels<'a>(&'a self, turn: Option<&'a str>) -> Labels<'a> {
        Labels {
            model: &self.model,
            api: self.api,
            tenant: self.tenant.as_deref(),
            turn,
        }
    }
}

/// The label values a request gives a family labelled by model, API, tenant and turn.
pub(super) struct Labels<'a> {
    model: &'a str,
    api: Api,
    tenant: Option<&'a str>,
    turn: Option<&'a str>,
}

impl<'a> Labels<'a> {
    /// The values of `family`'s labels; `None` for a family with other labels, or one that holds no
    /// series for the request's API (a path no dialect knows).
    pub(super) fn of(&self, family: &Family) -> Option<Values<'a>> {
        if family.apis == Apis::Known && self.api == Api::Other {
            return None;
        }
        let mut values = Values {
            values: [""; MAX_LABELS],
            len: 0,
        };
        for label in family.labels {
            let value = match label {
                Label::Model => self.model,
                Label::Api => self.api.as_str(),
                Label::Tenant => match self.tenant {
                    Some(tenant) => tenant,
                    None => continue,
                },
                Label::Turn => self.turn?,
                _ => return None,
            };
            *values.values.get_mut(values.len)? = value;
            values.len += 1;
        }
        Some(values)
    }
}

/// The most labels a request's own values fill: model, API, tenant and turn.
const MAX_LABELS: usize = 4;

/// A family's label values for one request, kept on the stack: they are looked up with on every
/// observation that resolves a child, and a `Vec` each time was an allocation per lookup.
pub(super) struct Values<'a> {
    values: [&'a str; MAX_LABELS],
    len: usize,
}

impl<'a> std::ops::Deref for Values<'a> {
    type Target = [&'a str];

    fn deref(&self) -> &[&'a str] {
        self.values.get(..self.len).unwrap_or_default()
    }
}
