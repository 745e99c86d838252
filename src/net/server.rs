//! The listeners: the proxy port (HTTP/1.1 and h2c on one socket) and the metrics port (its endpoints
//! are `admin.rs`). [`start`] binds both and returns a handle with the bound addresses, so tests
//! run the whole proxy in-process on `127.0.0.1:0`; [`run`] is the binary's main loop, which ends with a
//! graceful shutdown ([`Running::shutdown`], see `shutdown.rs`).
//!
//! The proxy port holds at most `limits.max_connections` client connections: a connection accepted
//! beyond them is closed at once and counted (as Envoy and nginx do at their limits: a client left in
//! the listen backlog would have a connection that looks open and a request nobody reads), while the
//! connections already open carry on untouched. Each connection is timed by `client_conn.rs`, its
//! request heads are bounded by `limits.max_request_header_bytes` (and hyper's 100 headers), and an
//! h2 connection may open `limits.max_concurrent_streams` streams at once. Accept failures (out of
//! file descriptors) back off and are logged as a [`RepeatedWarning`], not once per retry.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::Response;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::config::{Config, Limits, RecordPath, Timeouts};
use crate::decode::tokenizer::Tokenizers;
use crate::logging::records::{RecordWriter, Target};
use crate::logging::repeated::RepeatedWarning;
use crate::net::admin::{serve_metrics, MetricsPort};
use crate::net::client_conn::{accept, sniff, Activity, InProgress, Speaks, TimedIo, Tracked};
use crate::net::delay::{Forwarding, FrameDelay};
use crate::net::signals::{shutdown_signal, Hangups};
use crate::proxy::models::ModelList;
use crate::proxy::upstream;
use crate::proxy::Proxy;
use crate::record::live::Live;
use crate::record::metrics::{Metrics, Refusals};
use crate::shutdown::{self, Count, Counted, Drained, Phase, Shutdown};
use crate::tap::exchange::{ExchangeContext, Records};
use crate::tap::identity::Identify;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("binding {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("registering metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("{0}")]
    Tokenizer(#[from] crate::config::ConfigError),
    #[error("upstream TLS: {0}")]
    Tls(#[from] upstream::TlsSetupError),
    #[error("request_log.path: cannot open {path} for appending: {source}")]
    RequestLog {
        path: String,
        source: std::io::Error,
    },
    /// The configuration's series limit is above `metrics.max_series`; the message names the product.
    #[error("{0}")]
    SeriesBudget(String),
    #[error("{0}")]
    ModelList(#[from] crate::proxy::models::ModelListError),
}

/// A running tokentap. Dropping it stops the listeners (connections already open finish on their own).
pub struct Running {
    proxy_addr: SocketAddr,
    metrics_addr: SocketAddr,
    context: Arc<ExchangeContext>,
    shutdown: Shutdown,
    grace: Duration,
    /// Client connections open on the proxy port.
    connections: Count,
    proxy_task: Mutex<Option<JoinHandle<()>>>,
    metrics_task: JoinHandle<()>,
    /// The live page's snapshots (`ui.enabled`).
    snapshot_task: Option<JoinHandle<()>>,
    live: Option<Arc<Live>>,
    /// The upstream's model list, fetched in the background (`model_list.enabled`).
    model_list_task: Option<JoinHandle<()>>,
}

impl Running {
    pub fn proxy_addr(&self) -> SocketAddr {
        self.proxy_addr
    }

    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
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
        if let Some(records) = &self.context.records {
            records.writer.reopen();
        }
    }

    /// Waits (at most `limit`) until every request record queued so far is written.
    pub fn flush_records(&self, limit: Duration) {
        if let Some(records) = &self.context.records {
            records.writer.flush(limit);
        }
    }

    /// Takes a snapshot for the live page now, as each `ui.interval` does (for tests that need a history
    /// without waiting for it). Nothing without `ui.enabled`.
    pub fn snapshot_live(&self) {
        if let Some(live) = &self.live {
            live.snapshot(&self.context.metrics);
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
        self.context.metrics.bound().describe()
    }

    /// Stops accepting connections on both ports at once, without draining (see [`Running::shutdown`]).
    pub fn stop_accepting(&mut self) {
        let proxy_task = self.proxy_task.get_mut();
        if let Some(task) = proxy_task.unwrap_or_else(PoisonError::into_inner).take() {
            task.abort();
        }
        self.metrics_task.abort();
        for task in [&self.snapshot_task, &self.model_list_task]
            .into_iter()
            .flatten()
        {
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

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { what, addr, source })
}

/// How long start waits for the request_log path to open before it serves without it: a path that
/// cannot be opened is refused at start, one whose open blocks (a FIFO no one reads) is not waited for.
const RECORDS_OPEN_WAIT: Duration = Duration::from_secs(1);

/// Starts the request_log writer, when one is configured.
async fn records(config: &Config, metrics: &Metrics) -> Result<Option<Records>, StartError> {
    let (Some(log), Some(counters)) = (&config.request_log, &metrics.records) else {
        return Ok(None);
    };
    let (target, path) = match &log.path {
        RecordPath::Stdout => (Target::Stdout, "-".to_owned()),
        RecordPath::File(path) => (Target::File(path.clone()), path.display().to_string()),
    };
    let refused = |source| StartError::RequestLog {
        path: path.clone(),
        source,
    };
    let (writer, opened) =
        RecordWriter::start(target, log.queue, counters.clone()).map_err(refused)?;
    let waited = tokio::task::spawn_blocking(move || opened.wait(RECORDS_OPEN_WAIT)).await;
    match waited {
        Ok(Some(Err(source))) => return Err(refused(source)),
        Ok(None) => tracing::warn!(
            path,
            "request_log.path is not open after 1s (a FIFO no one reads yet? a hung mount?): serving on; \
             records wait in the queue, then are dropped and counted, until it opens"
        ),
        Ok(Some(Ok(()))) | Err(_) => {}
    }
    Ok(Some(Records {
        writer: Arc::new(writer),
        gaps: log.gaps,
        max_gaps: log.max_gaps,
    }))
}

/// Binds the proxy and metrics ports and starts serving.
pub async fn start(config: &Config) -> Result<Running, StartError> {
    let metrics = Metrics::new(config)?;
    metrics
        .bound()
        .check(config.metrics.max_series)
        .map_err(StartError::SeriesBudget)?;
    let context = Arc::new(ExchangeContext {
        slo: config.slo.clone(),
        metering: config.metering.clone(),
        tokenizers: Arc::new(Tokenizers::load(config, Some(&metrics.served))?),
        requests: Count::default(),
        identify: Identify::new(config.tenants.as_ref()),
        records: records(config, &metrics).await?,
        metrics: Arc::new(metrics),
    });
    let connections = upstream::Upstream::new(config, context.metrics.upstream.clone())?;
    let model_list = match config.model_list.enabled {
        true => Some(ModelList::new(config, context.metrics.served.clone())?),
        false => None,
    };
    let shutdown = Shutdown::default();
    let proxy = Proxy::new(connections, config, context.clone(), shutdown.clone());
    let proxy_listener = bind("the proxy listener", config.listen).await?;
    let metrics_listener = bind("the metrics listener", config.metrics_listen).await?;
    let local = |l: &TcpListener, addr| l.local_addr().unwrap_or(addr);
    let proxy_addr = local(&proxy_listener, config.listen);
    let metrics_addr = local(&metrics_listener, config.metrics_listen);
    let connections = Count::default();
    let serve = ServeProxy {
        proxy,
        slots: Arc::new(Semaphore::new(config.limits.max_connections)),
        max_connections: config.limits.max_connections,
        refused: context.metrics.refusals.clone(),
        forwarding_delay: context.metrics.forwarding_delay.clone(),
        connections: connections.clone(),
        builders: Builders::new(connection_builder(&config.limits)),
        timeouts: config.timeouts.clone(),
        shutdown: shutdown.clone(),
    };
    // The live page's first snapshot is taken before the proxy serves: a snapshot taken after the first
    // requests finished would be the baseline its windows count from, and they would never show them.
    let live = config.ui.enabled.then(|| Arc::new(Live::new(config)));
    if let Some(live) = &live {
        live.snapshot(&context.metrics);
    }
    let proxy_task = tokio::spawn(serve.run(proxy_listener));
    let model_list_task = model_list.map(|list| tokio::spawn(list.run()));
    let snapshot_task = live
        .clone()
        .map(|live| tokio::spawn(live.run(context.metrics.clone())));
    let metrics = serve_metrics(
        metrics_listener,
        MetricsPort {
            context: context.clone(),
            shutdown: shutdown.clone(),
            live: live.clone(),
            timeouts: config.timeouts.clone(),
            max_connections: config.limits.max_metrics_connections,
            allowed_hosts: config.metrics.allowed_hosts.clone(),
        },
    );
    Ok(Running {
        proxy_addr,
        metrics_addr,
        context,
        shutdown,
        grace: config.shutdown_grace,
        connections,
        proxy_task: Mutex::new(Some(proxy_task)),
        metrics_task: tokio::spawn(metrics),
        snapshot_task,
        live,
        model_list_task,
    })
}

/// Runs until SIGTERM or SIGINT, then shuts down gracefully (see [`Running::shutdown`]).
pub async fn run(config: &Config) -> Result<(), StartError> {
    let signalled = shutdown_signal();
    let hangups = Hangups::listen();
    let running = Arc::new(start(config).await?);
    let reopening = running.clone();
    hangups.reopen(move || {
        reopening.reopen_records();
        reopening.context.records.is_some()
    });
    tracing::info!(
        listen = %running.proxy_addr(),
        upstream = %config.upstream,
        metrics = %format!("http://{}/metrics", running.metrics_addr()),
        live_page = %match config.ui.enabled {
            true => format!("http://{}/", running.metrics_addr()),
            false => "off".to_owned(),
        },
        "tokentap is forwarding"
    );
    tracing::info!(
        limit = running.context.metrics.bound().total,
        max_series = config.metrics.max_series,
        "series bound: {}",
        running.series_bound()
    );
    signalled.await;
    let in_flight = running.in_flight();
    let grace = crate::config::format_duration(config.shutdown_grace);
    tracing::info!(in_flight, %grace, "shutdown requested: not ready, no new connections, draining");
    let drained = running.shutdown().await;
    let records = running.clone();
    // The writer thread may be stuck on a reader that does not read: wait for it off the runtime, briefly.
    let _ =
        tokio::task::spawn_blocking(move || records.flush_records(Duration::from_secs(2))).await;
    tracing::info!(cut = drained.cut, "tokentap stopped");
    Ok(())
}

fn connection_builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The upstream's response headers are passed on as they are: no `date` is added where it sent none,
    // and each name keeps the case it came in (the original case map travels in the message's
    // extensions, from this parser through the upstream client and back; HTTP/2 names are lowercase).
    // Its cost: one more small header map and an extensions entry per message; the spellings it holds
    // are slices of the read buffer the header values already share, not copies.
    // An HTTP/1.1 head must fit the read buffer whole: beyond it hyper answers 431 and closes.
    // hyper's own header_read_timeout is off: its clock also runs while a kept-alive connection waits
    // for its next request, which would cap client_idle at client_header_read; client_conn.rs times both.
    let read_buffer = limits
        .max_request_header_bytes
        .max(Limits::MIN_HEADER_BYTES);
    builder
        .http1()
        .auto_date_header(false)
        .preserve_header_case(true)
        .header_read_timeout(None)
        .max_buf_size(read_buffer);
    let h2_header_list = u32::try_from(limits.max_request_header_bytes).unwrap_or(u32::MAX);
    builder
        .http2()
        .auto_date_header(false)
        .max_header_list_size(h2_header_list)
        .max_concurrent_streams(limits.max_concurrent_streams);
    builder
}

/// The future hyper holds for a request until its response head: `handled`, and the response body
/// tracked as in progress on its connection. hyper's HTTP/1 server keeps a slot the size of this future
/// for the connection's whole life (and an h2 stream's task holds it inline for the stream's), so the
/// forwarding future, ~5 KiB and done once the response head is back, goes in a box of its own: one
/// allocation per request, freed at the head, instead of its size held per open connection.
/// Each data frame of the body is noted in `frames` on its way into hyper (`delay.rs`).
fn respond<F, B>(
    handled: F,
    in_progress: InProgress,
    frames: Arc<FrameDelay>,
) -> impl Future<Output = Result<Response<Tracked<Forwarding<B>>>, Infallible>>
where
    F: Future<Output = Result<Response<B>, Infallible>>,
{
    let handled = Box::pin(handled);
    async move {
        let response = handled.await?;
        Ok(response.map(|body| Tracked::new(Forwarding::new(body, frames), in_progress)))
    }
}

/// The proxy port's connection builders: one for each HTTP version a connection's first bytes name
/// ([`sniff`]), and the auto-detecting one for a connection they do not.
struct Builders {
    auto: auto::Builder<TokioExecutor>,
    http1: auto::Builder<TokioExecutor>,
    h2: auto::Builder<TokioExecutor>,
}

impl Builders {
    fn new(auto: auto::Builder<TokioExecutor>) -> Self {
        Builders {
            http1: auto.clone().http1_only(),
            h2: auto.clone().http2_only(),
            auto,
        }
    }
}

/// The proxy port's accept loop and what each connection needs.
struct ServeProxy {
    proxy: Proxy,
    /// One permit per connection served, `limits.max_connections` in all.
    slots: Arc<Semaphore>,
    max_connections: usize,
    /// The counters of `tokentap_connections_refused_total` and its kin.
    refused: Refusals,
    /// `tokentap_forwarding_delay_seconds`.
    forwarding_delay: prometheus::Histogram,
    /// Connections being served.
    /// Counts each client connection as open, however its task ends.
    connections: Count,
    builders: Builders,
    timeouts: Timeouts,
    shutdown: Shutdown,
}

impl ServeProxy {
    async fn run(self, listener: TcpListener) {
        let this = Arc::new(self);
        let (mut failures, mut refusals) = (RepeatedWarning::default(), RepeatedWarning::default());
        loop {
            let stream = accept(&listener, "proxy", &mut failures).await;
            let Ok(permit) = this.slots.clone().try_acquire_owned() else {
                this.refused.connections.inc();
                if let Some(refused) = refusals.occurred(tokio::time::Instant::now()) {
                    let limit = this.max_connections;
                    tracing::warn!(limit, refused, "client connections closed at limits.max_connections (count since the last such line)");
                }
                drop(stream);
                continue;
            };
            let open: Counted = this.connections.enter();
            let this = this.clone();
            tokio::spawn(async move {
                this.serve(stream).await;
                drop((open, permit));
            });
        }
    }

    async fn serve(&self, stream: tokio::net::TcpStream) {
        let activity = Arc::new(Activity::default());
        let (header_read, idle) = (self.timeouts.client_header_read, self.timeouts.client_idle);
        let frames = FrameDelay::new(self.forwarding_delay.clone());
        let io = TimedIo::new(stream, activity.clone(), header_read, idle)
            .counting_head_timeouts(self.refused.head_timeouts.clone())
            .timing_frames(frames.clone());
        let mut draining = self.shutdown.reached(Phase::Draining);
        let speaks = tokio::select! {
            // The head's deadline: a silent connection is given up on when its timer closes it.
            speaks = sniff(io.get_ref(), io.deadline()) => speaks,
            // A connection that has sent nothing yet is closed, as hyper-util closes one still
            // reading its first bytes.
            () = &mut draining => return,
        };
        let builder = match speaks {
            Speaks::Http1 => &self.builders.http1,
            Speaks::H2 => &self.builders.h2,
            Speaks::Undecided => &self.builders.auto,
        };
        let io = TokioIo::new(io);
        let proxy = self.proxy.clone();
        // An HTTP/1.1 connection carries one request at a time: only h2 needs a share of its own.
        let share = (!matches!(speaks, Speaks::Http1)).then(|| proxy.connection_share());
        let service = service_fn(move |request| {
            let in_progress = activity.begin();
            let handled = proxy.clone().handle(request, share.clone());
            respond(handled, in_progress, frames.clone())
        });
        let conn = builder.serve_connection(io, service);
        tokio::pin!(conn);
        let result = tokio::select! {
            result = conn.as_mut() => result,
            () = draining => {
                // Finish the request in progress (h1) or the open streams (h2), take no more.
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(err) = result {
            // hyper has answered 431 (or 414) and closed; it gives no other hook to count it by.
            let head_too_large = err
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_parse_too_large);
            if head_too_large {
                self.refused.header_too_large.inc();
            }
            tracing::debug!(%err, "client connection ended with an error");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_holds_a_small_slot_for_its_request_whatever_the_forwarding_future_weighs() {
        let heavy = async {
            let state = [1u8; 4096];
            tokio::task::yield_now().await;
            Ok::<_, Infallible>(Response::new(std::hint::black_box(state)[0]))
        };
        assert!(std::mem::size_of_val(&heavy) > 4096);
        let activity = Arc::new(Activity::default());
        let histogram = prometheus::Histogram::with_opts(prometheus::HistogramOpts::new("h", "h"));
        let Ok(histogram) = histogram else {
            panic!("a histogram");
        };
        let slot = respond(heavy, activity.begin(), FrameDelay::new(histogram));
        assert!(
            std::mem::size_of_val(&slot) <= 64,
            "{}",
            std::mem::size_of_val(&slot)
        );
    }
}
