//! The live page's history: every `ui.interval` a task takes a snapshot of tokentap's own series (the
//! cumulative bucket counts of the latency histograms and the request, token, goodput and SLO counters,
//! summed per model and per model and tenant) into a ring that holds `ui.history` of them. Nothing is
//! added to the data path: the snapshot reads the same registry a scrape reads, on the blocking pool.
//!
//! Memory is fixed by the config: at most `ui.max_models` models and as many (model, tenant) pairs are
//! kept (the most requested ones; the rest are left out of the page, never out of `/metrics`), each a
//! [`Counts`] of one `u64` per histogram bucket (+Inf included), 13 counters and the sum and count of six
//! histograms (the parts of a TTFT, shown as means), in each of
//! `ui.history / ui.interval` snapshots, beside the process-wide figures (requests in flight, and the
//! buckets of tokentap's own delay per frame). [`Ring::bytes_bound`] states the figure; docs/live.md has it
//! for the defaults. [`view`] turns the ring into the JSON the page reads, with quantiles computed from
//! bucket deltas as Prometheus does ([`quantile`]); [`views`] computes each view once, off the ring's
//! lock, and bounds how many are held.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus::proto::MetricFamily;
use tokio::time::Instant;

use crate::config::{Config, Slo, SloKind, Ui};
use crate::record::figure::ROWS;
use crate::record::metrics::family::{self, Family, Kind};
use crate::record::metrics::{Boundaries, Metrics};

pub mod quantile;
pub mod view;
pub mod views;

/// One latency chart of the page: a histogram's key in the JSON, its title, its family, and the SLO
/// kind whose ceiling is drawn over it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Chart {
    pub key: &'static str,
    pub title: &'static str,
    pub family: &'static Family,
    pub ceiling: Option<SloKind>,
}

/// The figures the page charts: the figure table's rows with a live chart, in its order.
const LIVE_FIGURES: usize = {
    let (mut n, mut i) = (0, 0);
    while i < ROWS.len() {
        if ROWS[i].live.is_some() {
            n += 1;
        }
        i += 1;
    }
    n
};

/// The latency histograms the page shows, in [`Counts::hist`] order: the figures' (from the figure
/// table, `record::figure`), then the gaps (ITL, one observation per gap) and the think time between
/// a conversation's turns.
pub const HISTOGRAMS: [Chart; LIVE_FIGURES + 2] = {
    let itl = Chart {
        key: "itl",
        title: "ITL",
        family: &family::ITL,
        ceiling: Some(SloKind::Itl),
    };
    let think = Chart {
        key: "think",
        title: "Think time between turns",
        family: &family::THINK_TIME,
        ceiling: None,
    };
    let mut charts = [itl; LIVE_FIGURES + 2];
    let (mut n, mut i) = (0, 0);
    while i < ROWS.len() {
        if let Some((key, title)) = ROWS[i].live {
            charts[n] = Chart {
                key,
                title,
                family: family::of_figure(ROWS[i].figure),
                ceiling: ROWS[i].slo,
            };
            n += 1;
        }
        i += 1;
    }
    charts[n + 1] = think;
    charts
};

/// The parts of a TTFT (issue "inside the TTFT"), shown as means over the window (Δsum / Δcount, as the
/// deploy/ recording rules do): only their sums and counts are kept, in [`Counts::means`] order.
pub const MEANS: [(&str, &str); 6] = [
    ("ttft", family::TTFT.name),
    ("server_queue", family::SERVER_QUEUE.name),
    ("server_prefill", family::SERVER_PREFILL.name),
    ("server_ttft", family::SERVER_TTFT.name),
    ("outside_server", family::OUTSIDE_SERVER.name),
    ("reasoning", family::REASONING_TIME.name),
];

const REQUESTS: &str = family::REQUESTS.name;
const CACHED_INPUT_TOKENS: &str = family::CACHED_INPUT_TOKENS.name;
const REASONING_TOKENS: &str = family::REASONING_TOKENS.name;
const GOODPUT: &str = family::GOODPUT.name;
const VIOLATIONS: &str = family::SLO_VIOLATIONS.name;
const INPUT_TOKENS: &str = family::INPUT_TOKENS.name;
const OUTPUT_TOKENS: &str = family::OUTPUT_TOKENS.name;
const IN_FLIGHT: &str = family::IN_FLIGHT.name;
const FORWARDING_DELAY: &str = family::FORWARDING_DELAY.name;

/// Which series a [`Counts`] sums: one model (every API and tenant), or one model's one tenant.
pub type Key = (String, Option<String>);

/// One key's cumulative counts at one snapshot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    /// Per histogram of [`HISTOGRAMS`]: cumulative counts per finite bound, then the +Inf bucket
    /// (the total); empty when the family has no series for this key.
    pub hist: [Vec<u64>; HISTOGRAMS.len()],
    pub requests: u64,
    pub goodput: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `outcome="upstream_error"`.
    pub errors: u64,
    /// `outcome="cancelled"`: the client went away.
    pub cancels: u64,
    /// `outcome="timeout"`: tokentap cut the stream (or refused on a deadline).
    pub cuts: u64,
    /// Per [`SloKind::ALL`]: missed ceilings.
    pub violations: [u64; SloKind::ALL.len()],
    pub cached_input_tokens: u64,
    pub reasoning_tokens: u64,
    /// Per [`MEANS`]: the histogram's sum of observations (seconds) and their count.
    pub means: [(f64, u64); MEANS.len()],
}

