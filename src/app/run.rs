//! The binary's main loop: start, reload the config at each SIGHUP, serve until SIGTERM or SIGINT, then
//! shut down gracefully.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::net::signals::{shutdown_signal, Hangups};

use super::plan::StartError;
use super::reload::Source;
use super::start::start;

/// Runs until SIGTERM or SIGINT, then shuts down gracefully (see
/// [`Running::shutdown`](super::Running::shutdown)); each SIGHUP reloads the config from `source`.
pub async fn run(config: &Config, source: Source) -> Result<(), StartError> {
    let signalled = shutdown_signal();
    let hangups = Hangups::listen();
    if let Err(e) = crate::logging::set_level(config.log_level.as_deref()) {
        tracing::warn!(%e, "log_level: the log's filter was not set");
    }
    let running = Arc::new(start(config).await?);
    running.reload_from(source);
    let reloading = running.clone();
    hangups.reload(move || {
        let running = reloading.clone();
        async move {
            running.reload().await;
        }
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
        limit = running.metrics.bound().total,
        max_series = config.metrics.max_series,
        "series bound: {}",
        running.series_bound()
    );
    signalled.await;
    let in_flight = running.in_flight();
    let grace = crate::config::format_duration(config.shutdown_grace);
    tracing::info!(in_flight, %grace, "shutdown requested: not ready, no new connections, draining");
    let asked = tokio::time::Instant::now();
    let drained = running.shutdown().await;
    // The spans of the last requests go out in what is left of the grace period (at least 2 s, as
    // the records have, for the requests the grace period cut).
    let left = config.shutdown_grace.saturating_sub(asked.elapsed());
    running.flush_spans(left.max(Duration::from_secs(2))).await;
    let left = config.shutdown_grace.saturating_sub(asked.elapsed());
    running
        .flush_metrics(left.max(Duration::from_secs(2)))
        .await;
    let records = running.clone();
    // The writer thread may be stuck on a reader that does not read: wait for it off the runtime, briefly.
    let _ =
        tokio::task::spawn_blocking(move || records.flush_records(Duration::from_secs(2))).await;
    tracing::info!(cut = drained.cut, "tokentap stopped");
    Ok(())
}
