//! The metrics port's endpoints, tokentap's own answers: `/metrics` (the Prometheus page, in the format
//! its `Accept` asks for: `record/metrics/format.rs`), `/healthz` (the process is up), `/readyz` (503 once a shutdown has begun, so a load balancer stops sending), and,
//! unless `ui.enabled` is false, the live page `/`, its JSON `/api/v1/live` and, with `ui.prometheus`,
//! the fleet's table `/api/v1/fleet` (`ui/`, `fleet.rs`); with `metrics.enable_reload`, `POST /-/reload`
//! reloads the config as SIGHUP does (off by default, as Prometheus's `--web.enable-lifecycle`: this
//! port answers anyone who reaches it).
//!
//! The port binds every interface by default, so what a client can hold here is bounded like the proxy
//! port: at most `limits.max_metrics_connections` connections, the oldest idle one closed to make room
//! for a newcomer (`places.rs`), timed by the port's own short timers (`timeouts.metrics_header_read`,
//! `timeouts.metrics_idle`: a scraper reconnects cheaply), each answer taken within
//! `timeouts.metrics_send` once the client's socket is full (`client_conn.rs`), the pages and views in
//! memory bounded however many ask (`record::metrics` and `record::live::views`), and, with
//! `metrics.allowed_hosts`, only requests naming an expected `Host` answered (against DNS rebinding:
//! a page elsewhere that resolves its own name to this address can then read nothing). Each refusal is
//! counted in `tokentap_metrics_port_refused_total{reason}`.
//!
//! `/healthz` and `/readyz` are answered whatever the clients hold: idle connections give their place,
//! and when every place is busy (clients that asked for a page and do not read it, for up to
//! `metrics_send`) a newcomer takes one of [`PROBE_PLACES`] kept apart, where only the probes are
//! answered (anything else gets 503 and is counted as refused), one request a connection. A probe's
//! answer is a few bytes that the socket takes at once, so no client can hold a probe place busy; a
//! silent one is reclaimed like any idle connection. Kubernetes restarts a pod whose liveness probe
//! fails, cutting every stream in flight: a probe refused for a scraper's sake would cost far more than
//! the scrape.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

use crate::config::Timeouts;
use crate::logging::repeated::RepeatedWarning;
use crate::net::activity::{Activity, Tracked};
use crate::net::client_conn::{accept, TimedIo};
use crate::net::fleet::FleetPage;
use crate::net::places::{Admission, Place, Places};
use crate::net::ui;
use crate::record::live::Live;
use crate::record::metrics::format::Format;
use crate::record::metrics::{Metrics, MetricsPortRefusals};
use crate::shutdown::{Phase, Shutdown};

/// What the metrics port serves and its bounds.
pub struct MetricsPort {
    pub metrics: Arc<Metrics>,
    pub shutdown: Shutdown,
    pub live: Option<Arc<Live>>,
    /// The live page's fleet table (`ui.prometheus`), when the page is on and one is configured.
    pub fleet: Option<Arc<FleetPage>>,
    /// The port's timers: `metrics_header_read`, `metrics_idle`, `metrics_send`.
    pub timeouts: Timeouts,
    /// `limits.max_metrics_connections`.
    pub max_connections: usize,
    /// `metrics.allowed_hosts`, lowercase; empty: any `Host`.
    pub allowed_hosts: Vec<String>,
    /// What `POST /-/reload` calls (the app's reloader).
    pub reload: Option<Arc<dyn Reload>>,
}

/// A config reload, as `POST /-/reload` asks for it (the app's reloader implements it: this stage
/// cannot reach the app).
pub trait Reload: Send + Sync {
    /// `metrics.enable_reload`, as the config running now says.
    fn enabled(&self) -> bool;
    /// Reloads the config; whether it was applied, and what the log says of it.
    fn reload(&self) -> Pin<Box<dyn Future<Output = (bool, String)> + Send + '_>>;
}

/// The path of the reload endpoint (Prometheus's).
const RELOAD_PATH: &str = "/-/reload";

/// Connections kept apart for `/healthz` and `/readyz`, taken only when every one of
/// `limits.max_metrics_connections` is busy: room for a kubelet's liveness, readiness and startup probes
/// and a load balancer's check at once, each on a connection of its own, with a margin.
pub const PROBE_PLACES: usize = 8;

/// Where a connection was admitted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kept {
    /// One of `limits.max_metrics_connections`.
    Open,
    /// One of [`PROBE_PLACES`]: only the probes are answered, one request.
    ForProbes,
}

