//! The writer of the per-request records (`request_log:`): lines in, a file or stdout out, on a thread
//! of its own, so that writing can never block or slow a request.
//!
//! A finished request hands its line to [`RecordWriter::send_with`], which never waits: the line joins a
//! bounded queue (`request_log.queue` lines), or, when the queue is full because the disk or the
//! reader of stdout is slower than the traffic, it is dropped and counted
//! (`tokentap_request_records_dropped_total{reason="queue_full"}`). The thread writes through a
//! `BufWriter` and flushes whenever the queue runs empty, so a record reaches the file within one
//! write of its request's end under light load and in large writes under heavy load.
//!
//! A failed write (a full disk, EIO, a closed stdout) loses that record, is counted
//! (`reason="write_error"`) and logged at most once per 10 s, and never stops anything: the file is
//! reopened for the next record. [`RecordWriter::reopen`] (SIGHUP) makes the thread open the path
//! again before its next write, which is what logrotate's `create` mode needs: after the rename the
//! records go to the new file, with none lost or split between the two.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use tokio::time::Instant;

use crate::logging::repeated::RepeatedWarning;

/// Where the lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Stdout,
    File(PathBuf),
}

/// The writer's counters: `tokentap_request_records_written_total` and
/// `tokentap_request_records_dropped_total{reason}`.
#[derive(Clone)]
pub struct RecordCounters {
    pub written: IntCounter,
    pub queue_full: IntCounter,
    pub write_error: IntCounter,
}

impl RecordCounters {
    /// Registers the two families; `reason` takes its two values at once, so both series exist from
    /// the start (a rate over a series that appears late misses its first increase).
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let written = IntCounter::new(
            "tokentap_request_records_written_total",
            "Per-request records written to request_log.path.",
        )?;
        registry.register(Box::new(written.clone()))?;
        let dropped = IntCounterVec::new(
            Opts::new(
                "tokentap_request_records_dropped_total",
                "Per-request records not written: the writer's queue was full (queue_full) or the write failed (write_error).",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(dropped.clone()))?;
        Ok(RecordCounters {
            written,
            queue_full: dropped.with_label_values(&["queue_full"]),
            write_error: dropped.with_label_values(&["write_error"]),
        })
    }
}

enum Message {
    Line(String),
    /// Wakes the thread for a reopen (the flag says it), or asks for a flush and an answer.
    Wake,
    Flush(SyncSender<()>),
}

/// The sending side; cheap to share (an `Arc` around it).
pub struct RecordWriter {
    queue: SyncSender<Message>,
    reopen: Arc<AtomicBool>,
    counters: RecordCounters,
    full: Mutex<RepeatedWarning>,
    /// Lines in the queue (sent, not yet taken by the thread), so a full queue is seen before a line is
    /// built for it.
    queued: Arc<AtomicUsize>,
    capacity: usize,
}

impl RecordWriter {
    /// Opens `target` (an error here stops tokentap from starting: a path it cannot write is a
    /// configuration error) and starts the writer thread with a queue of `queue` lines.
    pub fn start(target: Target, queue: usize, counters: RecordCounters) -> io::Result<Self> {
        let out = Output::open(&target)?;
        let (sender, receiver) = mpsc::sync_channel(queue);
        let reopen = Arc::new(AtomicBool::new(false));
        let queued = Arc::new(AtomicUsize::new(0));
        let thread = Thread {
            queued: queued.clone(),
            target,
            out: Some(out),
            receiver,
            reopen: reopen.clone(),
            counters: counters.clone(),
            failed: RepeatedWarning::default(),
            pending: 0,
        };
        std::thread::Builder::new()
            .name("tokentap-records".into())
            .spawn(move || thread.run())?;
        Ok(RecordWriter {
            queue: sender,
            reopen,
            counters,
            full: Mutex::default(),
            queued,
            capacity: queue,
        })
    }

