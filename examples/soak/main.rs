//! Soak test: holds many concurrent streams through a tokentap process for minutes and reports its memory
//! (RSS), open file descriptors, and any byte or count mismatch. Loopback only, bounded in time.
//!
//! It starts a scripted OpenAI-style upstream in this process (`tokentap::scripted`: a role chunk, then `--tokens` content
//! chunks `--gap-ms` apart, usage, `[DONE]`), starts the tokentap binary given by `--tokentap` in front of
//! it, and keeps `--streams` client streams open for `--duration` seconds: every stream that ends is
//! replaced by a new one. Every client checks that it got exactly the bytes the upstream sent. At the
//! end it waits for the last streams, scrapes tokentap's `/metrics` and compares its request and token
//! counts with what the clients saw. Exit status 1 on any mismatch.
//!
//! Every 10 s it also prints where tokentap's resident memory is, from `/proc/PID/smaps`: `brk` (the
//! `[heap]` mapping, glibc's main arena), `arenas N/R of M` (glibc's thread arenas: how many, resident
//! KiB, mapped KiB; each is a 64 MiB reservation of which only the grown part is mapped read-write),
//! and `anon` (every other anonymous mapping: thread stacks and allocations above glibc's mmap
//! threshold), and the 1-minute load average.
//!
//! `--burst N` replaces the held streams with rounds of N streams at once and lulls of 2 to 8 s
//! (`bursts.rs`); `--keep-alive-ms MS` makes the upstream close a connection idle that long, as a server's
//! keep-alive does (`--burst 300 --keep-alive-ms 2000`: docs/lab/soak.md's bursty run).
//!
//! `--capture` runs `tokentap capture` instead (root: an AF_PACKET socket on `lo`): the clients talk to the
//! upstream directly, tokentap reads its port's packets beside them, and the same counts are checked
//! against what it metered (docs/lab/capture.md).
//!
//! `--config FILE` passes a config file to tokentap (the listen and upstream flags still win).
//! `--env K=V` (repeatable) sets a variable for tokentap only, e.g.
//! `GLIBC_TUNABLES=glibc.malloc.arena_max=1` or heaptrack's `LD_PRELOAD`. At the end tokentap gets
//! SIGTERM and up to 10 s to exit, so a preloaded profiler can write its last figures.
//!
//! `--malloc-stats`: after the drain, with no request in flight, attach `gdb` to tokentap and call
//! glibc's `malloc_stats()` (each arena's `system bytes`, what it holds from the kernel, and `in use
//! bytes`, the live allocations; printed on tokentap's stderr), then `malloc_trim(0)` (give every free
//! page back), then `malloc_stats()` again, and print RSS and the smaps figures after the trim. What the
//! trim gives back was free memory the allocator kept, not live data.
//!
//!     scripts/soak.sh                      # builds, raises the descriptor limit, runs with the defaults
//!     cargo run --example soak -- --tokentap target/release/tokentap --streams 1000 --duration 180

use std::net::{SocketAddr, TcpListener as StdListener};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokentap::scripted::{decode, Chunked, Chunks, Scripted, Step};

mod bursts;

struct Args {
    tokentap: String,
    streams: usize,
    duration: Duration,
    tokens: usize,
    gap: Duration,
    env: Vec<(String, String)>,
    config: Option<String>,
    malloc_stats: bool,
    /// `--burst N`: rounds of N streams at once, then a lull (bursts.rs), instead of N held open.
    burst: Option<usize>,
    /// `--keep-alive-ms MS`: the upstream closes a connection idle this long, as a server's keep-alive.
    keep_alive: Option<Duration>,
    /// `--capture`: `tokentap capture` beside the upstream instead of the proxy in front of it.
    capture: bool,
}

