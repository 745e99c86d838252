//! The handle on a running tokentap: where it listens, what it holds in flight, and how it stops.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::config::Config;
use crate::net::tls::Certificates;
use crate::record::live::Live;
use crate::record::metrics::Metrics;
use crate::record::otlp_metrics::MetricsExporter;
use crate::shutdown::{self, Count, Drained, Phase, Shutdown};
use crate::tap::context::ExchangeContext;

use super::reload::{Reloaded, Reloader, Source};

/// A running tokentap. Dropping it stops the listeners (connections already open finish on their own).
pub struct Running {
    pub(super) proxy_addr: SocketAddr,
    pub(super) metrics_addr: SocketAddr,
    pub(super) context: Arc<ExchangeContext>,
    pub(super) metrics: Arc<Metrics>,
    /// The config's reloads, and what they replace (the request_log writer, the span exporter, the
    /// model list's fetcher).
    pub(super) reloader: Arc<Reloader>,
    pub(super) shutdown: Shutdown,
    pub(super) grace: Duration,
    /// Client connections open on the proxy port.
    pub(super) connections: Count,
    pub(super) proxy_task: Mutex<Option<JoinHandle<()>>>,
    pub(super) metrics_task: JoinHandle<()>,
    /// The live page's snapshots (`ui.enabled`).
    pub(super) snapshot_task: Option<JoinHandle<()>>,
    pub(super) live: Option<Arc<Live>>,
    /// The proxy port's certificate (`listen_tls:`).
    pub(super) certificates: Option<Arc<Certificates>>,
    /// The metrics pushed to a collector (`otlp_metrics:`; a restart changes it).
    pub(super) otlp_metrics: Option<MetricsExporter>,
}

impl Running {
    pub fn proxy_addr(&self) -> SocketAddr {
        self.proxy_addr
    }

    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// The proxy port's certificate and key (`listen_tls:`), to [`Certificates::reload`] them.
    pub fn certificates(&self) -> Option<&Certificates> {
        self.certificates.as_deref()
    }

    /// Requests between t_arrive and t_end, all APIs.
    pub fn in_flight(&self) -> i64 {
        i64::try_from(self.context.requests.get()).unwrap_or(i64::MAX)
    }

    /// Client connections open on the proxy port.
    pub fn open_connections(&self) -> usize {
        self.connections.get()
    }

    /// The request_log file is to be opened again before its next record (after logrotate renamed it).
    pub fn reopen_records(&self) {
        if let Some(records) = &self.reloader.parts().records {
            records.reopen();
        }
    }

    /// Waits (at most `limit`) until every request record queued so far is written.
    pub fn flush_records(&self, limit: Duration) {
        let records = self.reloader.parts().records.clone();
        if let Some(records) = records {
            records.flush(limit);
        }
    }

    /// Sends the spans queued so far to the collector (`traces:`), waiting at most `limit`; those still
    /// queued then are dropped and counted (`reason="shutdown"`).
    pub async fn flush_spans(&self, limit: Duration) {
        let spans = self.reloader.parts().spans.clone();
        if let Some(spans) = spans {
            spans.flush(limit).await;
        }
    }

    /// Sends one last metric export to the collector (`otlp_metrics:`), waiting at most `limit`.
    pub async fn flush_metrics(&self, limit: Duration) {
        if let Some(exporter) = &self.otlp_metrics {
            exporter.flush(limit).await;
        }
    }

    /// Whether `request_log:` is on.
    pub fn has_records(&self) -> bool {
        self.reloader.parts().records.is_some()
    }

    /// Where a reload reads the config from (the binary: the config file, with the command line's
    /// overrides); without it, [`Running::reload`] fails.
    pub fn reload_from(&self, source: Source) {
        self.reloader.read_from(source);
    }

    /// Reads the config again and applies what can change live, or nothing (SIGHUP does this).
    pub async fn reload(&self) -> Reloaded {
        self.reloader.reload().await
    }

    /// Applies `config` as a reload that read it would (`Err`: a file that failed to read or check).
    pub async fn reload_with(&self, config: Result<Config, String>) -> Reloaded {
        self.reloader.apply(config).await
    }

    /// Takes a snapshot for the live page now, as each `ui.interval` does (for tests that need a history
    /// without waiting for it). Nothing without `ui.enabled`.
    pub fn snapshot_live(&self) {
        if let Some(live) = &self.live {
            live.snapshot(&self.metrics);
        }
    }

    /// Waits (at most `limit`, blocking the calling thread) until no tokenizer look-up is in progress
    /// (for tests that need a look-up the upstream's model list started to have finished); true if
    /// none is.
    pub fn settle_tokenizers(&self, limit: Duration) -> bool {
        self.context.tokenizers.settle(limit)
    }

    /// The most series this process can export and the product of caps that makes it.
    pub fn series_bound(&self) -> String {
        self.metrics.bound().describe()
    }

    /// Stops accepting connections on both ports at once, without draining (see [`Running::shutdown`]).
    pub fn stop_accepting(&mut self) {
        let proxy_task = self.proxy_task.get_mut();
        if let Some(task) = proxy_task.unwrap_or_else(PoisonError::into_inner).take() {
            task.abort();
        }
        self.metrics_task.abort();
        if let Some(task) = &self.snapshot_task {
            task.abort();
        }
        if let Some(task) = self.reloader.parts().model_list_task.take() {
            task.abort();
        }
    }

    /// Starts a graceful shutdown at once: `/readyz` answers 503 from now on and the proxy port is
    /// closed. The future completes when every request and client connection has finished, or when
    /// `shutdown_grace` has run out and what was left has been cut. The metrics port stays up.
    pub fn shutdown(&self) -> impl Future<Output = Drained> + Send + 'static {
        self.shutdown.advance(Phase::Draining);
        let accept_loop = self
            .proxy_task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = &accept_loop {
            task.abort();
        }
        shutdown::drain(
            self.shutdown.clone(),
            accept_loop,
            self.context.requests.clone(),
            self.connections.clone(),
            self.grace,
        )
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop_accepting();
    }
}
