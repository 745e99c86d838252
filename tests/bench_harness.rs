//! Smoke test of the benchmark harness (benches/proxy): the scripted upstream, the load generator and the
//! report run at a tiny scale, direct, through tokentap started in-process and through the stack's floor
//! (the plain hyper proxy), and produce a table. It asserts that every stream arrived whole and that the
//! report has its rows — never on a timing.
#![allow(dead_code)]

#[path = "../benches/proxy/hyper_floor.rs"]
mod hyper_floor;
#[path = "../benches/proxy/lane_table.rs"]
mod lane_table;
#[path = "../benches/proxy/lanes.rs"]
mod lanes;
#[path = "../benches/proxy/load.rs"]
mod load;
#[path = "../benches/proxy/ratios.rs"]
mod ratios;
#[path = "../benches/proxy/report.rs"]
mod report;
#[path = "../benches/proxy/stats.rs"]
mod stats;
#[path = "../benches/proxy/target.rs"]
mod target;
#[path = "../benches/proxy/upstream.rs"]
mod upstream;

use std::net::SocketAddr;
use std::time::Duration;
use tokentap::record::metrics::family;

use report::{LatencyRow, Report, Run};
use target::Kind;
use upstream::Script;

fn spec(target: SocketAddr) -> load::Spec {
    load::Spec {
        target,
        users: 4,
        script: Script {
            tokens: 5,
            gap: Duration::from_millis(2),
            prefill: Duration::from_millis(1),
        },
        ramp: Duration::from_millis(20),
        warmup: Duration::ZERO,
        duration: Duration::from_millis(300),
    }
}

async fn run(kind: Kind, target: SocketAddr) -> Run {
    let spec = spec(target);
    let samples = load::run(spec, Duration::from_secs(10)).await;
    Run {
        kind,
        samples,
        window_s: spec.duration.as_secs_f64(),
        cpu_wall_s: spec.duration.as_secs_f64(),
        proxy_cpu_s: 0.0,
        load_cpu_s: 0.0,
    }
}

/// The scripted upstream, and tokentap in-process in front of it on its defaults.
async fn upstream_and_tokentap() -> (SocketAddr, tokentap::Running) {
    let upstream = upstream::spawn().await.expect("scripted upstream");
    let config = tokentap::Config {
        listen: "127.0.0.1:0".parse().expect("addr"),
        metrics_listen: "127.0.0.1:0".parse().expect("addr"),
        upstream: format!("http://{upstream}").parse().expect("uri"),
        ..tokentap::Config::default()
    };
    let proxy = tokentap::start(&config).await.expect("tokentap starts");
    (upstream, proxy)
}

#[tokio::test]
async fn harness_streams_direct_through_tokentap_and_through_the_floor_and_renders_a_table() {
    let (upstream, proxy) = upstream_and_tokentap().await;
    // The stack's floor, a plain hyper proxy, served on this runtime.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the floor");
    let floor = listener.local_addr().expect("the floor's address");
    let floor_task = tokio::spawn(hyper_floor::serve(listener, upstream));

    let mut row = LatencyRow::new(4, spec(upstream).script);
    for (kind, addr) in [
        (Kind::Direct, upstream),
        (Kind::Tokentap, proxy.proxy_addr()),
        (Kind::Hyper, floor),
    ] {
        let before = target::scrape(proxy.metrics_addr()).await.expect("scrape");
        let run = run(kind, addr).await;
        if kind == Kind::Tokentap {
            let after = target::scrape(proxy.metrics_addr()).await.expect("scrape");
            row.self_delay
                .push(ratios::SelfDelay::between(&before, &after));
        }
        assert_eq!(
            run.samples.errors,
            0,
            "{}: {:?}",
            kind.name(),
            run.samples.first_error
        );
        assert!(run.samples.requests_ok >= 4, "{}", kind.name());
        // Every content chunk of every measured stream has a delivery latency.
        assert_eq!(
            run.samples.chunk_ns.len() as u64,
            run.samples.ttft_ns.len() as u64 * 5,
            "{}",
            kind.name()
        );
        row.add(run);
    }

    let exposition = target::scrape(proxy.metrics_addr()).await.expect("scrape");
    let ttft = stats::buckets(&exposition, family::TTFT.name);
    assert!(ttft
        .last()
        .is_some_and(|(le, n)| le.is_infinite() && *n >= 4.0));

    let mut report = Report::new(1, false);
    report.latency.push(row);
    let table = report.render();
    println!("{table}");
    assert!(table.contains("| direct |") && table.contains("| tokentap |"));
    assert!(table.contains("| hyper |"), "{table}");
    floor_task.abort();
    // tokentap's own delay histogram observed every frame it forwarded, and is set beside the wire's.
    let own = table
        .lines()
        .skip_while(|l| !l.starts_with("### tokentap's own delay per frame"))
        .find(|l| l.starts_with("| 4 |"))
        .expect("a self-delay row for the 4-stream load");
    let frames: f64 = own
        .split('|')
        .nth(2)
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or_default();
    assert!(frames > 0.0, "{own}");
    // The wire's side, socket to socket: the clients' sockets gave their receive timestamps.
    let wire = own.split('|').nth(4).unwrap_or_default();
    assert!(wire.trim().ends_with("µs"), "{own}");
}

