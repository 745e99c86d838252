//! The forwarding service: one request in from the client, the same request out to the upstream, the
//! upstream's response back. The clock starts when the request head has been read (t_arrive). Only
//! hop-by-hop headers are touched and `Host` is set to the upstream's, as a reverse proxy must for
//! virtual-hosted and TLS upstreams; bodies stream through the taps in both directions. Here too are the
//! limits and timeouts of one request: a body declared over `limits.max_request_body_bytes` is refused
//! with 413 before anything is sent upstream, and the wait for the response head is bounded by
//! `timeouts.response_headers` and by a shutdown's grace period. What tokentap does not forward is
//! refused before anything is sent upstream: `CONNECT` and transfer codings other than `chunked` (501), a
//! target that would leave the upstream's path prefix (400, [`crate::proxy::request_target`]). An upstream status
//! HTTP does not define (over 599), or a `101` nobody asked for, is answered 502.
//!
//! Every forwarded request, HTTP/1.1 or h2 stream, is its own upstream request, so each takes one of
//! `limits.max_upstream_connections` slots before it is sent and keeps it in its exchange until the
//! response ends or the client goes away. With none free the request is answered 503 at once: a
//! queue would only hold the client's connection and hide the overload from its retry logic.

use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::uri::Uri;
use http::{header, HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body::Body;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::config::Config;
use crate::decode::dialect;
use crate::logging::repeated::RepeatedWarning;
use crate::proxy::error::ProxyError;
use crate::proxy::hop_by_hop::{self, Direction, NextHop};
use crate::proxy::request_body::{self, HoldError, HoldLimits, UploadsPerClient};
use crate::proxy::request_target::{self, Target, TargetError};
use crate::proxy::upstream::{Upstream, UpstreamResponse};
use crate::record::outcome::End;
use crate::shutdown::{Phase, Shutdown};
use crate::tap::exchange::{Exchange, ExchangeContext, ExchangeGuard, HeldBody};
use crate::tap::{RequestSeen, RequestTap, ResponseTap};

/// How long a request the upstream refused may take to yield its `model` before the error answer goes out.
const LEFTOVER_READ_LIMIT: Duration = Duration::from_millis(250);

pub type ProxyBody = Either<ResponseTap<UpstreamResponse>, Full<Bytes>>;

#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    connections: Upstream,
    /// The upstream's path prefix, put before every request's path (no trailing `/`).
    prefix: String,
    /// The `Host` every forwarded request carries: the upstream's authority, as an HTTP client sets it.
    host: Option<HeaderValue>,
    upstream_shown: String,
    context: Arc<ExchangeContext>,
    response_headers: Duration,
    idle: Duration,
    body_idle: Duration,
    max_body_bytes: u64,
    /// `limits.max_request_header_bytes`.
    max_head_bytes: usize,
    /// What a request body may hold before it is sent.
    hold: HoldLimits,
    /// Each client address's unfinished streamed uploads (`limits.max_streamed_uploads_per_client`).
    uploads: UploadsPerClient,
    /// One permit per upstream request in progress, `limits.max_upstream_connections` in all.
    upstream_slots: Arc<Semaphore>,
    max_upstream: usize,
    /// `limits.max_upstream_per_connection`.
    per_connection: usize,
    overloaded: Mutex<RepeatedWarning>,
    shutdown: Shutdown,
}

