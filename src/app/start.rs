//! Building a tokentap from its config: what every stage shares, made once (the span exporter's task
//! started with it, `traces:`), then both ports bound and served.

use std::sync::{Arc, Mutex};

use crate::config::Config;
use crate::govern::{Budget, Governor};
use crate::logging::records::RecordWriter;
use crate::net::admin::MetricsPort;
use crate::net::fleet::{FleetPage, Prometheus};
use crate::net::server::{Listeners, ProxyPort};
use crate::net::tls::{Certificates, TlsListener};
use crate::proxy::models::ModelList;
use crate::proxy::upstream;
use crate::proxy::Proxy;
use crate::record::conversations::Conversations;
use crate::record::live::Live;
use crate::record::metrics::Metrics;
use crate::record::otlp_metrics::MetricsExporter;
use crate::record::trace::{self, SpanExporter, Tracing};
use crate::shutdown::{Count, Shutdown};
use crate::tap::context::ExchangeContext;

use super::plan::{self, Prepared, StartError};
use super::reload::{records, settings, Parts, Reloader};
use super::running::Running;

/// What the proxy and the capture alike meter with: the metrics, the exchanges' context (the
/// tokenizers, the sinks) and what a reload replaces.
pub(super) struct Metering {
    pub(super) metrics: Arc<Metrics>,
    pub(super) context: Arc<ExchangeContext>,
    pub(super) conversations: Option<Arc<Conversations>>,
    pub(super) writer: Option<Arc<RecordWriter>>,
    pub(super) spans: Option<Arc<SpanExporter>>,
    /// The metrics pushed to a collector (`otlp_metrics:`).
    pub(super) otlp_metrics: Option<MetricsExporter>,
    /// `listen_tls:`'s pair, read and matched by the plan.
    pub(super) certificates: Option<Arc<Certificates>>,
}

/// Builds the metering `config` asks for (the span exporter's task started with it), from what the
/// plan prepared (`plan.rs`: what `check-config` checks).
pub(super) async fn metering(config: &Config) -> Result<Metering, StartError> {
    let Prepared {
        metrics,
        tokenizers,
        certificates,
    } = plan::prepare(config)?;
    let governor = Governor::new(&config.budgets, &config.conversations);
    metrics.watch(governor.clone())?;
    let tokenizers = Arc::new(tokenizers);
    tokenizers.log();
    let records = records(config, &metrics, &governor).await?;
    let writer = records.as_ref().map(|r| r.writer.clone());
    let metrics = Arc::new(metrics);
    let tracing = Tracing::start(config, metrics.spans.clone(), &governor)?;
    let spans = tracing.as_ref().map(|t| t.exporter.clone());
    let turns = governor.pool(Budget::Conversations).clone();
    let otlp_metrics = match &config.otlp_metrics {
        Some(otlp) => {
            let server = trace::server(&config.upstream);
            let exporter = MetricsExporter::start(otlp, metrics.clone(), server);
            Some(exporter.map_err(StartError::OtlpMetrics)?)
        }
        None => None,
    };
    let conversations =
        Conversations::new(config.conversations.max_turns, config.conversations.idle)
            .map(|c| Arc::new(c.governed(turns)));
    let settings = settings(config, &metrics, conversations.clone(), records, tracing);
    let context = Arc::new(ExchangeContext::new(
        settings,
        config.metering.clone(),
        tokenizers,
        governor,
    ));
    Ok(Metering {
        metrics,
        context,
        conversations,
        writer,
        spans,
        otlp_metrics,
        certificates,
    })
}