fn args() -> Args {
    let mut a = Args {
        tokentap: "target/release/tokentap".into(),
        streams: 1000,
        duration: Duration::from_secs(180),
        tokens: 100,
        gap: Duration::from_millis(100),
        env: Vec::new(),
        config: None,
        malloc_stats: false,
        burst: None,
        keep_alive: None,
        capture: false,
    };
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = argv.iter().position(|a| a == "--malloc-stats") {
        argv.remove(at);
        a.malloc_stats = true;
    }
    if let Some(at) = argv.iter().position(|a| a == "--capture") {
        argv.remove(at);
        a.capture = true;
    }
    for pair in argv.chunks(2) {
        let value = pair.get(1).map(String::as_str).unwrap_or_default();
        let number = || value.parse::<u64>().unwrap_or_else(|_| usage(&pair[0]));
        match pair[0].as_str() {
            "--tokentap" => a.tokentap = value.to_owned(),
            "--streams" => a.streams = number() as usize,
            "--duration" => a.duration = Duration::from_secs(number()),
            "--tokens" => a.tokens = number() as usize,
            "--gap-ms" => a.gap = Duration::from_millis(number()),
            "--config" => a.config = Some(value.to_owned()),
            "--burst" => a.burst = Some(number() as usize),
            "--keep-alive-ms" => a.keep_alive = Some(Duration::from_millis(number())),
            "--env" => match value.split_once('=') {
                Some((k, v)) if !k.is_empty() => a.env.push((k.to_owned(), v.to_owned())),
                _ => usage(value),
            },
            other => usage(other),
        }
    }
    a
}

fn usage(bad: &str) -> ! {
    eprintln!("soak: bad argument {bad}\nusage: soak [--tokentap PATH] [--streams N] [--duration SECS] [--tokens N] [--gap-ms MS] [--config FILE] [--env K=V]... [--malloc-stats] [--burst N] [--keep-alive-ms MS] [--capture]");
    std::process::exit(2)
}

/// How every stream's chunks are spelled.
const CHUNKS: Chunks<'static> = Chunks::chat("s", "soak");

/// The scripted upstream's answer to every request: role, `tokens` content chunks `gap` apart, usage,
/// `[DONE]`; with `keep_alive`, a connection idle that long is then closed, as a server's keep-alive
/// timer does.
fn script(tokens: usize, gap: Duration, keep_alive: Option<Duration>) -> Vec<Step> {
    let texts = (0..tokens).map(|i| (gap, format!("tok{i} ")));
    let mut steps = CHUNKS.stream(texts, Some((7, tokens as u64)));
    steps.extend(keep_alive.map(Step::KeepAliveFor));
    steps
}

/// The exact body every stream carries: the script's chunked body, decoded.
fn expected_body(tokens: usize) -> Vec<u8> {
    let body: Vec<u8> = script(tokens, Duration::ZERO, None)
        .into_iter()
        .skip(1) // the head
        .flat_map(|step| match step {
            Step::Raw(bytes) => bytes,
            _ => Vec::new(),
        })
        .collect();
    match decode(&body) {
        Chunked::Done { body, .. } => body,
        other => panic!("the script's body is not chunked coding: {other:?}"),
    }
}