/// The metrics port: no request limits (it serves only tokentap's own answers), short timers of its own,
/// a send timeout and a cap on connections.
pub async fn serve_metrics(listener: TcpListener, port: MetricsPort) {
    let port = Arc::new(port);
    let refused = port.metrics.refusals.metrics_port.clone();
    let (open, probes) = (Places::new(port.max_connections), Places::new(PROBE_PLACES));
    let (mut failures, mut refusals) = (RepeatedWarning::default(), RepeatedWarning::default());
    loop {
        let stream = accept(&listener, "metrics", &mut failures).await;
        let activity = Arc::new(Activity::default());
        let admitted = match open.admit(&activity) {
            Admission::Refused => kept(probes.admit(&activity), Kept::ForProbes),
            admitted => kept(admitted, Kept::Open),
        };
        let Some((place, reclaimed, kept)) = admitted else {
            refused.connections.inc();
            if let Some(refused) = refusals.occurred(tokio::time::Instant::now()) {
                let limit = port.max_connections;
                tracing::warn!(limit, refused, "metrics-port connections closed at limits.max_metrics_connections, every one and every probe place busy (count since the last such line)");
            }
            drop(stream);
            continue;
        };
        if reclaimed {
            refused.reclaimed.inc();
        }
        tokio::spawn(port.clone().serve(stream, activity, kept, place));
    }
}

/// An admitted connection's place, whether it was reclaimed from an idle one, and which kind it is.
fn kept(admission: Admission, kind: Kept) -> Option<(Place, bool, Kept)> {
    match admission {
        Admission::Admitted { place, reclaimed } => Some((place, reclaimed, kind)),
        Admission::Refused => None,
    }
}

