//! The forwarding service: one request in from the client, the same request out to the upstream, the
//! upstream's response back. The clock starts when the request head has been read (t_arrive). Only
//! hop-by-hop headers are touched and `Host` is set to the upstream's, as a reverse proxy must for
//! virtual-hosted and TLS upstreams; bodies stream through the taps in both directions. Here too are the
//! limits and timeouts of one request: a body declared over `limits.max_request_body_bytes` is refused
//! with 413 before anything is sent upstream, and the wait for the response head is bounded by
//! `timeouts.response_headers` and by a shutdown's grace period.
//!
//! Every forwarded request, HTTP/1.1 or h2 stream, is its own upstream request, so each takes one of
//! `limits.max_upstream_connections` slots before it is sent and keeps it in its exchange until the
//! response ends or the client goes away. With none free the request is answered 503 at once: a
//! queue would only hold the client's connection and hide the overload from its retry logic.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::uri::{PathAndQuery, Uri};
use http::{header, HeaderValue, Request, Response, Version};
use http_body::Body;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::config::Config;
use crate::dialect;
use crate::error::ProxyError;
use crate::exchange::{Exchange, ExchangeGuard, Outcome, Recorder};
use crate::hop_by_hop::{self, NextHop};
use crate::repeated::RepeatedWarning;
use crate::shutdown::{Phase, Shutdown};
use crate::tap::{MeteredBody, ModelSlot, RequestTap};
use crate::upstream::UpstreamClient;

/// How long a request the upstream refused may take to yield its `model` before the error answer goes out.
const LEFTOVER_READ_LIMIT: Duration = Duration::from_millis(250);

pub type ProxyBody = Either<MeteredBody<Incoming>, Full<Bytes>>;

#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    client: UpstreamClient,
    upstream: Uri,
    /// The `Host` every forwarded request carries, as hyper-util's client would set it.
    host: Option<HeaderValue>,
    upstream_shown: String,
    recorder: Arc<Recorder>,
    response_headers: Duration,
    idle: Duration,
    body_idle: Duration,
    max_body_bytes: u64,
    /// One permit per upstream request in progress, `limits.max_upstream_connections` in all.
    upstream_slots: Arc<Semaphore>,
    max_upstream: usize,
    overloaded: Mutex<RepeatedWarning>,
    shutdown: Shutdown,
}

impl Proxy {
    pub fn new(
        client: UpstreamClient,
        config: &Config,
        recorder: Arc<Recorder>,
        shutdown: Shutdown,
    ) -> Self {
        let upstream = config.upstream.clone();
        let upstream_shown = upstream.to_string().trim_end_matches('/').to_owned();
        Proxy {
            inner: Arc::new(Inner {
                client,
                host: host_header(&upstream),
                upstream,
                upstream_shown,
                recorder,
                response_headers: config.timeouts.response_headers,
                idle: config.timeouts.idle,
                body_idle: config.timeouts.request_body_idle,
                max_body_bytes: config.limits.max_request_body_bytes,
                upstream_slots: Arc::new(Semaphore::new(config.limits.max_upstream_connections)),
                max_upstream: config.limits.max_upstream_connections,
                overloaded: Mutex::default(),
                shutdown,
            }),
        }
    }