impl Proxy {
    pub fn new(
        connections: Upstream,
        config: &Config,
        context: Arc<ExchangeContext>,
        shutdown: Shutdown,
    ) -> Self {
        let upstream = &config.upstream;
        let upstream_shown = upstream.to_string().trim_end_matches('/').to_owned();
        Proxy {
            inner: Arc::new(Inner {
                connections,
                host: host_header(upstream),
                prefix: upstream.path().trim_end_matches('/').to_owned(),
                upstream_shown,
                context,
                response_headers: config.timeouts.response_headers,
                idle: config.timeouts.idle,
                body_idle: config.timeouts.request_body_idle,
                max_body_bytes: config.limits.max_request_body_bytes,
                max_head_bytes: config.limits.max_request_header_bytes,
                hold: HoldLimits {
                    per_request: config.limits.held_body_bytes(),
                    all: Arc::new(Semaphore::new(
                        usize::try_from(config.limits.max_held_request_bytes)
                            .unwrap_or(usize::MAX)
                            .min(Semaphore::MAX_PERMITS),
                    )),
                    wait: config.timeouts.request_body_idle,
                },
                uploads: UploadsPerClient::new(
                    (config.limits.max_streamed_uploads_per_client)
                        .min(config.limits.max_upstream_connections),
                ),
                upstream_slots: Arc::new(Semaphore::new(config.limits.max_upstream_connections)),
                max_upstream: config.limits.max_upstream_connections,
                per_connection: config.limits.upstream_per_connection(),
                overloaded: Mutex::default(),
                shutdown,
            }),
        }
    }

