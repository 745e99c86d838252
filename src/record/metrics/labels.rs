//! The two label values that come from outside: `model` (from the request body, a client's choice) and
//! `status` (from the upstream), each kept to a bounded set.
//!
//! The series an admitted name holds are drawn from a budget (what `metrics.max_series` leaves after
//! the series counted up front, `bound.rs`), a (name, API) pair at a time, the first time a request of
//! that API counts under the name; a pair that does not fit counts under `other`, and a retired name
//! gives its pairs back. The fixed values and the pinned names are counted up front and draw nothing.
//!
//! A model name takes one of the `max_models` places only when the caller admits it (a name the
//! upstream lists, or confirmed by a 2xx where it lists nothing: `admission.rs`): junk names a client
//! makes up never take a place, and count under `unadmitted`. A place is freed again when its name has
//! had no request for `metrics.model_idle`, or the caller says it is dropped (the upstream's list no
//! longer names it), and no request in flight holds it; the caller then removes the name's series while
//! the set is still locked, so a name admitted again starts from fresh series.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http::StatusCode;
use tokio::time::Instant;

use super::bound::PairCosts;
use crate::logging::repeated::RepeatedWarning;
use crate::record::api::Api;

/// Label for requests whose model could not be read from the request or the response.
pub const UNKNOWN_MODEL: &str = "unknown";
/// Label for models beyond the `max_models` cap, and for names no real model has (control characters,
/// over 200 bytes).
pub const OTHER_MODEL: &str = "other";
/// Label for requests naming a model the upstream has not yet confirmed with a 2xx answer.
pub const UNADMITTED_MODEL: &str = "unadmitted";
/// Label for requests that name no tenant (`tenant` label).
pub const NO_TENANT: &str = "none";
/// Longer model names are counted as `other`: a real model name is never this long.
const MAX_MODEL_LEN: usize = 200;

/// Status codes that keep their own `status` label value; every other code is counted under its class
/// (`1xx` … `5xx`), so an upstream cannot create label values by answering odd codes.
const EXACT_STATUSES: [&str; 16] = [
    "200", "204", "400", "401", "403", "404", "408", "413", "422", "429", "431", "500", "501",
    "502", "503", "504",
];
const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
/// No response head reached the client.
const NO_STATUS: &str = "none";

/// Every value the `status` label can take.
pub fn status_labels() -> impl Iterator<Item = &'static str> {
    EXACT_STATUSES
        .into_iter()
        .chain(STATUS_CLASSES)
        .chain([NO_STATUS])
}

/// The `status` label of a response status: itself when it is one of the common codes, else its class.
/// Codes above 599 (which hyper accepts) count as `5xx`: a server that answers them is broken.
pub fn status_label(status: Option<StatusCode>) -> &'static str {
    let Some(status) = status else {
        return NO_STATUS;
    };
    if let Some(exact) = EXACT_STATUSES.iter().find(|s| **s == status.as_str()) {
        return exact;
    }
    let class = usize::from(status.as_u16() / 100).clamp(1, 5);
    STATUS_CLASSES[class - 1]
}

/// Whether `model` is a name no real model has: a control character is in none (admitted, it would
/// take one of the capped places and carry line breaks into the per-request log line), nor is a name
/// over [`MAX_MODEL_LEN`].
fn impossible(model: &str) -> bool {
    model.len() > MAX_MODEL_LEN || model.chars().any(char::is_control)
}

/// The capped set of `model` label values. Models named in the SLO config are always admitted and
/// never retired.
pub struct ModelLabels {
    cap: usize,
    idle: Option<Duration>,
    admitted: Mutex<Places>,
    /// How many names are pinned (configured); a reload may change them ([`ModelLabels::pin`]).
    pinned: AtomicUsize,
    unknown: Arc<str>,
    other: Arc<str>,
    unadmitted: Arc<str>,
}

pub(super) struct Admitted {
    last_request: Instant,
    pinned: bool,
    /// The APIs it has counted under, a bit each (`Api as usize`): its pairs.
    pairs: u16,
}

/// The admitted names, and the series budget their pairs draw from.
pub(super) struct Places {
    names: HashMap<Arc<str>, Admitted>,
    /// `None` for the tenant label, whose values take no budget of their own.
    budget: Option<Budget>,
}

struct Budget {
    costs: PairCosts,
    /// The series the names that are not pinned may hold.
    cap: usize,
    /// What their pairs hold now.
    spent: usize,
    refused: RepeatedWarning,
}

impl Places {
    /// What the names that are not pinned hold, at `costs`.
    fn spent(&self, costs: &PairCosts) -> usize {
        let unpinned = self.names.values().filter(|e| !e.pinned);
        unpinned.map(|e| costs.of(e.pairs)).sum()
    }
}

