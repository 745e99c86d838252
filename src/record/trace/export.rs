//! The exporter: a bounded queue that a finished request hands its span to without waiting
//! ([`SpanExporter::offer`]: a full queue drops the span, counted), and one background task that
//! batches the spans (`traces.batch` of them, or whatever `traces.interval` gathered), encodes each
//! batch off the runtime's workers and posts it ([`super::post`]), one at a time. A slow, failing or
//! absent collector costs spans, each counted by reason (`tokentap_spans_dropped_total`) and logged at
//! most once per 10 s, never a request's time: memory is the queue and one batch.
//!
//! At shutdown [`SpanExporter::flush`] sends what is queued, within the time it is given; what is left
//! then is counted `reason="shutdown"`.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use std::sync::Arc;

use crate::config::{Compression, Traces};
use crate::govern::{Client, Lease, Pool};
use crate::logging::repeated::RepeatedWarning;
use crate::record::metrics::SpanCounters;

use super::post::{Answer, Collector, PostError, SetupError};
use super::span::Span;

/// What one span waiting in the queue is taken to hold of the `spans` budget: its attributes are
/// bounded (names of at most 256 bytes, ids, numbers), so this is their most, not their size.
pub const SPAN_BYTES: u64 = 4 << 10;

/// A span in the queue, and its room in the `spans` budget until it is sent or dropped.
type Queued = (Span, Lease);

/// Hands spans to the background task.
pub struct SpanExporter {
    queue: mpsc::Sender<Queued>,
    /// The governor's `spans` budget each queued span is leased from.
    budget: Arc<Pool>,
    flushes: mpsc::Sender<Flush>,
    counters: SpanCounters,
    /// The queue-full warning, shared by every request that finds it full.
    full: Mutex<RepeatedWarning>,
    task: JoinHandle<()>,
}

/// Send what is queued until `until`, then say so.
struct Flush {
    until: Instant,
    done: oneshot::Sender<()>,
}

/// The background task's own state.
struct Batcher {
    collector: Collector,
    counters: SpanCounters,
    service_name: String,
    gzip: bool,
    timeout: Duration,
    batch: usize,
    interval: Duration,
    failing: RepeatedWarning,
}

/// Why a batch's spans were not exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dropped {
    Timeout,
    Rejected,
    Failed,
    Shutdown,
}

impl SpanExporter {
    /// Starts the background task (on the current runtime).
    pub fn start(
        config: &Traces, counters: SpanCounters, budget: Arc<Pool>,
    ) -> Result<Self, SetupError> {
        let collector = Collector::new(config)?;
        let (queue, spans) = mpsc::channel(config.queue);
        let (flushes, flush_requests) = mpsc::channel(4);
        let batcher = Batcher {
            collector,
            counters: counters.clone(),
            service_name: config.service_name.clone(),
            gzip: config.compression == Compression::Gzip,
            timeout: config.timeout,
            batch: config.batch,
            interval: config.interval,
            failing: RepeatedWarning::default(),
        };
        let task = tokio::spawn(batcher.run(spans, flush_requests));
        Ok(SpanExporter {
            queue,
            budget,
            flushes,
            counters,
            full: Mutex::default(),
            task,
        })
    }

    /// Queues `span` of `client`'s request for export, at once: a full queue drops it (counted, and
    /// logged at most once per 10 s), and so does no room for it in the client's share of the budget.
    pub fn offer(&self, span: Span, client: &Client) {
        let mut lease = Lease::on(&self.budget, client.clone());
        if lease.grow(SPAN_BYTES).is_err() {
            self.counters.budget.inc();
            return;
        }
        match self.queue.try_send((span, lease)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.counters.queue_full.inc();
                let mut full = self.full.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(dropped) = full.occurred(Instant::now()) {
                    tracing::warn!(
                        dropped,
                        queue = self.queue.max_capacity(),
                        "spans dropped: the export queue (traces.queue) is full; the collector is \
                         slower than the requests (this one and those since the last such line)"
                    );
                }
            }
            // The task is gone (the runtime is shutting down).
            Err(TrySendError::Closed(_)) => self.counters.shutdown.inc(),
        }
    }

    /// Sends every span queued so far, waiting at most `limit`; the spans still queued then are
    /// counted `reason="shutdown"`.
    pub async fn flush(&self, limit: Duration) {
        let (done, sent) = oneshot::channel();
        let until = Instant::now() + limit;
        if self.flushes.send(Flush { until, done }).await.is_ok() {
            // The task answers by `until` (each export it starts ends by then); a little more for
            // the answer itself.
            let _ = tokio::time::timeout(limit + Duration::from_millis(100), sent).await;
        }
    }

    /// Spans waiting in the queue.
    pub fn queued(&self) -> usize {
        self.queue.max_capacity() - self.queue.capacity()
    }
}

/// How long an exporter that is let go (a reload replaced it) may take to send what it holds.
pub const DRAIN: Duration = Duration::from_secs(5);

