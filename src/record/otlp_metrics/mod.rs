//! Metrics over OTLP (`otlp_metrics:`, docs/tracing.md, "Metrics over OTLP"): every
//! `otlp_metrics.interval` one background task gathers the families the Prometheus page serves,
//! builds the GenAI server metrics and tokentap's own from them (`encode.rs`), encodes them off the
//! runtime's workers and posts them to the collector over the span exporter's kind of connection
//! (`record/trace/post.rs`). Nothing on the forwarding path waits for it: it reads the registry as a
//! scrape does.
//!
//! Bounded like the span exporter, with one export in flight and no queue: an export that is slow,
//! refused or fails is dropped and counted by reason (`tokentap_otlp_metric_exports_dropped_total`),
//! logged at most once per 10 s, and an interval that passes while one still runs is skipped and
//! counted. Nothing is lost by it: the next export carries the totals (cumulative), or what changed
//! since the last one the collector accepted (delta). Memory is one export and, per series, its last
//! point sent. At shutdown [`MetricsExporter::flush`] sends one last export within the time it is given.

mod encode;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use prost::Message;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::config::{Compression, OtlpMetrics};
use crate::logging::repeated::RepeatedWarning;
use crate::record::metrics::{Metrics, OtlpMetricCounters};
use crate::record::trace::post::{Answer, Collector, PostError, SetupError};

pub use encode::{names, request, Sent, SEMCONV_VERSION};

/// The background task's handle.
pub struct MetricsExporter {
    flushes: mpsc::Sender<(Instant, oneshot::Sender<()>)>,
    task: JoinHandle<()>,
}

/// The background task.
struct Exporter {
    collector: Collector,
    metrics: Arc<Metrics>,
    counters: OtlpMetricCounters,
    config: OtlpMetrics,
    server: (String, u16),
    /// Each series' last point the collector accepted.
    sent: Sent,
    started: u64,
    failing: RepeatedWarning,
}

/// The data points an accepted export's partial success rejected.
fn rejected_points(answer: Bytes) -> u64 {
    let partial = ExportMetricsServiceResponse::decode(answer)
        .ok()
        .and_then(|r| r.partial_success);
    partial.map_or(0, |p| u64::try_from(p.rejected_data_points).unwrap_or(0))
}

fn unix_nanos(at: SystemTime) -> u64 {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

impl MetricsExporter {
    /// Starts the background task (on the current runtime); `server` is the upstream's host and port.
    pub fn start(
        config: &OtlpMetrics, metrics: Arc<Metrics>, server: (String, u16),
    ) -> Result<Self, SetupError> {
        let url = config.export_url().map_err(SetupError::Endpoint)?;
        let collector = Collector::to(url, &config.headers, config.compression, rejected_points)?;
        let (flushes, asked) = mpsc::channel(4);
        let exporter = Exporter {
            collector,
            counters: metrics.otlp.clone(),
            metrics,
            config: config.clone(),
            server,
            sent: Sent::default(),
            started: unix_nanos(SystemTime::now()),
            failing: RepeatedWarning::default(),
        };
        let task = tokio::spawn(exporter.run(asked));
        Ok(MetricsExporter { flushes, task })
    }

    /// Sends one last export, waiting at most `limit`.
    pub async fn flush(&self, limit: Duration) {
        let (done, sent) = oneshot::channel();
        let until = Instant::now() + limit;
        if self.flushes.send((until, done)).await.is_ok() {
            let _ = tokio::time::timeout(limit + Duration::from_millis(100), sent).await;
        }
    }
}

impl Drop for MetricsExporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Exporter {
    async fn run(mut self, mut flushes: mpsc::Receiver<(Instant, oneshot::Sender<()>)>) {
        let interval = self.config.interval;
        let mut ticks = tokio::time::interval_at(Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = ticks.tick() => {
                    let began = Instant::now();
                    self.export(self.config.timeout).await;
                    let missed = began.elapsed().as_nanos() / interval.as_nanos().max(1);
                    self.counters.skipped.inc_by(u64::try_from(missed).unwrap_or(u64::MAX));
                }
                flush = flushes.recv() => match flush {
                    Some((until, done)) => {
                        let left = until.saturating_duration_since(Instant::now());
                        self.export(left.min(self.config.timeout)).await;
                        let _ = done.send(());
                    }
                    None => return,
                },
            }
        }
    }

    /// Gathers, encodes and posts one export within `limit`; what [`Sent`] holds moves on only when
    /// the collector accepted it.
    async fn export(&mut self, limit: Duration) {
        let metrics = self.metrics.clone();
        let sent = self.sent.clone();
        let temporality = self.config.temporality;
        let started = self.started;
        let name = self.config.service_name.clone();
        let server = self.server.clone();
        let gzip = self.config.compression == Compression::Gzip;
        // Gathering every family and encoding is CPU work that grows with the series: not on a worker
        // that forwards frames.
        let built = tokio::task::spawn_blocking(move || {
            let families = metrics.gather();
            let now = unix_nanos(SystemTime::now());
            let server = (server.0.as_str(), server.1);
            let (request, next) =
                request(&families, &sent, temporality, now, started, &name, server);
            let body = request.encode_to_vec();
            let body = match gzip {
                true => crate::record::trace::otlp::gzip(&body),
                false => Ok(body),
            };
            body.map(|body| (body, next))
        })
        .await;
        let (body, next) = match built {
            Ok(Ok(built)) => built,
            Ok(Err(error)) => return self.dropped("failed", &error.to_string()),
            Err(error) => return self.dropped("failed", &error.to_string()),
        };
        match self.collector.post(Bytes::from(body), limit).await {
            Ok(Answer::Accepted { rejected: 0 }) => {
                self.counters.exported.inc();
                self.sent = next;
            }
            Ok(Answer::Accepted { rejected }) => {
                // The collector kept the rest: the baseline moves on, and the rejection is counted.
                self.sent = next;
                let why =
                    format!("the collector rejected {rejected} data points (partial success)");
                self.dropped("rejected", &why);
            }
            Ok(Answer::Refused(status)) => {
                self.dropped("rejected", &format!("the collector answered {status}"))
            }
            Err(error @ PostError::Timeout(_)) => self.dropped("timeout", &error.to_string()),
            Err(error @ PostError::Failed(_)) => self.dropped("failed", &error.to_string()),
        }
    }

    /// Counts an export dropped for `reason`, and logs it at most once per 10 s.
    fn dropped(&mut self, reason: &'static str, why: &str) {
        let counter = match reason {
            "timeout" => &self.counters.timeout,
            "rejected" => &self.counters.rejected,
            _ => &self.counters.failed,
        };
        counter.inc();
        if let Some(failures) = self.failing.occurred(Instant::now()) {
            tracing::warn!(
                collector = %self.collector.url(),
                reason,
                failures,
                "metric export dropped: {why} (this export failure and those since the last such line)"
            );
        }
    }
}
