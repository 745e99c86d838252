//! The figures issue 25's targets are stated in, as ratios of tokentap to each anchor (nginx, HAProxy)
//! and to the stack's floor (a plain hyper proxy) measured in the same run, with the floor's own ratio to
//! nginx (the part of each target the stack spends before tokentap does anything); and tokentap's own
//! delay histogram (`tokentap_forwarding_delay_seconds`) beside the delay the wire shows it adds (its
//! chunk latency to the client's socket minus the direct path's).
//!
//! - CPU per chunk: proxy CPU seconds per million chunks at each latency load (100 and 1,000 streams).
//! - Moderate p99: chunk latency p99 at the lighter latency load (100 streams), not the added figure.
//! - CPU per short request: the requests/s phase's CPU µs per request.
//! - Saturation throughput: chunks/s delivered at the sweep's heaviest step.
//! - Memory per held-open stream at 1,000 streams (the target is absolute: 20 KiB).

use std::fmt::Write;

use crate::load::Samples;
use crate::report::{p, LatencyRow, Report};
use crate::stats::{buckets, delta, histogram_quantile};
use crate::target::Kind;

pub const DELAY: &str = "tokentap_forwarding_delay_seconds";

/// What `tokentap_forwarding_delay_seconds` gained over one run.
pub struct SelfDelay {
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

fn sample(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

impl SelfDelay {
    pub fn between(before: &str, after: &str) -> Self {
        let (sum, count) = (format!("{DELAY}_sum"), format!("{DELAY}_count"));
        SelfDelay {
            buckets: delta(&buckets(after, DELAY), &buckets(before, DELAY)),
            sum: sample(after, &sum) - sample(before, &sum),
            count: sample(after, &count) - sample(before, &count),
        }
    }
}

/// The columns beside tokentap: the two anchors, and the stack's floor (a plain hyper proxy).
const ANCHORS: [Kind; 3] = [Kind::Nginx, Kind::Haproxy, Kind::Hyper];

fn row(
    o: &mut String, figure: &str, target: &str, value: impl Fn(Kind) -> Option<f64>, unit: &str,
) {
    let t = value(Kind::Tokentap);
    let mut cells = vec![match t {
        Some(t) => format!("{t:.1}{unit}"),
        None => "–".into(),
    }];
    for anchor in ANCHORS {
        cells.push(match value(anchor) {
            Some(a) => format!("{a:.1}{unit}"),
            None => "–".into(),
        });
    }
    let ratio = |a: Option<f64>, b: Option<f64>, bold: bool| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && bold => format!("**{:.2}×**", a / b),
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    };
    for anchor in ANCHORS {
        cells.push(ratio(t, value(anchor), true));
    }
    // The stack's floor against nginx: how much of the target a plain hyper proxy already spends.
    cells.push(ratio(value(Kind::Hyper), value(Kind::Nginx), false));
    let _ = writeln!(o, "| {figure} | {target} | {} |", cells.join(" | "));
}

fn mean_us(v: &[u64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64 / 1e3)
}

pub fn render(o: &mut String, report: &Report) {
    let _ = writeln!(
        o,
        "### Ratios against the targets (tokentap / anchor, this run)\n"
    );
    let _ = writeln!(
        o,
        "| figure | target | tokentap | nginx | haproxy | hyper | / nginx | / haproxy | / hyper | hyper / nginx |"
    );
    let _ = writeln!(o, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    for row_ in &report.latency {
        let users = row_.users;
        row(
            o,
            &format!("CPU µs per chunk, {users} streams"),
            "≤ 1.1×",
            |k| Some(row_.pooled(k)?.cpu_per_million()),
            "",
        );
    }
    if let Some(moderate) = report.latency.first() {
        let users = moderate.users;
        row(
            o,
            &format!("chunk p99 µs, {users} streams"),
            "≤ 1.1×",
            |k| p(&moderate.pooled(k)?.samples.chunk_ns, 0.99),
            "",
        );
    }
    if let Some(requests) = &report.requests {
        let events = f64::from(requests.script.tokens + 3);
        row(
            o,
            "CPU µs per short request",
            "≤ 1.25×",
            |k| {
                let pool = requests.pooled(k)?;
                let rps = pool.events_per_s() / events;
                Some(pool.proxy_util() / rps * 1e6)
            },
            "",
        );
    }
    if let Some(heaviest) = report.sweep.last() {
        let users = heaviest.users;
        row(
            o,
            &format!("chunks/s delivered, {users} streams"),
            "≥ 1×",
            |k| Some(heaviest.pooled(k)?.events_per_s()),
            "",
        );
    }
    row(
        o,
        "memory per held-open stream, 1,000 streams (KiB)",
        "≤ 20 KiB",
        |k| {
            report
                .memory
                .iter()
                .find(|m| m.kind == k)?
                .per_stream_kib(1000)
        },
        "",
    );
    let _ = writeln!(o);
    render_self_delay(o, &report.latency);
}

/// tokentap's histogram of its own delay against the wire's added delay, per latency load.
fn render_self_delay(o: &mut String, rows: &[LatencyRow]) {
    if rows.iter().all(|r| r.self_delay.is_empty()) {
        return;
    }
    let _ = writeln!(
        o,
        "### tokentap's own delay per frame (its histogram) against the wire\n"
    );
    let _ = writeln!(o, "| streams | frames observed | self p50 (interpolated) | wire added p50, socket to socket | **self − wire** | null relay added p50, socket to socket | wire added p50, to the client's parse | self mean | wire added mean, socket to socket |");
    let _ = writeln!(o, "|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for row in rows.iter().filter(|r| !r.self_delay.is_empty()) {
        let mut pooled: Vec<(f64, f64)> = Vec::new();
        let (mut sum, mut count) = (0.0, 0.0);
        for run in &row.self_delay {
            if pooled.is_empty() {
                pooled.clone_from(&run.buckets);
            } else {
                for (p, r) in pooled.iter_mut().zip(&run.buckets) {
                    p.1 += r.1;
                }
            }
            sum += run.sum;
            count += run.count;
        }
        let self_p50 = histogram_quantile(0.5, &pooled).map(|s| s * 1e6);
        let self_mean = (count > 0.0).then(|| sum / count * 1e6);
        // What a path adds over the direct one, by `stat` of each chunk's latency as `of` gives it.
        let added =
            |k: Kind, of: &dyn Fn(&Samples) -> &Vec<u64>, stat: &dyn Fn(&[u64]) -> Option<f64>| {
                let path = row.pooled(k)?;
                let direct = row.pooled(Kind::Direct)?;
                Some(stat(of(&path.samples))? - stat(of(&direct.samples))?)
            };
        fn socket(s: &Samples) -> &Vec<u64> {
            &s.socket_ns
        }
        fn parse(s: &Samples) -> &Vec<u64> {
            &s.chunk_ns
        }
        let median = |v: &[u64]| p(v, 0.5);
        let wire_p50 = added(Kind::Tokentap, &socket, &median);
        let f = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.0} µs"));
        let diff = |a: Option<f64>, b: Option<f64>| {
            a.zip(b)
                .map_or("–".into(), |(a, b)| format!("{:+.0} µs", a - b))
        };
        let _ = writeln!(
            o,
            "| {} | {count:.0} | {} | {} | **{}** | {} | {} | {} | {} |",
            row.users,
            f(self_p50),
            f(wire_p50),
            diff(self_p50, wire_p50),
            f(added(Kind::Relay, &socket, &median)),
            f(added(Kind::Tokentap, &parse, &median)),
            f(self_mean),
            f(added(Kind::Tokentap, &socket, &mean_us)),
        );
    }
    let _ = writeln!(
        o,
        "\nself: from the frame's bytes reaching tokentap's upstream socket (the kernel's receive timestamp) to the \
         start of the client write that took it (every frame: role, content, usage, `[DONE]`). Wire, socket to \
         socket: each event's bytes (role, content and usage chunks: those the upstream stamps) reaching the client's socket (the kernel's receive timestamp there) \
         minus the upstream's send, tokentap's p50 minus the direct path's: what tokentap holds a chunk, plus a \
         loopback hop, without the harness's own scheduling (on the direct path the upstream and the client share \
         a thread, and the client's parse waits behind the upstream's other writes; through a proxy it runs \
         while the proxy works). To the client's parse: the same to the moment the client parsed the chunk, the \
         figure the latency tables use. The null relay (`relay.rs`, a process that only copies bytes) shows \
         what any proxy in a separate process adds: the kernel waking it on its core.\n"
    );
}