/// The counts of every kept key at one moment.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub unix_ms: u64,
    pub at: Instant,
    pub in_flight: i64,
    /// `tokentap_forwarding_delay_seconds`: cumulative counts per bound of its fixed buckets, then the
    /// total (empty before it is found).
    pub forwarding_delay: Vec<u64>,
    pub series: BTreeMap<Key, Counts>,
}

/// The snapshots of the last `ui.history`, oldest first, and the histograms' bucket bounds. A clone
/// shares the snapshots: a view is computed from one, off the lock.
#[derive(Clone)]
pub struct Ring {
    pub bounds: [Vec<f64>; HISTOGRAMS.len()],
    pub points: VecDeque<Arc<Snapshot>>,
    capacity: usize,
    max_keys: usize,
    /// Buckets (+Inf included) of one key's histograms, from the configured boundaries.
    buckets_per_key: usize,
}

impl Ring {
    pub fn new(config: &Config) -> Self {
        let capacity = config.ui.points();
        let boundaries = Boundaries::of(config);
        // Each histogram's buckets as its family row names them, and +Inf.
        let buckets_per_key = HISTOGRAMS
            .iter()
            .map(|chart| match chart.family.kind {
                Kind::Histogram(buckets) => boundaries.get(buckets).len() + 1,
                Kind::Counter | Kind::Gauge => 0,
            })
            .sum();
        Ring {
            bounds: Default::default(),
            points: VecDeque::with_capacity(capacity),
            capacity,
            max_keys: config.ui.max_models,
            buckets_per_key,
        }
    }

    /// Adds a snapshot of `families`, dropping the oldest once `capacity` are held.
    pub fn push(&mut self, families: &[MetricFamily], at: Instant, unix_ms: u64) {
        let (mut snapshot, bounds) = take(families, self.max_keys);
        snapshot.at = at;
        snapshot.unix_ms = unix_ms;
        for (slot, found) in self.bounds.iter_mut().zip(bounds) {
            if let Some(found) = found {
                *slot = found;
            }
        }
        if self.points.len() == self.capacity {
            self.points.pop_front();
        }
        self.points.push_back(Arc::new(snapshot));
    }

    /// The most memory the counts can take: every snapshot full of keys, every histogram present.
    pub fn bytes_bound(&self) -> usize {
        let seen: usize = self.bounds.iter().map(|b| b.len() + 1).sum();
        let buckets = seen.max(self.buckets_per_key);
        let per_key = std::mem::size_of::<Counts>() + buckets * 8 + 64;
        let process_wide = (crate::record::metrics::forwarding::BUCKETS.len() + 1) * 8;
        self.capacity * (2 * self.max_keys * per_key + process_wide)
    }
}

/// The ceilings a request admitted now is judged by: the running tokentap's are those of the settings
/// a request takes (`tap/context.rs`), so a reload's reach the page's next view.
pub type CurrentSlo = Box<dyn Fn() -> Slo + Send + Sync>;

/// The shared ring behind the live page, filled by [`Live::run`].
pub struct Live {
    ring: Mutex<Ring>,
    pub ui: Ui,
    /// The ceilings drawn over the charts, read for each view.
    slo: CurrentSlo,
    /// The views computing or held by connections ([`views`]).
    views: Mutex<views::Views>,
}

impl Live {
    /// The live page of `config`, its ceilings `config.slo` until [`Live::with_ceilings`] says where
    /// the current ones are.
    pub fn new(config: &Config) -> Self {
        let slo = config.slo.clone();
        Live {
            ring: Mutex::new(Ring::new(config)),
            ui: config.ui.clone(),
            slo: Box::new(move || slo.clone()),
            views: Mutex::default(),
        }
    }

    /// Reads the ceilings from `current` for each view.
    pub fn with_ceilings(mut self, current: CurrentSlo) -> Self {
        self.slo = current;
        self
    }

    /// The ceilings current now.
    pub fn slo(&self) -> Slo {
        (self.slo)()
    }

    pub fn ring(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a snapshot of `metrics` now.
    pub fn snapshot(&self, metrics: &Metrics) {
        let at = Instant::now();
        let families = metrics.gather();
        self.ring().push(&families, at, unix_ms());
    }

    /// Takes a snapshot every `ui.interval`, the first one interval from now, for ever (the caller aborts
    /// the task). The one before it is the caller's: taken before the proxy serves its first request, so
    /// the first window counts every request since the start.
    pub async fn run(self: Arc<Self>, metrics: Arc<Metrics>) {
        let mut ticks = tokio::time::interval(self.ui.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let live = self.clone();
            let metrics = metrics.clone();
            let taken = tokio::task::spawn_blocking(move || live.snapshot(&metrics));
            if let Err(err) = taken.await {
                tracing::debug!(%err, "live page snapshot did not run");
            }
        }
    }
}

fn unix_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH);
    u64::try_from(since.unwrap_or(Duration::ZERO).as_millis()).unwrap_or(u64::MAX)
}

