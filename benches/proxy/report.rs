//! Pools the repeated runs and renders the Markdown report: added latency per chunk and to TTFT, CPU per
//! million chunks, the chunks/s sweep, requests/s, memory per open stream, tokentap's ratios to each
//! anchor (nginx, HAProxy) and to the stack's floor (hyper), and how tokentap's own histograms compare
//! with what the clients saw (the target ratios and the self-measured delay are rendered by `ratios.rs`).

use std::fmt::Write;

use crate::load::Samples;
use crate::stats::{buckets, delta, histogram_quantile, percentile};
use crate::target::Kind;
use crate::upstream::Script;

const TTFT: &str = "tokentap_time_to_first_token_seconds";
const ITL: &str = "tokentap_inter_token_latency_seconds";

/// One phase against one target.
pub struct Run {
    pub kind: Kind,
    pub samples: Samples,
    /// Length of the measuring window the load counted events in.
    pub window_s: f64,
    /// Wall time between the two CPU readings (≈ `window_s`).
    pub cpu_wall_s: f64,
    pub proxy_cpu_s: f64,
    pub load_cpu_s: f64,
}

/// Every run of one load, all targets and repetitions.
pub struct LatencyRow {
    pub users: usize,
    pub script: Script,
    pub runs: Vec<Run>,
    /// tokentap's `tokentap_forwarding_delay_seconds` over each of its runs (scraped before and after).
    pub self_delay: Vec<crate::ratios::SelfDelay>,
}

/// A target's runs of one load, pooled.
pub struct Pooled {
    pub samples: Samples,
    events: u64,
    window_s: f64,
    cpu_wall_s: f64,
    proxy_cpu_s: f64,
    load_cpu_s: f64,
}

impl Pooled {
    pub fn events_per_s(&self) -> f64 {
        self.events as f64 / self.window_s
    }
    pub fn proxy_util(&self) -> f64 {
        self.proxy_cpu_s / self.cpu_wall_s
    }
    fn load_util(&self) -> f64 {
        self.load_cpu_s / self.cpu_wall_s
    }
    /// Proxy CPU seconds per million events, over the measuring window.
    pub fn cpu_per_million(&self) -> f64 {
        self.proxy_util() * self.window_s / self.events.max(1) as f64 * 1e6
    }
}

pub fn p(samples: &[u64], q: f64) -> Option<f64> {
    let mut v = samples.to_vec();
    percentile(&mut v, q).map(|ns| ns as f64 / 1e3)
}

impl LatencyRow {
    pub fn new(users: usize, script: Script) -> Self {
        LatencyRow {
            users,
            script,
            runs: Vec::new(),
            self_delay: Vec::new(),
        }
    }

    pub fn add(&mut self, run: Run) {
        self.runs.push(run);
    }

    fn kinds(&self) -> Vec<Kind> {
        let mut kinds: Vec<Kind> = Vec::new();
        for r in &self.runs {
            if !kinds.contains(&r.kind) {
                kinds.push(r.kind);
            }
        }
        kinds.sort_by_key(|k| *k as u8);
        kinds
    }

    pub fn pooled(&self, kind: Kind) -> Option<Pooled> {
        let runs: Vec<&Run> = self.runs.iter().filter(|r| r.kind == kind).collect();
        if runs.is_empty() {
            return None;
        }
        let mut samples = Samples::default();
        for r in &runs {
            samples.chunk_ns.extend(&r.samples.chunk_ns);
            samples.socket_ns.extend(&r.samples.socket_ns);
            samples.ttft_ns.extend(&r.samples.ttft_ns);
            samples.ttft_path_ns.extend(&r.samples.ttft_path_ns);
            samples.requests_ok += r.samples.requests_ok;
            samples.errors += r.samples.errors;
            if samples.first_error.is_none() {
                samples.first_error.clone_from(&r.samples.first_error);
            }
        }
        Some(Pooled {
            samples,
            events: runs.iter().map(|r| r.samples.window_events).sum(),
            window_s: runs.iter().map(|r| r.window_s).sum(),
            cpu_wall_s: runs.iter().map(|r| r.cpu_wall_s).sum(),
            proxy_cpu_s: runs.iter().map(|r| r.proxy_cpu_s).sum(),
            load_cpu_s: runs.iter().map(|r| r.load_cpu_s).sum(),
        })
    }