    /// Forwards one request that came on `client`.
    pub async fn handle(
        self,
        request: Request<Incoming>,
        client: ClientConn,
    ) -> Result<Response<ProxyBody>, std::convert::Infallible> {
        let arrive = Instant::now();
        let inner = &self.inner;
        let (mut parts, body) = request.into_parts();
        let target = request_target::resolve(&parts.uri);
        let path = match &target {
            Ok(target) => target.path().to_owned(),
            Err(_) => parts.uri.path().to_owned(),
        };
        let (api, dialect) = dialect::detect(&path);
        let slot = Arc::new(RequestSeen::default());
        let mut guard = ExchangeGuard::new(Exchange::begin(
            inner.context.clone(),
            api,
            dialect,
            parts.method.clone(),
            path,
            arrive,
            slot.clone(),
        ));
        if let Some(exchange) = guard.get_mut() {
            exchange.identify(&parts.headers);
        }

        let target = match admit(&parts, target, inner.max_body_bytes, inner.max_head_bytes) {
            Ok(target) => target,
            Err(error) => {
                if let ProxyError::HeadTooLarge { .. } = error {
                    inner.context.metrics.refusals.header_too_large.inc();
                }
                tracing::warn!(%error, "request refused");
                return Ok(refuse(&mut guard, &error));
            }
        };
        let scan_bytes = inner.context.metering.model_scan_bytes;
        let (body, leftover) = RequestTap::new(
            body,
            scan_bytes,
            inner.max_body_bytes,
            inner.body_idle,
            slot.clone(),
        );
        // A small body is read whole before anything upstream is taken (see `request_body`).
        let declared = declared_length(&parts.headers);
        let held = tokio::select! {
            held = request_body::hold(body, &inner.hold, declared) => held.map_err(|error| match error {
                HoldError::Body(_) => ProxyError::from_body(&slot, (inner.max_body_bytes, inner.body_idle)),
                HoldError::Budget(after) => ProxyError::HeldBytesFull { after },
            }),
            () = inner.shutdown.reached(Phase::Cut) => Err(ProxyError::ShutdownCut),
        };
        let refusals = &inner.context.metrics.refusals;
        let mut body = match held {
            Ok(held) => {
                if held.waited {
                    refusals.held_bytes_waited.inc();
                }
                held.body
            }
            Err(error) => {
                if let ProxyError::HeldBytesFull { .. } = error {
                    refusals.held_bytes_waited.inc();
                    refusals.held_bytes.inc();
                }
                tracing::warn!(%error, "request refused");
                return Ok(refuse(&mut guard, &error));
            }
        };
        if !body.count_upload(&inner.uploads, client.addr) {
            refusals.uploads_per_client.inc();
            let error = ProxyError::UploadsPerClient {
                limit: inner.uploads.limit(),
            };
            return Ok(self.overloaded(&mut guard, arrive, &error));
        }
        let Ok(permit) = inner.upstream_slots.clone().try_acquire_owned() else {
            inner.context.metrics.refusals.upstream_requests.inc();
            let error = ProxyError::UpstreamOverloaded {
                limit: inner.max_upstream,
            };
            return Ok(self.overloaded(&mut guard, arrive, &error));
        };
        // The connection's own share, once there is room upstream at all: a refusal is the connection's.
        let share = match client.share.map(Semaphore::try_acquire_owned).transpose() {
            Ok(share) => share,
            Err(_) => {
                inner.context.metrics.refusals.connection_share.inc();
                let error = ProxyError::ConnectionShare {
                    limit: inner.per_connection,
                };
                return Ok(self.overloaded(&mut guard, arrive, &error));
            }
        };
        if let Some(exchange) = guard.get_mut() {
            exchange.hold(permit, share);
        }
        let held = body.held().map(|held| held as HeldBody);
        let client_version = parts.version;
        parts.uri = origin_form(&inner.prefix, target.path_and_query());
        parts.version = Version::HTTP_11;
        hop_by_hop::strip(&mut parts.headers, NextHop::Http1, Direction::Request);
        if client_version == Version::HTTP_2 {
            hop_by_hop::join_cookies(&mut parts.headers);
        }
        // In the client's `Host` line, so it keeps its place and case (`insert` replaces in place).
        match &inner.host {
            Some(host) => {
                parts.headers.insert(header::HOST, host.clone());
            }
            None => {
                parts.headers.remove(header::HOST);
            }
        }

        let mut forward = std::pin::pin!(inner.connections.send(Request::from_parts(parts, body)));
        // The request is on its way upstream after the first poll; its message list is read after
        // it, beside the upstream's work, never before it (`Exchange::read_messages`).
        let first = std::future::poll_fn(|cx| Poll::Ready(forward.as_mut().poll(cx))).await;
        if let Some(exchange) = guard.get_mut() {
            exchange.read_messages(held);
        }
        let forward = async move {
            match first {
                Poll::Ready(answered) => answered,
                Poll::Pending => forward.await,
            }
        };
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
        let answered = answered.and_then(|response| match undefined_status(response.status()) {
            None => Ok(response),
            Some(why) => Err(ProxyError::UpstreamBadStatus {
                upstream: inner.upstream_shown.clone(),
                status: response.status().as_u16(),
                why,
            }),
        });
        match answered {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                hop_by_hop::strip(
                    &mut parts.headers,
                    NextHop::to_client(client_version),
                    Direction::Response,
                );
                if let Some(exchange) = guard.get_mut() {
                    exchange.on_response(parts.status, parts.headers.get(header::CONTENT_TYPE));
                    exchange.on_server_headers(&parts.headers);
                }
                if body.is_end_stream() {
                    guard.finish(End::Complete);
                }
                let cut = inner.shutdown.reached(Phase::Cut);
                let body = ResponseTap::new(body, guard, inner.idle, cut);
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

/// What a request knows of the client connection it came on.
#[derive(Clone, Default)]
pub struct ClientConn {
    /// The connection's share of the upstream slots (`limits.max_upstream_per_connection`), for a
    /// connection that may carry several requests at once (h2).
    pub share: Option<Arc<Semaphore>>,
    /// The client's address.
    pub addr: Option<IpAddr>,
}

impl Proxy {
    /// A new client connection's share of the upstream slots.
    pub fn connection_share(&self) -> Arc<Semaphore> {
        Arc::new(Semaphore::new(self.inner.per_connection))
    }

    /// The 503 of a request refused for want of an upstream slot, logged once per 10 s at most.
    fn overloaded(
        &self,
        guard: &mut ExchangeGuard,
        arrive: Instant,
        error: &ProxyError,
    ) -> Response<ProxyBody> {
        let mut overloaded = self
            .inner
            .overloaded
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(refused) = overloaded.occurred(arrive) {
            tracing::warn!(%error, refused, "requests refused (this one and those since the last such line)");
        }
        drop(overloaded);
        refuse(guard, error)
    }
}

/// tokentap's own answer for `error`, recorded as the exchange's response.
fn refuse(guard: &mut ExchangeGuard, error: &ProxyError) -> Response<ProxyBody> {
    let response = error.to_response();
    if let Some(exchange) = guard.get_mut() {
        exchange.on_response(response.status(), None);
    }
    guard.finish(End::Refused(error.refusal()));
    response.map(Either::Right)
}

/// The request's target made safe to forward, or why tokentap refuses it before anything is sent.
/// Upgrades are not refused: `Upgrade` is a hop-by-hop header, removed, so the upstream answers the plain
/// request, as it does behind nginx without `proxy_set_header Upgrade`.
fn admit(
    parts: &http::request::Parts,
    target: Result<Target, TargetError>,
    max_body_bytes: u64,
    max_head_bytes: usize,
) -> Result<Target, ProxyError> {
    if parts.version < Version::HTTP_2 && head_len(parts) > max_head_bytes {
        return Err(ProxyError::HeadTooLarge {
            limit: max_head_bytes,
        });
    }
    if parts.method == Method::CONNECT {
        return Err(ProxyError::NotImplemented { what: "CONNECT" });
    }
    if !hop_by_hop::request_coding_supported(&parts.headers) {
        return Err(ProxyError::NotImplemented {
            what: "a request transfer coding other than chunked",
        });
    }
    let target = target.map_err(|error| ProxyError::BadTarget {
        reason: error.reason(),
    })?;
    if declared_length(&parts.headers).is_some_and(|n| n > max_body_bytes) {
        return Err(ProxyError::RequestBodyTooLarge {
            limit: max_body_bytes,
        });
    }
    Ok(target)
}

/// Why an upstream's status cannot be forwarded: one HTTP does not define, or a switch of protocols
/// that was never asked for (tokentap removes `Upgrade` from every request). Other 1xx never get here:
/// hyper reads them and waits for the final response.
fn undefined_status(status: StatusCode) -> Option<&'static str> {
    if status == StatusCode::SWITCHING_PROTOCOLS {
        Some("switching protocols though no upgrade was asked for")
    } else if status.as_u16() > 599 {
        Some("which HTTP does not define (100 to 599)")
    } else {
        None
    }
}

/// The size of an HTTP/1 request's head as it came, but for the optional spaces around header values,
/// which the parser drops: the request line and every header line with their CRLFs, and the blank line.
/// hyper bounds its read buffer, not the head: a head up to half again `limits.max_request_header_bytes`
/// could reach the service whole in one read. So the limit is held here, exactly but for those spaces.
/// (h2 bounds its header list itself, as HTTP/2 counts it.)
fn head_len(parts: &http::request::Parts) -> usize {
    let target = parts.uri.path_and_query().map_or(1, |pq| pq.as_str().len());
    let target = match parts.uri.authority() {
        Some(authority) => target + authority.as_str().len() + "http://".len(),
        None => target,
    };
    let line = parts.method.as_str().len() + 1 + target + " HTTP/1.1\r\n".len();
    let headers: usize = (parts.headers.iter())
        .map(|(name, value)| name.as_str().len() + ": ".len() + value.len() + 2)
        .sum();
    line + headers + 2
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

/// The request line's target upstream: the upstream's path prefix joined with the request's path and query
/// (which starts with `/`).
fn origin_form(prefix: &str, request: &str) -> Uri {
    let joined = if prefix.is_empty() {
        request.parse()
    } else {
        format!("{prefix}{request}").parse()
    };
    joined.unwrap_or_else(|_| Uri::from_static("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_prefix_path_and_query() {
        let pq = "/v1/chat/completions?x=1";
        assert_eq!(
            origin_form("/openai", pq).to_string(),
            "/openai/v1/chat/completions?x=1"
        );
        assert_eq!(origin_form("", pq).to_string(), "/v1/chat/completions?x=1");
        assert_eq!(origin_form("", "/").to_string(), "/");
    }

    #[test]
    fn only_a_101_or_a_status_over_599_is_not_forwarded() {
        let status = |code| StatusCode::from_u16(code).unwrap_or_default();
        for code in [101, 600, 999] {
            assert!(undefined_status(status(code)).is_some(), "{code}");
        }
        for code in [100, 103, 200, 204, 304, 404, 599] {
            assert!(undefined_status(status(code)).is_none(), "{code}");
        }
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
