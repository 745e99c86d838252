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
//! reopened for the next record. The thread keeps its own buffer and counts the bytes each write took,
//! so it knows which records reached the file whole (counted written), which did not start (counted
//! lost) and which one a failure cut in the middle (counted lost too): the file then ends in a torn
//! line, and the next record is written after a newline, so it starts a line of its own and a reader
//! loses only the torn one. A file found not ending in a newline when it is opened (a crash, or
//! another writer) is treated the same. [`RecordWriter::reopen`] (SIGHUP) makes the thread open the
//! path again before its next write, which is what logrotate's `create` mode needs: after the rename
//! the records go to the new file, with none lost or split between the two.
//!
//! The path is opened by the thread too, never by the caller: opening a FIFO no one reads, or a path
//! on a hung mount, blocks, and it must block neither the start (the ports bind, SIGTERM works) nor a
//! request. [`RecordWriter::start`] hands back an [`Opened`] the caller may wait on for a while: a path
//! that cannot be opened (a missing directory, no permission) is still refused at start, and one still
//! opening later holds only its records (queued, then dropped and counted), until it opens.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use tokio::time::Instant;

use crate::govern::{Client, Lease, Pool};
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
    /// The governor's `records` budget had no room for the line (its client's share, or the cap).
    pub budget: IntCounter,
}

/// The family of records written whole.
pub const WRITTEN: &str = "tokentap_request_records_written_total";
/// The family of records not written, by `reason`.
pub const DROPPED: &str = "tokentap_request_records_dropped_total";
/// The values of its `reason`, all there from the start.
pub const DROP_REASONS: [&str; 3] = ["queue_full", "write_error", "budget"];

impl RecordCounters {
    /// Registers the two families; `reason` takes its values at once, so every series exists from
    /// the start (a rate over a series that appears late misses its first increase).
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let written = IntCounter::new(WRITTEN, "Per-request records written to request_log.path.")?;
        registry.register(Box::new(written.clone()))?;
        let dropped = IntCounterVec::new(
            Opts::new(
                DROPPED,
                "Per-request records not written: the writer's queue was full (queue_full), the records budget had no room for the line in its client's share or in all (budget), or the write failed (write_error).",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(dropped.clone()))?;
        Ok(RecordCounters {
            written,
            queue_full: dropped.with_label_values(&[DROP_REASONS[0]]),
            write_error: dropped.with_label_values(&[DROP_REASONS[1]]),
            budget: dropped.with_label_values(&[DROP_REASONS[2]]),
        })
    }
}

enum Message {
    /// A record, and what it holds of the `records` budget until it is written.
    Line(String, Option<Lease>),
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
    /// The governor's `records` budget each queued line is leased from; `None`: not governed.
    budget: Option<Arc<Pool>>,
}

impl RecordWriter {
    /// Starts the writer thread with a queue of `queue` lines; the thread opens `target` itself, and
    /// the returned [`Opened`] says how that went.
    pub fn start(
        target: Target, queue: usize, counters: RecordCounters,
    ) -> io::Result<(Self, Opened)> {
        let (sender, receiver) = mpsc::sync_channel(queue);
        let reopen = Arc::new(AtomicBool::new(false));
        let queued = Arc::new(AtomicUsize::new(0));
        let (opened, open_result) = mpsc::sync_channel(1);
        let thread = Thread {
            queued: queued.clone(),
            target,
            out: None,
            receiver,
            reopen: reopen.clone(),
            counters: counters.clone(),
            failed: RepeatedWarning::default(),
            buffer: Vec::with_capacity(BUFFER),
            records: Vec::new(),
            torn: false,
        };
        std::thread::Builder::new()
            .name("tokentap-records".into())
            .spawn(move || thread.run(opened))?;
        let writer = RecordWriter {
            queue: sender,
            reopen,
            counters,
            full: Mutex::default(),
            queued,
            capacity: queue,
            budget: None,
        };
        Ok((writer, Opened(open_result)))
    }

    /// Each line queued from now is leased from `budget` (the governor's `records`) until written.
    pub fn governed(mut self, budget: Arc<Pool>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Queues one record (a JSON object without its newline) of `client`'s. Never waits: a full
    /// queue, or no room for it in the client's share of the budget, drops it.
    fn send(&self, line: String, client: &Client) {
        let lease = match &self.budget {
            Some(budget) => {
                let mut lease = Lease::on(budget, client.clone());
                if lease.grow(line.len() as u64).is_err() {
                    self.counters.budget.inc();
                    return;
                }
                Some(lease)
            }
            None => None,
        };
        self.queued.fetch_add(1, Ordering::AcqRel);
        if self.queue.try_send(Message::Line(line, lease)).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            self.dropped();
        }
    }