fn free_port() -> SocketAddr {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

#[derive(Default)]
struct Tally {
    active: AtomicI64,
    completed: AtomicU64,
    bytes: AtomicU64,
    mismatched: AtomicU64,
    failed: AtomicU64,
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// One client slot: opens stream after stream until the deadline.
async fn slot(
    client: HttpClient, url: String, expected: Arc<Vec<u8>>, tally: Arc<Tally>, deadline: Instant,
) {
    while Instant::now() < deadline {
        if !one_stream(&client, &url, &expected, &tally).await {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// One stream through tokentap, tallied; false when it failed.
async fn one_stream(client: &HttpClient, url: &str, expected: &[u8], tally: &Tally) -> bool {
    let body = Bytes::from_static(br#"{"model":"soak","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#);
    let request = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("request");
    tally.active.fetch_add(1, Relaxed);
    let result = async {
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        if response.status() != 200 {
            let status = response.status();
            let body = response.into_body().collect().await.map(|b| b.to_bytes());
            let body = String::from_utf8_lossy(&body.unwrap_or_default()).into_owned();
            return Err(format!("status {status}: {body}"));
        }
        let mut body = response.into_body();
        let mut got = Vec::with_capacity(expected.len());
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() {
                got.extend_from_slice(&data);
            }
        }
        Ok(got)
    }
    .await;
    tally.active.fetch_sub(1, Relaxed);
    match result {
        Ok(got) => {
            tally.bytes.fetch_add(got.len() as u64, Relaxed);
            tally.completed.fetch_add(1, Relaxed);
            if got != *expected {
                tally.mismatched.fetch_add(1, Relaxed);
            }
            true
        }
        Err(err) => {
            if tally.failed.fetch_add(1, Relaxed) < 5 {
                eprintln!("soak: a stream failed: {err}");
            }
            false
        }
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Where the resident memory is, in KiB, from `/proc/PID/smaps` (see the header).
#[derive(Default)]
struct Breakdown {
    brk: u64,
    arenas: usize,
    arena_rss: u64,
    arena_size: u64,
    anon: u64,
}

/// glibc's non-main arenas live in heaps of HEAP_MAX_SIZE (64 MiB on 64-bit), each mmapped at a 64 MiB
/// aligned address: the touched part is a read-write mapping at the aligned start, the rest `---p` up
/// to the next 64 MiB boundary. A heap that grew to the full 64 MiB is one read-write mapping.
fn breakdown(pid: u32) -> Breakdown {
    const HEAP_MAX: u64 = 64 << 20;
    struct Map {
        start: u64,
        end: u64,
        perms: String,
        anonymous: bool,
        heap: bool,
        rss: u64,
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut maps: Vec<Map> = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or_default();
        if let Some((start, end)) = first.split_once('-') {
            if let (Ok(start), Ok(end)) =
                (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
            {
                let perms = fields.next().unwrap_or_default().to_owned();
                let path = fields.nth(3).unwrap_or_default();
                maps.push(Map {
                    start,
                    end,
                    perms,
                    anonymous: path.is_empty(),
                    heap: path == "[heap]",
                    rss: 0,
                });
                continue;
            }
        }
        if let (Some("Rss:"), Some(kib), Some(map)) = (Some(first), fields.next(), maps.last_mut())
        {
            map.rss = kib.parse().unwrap_or(0);
        }
    }
    let mut b = Breakdown::default();
    for (i, m) in maps.iter().enumerate() {
        if m.heap {
            b.brk += m.rss;
        } else if m.anonymous && m.perms.starts_with("rw") {
            let next = maps.get(i + 1);
            let arena = m.start % HEAP_MAX == 0
                && (m.end - m.start == HEAP_MAX
                    || next.is_some_and(|n| {
                        n.anonymous
                            && n.start == m.end
                            && n.perms.starts_with("---")
                            && n.end % HEAP_MAX == 0
                    }));
            if arena {
                b.arenas += 1;
                b.arena_rss += m.rss;
                b.arena_size += (m.end - m.start) >> 10;
            } else {
                b.anon += m.rss;
            }
        }
    }
    b
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The 1-minute load average (other work on the same cores slows the streams).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default()
}

async fn scrape(client: &HttpClient, metrics: SocketAddr) -> String {
    let request = http::Request::get(format!("http://{metrics}/metrics"))
        .body(Full::new(Bytes::new()))
        .expect("request");
    match client.request(request).await {
        Ok(response) => match response.into_body().collect().await {
            Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
            Err(_) => String::new(),
        },
        Err(_) => String::new(),
    }
}

/// Sum of the samples of `name` whose label set contains every `label="value"` in `with`.
fn sample(text: &str, name: &str, with: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| with.iter().all(|w| l.contains(w)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SIGTERM first, so tokentap (and a preloaded profiler) ends as it would in production.
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() {
    let args = args();
    // Keep-alive HTTP/1.1, one stream per request, no log kept (it serves for minutes).
    let (tokens, gap, keep_alive) = (args.tokens, args.gap, args.keep_alive);
    let upstream = Scripted::new(move |_| script(tokens, gap, keep_alive))
        .forgetful()
        .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind upstream");
    let upstream_addr = upstream.addr;
    let (listen, metrics) = (free_port(), free_port());
    let mut command = Command::new(&args.tokentap);
    match args.capture {
        true => command.args([
            "capture",
            "--interface",
            "lo",
            "--port",
            &upstream_addr.port().to_string(),
        ]),
        false => command.args([
            "--listen",
            &listen.to_string(),
            "--upstream",
            &format!("http://{upstream_addr}"),
        ]),
    };
    let child = command
        .args(["--metrics-listen", &metrics.to_string()])
        .args(args.config.iter().flat_map(|c| ["--config", c]))
        .env("RUST_LOG", "warn")
        .envs(args.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            eprintln!("soak: cannot start {}: {e}", args.tokentap);
            std::process::exit(2)
        });
    let child = KillOnDrop(child);
    let pid = child.0.id();
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(args.streams * 2)
        .build_http();
    // Bounded wait for tokentap to answer.
    let started = Instant::now();
    while scrape(&client, metrics).await.is_empty() {
        if started.elapsed() > Duration::from_secs(10) {
            eprintln!("soak: tokentap did not start");
            std::process::exit(2);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (rss_idle, fds_idle) = (rss_kib(pid), fds(pid));
    let m_idle = breakdown(pid);
    let shape = match args.burst {
        Some(burst) => format!("bursts of {burst} streams, lulls of 2-8 s,"),
        None => format!("{} streams", args.streams),
    };
    println!(
        "soak: {shape} for {:?}, {} tokens {:?} apart per stream, upstream keep-alive {:?}, tokentap{} pid {pid} ({})",
        args.duration, args.tokens, args.gap, args.keep_alive, if args.capture { " capture" } else { "" }, args.tokentap
    );
    println!(
        "idle: RSS {rss_idle} KiB, {fds_idle} fds, brk {} KiB, {} arenas {} KiB, other anon {} KiB",
        m_idle.brk, m_idle.arenas, m_idle.arena_rss, m_idle.anon
    );

    let expected = Arc::new(expected_body(args.tokens));
    let tally = Arc::new(Tally::default());
    let t0 = Instant::now();
    let deadline = t0 + args.duration;
    let target = if args.capture { upstream_addr } else { listen };
    let url = format!("http://{target}/v1/chat/completions");
    let bursts = args.burst.map(|burst| {
        tokio::spawn(bursts::run(
            client.clone(),
            url.clone(),
            expected.clone(),
            tally.clone(),
            deadline,
            burst,
            (pid, metrics),
        ))
    });
    let slots: Vec<_> = (0..if bursts.is_some() { 0 } else { args.streams })
        .map(|_| {
            tokio::spawn(slot(
                client.clone(),
                url.clone(),
                expected.clone(),
                tally.clone(),
                deadline,
            ))
        })
        .collect();

    let (mut rss_max, mut fds_max) = (0u64, 0usize);
    let (mut held_min, mut held_sum, mut held_samples) = (i64::MAX, 0i64, 0i64);
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    ticks.tick().await;
    let mut second = 0u64;
    while Instant::now() < deadline {
        ticks.tick().await;
        second += 1;
        let (rss, open) = (rss_kib(pid), fds(pid));
        rss_max = rss_max.max(rss);
        fds_max = fds_max.max(open);
        let active = tally.active.load(Relaxed);
        // Ramp-up is the first 10 s; from then to the deadline every slot should hold a stream.
        if second > 10 && Instant::now() < deadline {
            held_min = held_min.min(active);
            held_sum += active;
            held_samples += 1;
        }
        if second % 10 == 0 {
            let text = scrape(&client, metrics).await;
            let in_flight = sample(&text, "tokentap_requests_in_flight", &[]);
            let m = breakdown(pid);
            println!(
                "t={second:>4}s active {active:>5} in_flight {in_flight:>5} completed {:>7} RSS {rss:>7} KiB fds {open:>5} brk {:>6} arenas {:>2}/{:>6} of {:>6} anon {:>6} load {}",
                tally.completed.load(Relaxed),
                m.brk,
                m.arenas,
                m.arena_rss,
                m.arena_size,
                m.anon,
                loadavg()
            );
        }
    }
    // Let the last streams end (each lasts tokens × gap), bounded.
    let drain = args.gap * (args.tokens as u32) + Duration::from_secs(30);
    let fds_after_lulls = tokio::time::timeout(drain, async {
        for s in slots {
            let _ = s.await;
        }
        match bursts {
            Some(bursts) => bursts.await.ok(),
            None => None,
        }
    })
    .await
    .ok()
    .flatten();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = scrape(&client, metrics).await;
    drop(client);
    upstream.close_idle();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (rss_end, fds_end) = (rss_kib(pid), fds(pid));
    let m_end = breakdown(pid);
    if args.malloc_stats {
        println!("malloc_stats() before malloc_trim(0), then after (tokentap's stderr):");
        let gdb = Command::new("timeout")
            .args(["60", "gdb", "-p", &pid.to_string(), "-batch", "-nx"])
            .args(["-ex", "call (void) malloc_stats()"])
            .args(["-ex", "call (int) malloc_trim(0)"])
            .args(["-ex", "call (void) malloc_stats()"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let m = breakdown(pid);
        println!(
            "after malloc_trim(0) ({}): RSS {} KiB, brk {} KiB, {} arenas {} KiB of {} KiB, other anon {} KiB",
            match gdb {
                Ok(s) if s.success() => "gdb ok".to_owned(),
                Ok(s) => format!("gdb failed: {s}"),
                Err(e) => format!("gdb failed: {e}"),
            },
            rss_kib(pid),
            m.brk,
            m.arenas,
            m.arena_rss,
            m.arena_size,
            m.anon
        );
    }

    let completed = tally.completed.load(Relaxed);
    let failed = tally.failed.load(Relaxed);
    let mismatched = tally.mismatched.load(Relaxed);
    let ok = sample(
        &text,
        "tokentap_requests_total",
        &["outcome=\"ok\"", "status=\"200\""],
    );
    let all = sample(&text, "tokentap_requests_total", &[]);
    let tokens = sample(&text, "tokentap_output_tokens_total", &["model=\"soak\""]);
    let ttft = sample(&text, "tokentap_time_to_first_token_seconds_count", &[]);
    let itl = sample(&text, "tokentap_inter_token_latency_seconds_count", &[]);
    let in_flight = sample(&text, "tokentap_requests_in_flight", &[]);
    let want_tokens = completed as f64 * args.tokens as f64;
    let want_itl = completed as f64 * (args.tokens as f64 - 1.0);
    let count_mismatch = ok != completed as f64
        || all != (completed + failed) as f64
        || tokens != want_tokens
        || ttft != completed as f64
        || itl != want_itl
        || in_flight != 0.0;
    println!("---");
    match (args.burst.is_none(), held_samples) {
        (true, 0) => println!("concurrent streams after ramp-up: none sampled (the run ended within its 10 s ramp-up)"),
        (true, n) => println!(
            "concurrent streams after ramp-up: min {held_min}, mean {} (target {}, sampled each second)",
            held_sum / n,
            args.streams
        ),
        _ => {}
    }
    println!(
        "completed streams: {completed}, failed: {failed}, bytes received: {}",
        tally.bytes.load(Relaxed)
    );
    println!("byte mismatches: {mismatched}");
    println!("tokentap counted: requests {all} (ok {ok}), output tokens {tokens} (expected {want_tokens}), TTFT {ttft}, ITL {itl} (expected {want_itl}), in flight {in_flight}");
    println!(
        "count mismatches: {}",
        if count_mismatch { "YES" } else { "none" }
    );
    println!("tokentap RSS: idle {rss_idle} KiB, peak {rss_max} KiB, after {rss_end} KiB");
    println!(
        "tokentap memory after (KiB): brk {}, {} arenas {} of {}, other anon {}",
        m_end.brk, m_end.arenas, m_end.arena_rss, m_end.arena_size, m_end.anon
    );
    println!("tokentap fds: idle {fds_idle}, peak {fds_max}, after {fds_end}");
    if let Some(most) = fds_after_lulls {
        println!("tokentap fds at the end of a lull, at most: {most}");
    }
    drop(child);
    if mismatched > 0 || count_mismatch || failed > 0 {
        std::process::exit(1);
    }
}
