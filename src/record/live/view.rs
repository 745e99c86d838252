//! The JSON the live page reads (`GET /api/v1/live`), version 1, documented in docs/live.md. Every
//! figure at a point covers the trailing window ending at that snapshot: the difference between that
//! snapshot and the oldest one not older than the window, as `increase(...[window])` would see it.
//! Quantiles come from those bucket deltas ([`super::quantile`]), rates are deltas over the seconds
//! between the two snapshots. A figure with nothing to go on (no earlier snapshot, no observation, no
//! ceiling configured) is `null`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::quantile::{delta, histogram_quantile};
use super::{Chart, Counts, Key, Ring, Snapshot, HISTOGRAMS, MEANS};
use crate::config::{Slo, SloKind};

pub const VERSION: u32 = 1;
pub const QUANTILES: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LiveView {
    pub version: u32,
    pub interval_seconds: f64,
    pub history_seconds: f64,
    pub window_seconds: f64,
    /// Each point's time, Unix seconds, oldest first; every series below has one value per point.
    pub time: Vec<f64>,
    /// Requests in flight at each point, all models.
    pub in_flight: Vec<f64>,
    /// tokentap's own delay per forwarded frame (`tokentap_forwarding_delay_seconds`) over the window
    /// ending at each point, seconds: `p50`, `p90`, `p99`.
    #[serde(default)]
    pub forwarding_delay: BTreeMap<String, Vec<Option<f64>>>,
    pub models: Vec<Entry>,
    /// Per (model, tenant) when a `tenant` label is configured; else empty.
    pub tenants: Vec<Entry>,
    /// `GET /api/v1/fleet` serves the fleet's table from Prometheus (`ui.prometheus` is set).
    #[serde(default)]
    pub fleet: bool,
    /// The latency charts, in the page's order: each histogram's key (in `quantiles`), its title and
    /// the SLO kind whose ceiling is drawn over it.
    #[serde(default)]
    pub charts: Vec<ChartJson>,
    /// The SLO kinds, in the order the attainment chart lists them.
    #[serde(default)]
    pub slo_kinds: Vec<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ChartJson {
    pub key: String,
    pub title: String,
    pub ceiling: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Entry {
    pub model: String,
    pub tenant: Option<String>,
    /// The SLO ceilings in force for this model, seconds (`null`: none).
    pub ceilings: BTreeMap<String, Option<f64>>,
    pub series: Series,
    /// The figures over the window ending at the newest point.
    pub current: Figures,
}

/// One value per point for each figure.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Series {
    /// Per histogram (`ttft`, `ttfa`, `tool_call`, `itl`, `tpot`, `e2e`), per quantile (`p50`, `p90`, `p99`).
    pub quantiles: BTreeMap<String, BTreeMap<String, Vec<Option<f64>>>>,
    pub requests_per_second: Vec<Option<f64>>,
    pub input_tokens_per_second: Vec<Option<f64>>,
    pub output_tokens_per_second: Vec<Option<f64>>,
    pub goodput_ratio: Vec<Option<f64>>,
    /// Per SLO kind with a ceiling: the share of requests that met it.
    pub attainment: BTreeMap<String, Vec<Option<f64>>>,
    pub errors_per_second: Vec<Option<f64>>,
    pub cancels_per_second: Vec<Option<f64>>,
    pub cuts_per_second: Vec<Option<f64>>,
    /// Inside the TTFT: per part (`ttft`, `server_queue`, `server_prefill`, `server_ttft`,
    /// `outside_server`, `reasoning`), the mean in seconds over the window.
    pub means: BTreeMap<String, Vec<Option<f64>>>,
    /// Cached prompt tokens / prompt tokens.
    pub cached_input_ratio: Vec<Option<f64>>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Figures {
    /// Seconds between the two snapshots compared (0: only one snapshot yet).
    pub seconds: f64,
    pub requests: u64,
    pub requests_per_second: Option<f64>,
    pub input_tokens_per_second: Option<f64>,
    pub output_tokens_per_second: Option<f64>,
    pub goodput_ratio: Option<f64>,
    pub attainment: BTreeMap<String, Option<f64>>,
    pub errors: u64,
    pub cancels: u64,
    pub cuts: u64,
    /// Inside the TTFT: each part's mean in seconds (see [`Series::means`]).
    pub means: BTreeMap<String, Option<f64>>,
    pub cached_input_ratio: Option<f64>,
    pub reasoning_tokens_per_second: Option<f64>,
    /// Per histogram: `p50`, `p90`, `p99` and `count` (observations in the window).
    pub quantiles: BTreeMap<String, BTreeMap<String, Option<f64>>>,
    /// TTFT and ITL: the bucket bounds and the observations per bucket in the window (not cumulative;
    /// one more count than bounds, the last for +Inf).
    pub distributions: BTreeMap<String, Distribution>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Distribution {
    pub bounds: Vec<f64>,
    pub counts: Vec<u64>,
}

/// The view of `ring` with figures over trailing `window`s.
pub fn view(ring: &Ring, slo: &Slo, interval: Duration, window: Duration) -> LiveView {
    let points: Vec<&Snapshot> = ring.points.iter().map(|p| &**p).collect();
    let starts: Vec<usize> = (0..points.len())
        .map(|i| window_start(&points, i, window))
        .collect();
    let mut keys: Vec<(&Key, u64)> = match points.last() {
        Some(last) => last.series.iter().map(|(k, c)| (k, c.requests)).collect(),
        None => Vec::new(),
    };
    keys.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let entry = |key: &Key| {
        let mut series = Series::default();
        let mut current = Figures::default();
        for (i, &start) in starts.iter().enumerate() {
            let f = figures(ring, slo, key, points[start], points[i]);
            push_point(&mut series, &f);
            current = f;
        }
        let c = slo.ceilings_for_request(&key.0, key.1.as_deref());
        let ceilings = SloKind::ALL
            .iter()
            .map(|&k| (k.as_str().to_owned(), c[k].map(|d| d.as_secs_f64())))
            .collect();
        Entry {
            model: key.0.clone(),
            tenant: key.1.clone(),
            ceilings,
            series,
            current,
        }
    };
    let (models, tenants) = keys.iter().partition::<Vec<_>, _>(|(k, _)| k.1.is_none());
    LiveView {
        version: VERSION,
        interval_seconds: interval.as_secs_f64(),
        history_seconds: interval.as_secs_f64() * ring.capacity as f64,
        window_seconds: window.as_secs_f64(),
        time: points.iter().map(|p| p.unix_ms as f64 / 1000.0).collect(),
        in_flight: points.iter().map(|p| p.in_flight as f64).collect(),
        forwarding_delay: forwarding_delay(&points, &starts),
        models: models.iter().map(|(k, _)| entry(k)).collect(),
        tenants: tenants.iter().map(|(k, _)| entry(k)).collect(),
        fleet: false,
        charts: HISTOGRAMS
            .iter()
            .map(|c| ChartJson {
                key: c.key.to_owned(),
                title: c.title.to_owned(),
                ceiling: c.ceiling.map(|k| k.as_str().to_owned()),
            })
            .collect(),
        slo_kinds: SloKind::ALL.iter().map(|k| k.as_str().to_owned()).collect(),
    }
}

/// The quantiles of tokentap's own delay per frame over the window ending at each point.
fn forwarding_delay(points: &[&Snapshot], starts: &[usize]) -> BTreeMap<String, Vec<Option<f64>>> {
    let bounds = &crate::record::metrics::forwarding::BUCKETS;
    QUANTILES
        .iter()
        .map(|(label, q)| {
            let values = starts.iter().enumerate().map(|(i, &start)| {
                let (now, then) = (&points[i].forwarding_delay, &points[start].forwarding_delay);
                let window = delta(now, (start != i).then_some(then.as_slice()));
                (start != i)
                    .then(|| histogram_quantile(*q, bounds, &window))
                    .flatten()
            });
            (label.to_string(), values.collect())
        })
        .collect()
}

/// The oldest point not older than `window` before point `i` (`i` itself when there is none).
fn window_start(points: &[&Snapshot], i: usize, window: Duration) -> usize {
    let end = points[i].at;
    (0..i)
        .find(|&j| end.duration_since(points[j].at) <= window + Duration::from_millis(500))
        .unwrap_or(i)
}

fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// The figures of `key` between snapshots `then` and `now`.
fn figures(ring: &Ring, slo: &Slo, key: &Key, then: &Snapshot, now: &Snapshot) -> Figures {
    let seconds = now.at.duration_since(then.at).as_secs_f64();
    let empty = Counts::default();
    let n = now.series.get(key).unwrap_or(&empty);
    let t = then.series.get(key);
    // A key missing from the older snapshot is new in the window: it counts from zero.
    let d = |f: fn(&Counts) -> u64| match t {
        Some(t) if f(n) >= f(t) => f(n) - f(t),
        _ => f(n),
    };
    let per_second = |v: u64| (seconds > 0.0).then(|| v as f64 / seconds);
    let requests = d(|c| c.requests);
    let ceilings = slo.ceilings_for_request(&key.0, key.1.as_deref());
    let attainment = SloKind::ALL
        .iter()
        .enumerate()
        .filter(|(_, k)| ceilings[**k].is_some())
        .map(|(i, k)| {
            let missed = match t {
                Some(t) if n.violations[i] >= t.violations[i] => n.violations[i] - t.violations[i],
                _ => n.violations[i],
            };
            let met = ratio(requests.saturating_sub(missed), requests);
            (k.as_str().to_owned(), met.filter(|_| seconds > 0.0))
        })
        .collect();
    let mut quantiles = BTreeMap::new();
    let mut distributions = BTreeMap::new();
    for (i, Chart { key: name, .. }) in HISTOGRAMS.iter().enumerate() {
        let bounds = &ring.bounds[i];
        let window = match (n.hist[i].is_empty(), seconds > 0.0) {
            (false, true) => delta(&n.hist[i], t.map(|t| t.hist[i].as_slice())),
            _ => Vec::new(),
        };
        let mut q: BTreeMap<String, Option<f64>> = QUANTILES
            .iter()
            .map(|(label, q)| (label.to_string(), histogram_quantile(*q, bounds, &window)))
            .collect();
        q.insert("count".into(), window.last().map(|&c| c as f64));
        quantiles.insert(name.to_string(), q);
        if matches!(*name, "ttft" | "itl") {
            let counts = match window.len() {
                0 => vec![0; bounds.len() + 1],
                _ => window
                    .iter()
                    .scan(0, |below, &c| {
                        Some(c.saturating_sub(std::mem::replace(below, c)))
                    })
                    .collect(),
            };
            let bounds = bounds.clone();
            distributions.insert(name.to_string(), Distribution { bounds, counts });
        }
    }
    let means = MEANS
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let (sum, count) = match t {
                Some(t) if n.means[i].1 >= t.means[i].1 => {
                    (n.means[i].0 - t.means[i].0, n.means[i].1 - t.means[i].1)
                }
                _ => n.means[i],
            };
            let mean = (count > 0 && seconds > 0.0).then(|| sum / count as f64);
            (name.to_string(), mean)
        })
        .collect();
    let input = d(|c| c.input_tokens);
    Figures {
        means,
        cached_input_ratio: ratio(d(|c| c.cached_input_tokens), input).filter(|_| seconds > 0.0),
        reasoning_tokens_per_second: per_second(d(|c| c.reasoning_tokens)),
        seconds,
        requests,
        requests_per_second: per_second(requests),
        input_tokens_per_second: per_second(input),
        output_tokens_per_second: per_second(d(|c| c.output_tokens)),
        goodput_ratio: ratio(d(|c| c.goodput), requests).filter(|_| seconds > 0.0),
        attainment,
        errors: d(|c| c.errors),
        cancels: d(|c| c.cancels),
        cuts: d(|c| c.cuts),
        quantiles,
        distributions,
    }
}

fn push_point(series: &mut Series, f: &Figures) {
    for (name, q) in &f.quantiles {
        let slot = series.quantiles.entry(name.clone()).or_default();
        for (label, _) in QUANTILES {
            let value = q.get(label).copied().flatten();
            slot.entry(label.to_owned()).or_default().push(value);
        }
    }
    let rate = |v: u64| (f.seconds > 0.0).then(|| v as f64 / f.seconds);
    series.requests_per_second.push(f.requests_per_second);
    series
        .input_tokens_per_second
        .push(f.input_tokens_per_second);
    series
        .output_tokens_per_second
        .push(f.output_tokens_per_second);
    series.goodput_ratio.push(f.goodput_ratio);
    for (kind, value) in &f.attainment {
        series
            .attainment
            .entry(kind.clone())
            .or_default()
            .push(*value);
    }
    series.errors_per_second.push(rate(f.errors));
    series.cancels_per_second.push(rate(f.cancels));
    series.cuts_per_second.push(rate(f.cuts));
    for (name, value) in &f.means {
        series.means.entry(name.clone()).or_default().push(*value);
    }
    series.cached_input_ratio.push(f.cached_input_ratio);
}