    /// Per repetition, `q`-percentile of chunk latency minus the direct run's of the same repetition.
    pub fn added_per_rep(&self, kind: Kind, q: f64) -> Vec<f64> {
        let direct: Vec<&Run> = self
            .runs
            .iter()
            .filter(|r| r.kind == Kind::Direct)
            .collect();
        let mine: Vec<&Run> = self.runs.iter().filter(|r| r.kind == kind).collect();
        mine.iter()
            .zip(direct)
            .filter_map(|(m, d)| Some(p(&m.samples.chunk_ns, q)? - p(&d.samples.chunk_ns, q)?))
            .collect()
    }
}

#[derive(Default)]
pub struct Accuracy {
    ttft_buckets: Vec<(f64, f64)>,
    itl_buckets: Vec<(f64, f64)>,
    ttft_ns: Vec<u64>,
    itl_ns: Vec<u64>,
    ttft_path_ns: Vec<u64>,
}

fn add_buckets(sum: &mut Vec<(f64, f64)>, more: Vec<(f64, f64)>) {
    if sum.is_empty() {
        *sum = more;
    } else {
        for (s, m) in sum.iter_mut().zip(more) {
            s.1 += m.1;
        }
    }
}

impl Accuracy {
    pub fn add(&mut self, before: &str, after: &str, samples: &Samples) {
        add_buckets(
            &mut self.ttft_buckets,
            delta(&buckets(after, TTFT), &buckets(before, TTFT)),
        );
        add_buckets(
            &mut self.itl_buckets,
            delta(&buckets(after, ITL), &buckets(before, ITL)),
        );
        self.ttft_ns.extend(&samples.ttft_ns);
        self.itl_ns.extend(&samples.itl_ns);
        self.ttft_path_ns.extend(&samples.ttft_path_ns);
    }
}

impl MemoryRow {
    /// (RSS − idle RSS) / streams at the step of `streams`, KiB.
    pub fn per_stream_kib(&self, streams: usize) -> Option<f64> {
        let &(k, _, rss) = self.steps.iter().find(|s| s.0 == streams)?;
        Some(rss.saturating_sub(self.idle_rss) as f64 / k as f64 / 1024.0)
    }
}

pub struct MemoryRow {
    pub kind: Kind,
    pub idle_rss: u64,
    /// (streams asked for, streams open, RSS)
    pub steps: Vec<(usize, usize, u64)>,
    pub errors: u64,
}

pub struct Report {
    pub reps: usize,
    pub pinned: bool,
    pub latency: Vec<LatencyRow>,
    pub accuracy: Option<Accuracy>,
    pub sweep: Vec<LatencyRow>,
    pub requests: Option<LatencyRow>,
    pub memory: Vec<MemoryRow>,
    /// The field's lanes (`lanes.rs`, `lane_table.rs`).
    pub lanes: Option<crate::lane_table::LaneTable>,
}

fn us(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.0}"))
}

fn signed(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:+.0}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b.abs() > f64::EPSILON => format!("{:.2}", a / b),
        _ => "–".to_owned(),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

impl Report {
    pub fn new(reps: usize, pinned: bool) -> Self {
        Report {
            reps,
            pinned,
            latency: Vec::new(),
            accuracy: None,
            sweep: Vec::new(),
            requests: None,
            memory: Vec::new(),
            lanes: None,
        }
    }