    /// Queues one record (a JSON object without its newline). Never waits: a full queue drops it.
    fn send(&self, line: String) {
        self.queued.fetch_add(1, Ordering::AcqRel);
        if self.queue.try_send(Message::Line(line)).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            self.dropped();
        }
    }

    /// Queues the record `line` builds, building it only when the queue has room: a writer that is
    /// behind costs the data path no serialising. `line` returning `None` queues nothing.
    pub fn send_with(&self, line: impl FnOnce() -> Option<String>) {
        if self.queued.load(Ordering::Acquire) >= self.capacity {
            self.dropped();
        } else if let Some(line) = line() {
            self.send(line);
        }
    }

    /// A record the full queue had no room for: counted, and said in the log (rate-limited).
    fn dropped(&self) {
        self.counters.queue_full.inc();
        let mut full = self.full.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(dropped) = full.occurred(Instant::now()) {
            tracing::warn!(
                dropped,
                "request records dropped: the request_log writer is behind (a slow disk or an unread stdout); count since the last such line"
            );
        }
    }

    /// The file is to be opened again before the next write (SIGHUP, after logrotate renamed it).
    pub fn reopen(&self) {
        self.reopen.store(true, Ordering::Release);
        // A full queue wakes the thread anyway; the flag is read before every write.
        let _ = self.queue.try_send(Message::Wake);
    }

    /// Waits at most `limit` until every record queued so far is written (at shutdown).
    pub fn flush(&self, limit: Duration) -> bool {
        let (done, wait) = mpsc::sync_channel(1);
        let deadline = std::time::Instant::now() + limit;
        let mut message = Message::Flush(done);
        loop {
            match self.queue.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) if std::time::Instant::now() < deadline => {
                    message = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return false,
            }
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        !matches!(wait.recv_timeout(left), Err(RecvTimeoutError::Timeout))
    }
}

enum Output {
    Stdout(BufWriter<io::Stdout>),
    File(BufWriter<File>),
}

impl Output {
    fn open(target: &Target) -> io::Result<Output> {
        Ok(match target {
            Target::Stdout => Output::Stdout(BufWriter::with_capacity(64 << 10, io::stdout())),
            Target::File(path) => Output::File(BufWriter::with_capacity(64 << 10, append(path)?)),
        })
    }

    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Output::Stdout(w) => w,
            Output::File(w) => w,
        }
    }
}

fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

struct Thread {
    /// The writer's count of queued lines, lowered as each is taken.
    queued: Arc<AtomicUsize>,
    target: Target,
    /// `None` after a failure: opened again for the next record.
    out: Option<Output>,
    receiver: Receiver<Message>,
    reopen: Arc<AtomicBool>,
    counters: RecordCounters,
    failed: RepeatedWarning,
    /// Records in the buffer, counted written once a flush has handed them to the file.
    pending: u64,
}

impl Thread {
    fn run(mut self) {
        while let Ok(message) = self.receiver.recv() {
            self.handle(message);
            // Drain what is queued before flushing, so a busy queue is written in large writes.
            while let Ok(message) = self.receiver.try_recv() {
                self.handle(message);
            }
            self.flush();
        }
        self.flush();
    }

    fn handle(&mut self, message: Message) {
        if self.reopen.swap(false, Ordering::AcqRel) {
            self.flush();
            self.out = None;
        }
        match message {
            Message::Line(mut line) => {
                self.queued.fetch_sub(1, Ordering::AcqRel);
                line.push('\n');
                self.write(line.as_bytes());
            }
            Message::Wake => {
                if self.out.is_none() {
                    self.open();
                }
            }
            Message::Flush(done) => {
                self.flush();
                let _ = done.try_send(());
            }
        }
    }

    fn open(&mut self) -> bool {
        match Output::open(&self.target) {
            Ok(out) => {
                self.out = Some(out);
                true
            }
            Err(error) => {
                self.failed("cannot open request_log.path", &error);
                false
            }
        }
    }

    fn write(&mut self, line: &[u8]) {
        if self.out.is_none() && !self.open() {
            self.counters.write_error.inc();
            return;
        }
        let Some(out) = self.out.as_mut() else {
            return;
        };
        match out.writer().write_all(line) {
            Ok(()) => self.pending += 1,
            Err(error) => {
                self.pending += 1;
                self.lost("cannot write a request record", &error);
            }
        }
    }

    fn flush(&mut self) {
        let Some(out) = self.out.as_mut() else {
            return;
        };
        match out.writer().flush() {
            Ok(()) => self
                .counters
                .written
                .inc_by(std::mem::take(&mut self.pending)),
            Err(error) => self.lost("cannot write request records", &error),
        }
    }

    /// A write failed: the records in the buffer are counted lost (some may have reached the file
    /// in an earlier partial write: the count is an upper bound), and the handle is dropped, so the
    /// next record opens the path again.
    fn lost(&mut self, what: &str, error: &io::Error) {
        self.counters
            .write_error
            .inc_by(std::mem::take(&mut self.pending));
        self.failed(what, error);
        self.out = None;
    }

    fn failed(&mut self, what: &str, error: &io::Error) {
        if let Some(times) = self.failed.occurred(Instant::now()) {
            let path = match &self.target {
                Target::Stdout => "-".to_owned(),
                Target::File(path) => path.display().to_string(),
            };
            tracing::warn!(%error, path, times, "{what} (count since the last such line); records are dropped until it works again");
        }
    }
}
