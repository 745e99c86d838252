//! The end-to-end benchmark: what tokentap adds to a token stream, side by side with a direct connection
//! and with nginx and HAProxy, in one run on one machine.
//!
//! This process is the scripted upstream ([`upstream`]) and the load generator ([`load`]) on one core;
//! tokentap and nginx run as separate processes pinned to the other core ([`target`]). Each measurement
//! is repeated, alternating the targets, and the figures are pooled; the report ([`report`]) is a Markdown
//! table on stdout. `scripts/bench.sh` builds everything, pins the cores and runs it.
//!
//! Usage: `proxy --tokentap PATH [--nginx PATH] [--haproxy PATH] [--hyper WRAPPER] [--baseline PATH] [--proxy-cpu N] [--reps N] [--quick] [--out FILE]
//! [--only lanes,latency,sweep,requests,memory] [--lane-rounds N] [--memory-steps 100,1000] [--logs on|off]
//! [--baseline-records stalled] [--profile tokentap|nginx|haproxy|hyper [--profile-secs S]]`
//!
//! The first phase is the field's own yardstick ([`lanes`]): TTFT probes on fresh connections, a
//! keep-alive window at c=1 and paced frames timed on the wire, `--lane-rounds` interleaved rounds.
//!
//! Beside the anchors runs the stack's floor (`hyper_floor.rs`: this binary as a plain hyper proxy), so
//! the report splits what tokentap costs beyond nginx into the stack's part and tokentap's own.
//!
//! `--logs off` runs tokentap without its per-request log line (`RUST_LOG=warn`) and nginx without its
//! access log; by default both log each request (nginx's access log buffered), so the figures say what
//! logging costs when the two runs are compared.
//!
//! `--profile` replaces the timed phases with fixed work between two shell hooks, for a profiler wrapped
//! around the proxy (see [`profile`] and `scripts/profile.sh`).
#![forbid(unsafe_code)]

