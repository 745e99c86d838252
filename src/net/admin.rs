//! The metrics port's endpoints, tokentap's own answers: `/metrics` (the Prometheus page), `/healthz`
//! (the process is up) and `/readyz` (503 once a shutdown has begun, so a load balancer stops sending).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::config::Timeouts;
use crate::logging::repeated::RepeatedWarning;
use crate::net::client_conn::{accept, Activity, TimedIo, Tracked};
use crate::shutdown::{Phase, Shutdown};
use crate::tap::exchange::ExchangeContext;

/// The metrics port: no request limits (it serves only tokentap's own small answers), but the same
/// client timers as the proxy port, so a slow or idle client cannot hold its sockets for ever.
pub async fn serve_metrics(
    listener: TcpListener,
    context: Arc<ExchangeContext>,
    shutdown: Shutdown,
    timeouts: Timeouts,
) {
    let mut failures = RepeatedWarning::default();
    loop {
        let stream = accept(&listener, "metrics", &mut failures).await;
        let context = context.clone();
        let shutdown = shutdown.clone();
        let activity = Arc::new(Activity::default());
        let (header_read, idle) = (timeouts.client_header_read, timeouts.client_idle);
        let io = TokioIo::new(TimedIo::new(stream, activity.clone(), header_read, idle));
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let in_progress = activity.begin();
                let ready = shutdown.phase() == Phase::Serving;
                let context = context.clone();
                async move {
                    let response = metrics_endpoint(&request, &context, ready).await;
                    Ok::<_, Infallible>(response.map(|b| Tracked::new(b, in_progress)))
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .header_read_timeout(None)
                .serve_connection(io, service);
            if let Err(err) = conn.await {
                tracing::debug!(%err, "metrics connection ended with an error");
            }
        });
    }
}

async fn metrics_endpoint(
    request: &Request<Incoming>,
    context: &ExchangeContext,
    ready: bool,
) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => match context.metrics.scrape().await {
            Some(page) => (
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                page,
            ),
            None => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                Bytes::from_static(b"metrics unavailable: shutting down\n"),
            ),
        },
        (&Method::GET, "/healthz") => (StatusCode::OK, "text/plain", Bytes::from_static(b"ok\n")),
        (&Method::GET, "/readyz") if ready => {
            (StatusCode::OK, "text/plain", Bytes::from_static(b"ready\n"))
        }
        (&Method::GET, "/readyz") => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            Bytes::from_static(b"shutting down\n"),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            Bytes::from_static(b"not found: try /metrics, /healthz or /readyz\n"),
        ),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