/// Binds the proxy and metrics ports and starts serving.
pub async fn start(config: &Config) -> Result<Running, StartError> {
    let metering = metering(config).await?;
    let model_list = match config.model_list.enabled {
        true => Some(ModelList::new(config, metering.metrics.served.clone())?),
        false => None,
    };
    let (shutdown, connections) = (Shutdown::default(), Count::default());
    let proxy_port = proxy_port(config, &metering, &shutdown, &connections)?;
    let listeners = Listeners::bind(config).await?;
    let (proxy_addr, metrics_addr) = (listeners.proxy_addr, listeners.metrics_addr);
    let Metering {
        metrics,
        context,
        conversations,
        writer,
        spans,
        otlp_metrics,
        certificates,
    } = metering;
    let (live, fleet) = live_page(config, &metrics, &context);
    let parts = Parts {
        records: writer,
        spans,
        model_list_task: model_list.map(|list| tokio::spawn(list.run())),
        certificates: certificates.clone(),
    };
    let reloader = Reloader::new(
        config,
        context.clone(),
        metrics.clone(),
        conversations,
        parts,
    );
    let reloader = Arc::new(reloader);
    let port = (live.clone(), fleet);
    let metrics_port = metrics_port(config, &metrics, &shutdown, port, reloader.clone());
    let serving = listeners.serve(proxy_port, metrics_port);
    let snapshot_task = (live.clone()).map(|live| tokio::spawn(live.run(metrics.clone())));
    Ok(Running {
        proxy_addr,
        metrics_addr,
        context,
        metrics,
        reloader,
        shutdown,
        grace: config.shutdown_grace,
        connections,
        proxy_task: Mutex::new(Some(serving.proxy)),
        metrics_task: serving.metrics,
        snapshot_task,
        live,
        certificates,
        otlp_metrics,
    })
}

/// What the proxy port serves: the forwarding service in front of the upstream's client, plain or
/// TLS (`listen_tls:`, its pair read by the plan).
fn proxy_port(
    config: &Config, metering: &Metering, shutdown: &Shutdown, connections: &Count,
) -> Result<ProxyPort, StartError> {
    let metrics = &metering.metrics;
    let upstream = upstream::Upstream::new(config, metrics.upstream.clone())?;
    let refusals = metrics.refusals.clone();
    let context = metering.context.clone();
    let proxy = Proxy::new(upstream, config, context, refusals, shutdown.clone());
    let tls = (metering.certificates.clone())
        .map(TlsListener::new)
        .transpose()
        .map_err(StartError::ListenTlsSetup)?;
    Ok(ProxyPort {
        proxy,
        limits: config.limits.clone(),
        timeouts: config.timeouts.clone(),
        refused: metrics.refusals.clone(),
        forwarding_delay: metrics.forwarding_delay.clone(),
        connections: connections.clone(),
        shutdown: shutdown.clone(),
        tls,
    })
}

/// The live page (`ui.enabled`), its first snapshot taken now, and its fleet table (`ui.prometheus`);
/// its ceilings are those of the settings current when each view is asked for.
/// The first snapshot is taken before anything is metered: one taken after the first requests finished
/// would be the baseline its windows count from, and they would never show them.
pub(super) fn live_page(
    config: &Config, metrics: &Metrics, context: &Arc<ExchangeContext>,
) -> (Option<Arc<Live>>, Option<Arc<FleetPage>>) {
    let live = config.ui.enabled.then(|| {
        // The ceilings are the settings' a request takes: a reload's are the page's.
        let context = context.clone();
        let current = Box::new(move || context.settings().meter.slo.clone());
        Arc::new(Live::new(config).with_ceilings(current))
    });
    if let Some(live) = &live {
        live.snapshot(metrics);
    }
    // Checked with the config (`ui.prometheus` is an http:// URL), so it is one here.
    let fleet = match (&live, &config.ui.prometheus) {
        (Some(_), Some(url)) => Prometheus::new(url)
            .map(|p| Arc::new(FleetPage::new(p)))
            .ok(),
        _ => None,
    };
    (live, fleet)
}

/// What the metrics port serves.
pub(super) fn metrics_port(
    config: &Config, metrics: &Arc<Metrics>, shutdown: &Shutdown,
    (live, fleet): (Option<Arc<Live>>, Option<Arc<FleetPage>>), reloader: Arc<Reloader>,
) -> MetricsPort {
    MetricsPort {
        metrics: metrics.clone(),
        shutdown: shutdown.clone(),
        live,
        fleet,
        timeouts: config.timeouts.clone(),
        max_connections: config.limits.max_metrics_connections,
        allowed_hosts: config.metrics.allowed_hosts.clone(),
        reload: Some(reloader),
    }
}