mod args;
mod hyper_floor;
mod lane_table;
mod lanes;
mod load;
mod profile;
mod ratios;
mod relay;
mod report;
mod stats;
mod target;
mod upstream;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use args::{parse_args, Args};
use report::{Accuracy, LatencyRow, MemoryRow, Report, Run};
use target::{Kind, Proxy, Setup};
use upstream::{now_ns, Script};

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if let [_, flag, listen, upstream, ..] = argv.as_slice() {
        if flag == "--relay" {
            return relay::main(listen, upstream);
        }
        if flag == "--hyper-floor" {
            return hyper_floor::main(listen, upstream);
        }
    }
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("proxy bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("proxy bench: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(kind) = args.profile {
        let result = runtime.block_on(profile_one(&args, kind));
        let _ = std::fs::remove_dir_all(&args.setup.dir);
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("proxy bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let result = runtime.block_on(bench(&args));
    let _ = std::fs::remove_dir_all(&args.setup.dir);
    match result {
        Ok(report) => {
            let text = report.render();
            println!("{text}");
            if let Some(out) = &args.out {
                if let Err(e) = std::fs::write(out, &text) {
                    eprintln!("proxy bench: writing {}: {e}", out.display());
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("proxy bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--profile`: one proxy, the fixed workloads of [`profile`], then the proxy is stopped (SIGTERM).
async fn profile_one(args: &Args, kind: Kind) -> Result<(), String> {
    let upstream = upstream::spawn().await.map_err(|e| e.to_string())?;
    let mut proxy = target::start(&args.setup, upstream, kind)?;
    proxy.ready().await?;
    profile::run(proxy.addr, args.profile_secs).await
}

/// The proxies of one run, started once and kept for every measurement but the memory one.
struct Targets {
    upstream: SocketAddr,
    tokentap: Proxy,
    nginx: Option<Proxy>,
    haproxy: Option<Proxy>,
    baseline: Option<Proxy>,
    /// The null relay, measured in the latency phase only.
    relay: Option<Proxy>,
    /// The plain hyper proxy: the stack's floor.
    hyper: Proxy,
}

impl Targets {
    fn kinds(&self) -> Vec<Kind> {
        let mut kinds = vec![Kind::Direct, Kind::Tokentap];
        if self.nginx.is_some() {
            kinds.push(Kind::Nginx);
        }
        if self.haproxy.is_some() {
            kinds.push(Kind::Haproxy);
        }
        if self.baseline.is_some() {
            kinds.push(Kind::Baseline);
        }
        kinds.push(Kind::Hyper);
        kinds
    }

    fn addr(&self, kind: Kind) -> SocketAddr {
        match kind {
            Kind::Direct => self.upstream,
            Kind::Tokentap => self.tokentap.addr,
            Kind::Nginx => self.nginx.as_ref().map_or(self.upstream, |n| n.addr),
            Kind::Haproxy => self.haproxy.as_ref().map_or(self.upstream, |n| n.addr),
            Kind::Baseline => self.baseline.as_ref().map_or(self.upstream, |n| n.addr),
            Kind::Relay => self.relay.as_ref().map_or(self.upstream, |n| n.addr),
            Kind::Hyper => self.hyper.addr,
        }
    }

    fn proxy(&self, kind: Kind) -> Option<&Proxy> {
        match kind {
            Kind::Direct => None,
            Kind::Tokentap => Some(&self.tokentap),
            Kind::Nginx => self.nginx.as_ref(),
            Kind::Haproxy => self.haproxy.as_ref(),
            Kind::Baseline => self.baseline.as_ref(),
            Kind::Relay => self.relay.as_ref(),
            Kind::Hyper => Some(&self.hyper),
        }
    }
}

fn progress(what: &str) {
    eprintln!(
        "[{:>7.1}s] {what} (upstream connections so far: {})",
        now_ns() as f64 / 1e9,
        upstream::accepted()
    );
}

/// The kinds in the order of repetition `rep`: each target takes each position in turn.
fn rotated(kinds: &[Kind], rep: usize) -> Vec<Kind> {
    let mut order = kinds.to_vec();
    order.rotate_left(rep % kinds.len().max(1));
    order
}

/// One phase against one target, with the proxy's and this process's CPU read over the measuring window.
async fn measure(targets: &Targets, kind: Kind, spec: load::Spec) -> Run {
    let spec = load::Spec {
        target: targets.addr(kind),
        ..spec
    };
    let proxy = targets.proxy(kind);
    let started = tokio::time::Instant::now();
    let handle = tokio::spawn(load::run(spec, Duration::from_secs(10)));
    tokio::time::sleep_until(started + spec.warmup).await;
    let (cpu0, self0, t0) = (
        proxy.map_or(0.0, Proxy::cpu_seconds),
        target::cpu_seconds(std::process::id()),
        now_ns(),
    );
    tokio::time::sleep_until(started + spec.duration).await;
    let (cpu1, self1, t1) = (
        proxy.map_or(0.0, Proxy::cpu_seconds),
        target::cpu_seconds(std::process::id()),
        now_ns(),
    );
    let samples = handle.await.unwrap_or_default();
    Run {
        kind,
        samples,
        window_s: (spec.duration - spec.warmup).as_secs_f64(),
        cpu_wall_s: (t1 - t0) as f64 / 1e9,
        proxy_cpu_s: cpu1 - cpu0,
        load_cpu_s: self1 - self0,
    }
}

async fn bench(args: &Args) -> Result<Report, String> {
    let quick = args.quick;
    let upstream = upstream::spawn().await.map_err(|e| e.to_string())?;
    let mut tokentap = target::start_tokentap(&args.setup, upstream, Kind::Tokentap)?;
    tokentap.ready().await?;
    let mut baseline = match &args.setup.baseline {
        Some(_) => Some(target::start_tokentap(
            &args.setup,
            upstream,
            Kind::Baseline,
        )?),
        None => None,
    };
    if let Some(b) = baseline.as_mut() {
        b.ready().await?;
    }
    let anchor = |path: &Option<PathBuf>, kind| match path {
        Some(_) => target::start(&args.setup, upstream, kind).map(Some),
        None => Ok(None),
    };
    let mut nginx = anchor(&args.setup.nginx, Kind::Nginx)?;
    let mut haproxy = anchor(&args.setup.haproxy, Kind::Haproxy)?;
    let mut relay = Some(target::start(&args.setup, upstream, Kind::Relay)?);
    let mut hyper = target::start(&args.setup, upstream, Kind::Hyper)?;
    for proxy in [
        nginx.as_mut(),
        haproxy.as_mut(),
        relay.as_mut(),
        Some(&mut hyper),
    ]
    .into_iter()
    .flatten()
    {
        proxy.ready().await?;
    }
    let targets = Targets {
        upstream,
        tokentap,
        nginx,
        haproxy,
        baseline,
        relay,
        hyper,
    };
    let kinds = targets.kinds();
    let mut latency_kinds = kinds.clone();
    latency_kinds.push(Kind::Relay);
    let mut report = Report::new(args.reps, args.setup.proxy_cpu.is_some());
    let secs = |full: f64, small: f64| Duration::from_secs_f64(if quick { small } else { full });

    // 0. The field's lanes: TTFT on fresh connections, keep-alive c=1, paced frames on the wire.
    if args.runs("lanes") {
        let sizes = lanes::Sizes::new(quick);
        let rounds = lanes::rounds(
            &kinds,
            |k| targets.addr(k),
            args.lane_rounds,
            sizes,
            progress,
        )
        .await;
        report.lanes = Some(lane_table::LaneTable { sizes, rounds });
    }

    // 1. Added latency at a steady, realistic load: 48 tokens at 20 tokens/s after a 50 ms prefill.
    let script = Script {
        tokens: if quick { 16 } else { 48 },
        gap: Duration::from_millis(50),
        prefill: Duration::from_millis(50),
    };
    let loads: &[usize] = match (args.runs("latency"), quick) {
        (false, _) => &[],
        (true, true) => &[10, 50],
        (true, false) => &[100, 1000],
    };
    for (i, &users) in loads.iter().enumerate() {
        let spec = load::Spec {
            target: upstream,
            users,
            script,
            ramp: secs(1.0, 0.2),
            warmup: secs(3.0, 0.5),
            duration: secs(8.0, 1.5),
        };
        let highest = i + 1 == loads.len();
        let mut row = LatencyRow::new(users, script);
        let mut accuracy = Accuracy::default();
        for rep in 0..args.reps {
            for kind in rotated(&latency_kinds, rep) {
                progress(&format!(
                    "latency K={users} rep {} {}",
                    rep + 1,
                    kind.name()
                ));
                let before = match (kind, targets.tokentap.metrics) {
                    (Kind::Tokentap, Some(m)) => target::scrape(m).await.ok(),
                    _ => None,
                };
                let run = measure(&targets, kind, spec).await;
                if let (Some(before), Some(m)) = (before, targets.tokentap.metrics) {
                    if let Ok(after) = target::scrape(m).await {
                        if highest {
                            accuracy.add(&before, &after, &run.samples);
                        }
                        row.self_delay
                            .push(ratios::SelfDelay::between(&before, &after));
                    }
                }
                row.add(run);
            }
        }
        report.latency.push(row);
        if highest {
            report.accuracy = Some(accuracy);
        }
    }

    // 2. Maximum sustained chunks/s: more and more streams at 50 tokens/s each.
    let sweep: &[usize] = match (args.runs("sweep"), quick) {
        (false, _) => &[],
        (true, true) => &[50, 100],
        (true, false) => &[250, 500, 1000, 1500],
    };
    let script = Script {
        tokens: if quick { 16 } else { 64 },
        gap: Duration::from_millis(20),
        prefill: Duration::ZERO,
    };
    for &users in sweep {
        let spec = load::Spec {
            target: upstream,
            users,
            script,
            ramp: secs(1.0, 0.2),
            warmup: secs(2.0, 0.5),
            duration: secs(6.0, 1.5),
        };
        let mut row = LatencyRow::new(users, script);
        for kind in rotated(&kinds, users) {
            progress(&format!("throughput K={users} {}", kind.name()));
            row.add(measure(&targets, kind, spec).await);
        }
        report.sweep.push(row);
    }

    // 3. Requests/s: short streams (8 tokens, no pacing) back to back.
    let script = Script {
        tokens: 8,
        gap: Duration::ZERO,
        prefill: Duration::ZERO,
    };
    let spec = load::Spec {
        target: upstream,
        users: if quick { 8 } else { 32 },
        script,
        ramp: secs(0.2, 0.1),
        warmup: secs(1.0, 0.3),
        duration: secs(5.0, 1.3),
    };
    let mut row = LatencyRow::new(spec.users, script);
    let rounds = if args.runs("requests") { args.reps } else { 0 };
    for rep in 0..rounds {
        for kind in rotated(&kinds, rep) {
            progress(&format!("requests/s rep {} {}", rep + 1, kind.name()));
            row.add(measure(&targets, kind, spec).await);
        }
    }
    report.requests = (rounds > 0).then_some(row);
    drop(targets);

    // 4. Memory per open stream, each proxy fresh: 100, then 1,000, then 5,000 streams held open.
    let steps: &[usize] = match (args.memory_steps.is_empty(), quick) {
        (false, _) => &args.memory_steps,
        (true, true) => &[10, 50],
        (true, false) => &[100, 1000, 5000],
    };
    let mut proxies = Vec::new();
    if args.runs("memory") {
        proxies.push(Kind::Tokentap);
    }
    if args.runs("memory") && args.setup.nginx.is_some() {
        proxies.push(Kind::Nginx);
    }
    if args.runs("memory") && args.setup.haproxy.is_some() {
        proxies.push(Kind::Haproxy);
    }
    if args.runs("memory") && args.setup.baseline.is_some() {
        proxies.push(Kind::Baseline);
    }
    if args.runs("memory") {
        proxies.push(Kind::Hyper);
    }
    for kind in proxies {
        progress(&format!("memory {}", kind.name()));
        report
            .memory
            .push(memory(&args.setup, upstream, kind, steps).await?);
    }
    Ok(report)
}

async fn memory(
    setup: &Setup, upstream: SocketAddr, kind: Kind, steps: &[usize],
) -> Result<MemoryRow, String> {
    let mut proxy = target::start(setup, upstream, kind)?;
    proxy.ready().await?;
    let warm = load::Spec {
        target: proxy.addr,
        users: 10,
        script: Script {
            tokens: 8,
            gap: Duration::from_millis(1),
            prefill: Duration::ZERO,
        },
        ramp: Duration::ZERO,
        warmup: Duration::ZERO,
        duration: Duration::from_millis(500),
    };
    let warmed = load::run(warm, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut row = MemoryRow {
        kind,
        idle_rss: proxy.rss_bytes(),
        steps: Vec::new(),
        errors: warmed.errors,
    };
    let open = Arc::new(AtomicUsize::new(0));
    let mut held = Vec::new();
    let mut total = 0;
    for &k in steps {
        let add = k - total;
        let spec = load::Spec {
            target: proxy.addr,
            users: add,
            script: Script {
                tokens: 1_000_000,
                gap: Duration::from_secs(1),
                prefill: Duration::ZERO,
            },
            ramp: Duration::from_millis((add as u64).min(5000)),
            warmup: Duration::ZERO,
            duration: Duration::from_secs(120),
        };
        held.push(load::hold(spec, open.clone(), total));
        total = k;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while open.load(Ordering::Relaxed) < total && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Let every stream pass a few more chunks so buffers reach their steady size.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        row.steps
            .push((k, open.load(Ordering::Relaxed), proxy.rss_bytes()));
    }
    for mut set in held {
        set.shutdown().await;
    }
    Ok(row)
}
