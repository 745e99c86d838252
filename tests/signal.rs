//! The binary's own process behaviour, as an operator meets it: SIGTERM turns an idle tokentap unready
//! and makes it exit cleanly at once (the in-process tests in `shutdown.rs` cover draining and cutting
//! through the same code); SIGHUP is logged and ignored, never a kill; a log reader that goes away
//! costs log lines (counted), never a request.
#![cfg(unix)]

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tokentap::record::metrics::family;

use support::{
    chunk, content_chunk, get_blocking, last_chunk, ms, sse_head, start_binary, Process, Step, DONE,
};

fn start(name: &str, upstream: &str) -> Process {
    let yaml = format!("listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {upstream}\nshutdown_grace: 20s\n");
    start_binary(name, &yaml, None)
}

fn get(addr: &str, path: &str) -> String {
    get_blocking(addr, path).unwrap_or_default()
}

/// A streaming chat request over a blocking connection; the whole raw answer.
fn stream_request(proxy: &str) -> Vec<u8> {
    let mut stream = TcpStream::connect(proxy).expect("connect");
    stream.set_read_timeout(Some(support::HANG)).ok();
    stream
        .write_all(&support::raw_chat("m", true))
        .expect("write");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer
}

fn streaming_steps(gap: Duration) -> Vec<Step> {
    let mut steps = vec![sse_head()];
    for word in ["a", "b", "c", "d"] {
        steps.push(Step::Sleep(gap));
        steps.push(chunk(content_chunk(word).as_bytes()));
    }
    steps.push(chunk(DONE.as_bytes()));
    steps.push(last_chunk());
    steps
}

fn whole_stream(answer: &[u8]) -> bool {
    let text = String::from_utf8_lossy(answer);
    text.starts_with("HTTP/1.1 200") && text.contains("[DONE]") && text.ends_with("0\r\n\r\n")
}

#[test]
fn sigterm_makes_an_idle_tokentap_exit_cleanly_at_once() {
    let _slot = support::slot();
    let process = start("sigterm", "http://127.0.0.1:9");
    assert!(get(&process.metrics, "/readyz").starts_with("HTTP/1.1 200"));
    let signalled = Instant::now();
    process.signal("TERM");
    let (exit, log) = process.wait();
    assert!(exit.success(), "exit {exit:?}:\n{log}");
    // Nothing was in flight, so no grace period was waited for.
    assert!(signalled.elapsed() < Duration::from_secs(5), "{log}");
    assert!(log.contains("shutdown requested"), "{log}");
    assert!(log.contains("tokentap stopped"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_is_logged_and_ignored_while_a_stream_is_in_flight() {
    let _slot = support::slot();
    let upstream = support::upstream(|_| streaming_steps(ms(150))).await;
    let process = start("sighup", &upstream.url());
    let proxy = process.proxy.clone();
    let streaming = std::thread::spawn(move || stream_request(&proxy));
    std::thread::sleep(Duration::from_millis(200));
    process.signal("HUP");
    std::thread::sleep(Duration::from_millis(50));
    process.signal("HUP");
    let answer = tokio::task::spawn_blocking(move || streaming.join().expect("client"))
        .await
        .expect("join");
    assert!(
        whole_stream(&answer),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // Still serving and still ready after the hangups.
    assert!(get(&process.metrics, "/readyz").starts_with("HTTP/1.1 200"));
    let proxy = process.proxy.clone();
    let again = tokio::task::spawn_blocking(move || stream_request(&proxy))
        .await
        .expect("join");
    assert!(whole_stream(&again));
    assert_eq!(process.metric(family::REQUESTS.name), 2.0);
    process.signal("TERM");
    let (exit, log) = process.wait();
    assert!(exit.success(), "exit {exit:?}:\n{log}");
    // Two signals sent close together may reach the process as one (pending signals coalesce).
    assert!(log.contains("SIGHUP received"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_reader_that_goes_away_costs_log_lines_not_requests() {
    let _slot = support::slot();
    let upstream = support::upstream(|_| streaming_steps(ms(1))).await;
    let mut process = start("closed-stderr", &upstream.url());
    // The log's reader goes away, as a dying log shipper's does: every later write to stderr fails.
    drop(process.stderr.take());
    let proxy = process.proxy.clone();
    let answers = tokio::task::spawn_blocking(move || {
        (0..20).map(|_| stream_request(&proxy)).collect::<Vec<_>>()
    })
    .await
    .expect("join");
    for answer in &answers {
        assert!(whole_stream(answer), "{}", String::from_utf8_lossy(answer));
    }
    assert!(get(&process.metrics, "/healthz").starts_with("HTTP/1.1 200"));
    // One info line per request, none of them written; the log thread writes in the background, so
    // give it a moment to fail.
    let mut dropped = 0.0;
    let since = Instant::now();
    while since.elapsed() < support::HANG {
        dropped = process.metric(tokentap::logging::DROPPED_LINES);
        if dropped >= 20.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(dropped >= 20.0, "dropped {dropped}");
    let m = process.scrape();
    assert_eq!(
        m.get(
            family::REQUESTS.name,
            &[("outcome", "ok"), ("status", "200")]
        ),
        20.0
    );
    process.signal("TERM");
    let (exit, _) = process.wait();
    assert!(
        exit.success(),
        "SIGTERM with a closed stderr: exit {exit:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_reader_that_stalls_holds_up_no_request() {
    let _slot = support::slot();
    let upstream = support::upstream(|_| streaming_steps(Duration::ZERO)).await;
    // stderr is a pipe nobody reads past the startup line: it fills after a few hundred lines.
    let process = start("stalled-stderr", &upstream.url());
    let proxy = process.proxy.clone();
    let answers = tokio::task::spawn_blocking(move || {
        // Up to the first answer that is not whole: a proxy blocked on its log costs one request's
        // read timeout, not one each.
        let mut answers = Vec::new();
        for _ in 0..600 {
            answers.push(stream_request(&proxy));
            if !answers.last().is_some_and(|a| whole_stream(a)) {
                break;
            }
        }
        answers
    })
    .await
    .expect("join");
    let whole = answers.iter().filter(|a| whole_stream(a)).count();
    if let Some(broken) = answers.last().filter(|a| !whole_stream(a)) {
        panic!(
            "answer {} of 600 not whole ({} bytes):\n{}\nits requests counted: {:?}",
            answers.len(),
            broken.len(),
            String::from_utf8_lossy(broken),
            get(&process.metrics, "/metrics")
                .lines()
                .filter(|l| l.starts_with(family::REQUESTS.name))
                .collect::<Vec<_>>()
        );
    }
    assert_eq!(whole, 600);
    assert_eq!(process.metric(family::REQUESTS.name), 600.0);
    process.signal("TERM");
    // At exit the log waits at most a second for its reader, then gives up what it still holds.
    let (exit, _) = process.wait();
    assert!(exit.success(), "exit {exit:?}");
}
