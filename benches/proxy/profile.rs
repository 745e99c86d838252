//! Fixed work for a profiler wrapped around the proxy under test (`scripts/profile.sh`): instead of timed
//! windows, each workload runs between two shell hooks (`BENCH_PROFILE_START`, `BENCH_PROFILE_STOP`,
//! e.g. `callgrind_control -z` and `callgrind_control -d`) and this prints how many requests and SSE
//! events passed in between, so instructions per request and per event are exact divisions.
//!
//! Every stream of a workload starts after the start hook and ends before the stop hook: the load runs
//! to its end (no stream is cut) before the stop hook runs.
//!
//! The last workload is the field's TTFT probe (`lanes.rs`) [`PROBES`] times: a fresh connection each,
//! closed at the first frame, so its figures are a connection's whole cost (accept, the upstream
//! connect, the request, its end when the client leaves).

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use crate::upstream::Script;
use crate::{lanes, load};

/// TTFT probes in the `connections` workload.
const PROBES: u64 = 200;

/// One workload: its name (passed to the hooks as `BENCH_PROFILE_LABEL`), its users and script.
struct Workload {
    label: &'static str,
    users: usize,
    script: Script,
}

const WORKLOADS: [Workload; 2] = [
    // Short streams back to back, no pacing: the cost of a request (its 11 events included).
    Workload {
        label: "requests",
        users: 8,
        script: Script {
            tokens: 8,
            gap: Duration::ZERO,
            prefill: Duration::ZERO,
        },
    },
    // Paced streams: one event per read, the cost of a chunk as it is in production. Light enough (250
    // events/s) that a proxy slowed ~50x by callgrind keeps up on a busy machine: a proxy that falls
    // behind finds several events per read, and its cost per event drops for that reason alone.
    Workload {
        label: "chunks",
        users: 5,
        script: Script {
            tokens: 64,
            gap: Duration::from_millis(20),
            prefill: Duration::ZERO,
        },
    },
];

fn hook(name: &str, label: &str) -> Result<(), String> {
    let Ok(command) = std::env::var(name) else {
        return Ok(());
    };
    let status = Command::new("sh")
        .arg("-c")
        .arg(&command)
        .env("BENCH_PROFILE_LABEL", label)
        .status()
        .map_err(|e| format!("{name}: {e}"))?;
    if !status.success() {
        return Err(format!("{name} ({command}) exited with {status}"));
    }
    Ok(())
}

/// Warms the proxy up, then runs each workload for `secs` between the hooks and prints one line each:
/// `profile LABEL requests N events E errors X`.
pub async fn run(proxy: SocketAddr, secs: f64) -> Result<(), String> {
    let warm = load::Spec {
        target: proxy,
        users: 8,
        script: WORKLOADS[0].script,
        ramp: Duration::ZERO,
        warmup: Duration::ZERO,
        duration: Duration::from_secs(1),
    };
    let warmed = load::run(warm, Duration::from_secs(30)).await;
    if warmed.errors > 0 {
        return Err(format!(
            "warm-up: {} errors, first: {:?}",
            warmed.errors, warmed.first_error
        ));
    }
    for w in &WORKLOADS {
        let spec = load::Spec {
            target: proxy,
            users: w.users,
            script: w.script,
            ramp: Duration::from_millis(200),
            warmup: Duration::ZERO,
            duration: Duration::from_secs_f64(secs),
        };
        hook("BENCH_PROFILE_START", w.label)?;
        let samples = load::run(spec, Duration::from_secs(60)).await;
        hook("BENCH_PROFILE_STOP", w.label)?;
        let events = samples.requests_ok * (u64::from(w.script.tokens) + 3);
        println!(
            "profile {} requests {} events {} errors {}",
            w.label, samples.requests_ok, events, samples.errors
        );
    }
    hook("BENCH_PROFILE_START", "connections")?;
    let mut errors = 0;
    for _ in 0..PROBES {
        if lanes::probe(proxy).await.is_err() {
            errors += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The last probe's end (the client left mid-stream) is part of its cost.
    tokio::time::sleep(Duration::from_millis(500)).await;
    hook("BENCH_PROFILE_STOP", "connections")?;
    let ok = PROBES - errors;
    println!("profile connections requests {ok} events {ok} errors {errors}");
    Ok(())
}