impl Drop for SpanExporter {
    /// The task is not cut: it sends what is queued within [`DRAIN`] (each export within
    /// `traces.timeout`), counts what is left then as dropped (`shutdown`), and ends.
    fn drop(&mut self) {
        let (done, _) = oneshot::channel();
        let until = Instant::now() + DRAIN;
        if self.flushes.try_send(Flush { until, done }).is_err() {
            self.task.abort();
        }
    }
}

impl Batcher {
    async fn run(mut self, mut spans: mpsc::Receiver<Queued>, mut flushes: mpsc::Receiver<Flush>) {
        let mut batch = Vec::with_capacity(self.batch);
        loop {
            // The first span of a batch, or a flush.
            tokio::select! {
                span = spans.recv() => match span {
                    Some((span, _room)) => batch.push(span),
                    None => return,
                },
                flush = flushes.recv() => match flush {
                    Some(flush) => {
                        self.flush(&mut spans, &mut batch, flush).await;
                        continue;
                    }
                    None => return,
                },
            }
            let deadline = Instant::now() + self.interval;
            let mut flush = None;
            while batch.len() < self.batch && flush.is_none() {
                tokio::select! {
                    span = spans.recv() => match span {
                        Some((span, _room)) => batch.push(span),
                        None => break,
                    },
                    () = tokio::time::sleep_until(deadline) => break,
                    asked = flushes.recv() => match asked {
                        Some(asked) => flush = Some(asked),
                        // The exporter is gone: this batch is sent, then the loop ends.
                        None => break,
                    },
                }
            }
            let timeout = self.timeout;
            self.export(&mut batch, timeout).await;
            if let Some(flush) = flush {
                self.flush(&mut spans, &mut batch, flush).await;
            }
        }
    }

    /// Exports `batch` and what is queued, batch by batch, until nothing is left or `flush.until`
    /// has passed; the rest is counted as dropped at shutdown.
    async fn flush(
        &mut self, spans: &mut mpsc::Receiver<Queued>, batch: &mut Vec<Span>, flush: Flush,
    ) {
        loop {
            while batch.len() < self.batch {
                match spans.try_recv() {
                    Ok((span, _room)) => batch.push(span),
                    Err(_) => break,
                }
            }
            if batch.is_empty() {
                break;
            }
            let left = flush.until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let mut rest = batch.len();
                batch.clear();
                while spans.try_recv().is_ok() {
                    rest += 1;
                }
                self.dropped(
                    Dropped::Shutdown,
                    rest,
                    "the shutdown's flush ran out of time",
                );
                break;
            }
            self.export(batch, left.min(self.timeout)).await;
        }
        let _ = flush.done.send(());
    }

    /// Encodes and posts `batch` (emptied), within `limit`; counts what became of its spans.
    async fn export(&mut self, batch: &mut Vec<Span>, limit: Duration) {
        if batch.is_empty() {
            return;
        }
        let spans = std::mem::replace(batch, Vec::with_capacity(self.batch));
        let n = spans.len();
        let (name, gzip) = (self.service_name.clone(), self.gzip);
        // Encoding (and gzip) of a full batch takes milliseconds: not on a worker that forwards frames.
        let encoded =
            tokio::task::spawn_blocking(move || super::otlp::body(&spans, &name, gzip)).await;
        let body = match encoded {
            Ok(Ok(body)) => Bytes::from(body),
            Ok(Err(error)) => return self.dropped(Dropped::Failed, n, &error.to_string()),
            Err(error) => return self.dropped(Dropped::Failed, n, &error.to_string()),
        };
        match self.collector.post(body, limit).await {
            Ok(Answer::Accepted { rejected }) => {
                let rejected = usize::try_from(rejected).unwrap_or(n).min(n);
                self.counters.exported.inc_by((n - rejected) as u64);
                if rejected > 0 {
                    let why = "the collector rejected part of the batch (partial success)";
                    self.dropped(Dropped::Rejected, rejected, why);
                }
            }
            Ok(Answer::Refused(status)) => self.dropped(
                Dropped::Rejected,
                n,
                &format!("the collector answered {status}"),
            ),
            Err(error @ PostError::Timeout(_)) => {
                self.dropped(Dropped::Timeout, n, &error.to_string())
            }
            Err(error @ PostError::Failed(_)) => {
                self.dropped(Dropped::Failed, n, &error.to_string())
            }
        }
    }

    /// Counts `n` spans dropped for `reason`, and logs it at most once per 10 s.
    fn dropped(&mut self, reason: Dropped, n: usize, why: &str) {
        let (counter, reason) = match reason {
            Dropped::Timeout => (&self.counters.timeout, "timeout"),
            Dropped::Rejected => (&self.counters.rejected, "rejected"),
            Dropped::Failed => (&self.counters.failed, "failed"),
            Dropped::Shutdown => (&self.counters.shutdown, "shutdown"),
        };
        counter.inc_by(n as u64);
        if let Some(failures) = self.failing.occurred(Instant::now()) {
            tracing::warn!(
                collector = %self.collector.url(),
                reason,
                spans = n,
                failures,
                "spans dropped: {why} (this export failure and those since the last such line)"
            );
        }
    }
}
