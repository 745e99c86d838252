use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};
use tokio::time::Instant;

use super::view::{view, LiveView};
use super::*;
use crate::config::{ByKind, Ceilings, Config, Slo, SloKind};
use crate::record::metrics::family::FORWARDING_DELAY as FORWARDING;

/// A registry with the families the page reads, labelled as tokentap labels them.
struct Fake {
    registry: Registry,
    ttft: HistogramVec,
    requests: IntCounterVec,
    goodput: IntCounterVec,
    violations: IntCounterVec,
}

impl Fake {
    fn new(tenant: bool) -> Self {
        let registry = Registry::new();
        let labels: &[&str] = if tenant {
            &["model", "api", "tenant"]
        } else {
            &["model", "api"]
        };
        let opts = HistogramOpts::new(HISTOGRAMS[0].family.name, "ttft")
            .buckets(vec![0.1, 0.25, 0.5, 1.0]);
        let ttft = HistogramVec::new(opts, labels).unwrap();
        let mut with = labels.to_vec();
        with.push("outcome");
        let requests = IntCounterVec::new(Opts::new(REQUESTS, "r"), &with).unwrap();
        let goodput = IntCounterVec::new(Opts::new(GOODPUT, "g"), labels).unwrap();
        let mut with = labels.to_vec();
        with.push("slo");
        let violations = IntCounterVec::new(Opts::new(VIOLATIONS, "v"), &with).unwrap();
        registry.register(Box::new(ttft.clone())).unwrap();
        registry.register(Box::new(requests.clone())).unwrap();
        registry.register(Box::new(goodput.clone())).unwrap();
        registry.register(Box::new(violations.clone())).unwrap();
        Fake {
            registry,
            ttft,
            requests,
            goodput,
            violations,
        }
    }

    /// One finished request of `model` with this TTFT, outcome ok, good or missing the TTFT ceiling.
    fn request(&self, model: &str, tenant: Option<&str>, ttft: f64, good: bool) {
        let mut labels = vec![model, "chat_completions"];
        labels.extend(tenant);
        self.ttft.with_label_values(&labels).observe(ttft);
        let mut with = labels.clone();
        with.push("ok");
        self.requests.with_label_values(&with).inc();
        if good {
            self.goodput.with_label_values(&labels).inc();
        } else {
            let mut with = labels.clone();
            with.push("ttft");
            self.violations.with_label_values(&with).inc();
        }
    }
}

fn ui(interval: u64, history: u64, max_models: usize) -> Config {
    let mut config = Config::default();
    config.ui = Ui {
        interval: Duration::from_secs(interval),
        history: Duration::from_secs(history),
        max_models,
        ..config.ui
    };
    config
}

fn slo() -> Slo {
    Slo {
        default: Ceilings::default().with(SloKind::Ttft, Duration::from_millis(500)),
        ..Slo::default()
    }
}

#[test]
fn the_ring_holds_history_over_interval_snapshots_and_no_more() {
    let fake = Fake::new(false);
    let mut ring = Ring::new(&ui(5, 30, 10));
    let start = Instant::now();
    for i in 0..20 {
        fake.request("m", None, 0.2, true);
        let at = start + Duration::from_secs(5 * i);
        ring.push(&fake.registry.gather(), at, 1000 * i);
    }
    assert_eq!(ring.points.len(), 6);
    assert_eq!(ring.points[0].unix_ms, 14_000);
    let bound = ring.bytes_bound();
    assert!(bound > 0 && bound < 1 << 20, "{bound}");
}

#[test]
fn the_default_history_is_360_snapshots_and_its_memory_bound_is_stated() {
    let config = Config::default();
    let mut ring = Ring::new(&config);
    assert_eq!(ring.capacity, 360);
    let metrics = crate::record::metrics::Metrics::new(&config).unwrap();
    ring.push(&metrics.gather(), Instant::now(), 0);
    // docs/live.md: "about 12 MiB with the defaults".
    let bound = ring.bytes_bound() as f64 / (1 << 20) as f64;
    assert!((11.0..13.0).contains(&bound), "{bound} MiB");
}

#[test]
fn only_the_most_requested_models_are_kept() {
    let fake = Fake::new(false);
    for (model, n) in [("a", 1), ("b", 3), ("c", 2)] {
        for _ in 0..n {
            fake.request(model, None, 0.2, true);
        }
    }
    let (snapshot, _) = take(&fake.registry.gather(), 2);
    let kept: Vec<&str> = snapshot.series.keys().map(|k| k.0.as_str()).collect();
    assert_eq!(kept, ["b", "c"]);
}

