//! What reading message lists costs the binary when 1 MiB bodies arrive at once: its resident memory
//! while they are held and read, and the latency of a plain small request sent meanwhile, against an
//! upstream that answers a large body after 300 ms (a server's prefill) and a small one at once.
//! Bodies no agent sends (a list of nested arrays, a list of numbers, one message of numbers) are given
//! up at their first item or at a reader's bound; ordinary agent histories of 500 messages are read,
//! or declined when every reader is busy, never queued. Before (each list parsed into a
//! `serde_json::Value` on tokio's blocking pool, as many at once as came, run on after the request
//! ended), six nested-array bodies grew the RSS by about 400 MiB and a plain request took 320–470 ms.
//! The resident memory and the counts are asserted; the plain request's latency, beside its latency
//! alone just before, is printed, not asserted: it is how fast a busy machine runs the binary as much
//! as what the readers cost (at load 20 a p50 of 192 ms beside the load, 5 ms alone, where a quiet
//! machine gives 3-8 ms and 1-7 ms), and no bound ten times from both was to be had.
#![cfg(all(target_os = "linux", feature = "jemalloc"))]

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{
    agent_history, chat_request, hostile_chat, json_response, ms, raw_exchange, raw_status,
    rss_kib_of, start_binary, RecordedRequest, Step, HANG,
};
use tokentap::record::metrics::family;

const ANSWER: &str = r#"{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;

