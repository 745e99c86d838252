//! The process log (stderr), written so that it can never fail or hold up a request.
//!
//! Log lines are formatted where they happen and handed to a background thread over a bounded queue
//! (`tracing-appender`'s non-blocking writer, lossy): a log reader that stalls (a full pipe, a paused
//! log shipper) costs lines, never latency, and a reader that goes away (`EPIPE`, a closed journald
//! socket) costs lines, never a panic. nginx and Envoy treat a failed access-log write the same way.
//! Every line that is not written is counted: the queue's overflow and the writes stderr refused add up
//! in [`dropped_lines`], which `/metrics` exports as `tokentap_log_lines_dropped_total`.

pub mod fields;
pub mod printable;
pub mod records;
pub mod repeated;

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};

/// Lines the queue holds while stderr's reader is slow; beyond them lines are dropped (and counted).
/// At a few hundred bytes a line this bounds the log's memory to a few MiB.
pub const QUEUE_LINES: usize = 8192;

/// Writes stderr refused (its reader gone or failing).
static REFUSED: AtomicU64 = AtomicU64::new(0);
/// The queue's own count of lines it dropped because it was full.
static OVERFLOWED: OnceLock<ErrorCounter> = OnceLock::new();

/// Log lines lost since the process started: dropped at a full queue or refused by stderr. Zero in a
/// process that never called [`init`] (the tests that run the proxy in-process).
pub fn dropped_lines() -> u64 {
    let overflowed = OVERFLOWED.get().map_or(0, |c| c.dropped_lines() as u64);
    REFUSED.load(Ordering::Relaxed) + overflowed
}

/// Installs the process-wide subscriber: `RUST_LOG` filter (default `info`), colour only on a terminal.
/// Keep the returned guard until the process exits: dropping it writes out what is still queued
/// (waiting at most a second for a stalled reader).
pub fn init() -> WorkerGuard {
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUE_LINES)
        .thread_name("tokentap-log")
        .finish(Stderr);
    let _ = OVERFLOWED.set(writer.error_counter());
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .fmt_fields(fields::Fields)
        .with_timer(fields::Timestamp)
        .with_writer(writer)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        // Its own report of a failed write goes to the same stderr with `eprintln!`, which panics
        // when stderr is gone: the failure is counted instead.
        .log_internal_errors(false)
        .init();
    guard
}

/// stderr for the log thread: a failed write is counted and the line given up, never retried, and
/// never reported anywhere that could fail in turn.
struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if io::stderr().write_all(buf).is_err() {
            REFUSED.fetch_add(1, Ordering::Relaxed);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// `tokentap_log_lines_dropped_total`, read from [`dropped_lines`] at each scrape.
/// The family of log lines not written.
pub const DROPPED_LINES: &str = "tokentap_log_lines_dropped_total";

pub struct DroppedLinesCollector {
    counter: prometheus::IntCounter,
}

impl DroppedLinesCollector {
    pub fn new() -> Result<Self, prometheus::Error> {
        Ok(DroppedLinesCollector {
            counter: prometheus::IntCounter::new(
                DROPPED_LINES,
                "Log lines not written: the log queue was full (stderr's reader too slow) or stderr refused the write (its reader gone).",
            )?,
        })
    }
}

impl prometheus::core::Collector for DroppedLinesCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.counter.desc()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let behind = dropped_lines().saturating_sub(self.counter.get());
        self.counter.inc_by(behind);
        self.counter.collect()
    }
}