fn live(fake: &Fake, windows: &[(f64, bool)], ring: &mut Ring, at: Instant) {
    for &(ttft, good) in windows {
        fake.request("m", None, ttft, good);
    }
    ring.push(&fake.registry.gather(), at, 0);
}

/// The window's figures are the difference between its two snapshots: what came before it is not in them.
#[test]
fn figures_cover_only_the_trailing_window() {
    let fake = Fake::new(false);
    let mut ring = Ring::new(&ui(5, 60, 10));
    let start = Instant::now();
    live(&fake, &[(2.0, false); 8], &mut ring, start);
    live(&fake, &[], &mut ring, start + Duration::from_secs(5));
    let requests = [(0.05, true), (0.2, true), (0.2, true), (0.7, false)];
    live(&fake, &requests, &mut ring, start + Duration::from_secs(10));
    let v = view(
        &ring,
        &slo(),
        Duration::from_secs(5),
        Duration::from_secs(5),
    );
    let m = &v.models[0].current;
    assert_eq!(m.requests, 4);
    assert_eq!(m.requests_per_second, Some(0.8));
    assert_eq!(m.goodput_ratio, Some(0.75));
    assert_eq!(m.attainment["ttft"], Some(0.75));
    // Bucket deltas [1, 3, 3, 4, 4]: rank 2 in (0.1, 0.25]: 0.1 + 0.15 * 1/2.
    let p50 = m.quantiles["ttft"]["p50"].unwrap();
    assert!((p50 - 0.175).abs() < 1e-12, "{p50}");
    assert_eq!(m.distributions["ttft"].counts, vec![1, 2, 0, 1, 0]);
    assert_eq!(m.distributions["ttft"].bounds, vec![0.1, 0.25, 0.5, 1.0]);
    // The first point has no earlier snapshot; the second's window saw nothing.
    assert_eq!(
        v.models[0].series.quantiles["ttft"]["p50"],
        vec![None, None, Some(p50)]
    );
    assert_eq!(v.models[0].series.requests_per_second[1], Some(0.0));
    assert_eq!(v.models[0].ceilings["ttft"], Some(0.5));
    assert_eq!(v.models[0].ceilings["e2e"], None);
    // An absent family (time to first answer here) has no figures, not an error.
    assert_eq!(m.quantiles["ttfa"]["p50"], None);
    // Inside the TTFT: means over the window, Δsum / Δcount.
    let mean = m.means["ttft"].unwrap();
    assert!((mean - 1.15 / 4.0).abs() < 1e-12, "{mean}");
    assert_eq!(m.means["server_queue"], None);
}

#[test]
fn a_tenant_label_adds_per_tenant_entries_beside_the_model() {
    let fake = Fake::new(true);
    let mut ring = Ring::new(&ui(5, 60, 10));
    let start = Instant::now();
    ring.push(&fake.registry.gather(), start, 0);
    fake.request("m", Some("team-a"), 0.2, true);
    fake.request("m", Some("team-b"), 0.2, true);
    fake.request("m", Some("team-b"), 0.2, true);
    ring.push(&fake.registry.gather(), start + Duration::from_secs(5), 0);
    let v = view(
        &ring,
        &slo(),
        Duration::from_secs(5),
        Duration::from_secs(60),
    );
    assert_eq!(v.models.len(), 1);
    assert_eq!(v.models[0].current.requests, 3);
    let tenants: Vec<_> = v
        .tenants
        .iter()
        .map(|e| (e.tenant.as_deref(), e.current.requests))
        .collect();
    assert_eq!(tenants, [(Some("team-b"), 2), (Some("team-a"), 1)]);
}

