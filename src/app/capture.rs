//! Capture mode's startup and shutdown (`tokentap capture`, src/capture/): the metering the proxy builds
//! (`start.rs`: the metrics, the sinks, the live page), the metrics port, and instead of the proxy port
//! one thread that reads the interface's packets into the capture until told to stop; or, with a
//! capture file, the file read through the capture once.
//!
//! The thread runs inside the runtime's context (a request's message list may be read on one of its
//! blocking threads) but never on a worker: a read waits in the kernel for up to 100 ms.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::time::Instant;

use crate::capture::{self, Capture, FileError, Interface, Link, SocketError};
use crate::config::Config;
use crate::net::admin::serve_metrics;
use crate::net::server::bind;
use crate::net::signals::{shutdown_signal, Hangups};
use crate::proxy::models::ModelList;
use crate::record::metrics::{Metrics, Unmetered};
use crate::shutdown::Shutdown;

use super::plan::StartError;
use super::reload::{Parts, Reloader, Source};
use super::start::{live_page, metering, metrics_port, Metering};

/// Why a capture could not start or read on.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("{0}")]
    Start(#[from] StartError),
    #[error("{0}")]
    Socket(#[from] SocketError),
    #[error("{0}")]
    File(#[from] FileError),
    #[error("reading packets: {0}")]
    Read(std::io::Error),
    #[error("the capture's thread: {0}")]
    Thread(std::io::Error),
}

/// A running capture of an interface, with its metrics port. Stopping it ends what it follows as a
/// shutdown's cut, and writes out what the sinks still hold.
pub struct Capturing {
    metrics_addr: std::net::SocketAddr,
    metrics: Arc<Metrics>,
    reloader: Arc<Reloader>,
    shutdown: Shutdown,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<Result<(), std::io::Error>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    ports: Vec<u16>,
}

/// Opens the interface `config.capture` names, binds the metrics port and starts reading.
pub async fn start_capture(config: &Config) -> Result<Capturing, CaptureError> {
    let metering = metering(config).await?;
    let (metrics, context) = (metering.metrics.clone(), metering.context.clone());
    let capture = Capture::new(config, context.clone());
    let ports = capture.ports().to_vec();
    let c = &config.capture;
    let interface = Interface::open(&c.interface, &ports, c.socket_buffer)?;
    let listener = bind("the metrics listener", config.metrics_listen)
        .await
        .map_err(StartError::from)?;
    let metrics_addr = listener.local_addr().unwrap_or(config.metrics_listen);
    let shutdown = Shutdown::default();
    // The server's model list, as the proxy fetches it (which names take a label, where a tokenizer
    // is): one small GET now and then, the only request the capture ever sends; and only when
    // `upstream` is the server captured (its port one of the capture's), else names take a label on
    // their first 2xx.
    let captured = (config.upstream.port_u16()).is_some_and(|port| ports.contains(&port));
    let model_list_task = match config.model_list.enabled && captured {
        true => Some(tokio::spawn(
            ModelList::new(config, metrics.served.clone())
                .map_err(StartError::from)?
                .run(),
        )),
        false => None,
    };
    let parts = Parts {
        records: metering.writer,
        spans: metering.spans,
        model_list_task,
        ..Parts::default()
    };
    let conversations = metering.conversations;
    let (live, fleet) = live_page(config, &metrics, &context);
    let reloader = Arc::new(Reloader::new(
        config,
        context,
        metrics.clone(),
        conversations,
        parts,
    ));
    let port = metrics_port(
        config,
        &metrics,
        &shutdown,
        (live.clone(), fleet),
        reloader.clone(),
    );
    let mut tasks = vec![tokio::spawn(serve_metrics(listener, port))];
    if let Some(live) = live {
        tasks.push(tokio::spawn(live.run(metrics.clone())));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reader = spawn_reader(interface, capture, stop.clone()).map_err(CaptureError::Thread)?;
    Ok(Capturing {
        metrics_addr,
        metrics,
        reloader,
        shutdown,
        stop,
        reader: Some(reader),
        tasks,
        ports,
    })
}

/// The thread that reads `interface` into `capture` until `stop`.
fn spawn_reader(
    mut interface: Interface, mut capture: Capture, stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<Result<(), std::io::Error>>> {
    let runtime = tokio::runtime::Handle::current();
    std::thread::Builder::new()
        .name("tokentap-capture".into())
        .spawn(move || {
            let _inside = runtime.enter();
            let read = loop {
                if stop.load(Ordering::Relaxed) {
                    break Ok(());
                }
                match interface.read() {
                    Ok(Some((packet, stamp))) => capture.packet(Link::Ip, packet, stamp),
                    Ok(None) => capture.sweep(Instant::now()),
                    Err(error) => break Err(error),
                }
            };
            capture.finish(Instant::now());
            read
        })
}

impl Capturing {
    pub fn metrics_addr(&self) -> std::net::SocketAddr {
        self.metrics_addr
    }

    /// The server's ports it reads.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Where a reload reads the config from (SIGHUP, `POST /-/reload`).
    pub fn reload_from(&self, source: Source) {
        self.reloader.read_from(source);
    }

    /// Stops reading: what is followed ends as a shutdown's cut (`timeout`); the records and spans
    /// still queued are written out (at most `limit` each). An error the reading met is returned.
    pub async fn stop(mut self, limit: Duration) -> Result<(), CaptureError> {
        self.shutdown.advance(crate::shutdown::Phase::Draining);
        self.stop.store(true, Ordering::Relaxed);
        let reader = self.reader.take();
        let read = tokio::task::spawn_blocking(move || reader.map(JoinHandle::join))
            .await
            .ok()
            .flatten();
        let (records, spans, model_list) = {
            let mut parts = self.reloader.parts();
            (
                parts.records.clone(),
                parts.spans.clone(),
                parts.model_list_task.take(),
            )
        };
        if let Some(task) = model_list {
            task.abort();
        }
        if let Some(spans) = spans {
            spans.flush(limit).await;
        }
        if let Some(records) = records {
            let _ = tokio::task::spawn_blocking(move || records.flush(limit)).await;
        }
        for task in &self.tasks {
            task.abort();
        }
        match read {
            Some(Ok(Err(error))) => Err(CaptureError::Read(error)),
            _ => Ok(()),
        }
    }
}

/// The binary's capture: runs until SIGTERM or SIGINT (a SIGHUP reloads the config from `source`).
pub async fn run_capture(config: &Config, source: Source) -> Result<(), CaptureError> {
    let signalled = shutdown_signal();
    let hangups = Hangups::listen();
    let capturing = start_capture(config).await?;
    capturing.reload_from(source);
    let reloader = capturing.reloader.clone();
    hangups.reload(move || {
        let reloader = reloader.clone();
        async move {
            reloader.reload().await;
        }
    });
    tracing::info!(
        interface = %config.capture.interface,
        ports = ?capturing.ports(),
        metrics = %format!("http://{}/metrics", capturing.metrics_addr()),
        "tokentap is capturing"
    );
    signalled.await;
    tracing::info!("shutdown requested: the capture stops, what it follows ends as cut");
    capturing
        .stop(config.shutdown_grace.max(Duration::from_secs(2)))
        .await
}

/// What reading a capture file came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    pub packets: u64,
    /// Connections (or the rest of one) not metered, by reason.
    pub unmetered: Vec<(&'static str, u64)>,
}

/// Reads the capture file at `path` through a capture of `config`'s ports, writing what it meters
/// to the sinks `config` names (`request_log:`, `traces:`), which are flushed before it returns.
pub async fn read_capture_file(config: &Config, path: &Path) -> Result<FileRead, CaptureError> {
    let Metering {
        metrics,
        context,
        writer,
        spans,
        ..
    } = metering(config).await?;
    let mut capture = Capture::new(config, context);
    let path = PathBuf::from(path);
    let runtime = tokio::runtime::Handle::current();
    let read = tokio::task::spawn_blocking(move || {
        let _inside = runtime.enter();
        capture::read_file(&path, &mut capture)
    })
    .await
    .map_err(|e| CaptureError::Thread(std::io::Error::other(e)))??;
    if let Some(spans) = spans {
        spans.flush(Duration::from_secs(5)).await;
    }
    if let Some(records) = writer {
        let _ = tokio::task::spawn_blocking(move || records.flush(Duration::from_secs(5))).await;
    }
    let counters = &metrics.capture;
    let unmetered = (Unmetered::ALL.iter())
        .map(|why| (why.as_str(), counters.unmetered_count(*why)))
        .filter(|(_, n)| *n > 0)
        .collect();
    Ok(FileRead {
        packets: read,
        unmetered,
    })
}