fn plain(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

impl MetricsPort {
    async fn serve(
        self: Arc<Self>, stream: TcpStream, activity: Arc<Activity>, kept: Kept, place: Place,
    ) {
        let t = &self.timeouts;
        let io = TimedIo::new(
            stream,
            activity.clone(),
            t.metrics_header_read,
            t.metrics_idle,
        )
        .with_send_timeout(t.metrics_send, self.refused().send_timeouts.clone());
        let io = TokioIo::new(io);
        let service = service_fn(|request| {
            let in_progress = activity.begin();
            let port = self.clone();
            async move {
                let response = match kept {
                    Kept::Open => port.endpoint(&request).await,
                    Kept::ForProbes => port.probe_only(&request).await,
                };
                Ok::<_, Infallible>(response.map(|b| Tracked::new(b, in_progress)))
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .header_read_timeout(None)
            .keep_alive(kept == Kept::Open)
            .serve_connection(io, service);
        if let Err(err) = conn.await {
            tracing::debug!(%err, "metrics connection ended with an error");
        }
        drop(place);
    }

    /// A connection in a probe place: the probes answered, anything else refused.
    async fn probe_only(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        if matches!(request.uri().path(), "/healthz" | "/readyz") {
            return self.endpoint(request).await;
        }
        self.refused().connections.inc();
        let body = "every connection of limits.max_metrics_connections is busy; only /healthz and /readyz are answered now\n";
        let mut response = plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            Bytes::from_static(body.as_bytes()),
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        response
    }

    fn refused(&self) -> &MetricsPortRefusals {
        &self.metrics.refusals.metrics_port
    }

    /// `POST /-/reload`: the reload's result as the body, 200 when it was applied, 500 when not (the
    /// file failed, or changed what needs a restart), 403 while `metrics.enable_reload` is off or when
    /// a browser says the request comes from another site; any other method 405. Requests that arrive
    /// while a reload runs share the next one (the app's reloader coalesces them).
    async fn reload(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        let text = |status, body: String| plain(status, "text/plain", Bytes::from(body));
        let method = request.method();
        if method != Method::POST {
            let mut response = text(
                StatusCode::METHOD_NOT_ALLOWED,
                "only POST reloads the config\n".into(),
            );
            let allow = HeaderValue::from_static("POST");
            response.headers_mut().insert(header::ALLOW, allow);
            return response;
        }
        let Some(reload) = self.reload.as_ref().filter(|r| r.enabled()) else {
            let body =
                "reloading by POST is off: set metrics.enable_reload: true (or send SIGHUP)\n";
            return text(StatusCode::FORBIDDEN, body.into());
        };
        if let Some(why) = cross_site(request) {
            self.refused().cross_site.inc();
            let body = format!("a reload from another site is refused ({why}); post it from a tool, not a page (curl, configmap-reload)\n");
            return text(StatusCode::FORBIDDEN, body);
        }
        let (applied, said) = reload.reload().await;
        let status = match applied {
            true => StatusCode::OK,
            false => StatusCode::INTERNAL_SERVER_ERROR,
        };
        text(status, format!("{said}\n"))
    }

    /// Whether `request` names a host this port answers: any without `metrics.allowed_hosts`.
    ///
    /// (See also [`cross_site`], which a state-changing request must pass too.)
    fn host_allowed(&self, request: &Request<Incoming>) -> bool {
        if self.allowed_hosts.is_empty() {
            return true;
        }
        let named = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| request.uri().authority().map(|a| a.as_str()));
        named.is_some_and(|host| {
            let host = host_name(host).to_ascii_lowercase();
            self.allowed_hosts
                .iter()
                .any(|allowed| allowed.trim_start_matches('[').trim_end_matches(']') == host)
        })
    }

    async fn endpoint(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        let path = request.uri().path();
        let get = request.method() == Method::GET;
        let probe = matches!(path, "/healthz" | "/readyz");
        if !probe && !self.host_allowed(request) {
            self.refused().host.inc();
            let body = "this Host is not in metrics.allowed_hosts\n";
            return plain(
                StatusCode::FORBIDDEN,
                "text/plain",
                Bytes::from_static(body.as_bytes()),
            );
        }
        if path == RELOAD_PATH {
            return self.reload(request).await;
        }
        if let (true, Some(live)) = (get, &self.live) {
            let answer = match path {
                "/" => Some(ui::page_answer()),
                "/api/v1/live" => {
                    let answer = ui::live_answer(live, request.uri().query()).await;
                    if answer.status == StatusCode::SERVICE_UNAVAILABLE && answer.busy {
                        self.refused().live_busy.inc();
                    }
                    Some(answer)
                }
                "/api/v1/fleet" => Some(ui::fleet_answer(self.fleet.as_deref()).await),
                _ => None,
            };
            if let Some(answer) = answer {
                return ui::response(answer);
            }
        }
        let not_found: &'static [u8] = match self.live {
            Some(_) => {
                b"not found: try /, /api/v1/live, /api/v1/fleet, /metrics, /healthz or /readyz\n"
            }
            None => b"not found: try /metrics, /healthz or /readyz\n",
        };
        let ready = self.shutdown.phase() == Phase::Serving;
        let accept = request.headers().get(header::ACCEPT);
        let format = Format::negotiate(accept.and_then(|a| a.to_str().ok()));
        let (status, content_type, body) = match (get, path) {
            (true, "/metrics") => match self.metrics.scrape(format).await {
                Some(page) => (StatusCode::OK, format.content_type(), page),
                None => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    Bytes::from_static(b"metrics unavailable: shutting down\n"),
                ),
            },
            (true, "/healthz") => (StatusCode::OK, "text/plain", Bytes::from_static(b"ok\n")),
            (true, "/readyz") if ready => {
                (StatusCode::OK, "text/plain", Bytes::from_static(b"ready\n"))
            }
            (true, "/readyz") => (
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
        let mut response = plain(status, content_type, body);
        if path == "/metrics" {
            // The page's format follows the scraper's Accept: a cache between must key on it.
            let vary = HeaderValue::from_static("accept");
            response.headers_mut().insert(header::VARY, vary);
        }
        response
    }
}

/// Why `request` comes from another site, as a browser says it (a tool such as curl says nothing): a
/// `Sec-Fetch-Site` other than `same-origin` or `none` (the user's own navigation), or an `Origin`
/// whose host is not the one the request was sent to. A page elsewhere can make a browser post a form
/// here (no CORS check stops a simple POST), so such a request changes nothing.
fn cross_site(request: &Request<Incoming>) -> Option<&'static str> {
    let headers = request.headers();
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if let Some(site) = text("sec-fetch-site") {
        if !matches!(site.trim(), "same-origin" | "none") {
            return Some("Sec-Fetch-Site is not same-origin");
        }
    }
    let origin = text("origin")?;
    let host = text("host").or_else(|| request.uri().authority().map(|a| a.as_str()));
    let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    match host {
        Some(host) if origin_host.eq_ignore_ascii_case(host) => None,
        _ => Some("its Origin is not this host"),
    }
}

/// The host of a `Host` value, without its port: `localhost:9464` → `localhost`, `[::1]:9464` → `::1`.
fn host_name(value: &str) -> &str {
    if let Some(v6) = value.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    match value.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => value,
    }
}

#[cfg(test)]
mod tests {
    use super::host_name;

    #[test]
    fn a_host_is_compared_without_its_port() {
        assert_eq!(host_name("localhost:9464"), "localhost");
        assert_eq!(host_name("LocalHost"), "LocalHost");
        assert_eq!(host_name("10.0.0.5:80"), "10.0.0.5");
        assert_eq!(host_name("[::1]:9464"), "::1");
        assert_eq!(host_name("[::1]"), "::1");
        assert_eq!(host_name("evil.example:x"), "evil.example:x");
    }
}