/// The documented example in docs/live.md is a valid version-1 document, and a served one round-trips.
#[test]
fn the_json_shape_round_trips_and_the_documented_example_parses() {
    let fake = Fake::new(false);
    let mut ring = Ring::new(&ui(5, 60, 10));
    let start = Instant::now();
    live(&fake, &[], &mut ring, start);
    live(
        &fake,
        &[(0.2, true)],
        &mut ring,
        start + Duration::from_secs(5),
    );
    // Every ceiling set, as in the documented example (attainment has one key per ceiling).
    let slo = Slo {
        default: ByKind([
            Some(Duration::from_millis(500)),
            Some(Duration::from_millis(50)),
            Some(Duration::from_millis(250)),
            Some(Duration::from_secs(20)),
            Some(Duration::from_secs(1)),
            Some(Duration::from_secs(2)),
        ]),
        ..Slo::default()
    };
    let v = view(&ring, &slo, Duration::from_secs(5), Duration::from_secs(60));
    let text = serde_json::to_string(&v).unwrap();
    let back: LiveView = serde_json::from_str(&text).unwrap();
    let (again, served) = (
        serde_json::to_value(&back).unwrap(),
        serde_json::to_value(&v).unwrap(),
    );
    assert!(same(&again, &served), "{again}\n{served}");
    let docs = include_str!("../../../docs/live.md");
    let example = docs
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .unwrap();
    let documented: LiveView = serde_json::from_str(example).unwrap();
    assert_eq!(documented.version, 1);
    let value: serde_json::Value = serde_json::from_str(example).unwrap();
    let served: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        keys(&value),
        keys(&served),
        "docs/live.md's example has the served keys"
    );
}

/// Equal JSON, numbers to 1e-12 (serde_json's default float parsing may be one ulp off).
fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value::*;
    match (a, b) {
        (Number(x), Number(y)) => (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() < 1e-12,
        (Array(x), Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Object(x), Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Every object key path in a JSON document (array items merged), to compare shapes, not values.
fn keys(v: &serde_json::Value) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    fn walk(v: &serde_json::Value, at: &str, out: &mut std::collections::BTreeSet<String>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let path = format!("{at}.{k}");
                    out.insert(path.clone());
                    walk(v, &path, out);
                }
            }
            serde_json::Value::Array(items) => {
                for item in items {
                    walk(item, &format!("{at}[]"), out);
                }
            }
            _ => {}
        }
    }
    walk(v, "", &mut out);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_is_encoded_afresh_once_a_new_snapshot_is_taken() {
    let config = ui(5, 60, 10);
    let live = Arc::new(Live::new(&config));
    let fake = Fake::new(false);
    let start = Instant::now();
    live.ring().push(&fake.registry.gather(), start, 1_000);
    let minute = Duration::from_secs(60);
    let before = live.view(minute).await.unwrap();
    fake.request("m", None, 0.2, true);
    live.ring().push(
        &fake.registry.gather(),
        start + Duration::from_secs(5),
        6_000,
    );
    let after = live.view(minute).await.unwrap();
    assert_ne!(after.as_ptr(), before.as_ptr());
    let view: LiveView = serde_json::from_slice(&after).unwrap();
    assert_eq!(view.models[0].current.requests, 1);
}

#[test]
fn tokentap_own_delay_per_frame_is_shown_over_the_window_as_histogram_quantile_computes_it() {
    let registry = Registry::new();
    let delay = prometheus::Histogram::with_opts(
        prometheus::HistogramOpts::new(FORWARDING.name, FORWARDING.help)
            .buckets(crate::record::metrics::forwarding::BUCKETS.to_vec()),
    )
    .unwrap();
    registry.register(Box::new(delay.clone())).unwrap();
    let mut ring = Ring::new(&ui(5, 60, 10));
    let start = Instant::now();
    ring.push(&registry.gather(), start, 0);
    // 10 frames at 12 µs, then 10 at 45 µs: the window's p50 lies in (10, 15] µs at its top edge.
    for _ in 0..10 {
        delay.observe(0.000_012);
    }
    ring.push(&registry.gather(), start + Duration::from_secs(5), 5_000);
    for _ in 0..10 {
        delay.observe(0.000_045);
    }
    ring.push(&registry.gather(), start + Duration::from_secs(10), 10_000);
    let v: LiveView = view(
        &ring,
        &slo(),
        Duration::from_secs(5),
        Duration::from_secs(10),
    );
    let p50 = &v.forwarding_delay["p50"];
    assert_eq!(p50.len(), 3);
    assert_eq!(p50[0], None, "no earlier snapshot");
    let close =
        |a: Option<f64>, b: f64| assert!((a.unwrap_or(f64::NAN) - b).abs() < 1e-12, "{a:?} != {b}");
    // Over 0..5 s all ten at 12 µs: rank 5 of 10 in (10, 15] µs.
    close(p50[1], 0.000_010 + 0.000_005 * 0.5);
    // Over 0..10 s twenty frames: rank 10 is the tenth in (10, 15] µs, its top edge.
    close(p50[2], 0.000_015);
    close(v.forwarding_delay["p99"][2], 0.000_04 + 0.000_01 * 0.98);
}
