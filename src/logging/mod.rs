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

/// Replaces the installed subscriber's filter; set once by [`init`].
type SetFilter = Box<dyn Fn(tracing_subscriber::EnvFilter) -> Result<(), String> + Send + Sync>;
static FILTER: OnceLock<SetFilter> = OnceLock::new();

/// The filter `log_level` names; `None`: `RUST_LOG`, else `info`.
fn filter_of(level: Option<&str>) -> Result<tracing_subscriber::EnvFilter, String> {
    let builder = tracing_subscriber::EnvFilter::builder();
    match level {
        Some(level) => builder.parse(level).map_err(|e| e.to_string()),
        None => Ok(tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))),
    }
}

/// Makes `level` (the config's `log_level`; `None`: `RUST_LOG`, else `info`) the log's filter, at start
/// and at each reload. False when no subscriber was installed (a process that never called [`init`]:
/// the tests that run the proxy in-process).
pub fn set_level(level: Option<&str>) -> Result<bool, String> {
    let Some(set) = FILTER.get() else {
        return Ok(false);
    };
    set(filter_of(level)?)?;
    Ok(true)
}

/// Installs the process-wide subscriber: `RUST_LOG` filter (default `info`; [`set_level`] replaces
/// it), colour only on a terminal.
/// Keep the returned guard until the process exits: dropping it writes out what is still queued
/// (waiting at most a second for a stalled reader).
pub fn init() -> WorkerGuard {
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUE_LINES)
        .thread_name("tokentap-log")
        .finish(Stderr::new(io::stderr()));
    let _ = OVERFLOWED.set(writer.error_counter());
    let filter = filter_of(None).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .fmt_fields(fields::Fields)
        .with_timer(fields::Timestamp)
        .with_writer(writer)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        // Its own report of a failed write goes to the same stderr with `eprintln!`, which panics
        // when stderr is gone: the failure is counted instead.
        .log_internal_errors(false)
        .with_filter_reloading();
    let handle = builder.reload_handle();
    let _ = FILTER.set(Box::new(move |filter| {
        handle.reload(filter).map_err(|e| e.to_string())
    }));
    builder.init();
    guard
}

/// stderr for the log thread, one system call per batch: the thread writes each line the queue holds
/// and then flushes (`tracing-appender`'s worker drains the queue between flushes), so the lines of a
/// batch are gathered here and written together at the flush, or whenever [`BATCH_BYTES`] have gathered.
/// A failed write is given up, never retried, and never reported anywhere that could fail in turn; the
/// lines it did not finish (a line cut in the middle too) are counted as dropped.
struct Batched<W: Write> {
    out: W,
    pending: Vec<u8>,
    /// Where each line in `pending` ends.
    ends: Vec<usize>,
}

/// Bytes gathered before they are written even if the queue still holds lines.
const BATCH_BYTES: usize = 64 << 10;

/// The log thread's stderr.
type Stderr = Batched<io::Stderr>;

impl<W: Write> Batched<W> {
    fn new(out: W) -> Self {
        Batched {
            out,
            pending: Vec::new(),
            ends: Vec::new(),
        }
    }

    fn write_out(&mut self) {
        let mut written = 0;
        while written < self.pending.len() {
            match self.out.write(&self.pending[written..]) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let unwritten = self.ends.iter().filter(|&&end| end > written).count();
        REFUSED.fetch_add(unwritten as u64, Ordering::Relaxed);
        self.pending.clear();
        self.ends.clear();
        // One long line (a panic's backtrace) does not keep its buffer for the life of the process.
        self.pending.shrink_to(BATCH_BYTES * 2);
    }
}

impl<W: Write> Write for Batched<W> {
    /// One line (the worker writes each with one `write_all`).
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(line);
        self.ends.push(self.pending.len());
        if self.pending.len() >= BATCH_BYTES {
            self.write_out();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.write_out();
        let _ = self.out.flush();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that notes each write it is asked for; with `takes` set it accepts only that many
    /// bytes more, then refuses (a pipe whose reader left).
    #[derive(Default)]
    struct Noted {
        writes: Vec<Vec<u8>>,
        takes: Option<usize>,
    }

    impl Write for Noted {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = match self.takes {
                Some(0) => return Err(io::ErrorKind::BrokenPipe.into()),
                Some(left) => {
                    let n = left.min(buf.len());
                    self.takes = Some(left - n);
                    n
                }
                None => buf.len(),
            };
            self.writes.push(buf[..n].to_vec());
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_lines_of_a_batch_go_out_in_one_write_at_the_flush() {
        let mut out = Batched::new(Noted::default());
        for line in ["one\n", "two\n", "three\n"] {
            out.write_all(line.as_bytes()).unwrap();
        }
        assert!(
            out.out.writes.is_empty(),
            "nothing is written before the flush"
        );
        out.flush().unwrap();
        assert_eq!(out.out.writes, vec![b"one\ntwo\nthree\n".to_vec()]);
        out.flush().unwrap();
        assert_eq!(out.out.writes.len(), 1, "an empty batch writes nothing");
    }

    #[test]
    fn a_batch_that_grows_past_its_bound_is_written_without_waiting_for_the_flush() {
        let mut out = Batched::new(Noted::default());
        let line = vec![b'x'; 1000];
        for _ in 0..BATCH_BYTES / 1000 + 1 {
            out.write_all(&line).unwrap();
        }
        assert_eq!(out.out.writes.len(), 1);
        assert_eq!(out.out.writes[0].len(), (BATCH_BYTES / 1000 + 1) * 1000);
        assert!(out.pending.is_empty());
    }

    #[test]
    fn a_refused_write_counts_the_lines_it_did_not_finish_as_dropped() {
        let before = REFUSED.load(Ordering::Relaxed);
        // The reader takes "one\ntw" and leaves: "two" is cut, "three" never written.
        let mut out = Batched::new(Noted {
            takes: Some(6),
            ..Noted::default()
        });
        for line in ["one\n", "two\n", "three\n"] {
            out.write_all(line.as_bytes()).unwrap();
        }
        out.flush().unwrap();
        assert_eq!(out.out.writes.concat(), b"one\ntw");
        assert_eq!(REFUSED.load(Ordering::Relaxed) - before, 2);
        assert!(
            out.pending.is_empty() && out.ends.is_empty(),
            "the lines are given up"
        );
        out.write_all(b"four\n").unwrap();
        out.flush().unwrap();
        assert_eq!(
            REFUSED.load(Ordering::Relaxed) - before,
            3,
            "a write refused outright drops its line"
        );
    }
}