    /// Queues the record of `client`'s that `line` builds, building it only when the queue has room:
    /// a writer that is behind costs the data path no serialising. `line` returning `None` queues
    /// nothing.
    pub fn send_with(&self, client: &Client, line: impl FnOnce() -> Option<String>) {
        if self.queued.load(Ordering::Acquire) >= self.capacity {
            self.dropped();
        } else if let Some(line) = line() {
            self.send(line, client);
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

/// How the first open of the path went, as the writer thread reports it.
pub struct Opened(Receiver<io::Result<()>>);

impl Opened {
    /// Waits at most `limit`: the open's result, or `None` while it is still blocked (a FIFO no one
    /// reads, a hung mount).
    pub fn wait(self, limit: Duration) -> Option<io::Result<()>> {
        match self.0.recv_timeout(limit) {
            Ok(result) => Some(result),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                Some(Err(io::Error::other("the request_log writer thread ended")))
            }
        }
    }
}

/// Bytes buffered before a write; a record larger than this is written on its own.
const BUFFER: usize = 64 << 10;

enum Output {
    Stdout(io::Stdout),
    File(File),
}

impl Output {
    /// Opens `target`; for a file, also whether its last byte is not a newline (its last line is
    /// torn). `None` for stdout, which cannot be asked.
    fn open(target: &Target) -> io::Result<(Output, Option<bool>)> {
        Ok(match target {
            Target::Stdout => (Output::Stdout(io::stdout()), None),
            Target::File(path) => {
                let file = append(path)?;
                let torn = ends_mid_line(&file, path);
                (Output::File(file), Some(torn))
            }
        })
    }

    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Output::Stdout(w) => w,
            Output::File(w) => w,
        }
    }
}

/// Opens `path` to append; for a FIFO this waits for a reader (on the writer thread).
fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Whether `opened` is a regular file whose last byte is not a newline. Anything else (a FIFO, a
/// device, a file that cannot be read back) is taken to end a line.
fn ends_mid_line(opened: &File, path: &Path) -> bool {
    let regular = opened.metadata().is_ok_and(|m| m.is_file() && m.len() > 0);
    if !regular {
        return false;
    }
    let mut last = [0u8; 1];
    let read = File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::End(-1))?;
        file.read_exact(&mut last)
    });
    read.is_ok() && last[0] != b'\n'
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
    /// Records not yet written, each with its newline.
    buffer: Vec<u8>,
    /// Where each record in `buffer` ends.
    records: Vec<usize>,
    /// The output ends in the middle of a line: the next write starts with a newline.
    torn: bool,
}

impl Thread {
    fn run(mut self, opened: SyncSender<io::Result<()>>) {
        let first = match Output::open(&self.target) {
            Ok((out, torn)) => {
                self.out = Some(out);
                self.torn = torn.unwrap_or(false);
                Ok(())
            }
            Err(error) => Err(error),
        };
        let refused = first.is_err();
        let _ = opened.try_send(first);
        if refused {
            // The caller refuses to start; nothing will be sent.
            return;
        }
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
            Message::Line(line, _lease) => {
                self.queued.fetch_sub(1, Ordering::AcqRel);
                if !self.buffer.is_empty() && self.buffer.len() + line.len() >= BUFFER {
                    self.flush();
                }
                self.buffer.extend_from_slice(line.as_bytes());
                self.buffer.push(b'\n');
                self.records.push(self.buffer.len());
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
            Ok((out, torn)) => {
                self.out = Some(out);
                // A file says for itself (a new one after logrotate is whole); stdout cannot.
                self.torn = torn.unwrap_or(self.torn);
                true
            }
            Err(error) => {
                self.failed("cannot open request_log.path", &error);
                false
            }
        }
    }

    /// Writes the buffered records; each one counted written once all its bytes are in the file, or
    /// lost when a failure leaves it unwritten or cut.
    fn flush(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        if self.out.is_none() && !self.open() {
            self.counters.write_error.inc_by(self.records.len() as u64);
            self.clear();
            return;
        }
        let Some(out) = self.out.as_mut() else {
            return;
        };
        let writer = out.writer();
        if self.torn {
            match write_all(writer, b"\n") {
                (_, None) => self.torn = false,
                (_, Some(error)) => {
                    let lost = self.records.len();
                    self.counters.write_error.inc_by(lost as u64);
                    self.lost("cannot write request records", &error);
                    return;
                }
            }
        }
        let (written, error) = write_all(writer, &self.buffer);
        let error = error.or_else(|| writer.flush().err());
        let whole = self
            .records
            .iter()
            .take_while(|&&end| end <= written)
            .count();
        self.counters.written.inc_by(whole as u64);
        if let Some(error) = error {
            // The record the failure cut leaves a torn line; it and those after it are lost.
            self.torn = whole < self.records.len() && written > self.start_of(whole);
            let lost = self.records.len() - whole;
            self.counters.write_error.inc_by(lost as u64);
            self.lost("cannot write request records", &error);
            return;
        }
        self.clear();
    }

    /// Where the `i`th buffered record starts.
    fn start_of(&self, i: usize) -> usize {
        match i {
            0 => 0,
            _ => self.records[i - 1],
        }
    }

    fn clear(&mut self) {
        self.buffer.clear();
        self.records.clear();
    }

    /// A write failed: the buffered records are gone (counted by the caller), and the handle is
    /// dropped, so the next record opens the path again.
    fn lost(&mut self, what: &str, error: &io::Error) {
        self.clear();
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

/// Writes `bytes` whole, or until an error: how many bytes were taken, and the error.
fn write_all(writer: &mut dyn Write, bytes: &[u8]) -> (usize, Option<io::Error>) {
    let mut written = 0;
    while written < bytes.len() {
        match writer.write(&bytes[written..]) {
            Ok(0) => return (written, Some(io::ErrorKind::WriteZero.into())),
            Ok(n) => written += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return (written, Some(error)),
        }
    }
    (written, None)
}