/// The field's lanes (benches/proxy/lanes.rs) at a tiny scale, direct and through tokentap: every probe,
/// request and paced delta is counted, and the table has its rows and issue 53's target rows.
#[tokio::test]
async fn lanes_probe_fresh_connections_time_a_window_and_paced_frames_and_render_a_table() {
    let (upstream, proxy) = upstream_and_tokentap().await;
    let sizes = lanes::Sizes {
        probes: 3,
        requests: 4,
        streams: 1,
    };
    let accepted = upstream::accepted();
    let kinds = [Kind::Direct, Kind::Tokentap, Kind::Nginx];
    // "nginx" is tokentap again here: the table's target rows need an nginx to compare with.
    let addr = |k: Kind| {
        if k == Kind::Direct {
            upstream
        } else {
            proxy.proxy_addr()
        }
    };
    let rounds = lanes::rounds(&kinds, addr, 1, sizes, |_| {}).await;
    for (kind, run) in rounds.iter().flatten() {
        assert_eq!(run.errors, 0, "{}: {:?}", kind.name(), run.first_error);
        assert_eq!(run.ttft_ns.len(), 3, "{}", kind.name());
        assert_eq!(run.request_ns.len(), 4, "{}", kind.name());
        assert_eq!(
            run.frame_ns.len(),
            lanes::PACED.tokens as usize,
            "{}",
            kind.name()
        );
    }
    // Each probe is a fresh connection, and through the proxy it makes a fresh upstream one too.
    assert!(
        upstream::accepted() - accepted >= 3 * 3,
        "{}",
        upstream::accepted()
    );
    let exposition = target::scrape(proxy.metrics_addr()).await.expect("scrape");
    let ttft = stats::buckets(&exposition, family::TTFT.name);
    assert!(ttft
        .last()
        .is_some_and(|(le, n)| le.is_infinite() && *n >= 2.0));

    let mut report = Report::new(1, false);
    report.lanes = Some(lane_table::LaneTable { sizes, rounds });
    let table = report.render();
    println!("{table}");
    assert!(
        table.contains("| direct |") && table.contains("| tokentap |"),
        "{table}"
    );
    assert!(table.contains("| tokentap | added TTFT p99 |"), "{table}");
    assert!(
        table.contains("| tokentap | paced frame p50 on the wire |"),
        "{table}"
    );
}

#[test]
fn percentiles_are_nearest_rank() {
    let mut v: Vec<u64> = (1..=100).collect();
    assert_eq!(stats::percentile(&mut v, 0.5), Some(50));
    assert_eq!(stats::percentile(&mut v, 0.99), Some(99));
    assert_eq!(stats::percentile(&mut v, 0.999), Some(100));
}

#[test]
fn histogram_quantile_interpolates_inside_the_bucket_like_prometheus() {
    let b = [
        (0.01, 0.0),
        (0.02, 50.0),
        (0.03, 100.0),
        (f64::INFINITY, 100.0),
    ];
    assert_eq!(stats::histogram_quantile(0.5, &b), Some(0.02));
    let q = stats::histogram_quantile(0.25, &b).unwrap_or_default();
    assert!((q - 0.015).abs() < 1e-12);
}