/// A chat request of `body`, the connection closed after its answer.
fn request(body: &str) -> Vec<u8> {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// What clients sending one body did to the binary.
struct Load {
    /// The large requests sent.
    sent: usize,
    idle_kib: u64,
    peak_kib: u64,
    /// The plain request's median latency before the load, in milliseconds: what this machine takes
    /// for it at the moment, busy or not.
    alone_p50: f64,
    /// The plain requests' latencies, in milliseconds, sorted.
    probes: Vec<f64>,
    /// `tokentap_conversation_lookups_total` and `tokentap_conversation_unread_total` afterwards, as
    /// `result` or `reason` = count, the zeros left out, the plain requests' not counted.
    lookups: Vec<(String, f64)>,
}

impl Load {
    fn grown_mib(&self) -> f64 {
        self.peak_kib.saturating_sub(self.idle_kib) as f64 / 1024.0
    }

    fn probe_p50(&self) -> f64 {
        self.probes[self.probes.len() / 2]
    }

    fn summary(&self) -> String {
        format!(
            "{} sent: +{:.1} MiB (idle {} KiB); plain request p50 {:.1} ms (alone {:.1} ms), max {:.1} ms over {}; {:?}",
            self.sent,
            self.grown_mib(),
            self.idle_kib,
            self.probe_p50(),
            self.alone_p50,
            self.probes[self.probes.len() - 1],
            self.probes.len(),
            self.lookups
        )
    }
}

/// Starts a fresh binary whose upstream answers a large body `status` after `prefill` and a small one
/// 200 at once;
/// `clients` clients send it `body` at once, and again as soon as they are answered until `window` has
/// passed; meanwhile, and until they are all answered, a plain request goes every 10 ms, one at a
/// time, and the RSS is sampled between them.
async fn under_load(
    name: &str, body: &str, clients: usize, window: Duration, (status, prefill): (u16, Duration),
) -> Load {
    let upstream = support::upstream(move |request: &RecordedRequest| match request.body.len() {
        0..=4096 => vec![json_response(200, "OK", ANSWER)],
        _ => vec![
            Step::Sleep(prefill),
            json_response(status, "Answer", r#"{"error":"x"}"#),
        ],
    })
    .await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {}\nmodel_list: {{enabled: false}}\n",
        upstream.url()
    );
    let process = start_binary(name, &yaml, None);
    let pid = process.child.id();
    let addr: SocketAddr = process.proxy.parse().expect("the proxy's address");
    let plain = request(&chat_request("m"));
    // What is made once (pools, the first connection's buffers) is made first.
    assert_eq!(raw_status(&raw_exchange(addr, &plain).await), 200);
    let mut alone = Vec::new();
    for _ in 0..21 {
        let sent = Instant::now();
        assert_eq!(raw_status(&raw_exchange(addr, &plain).await), 200);
        alone.push(sent.elapsed().as_secs_f64() * 1e3);
    }
    alone.sort_by(f64::total_cmp);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_kib = rss_kib_of(pid);
    let large = std::sync::Arc::new(request(body));
    let start = Instant::now();
    let mut senders = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let large = large.clone();
        senders.spawn(async move {
            let mut statuses = Vec::new();
            while statuses.is_empty() || start.elapsed() < window {
                statuses.push(raw_status(&raw_exchange(addr, &large).await));
            }
            statuses
        });
    }
    let start = Instant::now();
    let (mut probes, mut peak_kib, mut answered) = (Vec::new(), idle_kib, Vec::new());
    while (start.elapsed() < window || !senders.is_empty()) && start.elapsed() < HANG {
        let sent = Instant::now();
        assert_eq!(raw_status(&raw_exchange(addr, &plain).await), 200);
        probes.push(sent.elapsed().as_secs_f64() * 1e3);
        peak_kib = peak_kib.max(rss_kib_of(pid));
        while let Some(done) = senders.try_join_next() {
            answered.extend(done.expect("a sender"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(senders.is_empty(), "the clients were not answered");
    assert!(answered.iter().all(|s| *s == status), "{answered:?}");
    probes.sort_by(f64::total_cmp);
    // The plain requests (the first, those alone and those beside the load) are conversations of one
    // turn each.
    let plain_sent = (1 + alone.len() + probes.len()) as f64;
    // A request whose list a reader was reading when it ended is finished when the read is done, a
    // few milliseconds later (more in a debug build): wait (bounded) for every one to be counted.
    let lookups_of = |m: &support::Metrics| -> f64 {
        let counted: f64 = ["first", "continued", "unread"]
            .iter()
            .map(|result| m.get(family::CONVERSATION_LOOKUPS.name, &[("result", *result)]))
            .sum();
        counted - plain_sent
    };
    let mut m = process.scrape();
    let since = Instant::now();
    while since.elapsed() < HANG {
        if lookups_of(&m) >= answered.len() as f64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        m = process.scrape();
    }
    let mut lookups = Vec::new();
    for result in ["first", "continued", "unread"] {
        let mut count = m.get(family::CONVERSATION_LOOKUPS.name, &[("result", result)]);
        if result == "first" {
            count -= plain_sent;
        }
        lookups.push((result.to_owned(), count));
    }
    for reason in tokentap::record::conversations::UNREAD_REASONS {
        lookups.push((
            reason.to_owned(),
            m.get(family::CONVERSATION_UNREAD.name, &[("reason", reason)]),
        ));
    }
    lookups.retain(|(_, n)| *n > 0.0);
    process.signal("TERM");
    let (exit, log) = process.wait();
    assert!(exit.success(), "exit {exit:?}:\n{log}");
    Load {
        sent: answered.len(),
        idle_kib,
        peak_kib,
        alone_p50: alone[alone.len() / 2],
        probes,
        lookups,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_no_agent_sends_cost_their_held_bytes_and_are_counted_unread() {
    let _slot = support::slot();
    for (kind, n) in [
        ("nested", 6),
        ("nested", 8),
        ("numbers", 6),
        ("numbers", 8),
        ("numbers_in_message", 8),
    ] {
        let name = format!("conv-{kind}-{n}");
        let load = under_load(&name, &hostile_chat(kind), n, ms(1_500), (200, ms(300))).await;
        println!("{n} clients of 1 MiB {kind}: {}", load.summary());
        // The held bodies themselves are n MiB; the readers add a few at most.
        assert!(
            load.grown_mib() < 3.0 * n as f64 + 16.0,
            "{n} × {kind}: {}",
            load.summary()
        );
        let unread: f64 = (load.lookups.iter())
            .filter(|(label, _)| label == "unread")
            .map(|(_, n)| n)
            .sum();
        assert_eq!(unread, load.sent as f64, "{n} × {kind}: {}", load.summary());
    }
}

/// Against an upstream that answers every large body 502 at once, each request ends before its list
/// could be read: the reads are dropped with their requests (before, they ran on after them, each on a
/// thread of the blocking pool and a `Value` of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_end_with_their_requests_against_an_upstream_that_answers_502_at_once() {
    let _slot = support::slot();
    let n = 8;
    let body = hostile_chat("numbers_in_message");
    let load = under_load("conv-502", &body, n, ms(1_500), (502, Duration::ZERO)).await;
    println!(
        "{n} clients of 1 MiB numbers_in_message, 502 at once: {}",
        load.summary()
    );
    // (The plain request's latency here is that of receiving 1 MiB bodies as fast as eight clients
    // send them, not of reading them: not asserted.)
    assert!(
        load.grown_mib() < 3.0 * n as f64 + 16.0,
        "{}",
        load.summary()
    );
    let unread = (load.lookups.iter()).find(|(l, _)| l == "unread");
    assert_eq!(
        unread.map(|(_, n)| *n),
        Some(load.sent as f64),
        "{}",
        load.summary()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_agent_histories_arriving_at_once_are_read_within_bounds() {
    let _slot = support::slot();
    let body =
        json!({"model": "m", "stream": false, "messages": agent_history(500, 1 << 20)}).to_string();
    let n = 8;
    // A prefill long enough for this test's unoptimised build to read them all: they take under 2 s
    // here alone; 20 s leaves ten times that for a busy machine.
    let load = under_load("conv-agents-8", &body, n, Duration::ZERO, (200, ms(20_000))).await;
    println!("{n} × 1 MiB agent histories at once: {}", load.summary());
    assert!(
        load.grown_mib() < 3.0 * n as f64 + 16.0,
        "{}",
        load.summary()
    );
    // Eight at once: as many read at once as there are readers, the others wait their turn (sixteen
    // may), and each is read (a first turn each).
    assert_eq!(
        load.lookups,
        [("first".to_owned(), n as f64)],
        "{}",
        load.summary()
    );
}
