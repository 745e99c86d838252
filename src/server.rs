//! The listeners: the proxy port (HTTP/1.1 and h2c on one socket) and the metrics port (`/metrics`,
//! `/healthz`). [`start`] binds both and returns a handle with the bound addresses, so tests run the whole
//! proxy in-process on `127.0.0.1:0`; [`run`] is the binary's main loop with graceful shutdown.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::exchange::Recorder;
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use crate::tokenizer::Tokenizers;
use crate::upstream;

/// How long in-flight requests may run on after SIGTERM/SIGINT before the process exits.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

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
}

/// A running tokentap. Dropping it stops the listeners (connections already open finish on their own).
pub struct Running {
    proxy_addr: SocketAddr,
    metrics_addr: SocketAddr,
    recorder: Arc<Recorder>,
    tasks: Vec<JoinHandle<()>>,
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
        self.recorder.metrics.in_flight_total()
    }

    /// Stops accepting connections on both ports.
    pub fn stop_accepting(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
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

/// Binds the proxy and metrics ports and starts serving.
pub async fn start(config: &Config) -> Result<Running, StartError> {
    let recorder = Arc::new(Recorder {
        metrics: Metrics::new(config)?,
        slo: config.slo.clone(),
        metering: config.metering.clone(),
        tokenizers: Arc::new(Tokenizers::load(&config.tokenizers)?),
    });
    let client = upstream::client(config)?;
    let proxy = Proxy::new(client, config.upstream.clone(), recorder.clone());
    let proxy_listener = bind("the proxy listener", config.listen).await?;
    let metrics_listener = bind("the metrics listener", config.metrics_listen).await?;
    let local = |l: &TcpListener, addr| l.local_addr().unwrap_or(addr);
    let proxy_addr = local(&proxy_listener, config.listen);
    let metrics_addr = local(&metrics_listener, config.metrics_listen);
    let tasks = vec![
        tokio::spawn(serve_proxy(proxy_listener, proxy)),
        tokio::spawn(serve_metrics(metrics_listener, recorder.clone())),
    ];
    Ok(Running {
        proxy_addr,
        metrics_addr,
        recorder,
        tasks,
    })
}

/// Runs until SIGTERM or SIGINT, then stops accepting and lets in-flight requests finish (up to 30 s).
pub async fn run(config: &Config) -> Result<(), StartError> {
    let mut running = start(config).await?;
    tracing::info!(
        listen = %running.proxy_addr(),
        upstream = %config.upstream,
        metrics = %format!("http://{}/metrics", running.metrics_addr()),
        "tokentap is forwarding"
    );
    shutdown_signal().await;
    running.stop_accepting();
    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    while running.in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tracing::info!(in_flight = running.in_flight(), "tokentap stopped");
    Ok(())
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(err) => {
                    tracing::warn!(%err, "cannot listen for SIGTERM; only SIGINT stops tokentap");
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
    tracing::info!("shutdown requested: no new connections, draining in-flight requests");
}

async fn accept(listener: &TcpListener) -> tokio::net::TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                return stream;
            }
            Err(err) => {
                // Out of file descriptors and similar: back off instead of spinning.
                tracing::warn!(%err, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn serve_proxy(listener: TcpListener, proxy: Proxy) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The upstream's response headers are passed on as they are: no `date` is added where it sent none.
    builder.http1().auto_date_header(false);
    builder.http2().auto_date_header(false);
    loop {
        let stream = accept(&listener).await;
        let proxy = proxy.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| proxy.clone().handle(request));
            if let Err(err) = builder
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%err, "client connection ended with an error");
            }
        });
    }
}

async fn serve_metrics(listener: TcpListener, recorder: Arc<Recorder>) {
    loop {
        let stream = accept(&listener).await;
        let recorder = recorder.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let recorder = recorder.clone();
                async move { Ok::<_, Infallible>(metrics_endpoint(&request, &recorder)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(err) = conn.await {
                tracing::debug!(%err, "metrics connection ended with an error");
            }
        });
    }
}

fn metrics_endpoint(request: &Request<Incoming>, recorder: &Recorder) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            Bytes::from(recorder.metrics.encode()),
        ),
        (&Method::GET, "/healthz") => (StatusCode::OK, "text/plain", Bytes::from_static(b"ok\n")),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            Bytes::from_static(b"not found: try /metrics or /healthz\n"),
        ),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