    pub async fn handle(
        self,
        request: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, std::convert::Infallible> {
        let arrive = Instant::now();
        let inner = &self.inner;
        let (mut parts, body) = request.into_parts();
        let path = parts.uri.path().to_owned();
        let (api, dialect) = dialect::detect(&path);
        let slot = Arc::new(ModelSlot::default());
        let mut guard = ExchangeGuard::new(Exchange::begin(
            inner.recorder.clone(),
            api,
            dialect,
            parts.method.clone(),
            path,
            arrive,
            slot.clone(),
        ));

        if declared_length(&parts.headers).is_some_and(|n| n > inner.max_body_bytes) {
            let error = ProxyError::RequestBodyTooLarge {
                limit: inner.max_body_bytes,
            };
            tracing::warn!(%error, "request refused");
            return Ok(refuse(&mut guard, &error));
        }
        let Ok(permit) = inner.upstream_slots.clone().try_acquire_owned() else {
            inner.recorder.metrics.refusals.upstream_requests.inc();
            let error = ProxyError::UpstreamOverloaded {
                limit: inner.max_upstream,
            };
            let mut overloaded = inner
                .overloaded
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(refused) = overloaded.occurred(arrive) {
                tracing::warn!(%error, refused, "requests refused (this one and those since the last such line)");
            }
            drop(overloaded);
            return Ok(refuse(&mut guard, &error));
        };
        if let Some(exchange) = guard.get_mut() {
            exchange.hold(permit);
        }
        let client_version = parts.version;
        parts.uri = upstream_uri(&inner.upstream, parts.uri.path_and_query());
        parts.version = Version::HTTP_11;
        hop_by_hop::strip(&mut parts.headers, NextHop::Http1);
        // In the client's `Host` line, so it keeps its place and case (`insert` replaces in place).
        match &inner.host {
            Some(host) => {
                parts.headers.insert(header::HOST, host.clone());
            }
            None => {
                parts.headers.remove(header::HOST);
            }
        }
        let scan_bytes = inner.recorder.metering.model_scan_bytes;
        let (body, leftover) = RequestTap::new(
            body,
            scan_bytes,
            inner.max_body_bytes,
            inner.body_idle,
            slot.clone(),
        );

        let forward = inner.client.request(Request::from_parts(parts, body));
        let answered = tokio::select! {
            answered = tokio::time::timeout(inner.response_headers, forward) => match answered {
                Ok(Ok(response)) => Ok(response),
                Ok(Err(err)) => Err(ProxyError::from_client(
                    &err,
                    &inner.upstream_shown,
                    &slot,
                    (inner.max_body_bytes, inner.body_idle),
                )),
                Err(_) => Err(ProxyError::UpstreamHeadersTimeout {
                    upstream: inner.upstream_shown.clone(),
                    after: inner.response_headers,
                }),
            },
            () = inner.shutdown.reached(Phase::Cut) => Err(ProxyError::ShutdownCut),
        };
        match answered {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                hop_by_hop::strip(&mut parts.headers, NextHop::to_client(client_version));
                if let Some(exchange) = guard.get_mut() {
                    exchange.on_response(parts.status, parts.headers.get(header::CONTENT_TYPE));
                }
                if body.is_end_stream() {
                    guard.finish(Outcome::Ok);
                }
                let cut = inner.shutdown.reached(Phase::Cut);
                let body = MeteredBody::new(body, guard, inner.idle, cut);
                Ok(Response::from_parts(parts, Either::Left(body)))
            }
            Err(error) => {
                tracing::warn!(%error, "request not forwarded");
                leftover.read_model(LEFTOVER_READ_LIMIT).await;
                Ok(refuse(&mut guard, &error))
            }
        }
    }
}

/// tokentap's own answer for `error`, recorded as the exchange's response.
fn refuse(guard: &mut ExchangeGuard, error: &ProxyError) -> Response<ProxyBody> {
    let response = error.to_response();
    if let Some(exchange) = guard.get_mut() {
        exchange.on_response(response.status(), None);
    }
    guard.finish(error.outcome());
    response.map(Either::Right)
}

/// The request's `Content-Length`, when it has one that parses.
fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `host[:port]` of the upstream, the port left out when it is the scheme's default, as hyper-util's
/// client writes `Host` when a request has none.
fn host_header(upstream: &Uri) -> Option<HeaderValue> {
    let host = upstream.host()?;
    let default_port = if upstream.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    let value = match upstream.port_u16() {
        Some(port) if port != default_port => format!("{host}:{port}"),
        _ => host.to_owned(),
    };
    HeaderValue::from_str(&value).ok()
}

/// The upstream base (scheme, authority, optional path prefix) joined with the request's path and query.
fn upstream_uri(base: &Uri, request: Option<&PathAndQuery>) -> Uri {
    let prefix = base.path().trim_end_matches('/');
    let tail = request.map_or("/", PathAndQuery::as_str);
    let mut parts = base.clone().into_parts();
    parts.path_and_query = format!("{prefix}{tail}")
        .parse()
        .ok()
        .or_else(|| request.cloned());
    Uri::from_parts(parts).unwrap_or_else(|_| base.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_prefix_path_and_query() {
        let base: Uri = "https://api.example.com/openai".parse().unwrap_or_default();
        let pq = PathAndQuery::from_static("/v1/chat/completions?x=1");
        assert_eq!(
            upstream_uri(&base, Some(&pq)).to_string(),
            "https://api.example.com/openai/v1/chat/completions?x=1"
        );
        let base: Uri = "http://127.0.0.1:8000".parse().unwrap_or_default();
        assert_eq!(
            upstream_uri(&base, Some(&pq)).to_string(),
            "http://127.0.0.1:8000/v1/chat/completions?x=1"
        );
        assert_eq!(
            upstream_uri(&base, None).to_string(),
            "http://127.0.0.1:8000/"
        );
    }

    #[test]
    fn host_is_the_upstream_authority_without_a_default_port() {
        let host = |uri: &str| {
            let uri: Uri = uri.parse().unwrap_or_default();
            host_header(&uri).map(|v| v.to_str().unwrap_or_default().to_owned())
        };
        assert_eq!(
            host("http://127.0.0.1:8000").as_deref(),
            Some("127.0.0.1:8000")
        );
        assert_eq!(
            host("http://models.internal:80/v1").as_deref(),
            Some("models.internal")
        );
        assert_eq!(
            host("https://api.example.com:443").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            host("https://api.example.com:80").as_deref(),
            Some("api.example.com:80")
        );
        assert_eq!(host("http://[::1]:9000").as_deref(), Some("[::1]:9000"));
    }
}
