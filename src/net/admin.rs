//! The metrics port's endpoints, tokentap's own answers: `/metrics` (the Prometheus page), `/healthz`
//! (the process is up), `/readyz` (503 once a shutdown has begun, so a load balancer stops sending), and,
//! unless `ui.enabled` is false, the live page `/` and its JSON `/api/v1/live` (`ui/`).

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
use crate::net::ui;
use crate::record::live::Live;
use crate::shutdown::{Phase, Shutdown};
use crate::tap::exchange::ExchangeContext;

/// The metrics port: no request limits (it serves only tokentap's own small answers), but the same
/// client timers as the proxy port, so a slow or idle client cannot hold its sockets for ever.
pub async fn serve_metrics(
    listener: TcpListener,
    context: Arc<ExchangeContext>,
    shutdown: Shutdown,
    timeouts: Timeouts,
    live: Option<Arc<Live>>,
) {
    let mut failures = RepeatedWarning::default();
    loop {
        let stream = accept(&listener, "metrics", &mut failures).await;
        let context = context.clone();
        let shutdown = shutdown.clone();
        let live = live.clone();
        let activity = Arc::new(Activity::default());
        let (header_read, idle) = (timeouts.client_header_read, timeouts.client_idle);
        let io = TokioIo::new(TimedIo::new(stream, activity.clone(), header_read, idle));
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let in_progress = activity.begin();
                let ready = shutdown.phase() == Phase::Serving;
                let context = context.clone();
                let live = live.clone();
                async move {
                    let response = metrics_endpoint(&request, &context, ready, live.as_ref()).await;
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
    live: Option<&Arc<Live>>,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    if let (&Method::GET, Some(live)) = (request.method(), live) {
        let answer = match path {
            "/" => Some(ui::page_answer()),
            "/api/v1/live" => Some(ui::live_answer(live, request.uri().query()).await),
            _ => None,
        };
        if let Some(answer) = answer {
            return ui_response(answer);
        }
    }
    let not_found: &'static [u8] = match live {
        Some(_) => b"not found: try /, /api/v1/live, /metrics, /healthz or /readyz\n",
        None => b"not found: try /metrics, /healthz or /readyz\n",
    };
    let (status, content_type, body) = match (request.method(), path) {
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
            Bytes::from_static(not_found),
        ),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The live page's answers, with their cache policy; the page may run only its own inline code and
/// fetch only from this port.
fn ui_response(answer: ui::Answer) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(answer.body));
    *response.status_mut() = answer.status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(answer.content_type),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(answer.cache_control),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
             connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'",
        ),
    );
    response
}