    pub fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "Each target measured {} time(s) per load, targets alternating; figures pooled over the runs. \
             Latencies in µs. \"added\" = the target's percentile minus the direct connection's. \
             Chunk = one SSE event. Proxy {}.\n",
            self.reps,
            if self.pinned { "pinned to its own core, upstream + load generator to the other" } else { "not pinned" }
        );
        crate::ratios::render(&mut o, self);
        if let Some(lanes) = &self.lanes {
            lanes.render(&mut o);
        }
        for row in &self.latency {
            self.render_latency(&mut o, row);
        }
        if let Some(acc) = &self.accuracy {
            render_accuracy(&mut o, acc);
        }
        self.render_sweep(&mut o);
        if let Some(row) = &self.requests {
            render_requests(&mut o, row);
        }
        self.render_memory(&mut o);
        o
    }

    fn render_latency(&self, o: &mut String, row: &LatencyRow) {
        let s = row.script;
        let _ = writeln!(
            o,
            "### {} concurrent streams: {} tokens at {} ms after a {} ms prefill\n",
            row.users,
            s.tokens,
            s.gap.as_millis(),
            s.prefill.as_millis()
        );
        let _ = writeln!(o, "| target | chunks/s | chunk p50 | p99 | p99.9 | added p50 | added p99 | added p99.9 | TTFT path p50 | added TTFT p50 | added TTFT p99 | proxy CPU | CPU s / M chunks | load core | errors |");
        let _ = writeln!(
            o,
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
        );
        let direct = row.pooled(Kind::Direct);
        let qs = [0.5, 0.99, 0.999];
        let dq: Vec<Option<f64>> = qs
            .iter()
            .map(|&q| direct.as_ref().and_then(|d| p(&d.samples.chunk_ns, q)))
            .collect();
        let dt: Vec<Option<f64>> = [0.5, 0.99]
            .iter()
            .map(|&q| direct.as_ref().and_then(|d| p(&d.samples.ttft_path_ns, q)))
            .collect();
        let mut added = std::collections::HashMap::new();
        for kind in row.kinds() {
            let Some(pool) = row.pooled(kind) else {
                continue;
            };
            let cq: Vec<Option<f64>> = qs.iter().map(|&q| p(&pool.samples.chunk_ns, q)).collect();
            let tq: Vec<Option<f64>> = [0.5, 0.99]
                .iter()
                .map(|&q| p(&pool.samples.ttft_path_ns, q))
                .collect();
            let add = |a: Option<f64>, b: Option<f64>| Some(a? - b?);
            let a: Vec<Option<f64>> = cq.iter().zip(&dq).map(|(c, d)| add(*c, *d)).collect();
            let at: Vec<Option<f64>> = tq.iter().zip(&dt).map(|(c, d)| add(*c, *d)).collect();
            let proxied = kind != Kind::Direct;
            let cpu = proxied.then(|| pool.cpu_per_million());
            added.insert(kind as u8, (a.clone(), cpu));
            let _ = writeln!(
                o,
                "| {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0}% | {} |",
                kind.name(),
                pool.events_per_s(),
                us(cq[0]),
                us(cq[1]),
                us(cq[2]),
                if proxied { signed(a[0]) } else { "–".into() },
                if proxied { signed(a[1]) } else { "–".into() },
                if proxied { signed(a[2]) } else { "–".into() },
                us(tq[0]),
                if proxied { signed(at[0]) } else { "–".into() },
                if proxied { signed(at[1]) } else { "–".into() },
                if proxied { format!("{:.0}%", pool.proxy_util() * 100.0) } else { "–".into() },
                cpu.map_or("–".into(), |c| format!("{c:.2}")),
                pool.load_util() * 100.0,
                errors(&pool.samples),
            );
        }
        let _ = writeln!(o);
        for kind in [Kind::Tokentap, Kind::Baseline] {
            for anchor in [Kind::Nginx, Kind::Haproxy, Kind::Hyper] {
                let (Some(t), Some(n)) = (added.get(&(kind as u8)), added.get(&(anchor as u8)))
                else {
                    continue;
                };
                let _ = writeln!(
                    o,
                    "{}/{}: added p50 {}, added p99 {}, added p99.9 {}, CPU per chunk {}.\n",
                    kind.name(),
                    anchor.name(),
                    ratio(t.0[0], n.0[0]),
                    ratio(t.0[1], n.0[1]),
                    ratio(t.0[2], n.0[2]),
                    ratio(t.1, n.1),
                );
            }
        }
        for kind in [
            Kind::Tokentap,
            Kind::Baseline,
            Kind::Nginx,
            Kind::Haproxy,
            Kind::Hyper,
            Kind::Relay,
        ] {
            let p50 = row.added_per_rep(kind, 0.5);
            let p99 = row.added_per_rep(kind, 0.99);
            if !p50.is_empty() {
                let list = |v: &[f64]| {
                    v.iter()
                        .map(|x| format!("{x:+.0}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let _ = writeln!(
                    o,
                    "- {} added per chunk, run by run: p50 [{}] µs, p99 [{}] µs",
                    kind.name(),
                    list(&p50),
                    list(&p99)
                );
            }
        }
        let _ = writeln!(o);
    }

    fn render_sweep(&self, o: &mut String) {
        let Some(first) = self.sweep.first() else {
            return;
        };
        let s = first.script;
        let _ = writeln!(
            o,
            "### Sustained chunks/s: more streams, {} tokens each at {} ms\n",
            s.tokens,
            s.gap.as_millis()
        );
        let _ = writeln!(o, "| streams | target | chunks/s | chunk p50 | chunk p99 | proxy CPU | chunks/s at 100% of a core | load core | errors |");
        let _ = writeln!(o, "|--:|---|--:|--:|--:|--:|--:|--:|--:|");
        let mut best: std::collections::HashMap<u8, (usize, f64, f64)> = Default::default();
        for row in &self.sweep {
            for kind in row.kinds() {
                let Some(pool) = row.pooled(kind) else {
                    continue;
                };
                let proxied = kind != Kind::Direct;
                let capacity = pool.events_per_s() / pool.proxy_util().max(1e-9);
                let p99 = p(&pool.samples.chunk_ns, 0.99);
                let sustained =
                    pool.samples.errors == 0 && p99.is_some_and(|v| v < s.gap.as_micros() as f64);
                if sustained {
                    let e = best.entry(kind as u8).or_insert((0, 0.0, 0.0));
                    if pool.events_per_s() > e.1 {
                        *e = (row.users, pool.events_per_s(), capacity);
                    }
                }
                let _ = writeln!(
                    o,
                    "| {} | {} | {:.0} | {} | {} | {} | {} | {:.0}% | {} |",
                    row.users,
                    kind.name(),
                    pool.events_per_s(),
                    us(p(&pool.samples.chunk_ns, 0.5)),
                    us(p99),
                    if proxied {
                        format!("{:.0}%", pool.proxy_util() * 100.0)
                    } else {
                        "–".into()
                    },
                    if proxied {
                        format!("{capacity:.0}")
                    } else {
                        "–".into()
                    },
                    pool.load_util() * 100.0,
                    errors(&pool.samples),
                );
            }
        }
        let _ = writeln!(o);
        for kind in [
            Kind::Direct,
            Kind::Tokentap,
            Kind::Baseline,
            Kind::Nginx,
            Kind::Haproxy,
            Kind::Hyper,
        ] {
            if let Some((users, rate, capacity)) = best.get(&(kind as u8)) {
                let _ = writeln!(
                    o,
                    "- {}: highest sustained (no errors, chunk p99 under one gap) {:.0} chunks/s at {} streams{}",
                    kind.name(),
                    rate,
                    users,
                    if kind == Kind::Direct { String::new() } else { format!("; its CPU use there extrapolates to {capacity:.0} chunks/s per core") }
                );
            }
        }
        let _ = writeln!(o);
    }

    fn render_memory(&self, o: &mut String) {
        if self.memory.is_empty() {
            return;
        }
        let _ = writeln!(
            o,
            "### Memory per open stream (fresh process, streams held open)\n"
        );
        let _ = writeln!(
            o,
            "| proxy | idle RSS | streams | open | RSS | per stream |"
        );
        let _ = writeln!(o, "|---|--:|--:|--:|--:|--:|");
        for row in &self.memory {
            for &(k, open, rss) in &row.steps {
                let per = rss.saturating_sub(row.idle_rss) as f64 / k as f64 / 1024.0;
                let _ = writeln!(
                    o,
                    "| {} | {} | {} | {} | {} | {:.1} KiB |",
                    row.kind.name(),
                    mib(row.idle_rss),
                    k,
                    open,
                    mib(rss),
                    per
                );
            }
        }
        let warm_errors: u64 = self.memory.iter().map(|m| m.errors).sum();
        let _ = writeln!(
            o,
            "\nnginx RSS is its master plus its worker; HAProxy's and hyper's their one process. Errors during the warm-up requests: {warm_errors}.\n"
        );
    }
}

fn errors(s: &Samples) -> String {
    match &s.first_error {
        Some(e) if s.errors > 0 => format!("{} ({e})", s.errors),
        _ => s.errors.to_string(),
    }
}

fn render_requests(o: &mut String, row: &LatencyRow) {
    let events = f64::from(row.script.tokens + 3);
    let _ = writeln!(
        o,
        "### Requests/s: {} users, {}-token streams back to back, no pacing\n",
        row.users, row.script.tokens
    );
    let _ = writeln!(
        o,
        "| target | requests/s | proxy CPU | CPU µs / request | load core | errors |"
    );
    let _ = writeln!(o, "|---|--:|--:|--:|--:|--:|");
    for kind in row.kinds() {
        let Some(pool) = row.pooled(kind) else {
            continue;
        };
        let rps = pool.events_per_s() / events;
        let proxied = kind != Kind::Direct;
        let _ = writeln!(
            o,
            "| {} | {:.0} | {} | {} | {:.0}% | {} |",
            kind.name(),
            rps,
            if proxied {
                format!("{:.0}%", pool.proxy_util() * 100.0)
            } else {
                "–".into()
            },
            if proxied {
                format!("{:.1}", pool.proxy_util() / rps * 1e6)
            } else {
                "–".into()
            },
            pool.load_util() * 100.0,
            errors(&pool.samples),
        );
    }
    let _ = writeln!(o);
}

fn render_accuracy(o: &mut String, acc: &Accuracy) {
    let _ = writeln!(
        o,
        "### Accuracy at the highest load: tokentap's histograms vs the clients\n"
    );
    let _ = writeln!(o, "| figure | quantile | clients (exact) | tokentap (/metrics, interpolated) | clients − tokentap |");
    let _ = writeln!(o, "|---|--:|--:|--:|--:|");
    let rows = [
        ("TTFT", &acc.ttft_ns, &acc.ttft_buckets),
        ("ITL", &acc.itl_ns, &acc.itl_buckets),
    ];
    for (name, client, hist) in rows {
        for q in [0.5, 0.99] {
            let c = p(client, q);
            let t = histogram_quantile(q, hist).map(|s| s * 1e6);
            let _ = writeln!(
                o,
                "| {name} | p{} | {} | {} | {} |",
                q * 100.0,
                us(c),
                us(t),
                signed(c.zip(t).map(|(c, t)| c - t)),
            );
        }
    }
    let _ = writeln!(
        o,
        "\nThe clients' TTFT includes both loopback hops through the proxy (the request on its way up, the \
         first chunk on its way down): TTFT path p50 {} µs. Bucket width around these values: 250 µs.\n",
        us(p(&acc.ttft_path_ns, 0.5))
    );
}