type Bounds = [Option<Vec<f64>>; HISTOGRAMS.len()];

/// Sums `families` into per-model and per-(model, tenant) counts, keeping the `max_keys` most requested
/// of each; also returns each histogram's bounds as found.
pub fn take(families: &[MetricFamily], max_keys: usize) -> (Snapshot, Bounds) {
    let mut all: BTreeMap<Key, Counts> = BTreeMap::new();
    let mut bounds: Bounds = Default::default();
    let mut in_flight = 0i64;
    let mut forwarding_delay = Vec::new();
    for family in families {
        let name = family.name();
        if name == FORWARDING_DELAY {
            for metric in family.get_metric() {
                let h = metric.get_histogram();
                let cumulative = h.get_bucket().iter().map(|b| b.cumulative_count());
                forwarding_delay = cumulative.chain([h.get_sample_count()]).collect();
            }
            continue;
        }
        if name == IN_FLIGHT {
            let sum: f64 = family
                .get_metric()
                .iter()
                .map(|m| m.get_gauge().get_value())
                .sum();
            in_flight = sum as i64;
            continue;
        }
        let hist = HISTOGRAMS.iter().position(|c| c.family.name == name);
        let mean = MEANS.iter().position(|(_, n)| *n == name);
        let counters = [
            REQUESTS,
            GOODPUT,
            INPUT_TOKENS,
            OUTPUT_TOKENS,
            VIOLATIONS,
            CACHED_INPUT_TOKENS,
            REASONING_TOKENS,
        ];
        if hist.is_none() && mean.is_none() && !counters.contains(&name) {
            continue;
        }
        for metric in family.get_metric() {
            let label = |key: &str| {
                let pairs = metric.get_label().iter();
                pairs
                    .into_iter()
                    .find(|p| p.name() == key)
                    .map(|p| p.value())
            };
            let Some(model) = label("model") else {
                continue;
            };
            let tenant = label("tenant").map(str::to_owned);
            let mut keys = vec![(model.to_owned(), None)];
            if tenant.is_some() {
                keys.push((model.to_owned(), tenant));
            }
            for key in keys {
                let counts = all.entry(key).or_default();
                if let Some(i) = mean {
                    let h = metric.get_histogram();
                    counts.means[i].0 += h.get_sample_sum();
                    counts.means[i].1 += h.get_sample_count();
                }
                if let Some(i) = hist {
                    let h = metric.get_histogram();
                    let cumulative = h.get_bucket().iter().map(|b| b.cumulative_count());
                    let cumulative: Vec<u64> = cumulative.chain([h.get_sample_count()]).collect();
                    add(&mut counts.hist[i], &cumulative);
                    if bounds[i].is_none() {
                        bounds[i] = Some(h.get_bucket().iter().map(|b| b.upper_bound()).collect());
                    }
                    continue;
                }
                if mean.is_some() {
                    continue;
                }
                let value = metric.get_counter().get_value() as u64;
                match name {
                    REQUESTS => {
                        counts.requests += value;
                        match label("outcome") {
                            Some("upstream_error") => counts.errors += value,
                            Some("cancelled") => counts.cancels += value,
                            Some("timeout") => counts.cuts += value,
                            _ => {}
                        }
                    }
                    GOODPUT => counts.goodput += value,
                    INPUT_TOKENS => counts.input_tokens += value,
                    OUTPUT_TOKENS => counts.output_tokens += value,
                    CACHED_INPUT_TOKENS => counts.cached_input_tokens += value,
                    REASONING_TOKENS => counts.reasoning_tokens += value,
                    VIOLATIONS => {
                        let slo = label("slo");
                        if let Some(k) = SloKind::ALL.iter().position(|k| Some(k.as_str()) == slo) {
                            counts.violations[k] += value;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    let series = most_requested(all, max_keys);
    let snapshot = Snapshot {
        unix_ms: 0,
        at: Instant::now(),
        in_flight,
        forwarding_delay,
        series,
    };
    (snapshot, bounds)
}

fn add(into: &mut Vec<u64>, from: &[u64]) {
    if into.len() != from.len() {
        *into = vec![0; from.len()];
    }
    for (a, b) in into.iter_mut().zip(from) {
        *a += b;
    }
}

/// The `max_keys` models and the `max_keys` (model, tenant) pairs with the most requests (ties by name).
fn most_requested(all: BTreeMap<Key, Counts>, max_keys: usize) -> BTreeMap<Key, Counts> {
    let (models, tenants): (Vec<_>, Vec<_>) = all.into_iter().partition(|(k, _)| k.1.is_none());
    let mut kept = BTreeMap::new();
    for mut group in [models, tenants] {
        group.sort_by(|a, b| b.1.requests.cmp(&a.1.requests).then_with(|| a.0.cmp(&b.0)));
        kept.extend(group.into_iter().take(max_keys));
    }
    kept
}

#[cfg(test)]
mod tests;
