//! Building a tokentap from its config: what every stage shares, made once (the span exporter's task
//! started with it, `traces:`), then both ports bound and served.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::{Config, RecordPath};
use crate::decode::tokenizer::Tokenizers;
use crate::logging::records::{RecordWriter, Target};
use crate::net::admin::MetricsPort;
use crate::net::fleet::{FleetPage, Prometheus};
use crate::net::server::{BindError, Listeners, ProxyPort};
use crate::net::tls::{Certificates, TlsFileError, TlsListener};
use crate::proxy::models::ModelList;
use crate::proxy::upstream;
use crate::proxy::Proxy;
use crate::record::conversations::Conversations;
use crate::record::emit::{Emitter, Records};
use crate::record::live::Live;
use crate::record::meter::MeterContext;
use crate::record::metrics::Metrics;
use crate::record::trace::{self, Tracing};
use crate::shutdown::{Count, Shutdown};
use crate::tap::exchange::{ExchangeContext, Readers};
use crate::tap::identity::Identify;

use super::running::Running;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Bind(#[from] BindError),
    #[error("registering metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("{0}")]
    Tokenizer(#[from] crate::config::ConfigError),
    #[error("upstream TLS: {0}")]
    Tls(#[from] upstream::TlsSetupError),
    /// `listen_tls:`'s files: the message names the key, the path and what is wrong.
    #[error("{0}")]
    ListenTls(#[from] TlsFileError),
    #[error("listen_tls: {0}")]
    ListenTlsSetup(#[source] rustls::Error),
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
    #[error("{0}")]
    Traces(#[from] trace::SetupError),
}

/// Binds the proxy and metrics ports and starts serving.
pub async fn start(config: &Config) -> Result<Running, StartError> {
    let metrics = Metrics::new(config)?;
    metrics
        .bound()
        .check(config.metrics.max_series)
        .map_err(StartError::SeriesBudget)?;
    let tokenizers = Arc::new(Tokenizers::load(config, Some(&metrics.served))?);
    let records = records(config, &metrics).await?;
    let writer = records.as_ref().map(|r| r.writer.clone());
    let metrics = Arc::new(metrics);
    let tracing = Tracing::start(config, metrics.spans.clone())?;
    let spans = tracing.as_ref().map(|t| t.exporter.clone());
    let mut emitter = Emitter::new(metrics.clone(), records);
    if let Some(tracing) = tracing {
        emitter = emitter.with_spans(tracing);
    }
    let meter = Arc::new(MeterContext {
        metrics: metrics.clone(),
        slo: config.slo.clone(),
        conversations: Conversations::new(
            config.conversations.max_turns,
            config.conversations.idle,
        ),
        emitter,
    });
    let context = Arc::new(ExchangeContext {
        meter,
        metering: config.metering.clone(),
        tokenizers,
        requests: Count::default(),
        identify: Identify::new(config.tenants.as_ref()).with_traces(spans.is_some()),
        readers: Readers::default(),
    });
    let upstream = upstream::Upstream::new(config, metrics.upstream.clone())?;
    let model_list = match config.model_list.enabled {
        true => Some(ModelList::new(config, metrics.served.clone())?),
        false => None,
    };
    let shutdown = Shutdown::default();
    let proxy = Proxy::new(
        upstream,
        config,
        context.clone(),
        metrics.refusals.clone(),
        shutdown.clone(),
    );
    let certificates = match &config.listen_tls {
        Some(files) => Some(Certificates::load(files)?),
        None => None,
    };
    let tls = certificates
        .clone()
        .map(TlsListener::new)
        .transpose()
        .map_err(StartError::ListenTlsSetup)?;
    let listeners = Listeners::bind(config).await?;
    let (proxy_addr, metrics_addr) = (listeners.proxy_addr, listeners.metrics_addr);
    let connections = Count::default();
    let proxy_port = ProxyPort {
        proxy,
        limits: config.limits.clone(),
        timeouts: config.timeouts.clone(),
        refused: metrics.refusals.clone(),
        forwarding_delay: metrics.forwarding_delay.clone(),
        connections: connections.clone(),
        shutdown: shutdown.clone(),
        tls,
    };
    // The live page's first snapshot is taken before the proxy serves: a snapshot taken after the first
    // requests finished would be the baseline its windows count from, and they would never show them.
    let live = config.ui.enabled.then(|| Arc::new(Live::new(config)));
    if let Some(live) = &live {
        live.snapshot(&metrics);
    }
    // Checked with the config (`ui.prometheus` is an http:// URL), so it is one here.
    let fleet = match (&live, &config.ui.prometheus) {
        (Some(_), Some(url)) => Prometheus::new(url)
            .map(|p| Arc::new(FleetPage::new(p)))
            .ok(),
        _ => None,
    };
    let metrics_port = MetricsPort {
        metrics: metrics.clone(),
        shutdown: shutdown.clone(),
        live: live.clone(),
        fleet,
        timeouts: config.timeouts.clone(),
        max_connections: config.limits.max_metrics_connections,
        allowed_hosts: config.metrics.allowed_hosts.clone(),
    };
    let serving = listeners.serve(proxy_port, metrics_port);
    let model_list_task = model_list.map(|list| tokio::spawn(list.run()));
    let snapshot_task = live
        .clone()
        .map(|live| tokio::spawn(live.run(metrics.clone())));
    Ok(Running {
        proxy_addr,
        metrics_addr,
        context,
        metrics,
        records: writer,
        spans,
        shutdown,
        grace: config.shutdown_grace,
        connections,
        proxy_task: Mutex::new(Some(serving.proxy)),
        metrics_task: serving.metrics,
        snapshot_task,
        live,
        model_list_task,
        certificates,
    })
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