/// What [`ModelLabels::lookup`] found.
pub enum Lookup {
    Label(Arc<str>),
    /// A confirmed name that would need a place, and every place is taken.
    Full,
}

impl ModelLabels {
    pub fn new<'a>(
        cap: usize, idle: Option<Duration>, configured: impl Iterator<Item = &'a str>,
    ) -> Self {
        let now = Instant::now();
        let pin = |name: &str| {
            let admitted = Admitted {
                last_request: now,
                pinned: true,
                pairs: 0,
            };
            (Arc::from(name), admitted)
        };
        let names: HashMap<_, _> = configured.map(pin).collect();
        ModelLabels {
            cap,
            idle,
            pinned: AtomicUsize::new(names.len()),
            admitted: Mutex::new(Places {
                names,
                budget: None,
            }),
            unknown: Arc::from(UNKNOWN_MODEL),
            other: Arc::from(OTHER_MODEL),
            unadmitted: Arc::from(UNADMITTED_MODEL),
        }
    }

    /// The same capped set for the `tenant` label: a request that names no tenant is `none`.
    pub fn for_tenants<'a>(
        cap: usize, idle: Option<Duration>, configured: impl Iterator<Item = &'a str>,
    ) -> Self {
        ModelLabels {
            unknown: Arc::from(NO_TENANT),
            ..ModelLabels::new(cap, idle, configured)
        }
    }

    /// The most values the label can take: the admitted names, `unknown`, `other` and `unadmitted`.
    pub fn max_values(&self) -> usize {
        Self::values_with(self.cap, self.pinned.load(Ordering::Relaxed))
    }

    /// What [`ModelLabels::max_values`] would be with this cap and `pinned` configured names.
    pub fn values_with(cap: usize, pinned: usize) -> usize {
        cap.max(pinned) + 3
    }

    /// How many names are pinned now.
    pub fn pinned(&self) -> usize {
        self.pinned.load(Ordering::Relaxed)
    }

    /// Sets the series budget of the names that are not pinned (at start, and at each reload, whose
    /// boundaries may change what a pair costs: what the names hold is counted again at the new costs).
    pub fn set_budget(&self, costs: PairCosts, cap: usize) {
        let mut places = self.lock();
        let spent = places.spent(&costs);
        let refused = places.budget.take().map(|b| b.refused).unwrap_or_default();
        places.budget = Some(Budget {
            costs,
            cap,
            spent,
            refused,
        });
    }

    /// Counts `label`'s pair with `api` in the budget the first time; false when it does not fit (the
    /// request counts under `other`). The fixed values and the pinned names always fit.
    pub fn take_pair(&self, label: &str, api: Api) -> bool {
        let bit = 1u16 << (api as usize);
        let mut guard = self.lock();
        let places = &mut *guard;
        let (Some(entry), Some(budget)) = (places.names.get_mut(label), places.budget.as_mut())
        else {
            return true;
        };
        if entry.pairs & bit != 0 {
            return true;
        }
        if !entry.pinned {
            let cost = budget.costs.of(entry.pairs | bit) - budget.costs.of(entry.pairs);
            if budget.spent + cost > budget.cap {
                if let Some(times) = budget.refused.occurred(Instant::now()) {
                    tracing::warn!(
                        model = label,
                        api = api.as_str(),
                        times,
                        budget = budget.cap,
                        "series budget spent (metrics.max_series): a model's first request on an API \
                         counts as model \"other\" until idle names are retired"
                    );
                }
                return false;
            }
            budget.spent += cost;
        }
        entry.pairs |= bit;
        true
    }

    /// The series the names that are not pinned hold now, and may hold.
    pub fn budget(&self) -> Option<(usize, usize)> {
        let places = self.lock();
        places.budget.as_ref().map(|b| (b.spent, b.cap))
    }

    /// Makes `configured` the pinned names (a reload's): a new one takes its place at once, one no
    /// longer configured keeps its place as any admitted name does, until it is retired.
    pub fn pin<'a>(&self, configured: impl Iterator<Item = &'a str>) {
        let configured: HashSet<&str> = configured.collect();
        let mut places = self.lock();
        for (name, entry) in places.names.iter_mut() {
            entry.pinned = configured.contains(&**name);
        }
        let now = Instant::now();
        for name in &configured {
            places.names.entry(Arc::from(*name)).or_insert(Admitted {
                last_request: now,
                pinned: true,
                pairs: 0,
            });
        }
        // A name no longer pinned holds its pairs from the budget now, one newly pinned none.
        let spent = places.budget.as_ref().map(|b| places.spent(&b.costs));
        if let (Some(budget), Some(spent)) = (places.budget.as_mut(), spent) {
            budget.spent = spent;
        }
        self.pinned.store(configured.len(), Ordering::Relaxed);
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Places> {
        // The map is consistent after every statement that changes it: a panic elsewhere cannot leave it
        // half-updated.
        self.admitted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The label for a request's model name, `confirmed` when the upstream answered it with a 2xx: an
    /// admitted name is itself; a new name is admitted only when confirmed and a place is free.
    pub fn lookup(&self, model: Option<&str>, confirmed: bool) -> Lookup {
        let Some(model) = model.filter(|m| !m.is_empty()) else {
            return Lookup::Label(self.unknown.clone());
        };
        if impossible(model) {
            return Lookup::Label(self.other.clone());
        }
        let now = Instant::now();
        let mut places = self.lock();
        let admitted = &mut places.names;
        if let Some(entry) = admitted.get_mut(model) {
            entry.last_request = now;
        }
        if let Some((label, _)) = admitted.get_key_value(model) {
            return Lookup::Label(label.clone());
        }
        if !confirmed {
            return Lookup::Label(self.unadmitted.clone());
        }
        if admitted.len() >= self.cap.max(self.pinned.load(Ordering::Relaxed)) {
            return Lookup::Full;
        }
        let label: Arc<str> = Arc::from(model);
        let entry = Admitted {
            last_request: now,
            pinned: false,
            pairs: 0,
        };
        admitted.insert(label.clone(), entry);
        Lookup::Label(label)
    }

    /// The label of a request whose name may not be counted under its own label now, even if it still
    /// holds a place: `unadmitted` (`unknown` and `other` as [`ModelLabels::lookup`] gives them).
    pub fn refused(&self, model: Option<&str>) -> Arc<str> {
        match model.filter(|m| !m.is_empty()) {
            None => self.unknown.clone(),
            Some(model) if impossible(model) => self.other.clone(),
            Some(_) => self.unadmitted.clone(),
        }
    }

    /// The label of a request that names nothing (`unknown` model, `none` tenant).
    pub fn none(&self) -> Arc<str> {
        self.unknown.clone()
    }

    /// The label once more, for a cap that is still full: `other`.
    pub fn overflow(&self) -> Arc<str> {
        self.other.clone()
    }

    /// A request labelled `label` has finished: its name was in use until now.
    pub fn touch(&self, label: &str) {
        if let Some(entry) = self.lock().names.get_mut(label) {
            entry.last_request = Instant::now();
        }
    }

    /// Frees the places of names idle for `model_idle`, or `dropped`, that no request in flight holds
    /// (pinned names never), and calls `purge` with them while the set is locked, so no request can take
    /// a name back before its series are gone. Returns how many were retired.
    pub fn retire(
        &self, dropped: impl Fn(&str) -> bool, purge: impl FnOnce(&HashSet<Arc<str>>),
    ) -> usize {
        let now = Instant::now();
        let idle = |entry: &Admitted| {
            self.idle
                .is_some_and(|idle| now.saturating_duration_since(entry.last_request) >= idle)
        };
        let mut places = self.lock();
        // Every label a request holds is a clone of the map's key: a count of one means no request
        // resolved its series with it and is still running.
        let retired: HashSet<Arc<str>> = places
            .names
            .iter()
            .filter(|(label, entry)| {
                !entry.pinned && Arc::strong_count(label) == 1 && (idle(entry) || dropped(label))
            })
            .map(|(label, _)| label.clone())
            .collect();
        if retired.is_empty() {
            return 0;
        }
        let places = &mut *places;
        if let Some(budget) = places.budget.as_mut() {
            let freed: usize = (retired.iter().filter_map(|name| places.names.get(name)))
                .map(|entry| budget.costs.of(entry.pairs))
                .sum();
            budget.spent = budget.spent.saturating_sub(freed);
        }
        places.names.retain(|label, _| !retired.contains(label));
        purge(&retired);
        retired.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(labels: &ModelLabels, model: Option<&str>) -> String {
        match labels.lookup(model, true) {
            Lookup::Label(label) => label.to_string(),
            Lookup::Full => labels.overflow().to_string(),
        }
    }

    #[test]
    fn model_labels_are_capped_and_configured_models_always_fit() {
        let labels = ModelLabels::new(3, None, ["pinned"].into_iter());
        assert_eq!(label(&labels, Some("a")), "a");
        assert_eq!(label(&labels, Some("b")), "b");
        assert_eq!(label(&labels, Some("c")), OTHER_MODEL);
        assert_eq!(label(&labels, Some("a")), "a");
        assert_eq!(label(&labels, Some("pinned")), "pinned");
        assert_eq!(label(&labels, None), UNKNOWN_MODEL);
        assert_eq!(label(&labels, Some("")), UNKNOWN_MODEL);
        assert_eq!(label(&labels, Some(&"x".repeat(500))), OTHER_MODEL);
        let labels = ModelLabels::new(3, None, std::iter::empty());
        for forged in ["a\nINFO forged", "b\r", "c\u{0}", "d\u{7f}", "e\u{85}"] {
            assert_eq!(label(&labels, Some(forged)), OTHER_MODEL, "{forged:?}");
        }
        assert_eq!(label(&labels, Some("ünï-模型 v2")), "ünï-模型 v2");
        assert_eq!(labels.max_values(), 6);
    }

    #[test]
    fn only_a_confirmed_name_takes_a_place_and_an_admitted_name_keeps_it_on_errors() {
        let labels = ModelLabels::new(1, None, std::iter::empty());
        for junk in ["junk-1", "junk-2", "junk-3"] {
            let Lookup::Label(got) = labels.lookup(Some(junk), false) else {
                panic!("unconfirmed names never ask for a place");
            };
            assert_eq!(&*got, UNADMITTED_MODEL);
        }
        assert!(matches!(labels.lookup(Some("real"), true), Lookup::Label(l) if &*l == "real"));
        assert!(matches!(labels.lookup(Some("real"), false), Lookup::Label(l) if &*l == "real"));
        assert!(matches!(labels.lookup(Some("next"), true), Lookup::Full));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_names_not_in_use_are_retired_and_pinned_ones_never() {
        let idle = Duration::from_secs(60);
        let labels = ModelLabels::new(2, Some(idle), ["pinned"].into_iter());
        let Lookup::Label(held) = labels.lookup(Some("held"), true) else {
            panic!("a place was free");
        };
        assert!(matches!(labels.lookup(Some("a"), true), Lookup::Full));
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(
            labels.retire(|_| false, |_| panic!("nothing is idle yet")),
            0
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(labels.retire(|_| false, |_| panic!("`held` is in use")), 0);
        drop(held);
        let mut purged = Vec::new();
        let retired = labels.retire(
            |_| false,
            |names| purged.extend(names.iter().map(|n| n.to_string())),
        );
        assert_eq!((retired, purged), (1, vec!["held".to_owned()]));
        assert!(matches!(labels.lookup(Some("a"), true), Lookup::Label(l) if &*l == "a"));
        tokio::time::advance(Duration::from_secs(30)).await;
        labels.touch("a");
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(
            labels.retire(|_| false, |_| panic!("`a` was used 30 s ago")),
            0
        );
    }

    #[test]
    fn a_dropped_name_gives_its_place_back_once_no_request_holds_it_and_pinned_ones_never() {
        let labels = ModelLabels::new(2, None, ["pinned"].into_iter());
        let Lookup::Label(held) = labels.lookup(Some("dropped"), true) else {
            panic!("a place was free");
        };
        assert!(matches!(labels.lookup(Some("listed"), true), Lookup::Full));
        let all = |_: &str| true;
        assert_eq!(labels.retire(all, |_| panic!("`dropped` is in use")), 0);
        assert_eq!(&*labels.refused(Some("dropped")), UNADMITTED_MODEL);
        assert_eq!(&*labels.refused(None), UNKNOWN_MODEL);
        assert_eq!(&*labels.refused(Some("a\nb")), OTHER_MODEL);
        drop(held);
        let mut purged = Vec::new();
        let retired = labels.retire(all, |names| {
            purged.extend(names.iter().map(|n| n.to_string()))
        });
        assert_eq!((retired, purged), (1, vec!["dropped".to_owned()]));
        let unconfirmed = |name| match labels.lookup(Some(name), false) {
            Lookup::Label(label) => label.to_string(),
            Lookup::Full => panic!("an unconfirmed name asks for no place"),
        };
        assert_eq!(
            [unconfirmed("pinned"), unconfirmed("dropped")],
            ["pinned", UNADMITTED_MODEL]
        );
        assert!(matches!(labels.lookup(Some("listed"), true), Lookup::Label(l) if &*l == "listed"));
    }

    #[test]
    fn status_labels_are_a_closed_set() {
        let label = |code: u16| status_label(StatusCode::from_u16(code).ok());
        assert_eq!(
            [200, 204, 404, 429, 504].map(label),
            ["200", "204", "404", "429", "504"]
        );
        assert_eq!(
            [101, 206, 307, 418, 599, 600, 999].map(label),
            ["1xx", "2xx", "3xx", "4xx", "5xx", "5xx", "5xx"]
        );
        assert_eq!(status_label(None), "none");
        let all: HashSet<&str> = status_labels().collect();
        assert_eq!(all.len(), 22);
        for code in 100..=999 {
            assert!(all.contains(label(code)), "{code}");
        }
    }
}
