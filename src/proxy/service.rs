//! The forwarding service: one request in from the client, the same request out to the upstream, the
//! upstream's response back. A request goes through named phases, in order ([`Proxy::forward`]; the
//! table in docs/architecture.md says what each does):
//!
//! 1. **admit** — the head: what tokentap does not forward is refused (`admit.rs`); the exchange begins.
//! 2. **hold** — the body: read whole before anything upstream is taken (`request_body.rs`), or its first
//!    part when it is larger than the hold size.
//! 3. **acquire** — one of `limits.max_upstream_connections` slots, and one of the client connection's
//!    share of them; with none free the request is answered 503 at once: a queue would only hold the
//!    client's connection and hide the overload from its retry logic.
//! 4. **send** — the head rewritten for the upstream (`rewrite.rs`; with `traces.propagate`, its
//!    `traceparent` names the request's span) and sent; the request's message list
//!    read beside the upstream's work; the wait for the response head bounded by
//!    `timeouts.response_headers` and a shutdown's grace period.
//! 5. **answer** — the response head checked and rewritten, its body wrapped in the response tap.
//! 6. **finish** — in the response tap, or the exchange's guard if the client left (`tap/`): once.
//!
//! A WebSocket handshake (`upgrade.rs`) takes the same phases, with a session's place taken after
//! admit; an upstream's `101` to it is answered as it came, and the session that follows is handed to
//! the client connection's task ([`ClientConn::handoff`]).
//!
//! Any phase may end in tokentap's own answer instead ([`Proxy::refuse`]), counted as the request's.
//! The clock starts when the request head has been read (t_arrive).

use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response};
use http_body::Body;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::config::Config;
use crate::decode::dialect;
use crate::decode::websocket::Deflate;
use crate::govern::{Budget, Client};
use crate::logging::repeated::RepeatedWarning;
use crate::proxy::admit::{admit, declared_length, undefined_status};
use crate::proxy::error::ProxyError;
use crate::proxy::request_body::{self, HoldError, HoldLimits, Outgoing, PerClient};
use crate::proxy::request_target::{self, Target};
use crate::proxy::rewrite::Rewrite;
use crate::proxy::upgrade::{self, Handoff, Place, Sessions};
use crate::proxy::upstream::{Upstream, UpstreamResponse};
use crate::record::metrics::Refusals;
use crate::record::outcome::End;
use crate::shutdown::{Phase, Shutdown};
use crate::tap::exchange::{Exchange, ExchangeContext, ExchangeGuard, HeldBody};
use crate::tap::realtime::{Handshake, SessionMeter};
use crate::tap::{Leftover, RequestSeen, RequestTap, ResponseTap};

/// How long a request the upstream refused may take to yield its `model` before the error answer goes out.
const LEFTOVER_READ_LIMIT: Duration = Duration::from_millis(250);

pub type ProxyBody = Either<ResponseTap<UpstreamResponse>, Full<Bytes>>;

#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    connections: Upstream,
    rewrite: Rewrite,
    upstream_shown: String,
    context: Arc<ExchangeContext>,
    refusals: Refusals,
    response_headers: Duration,
    idle: Duration,
    body_idle: Duration,
    max_body_bytes: u64,
    /// `limits.max_request_header_bytes`.
    max_head_bytes: usize,
    /// What a request body may hold before it is sent.
    hold: HoldLimits,
    /// Each client address's unfinished streamed uploads (`limits.max_streamed_uploads_per_client`).
    uploads: PerClient,
    /// One permit per upstream request in progress, `limits.max_upstream_connections` in all.
    upstream_slots: Arc<Semaphore>,
    max_upstream: usize,
    /// `limits.max_upstream_per_connection`.
    per_connection: usize,
    overloaded: Mutex<RepeatedWarning>,
    shutdown: Shutdown,
    /// WebSocket sessions: their limits and what they run with.
    sessions: Sessions,
}

/// What a request knows of the client connection it came on.
#[derive(Clone, Default)]
pub struct ClientConn {
    /// The connection's share of the upstream slots (`limits.max_upstream_per_connection`), for a
    /// connection that may carry several requests at once (h2).
    pub share: Option<Arc<Semaphore>>,
    /// The client's address.
    pub addr: Option<IpAddr>,
    /// Where a WebSocket session is left for the connection's task to run (HTTP/1.1 connections);
    /// without one it runs on a task of its own.
    pub handoff: Option<Handoff>,
}

/// One request on its way through the phases.
struct Forwarding {
    arrive: Instant,
    /// The client's head, until it is sent.
    parts: Option<http::request::Parts>,
    /// The client's HTTP version.
    version: http::Version,
    /// The exchange, until it is finished (then in the response tap, or done).
    guard: ExchangeGuard,
    /// What the request tap saw of the body.
    seen: Arc<RequestSeen>,
    /// The proxy's hold on the body, to read its `model` when the upstream never did.
    leftover: Option<Leftover<Incoming>>,
    /// A WebSocket handshake: the client's side of the upgrade, and the session's place once admitted.
    upgrade: Option<(OnUpgrade, Option<Place>)>,
    /// A WebSocket handshake's id, path and `model=`, for its session's meter.
    handshake: Option<Handshake>,
}

/// tokentap's own answer instead of the upstream's, and whether the upstream had been asked.
struct Refused {
    error: ProxyError,
    /// The request went upstream: what the upstream left of the body is read for its `model` first.
    sent: bool,
}

impl From<ProxyError> for Refused {
    fn from(error: ProxyError) -> Self {
        Refused { error, sent: false }
    }
}

impl Proxy {
    pub fn new(
        connections: Upstream, config: &Config, context: Arc<ExchangeContext>, refusals: Refusals,
        shutdown: Shutdown,
    ) -> Self {
        let upstream = &config.upstream;
        let limits = &config.limits;
        let held_bodies = context.governor.pool(Budget::HeldBodies).clone();
        Proxy {
            inner: Arc::new(Inner {
                connections,
                rewrite: Rewrite::new(
                    upstream,
                    config.traces.as_ref().is_some_and(|t| t.propagate),
                ),
                upstream_shown: upstream.to_string().trim_end_matches('/').to_owned(),
                context,
                response_headers: config.timeouts.response_headers,
                idle: config.timeouts.idle,
                body_idle: config.timeouts.request_body_idle,
                max_body_bytes: limits.max_request_body_bytes,
                max_head_bytes: limits.max_request_header_bytes,
                hold: HoldLimits {
                    per_request: limits.held_body_bytes(),
                    all: held_bodies,
                    whole: config.timeouts.held_request_body,
                    wait: config.timeouts.request_body_idle,
                },
                uploads: PerClient::new(
                    (limits.max_streamed_uploads_per_client).min(limits.max_upstream_connections),
                ),
                upstream_slots: Arc::new(Semaphore::new(limits.max_upstream_connections)),
                max_upstream: limits.max_upstream_connections,
                per_connection: limits.upstream_per_connection(),
                overloaded: Mutex::default(),
                sessions: Sessions::new(config, refusals.sessions.clone(), shutdown.clone()),
                refusals,
                shutdown,
            }),
        }
    }

    /// A new client connection's share of the upstream slots.
    pub fn connection_share(&self) -> Arc<Semaphore> {
        Arc::new(Semaphore::new(self.inner.per_connection))
    }

    /// Forwards one request that came on `client`.
    pub async fn handle(
        self, request: Request<Incoming>, client: ClientConn,
    ) -> Result<Response<ProxyBody>, std::convert::Infallible> {
        let arrive = Instant::now();
        let (mut parts, body) = request.into_parts();
        let upgrade = upgrade::is_websocket(&parts)
            .then(|| parts.extensions.remove::<OnUpgrade>())
            .flatten()
            .map(|client| (client, None));
        let target = request_target::resolve(&parts.uri);
        let path = match &target {
            Ok(target) => target.path().to_owned(),
            Err(_) => parts.uri.path().to_owned(),
        };
        let (api, dialect) = dialect::detect(&path);
        let seen = Arc::new(RequestSeen::default());
        let exchange = Exchange::begin(
            self.inner.context.clone(),
            api,
            dialect,
            parts.method.clone(),
            path,
            arrive,
            seen.clone(),
        );
        let mut request = Forwarding {
            arrive,
            version: parts.version,
            parts: Some(parts),
            guard: ExchangeGuard::new(exchange),
            seen,
            leftover: None,
            upgrade,
            handshake: None,
        };
        if let (Some(exchange), Some(parts)) = (request.guard.get_mut(), &request.parts) {
            exchange.identify(&parts.headers, client.addr);
            if let (Some(identity), Some(_)) = (exchange.identity(), &request.upgrade) {
                let handshake = Handshake::new(identity, parts.uri.path(), parts.uri.query());
                request.handshake = Some(handshake);
            }
        }
        let answered = match self.forward(&mut request, target, body, client).await {
            Ok(response) => response,
            Err(refused) => self.refuse(&mut request, refused).await,
        };
        Ok(answered)
    }

    /// The phases of a request, in order (see the module's documentation).
    async fn forward(
        &self, request: &mut Forwarding, target: Result<Target, request_target::TargetError>,
        body: Incoming, client: ClientConn,
    ) -> Result<Response<ProxyBody>, Refused> {
        let inner = &self.inner;
        let parts = request.parts.as_ref().ok_or(ProxyError::ClientBodyBroken)?;
        let target = admit(parts, target, inner.max_body_bytes, inner.max_head_bytes)?;
        if let Some((_, place)) = &mut request.upgrade {
            *place = Some(inner.sessions.admit(client.addr)?);
        }
        let body = self.hold(request, body, &client).await?;
        self.acquire(request, &client)?;
        let response = self.send(request, &target, body).await?;
        Ok(self.answer(request, response, &client))
    }

    /// The body, read whole into one buffer before anything upstream is taken, or, larger than the hold
    /// size, its first part, the rest to stream (counted among its client address's uploads).
    async fn hold(
        &self, request: &mut Forwarding, body: Incoming, client: &ClientConn,
    ) -> Result<Outgoing, ProxyError> {
        let inner = &self.inner;
        let scan_bytes = inner.context.metering.model_scan_bytes;
        let content_type = (request.parts.as_ref())
            .and_then(|parts| parts.headers.get(http::header::CONTENT_TYPE));
        let (body, leftover) = RequestTap::new(
            body,
            content_type,
            scan_bytes,
            inner.max_body_bytes,
            inner.body_idle,
            request.seen.clone(),
        );
        request.leftover = Some(leftover);
        let declared = (request.parts.as_ref()).and_then(|parts| declared_length(&parts.headers));
        let who = (request.guard.get_mut()).map_or(Client::Unknown, |exchange| exchange.client());
        let held = request_body::hold(body, &inner.hold, declared, &who, request.arrive);
        let held = tokio::select! {
            held = held => held.map_err(|error| match error {
                HoldError::Body(_) => {
                    ProxyError::from_body(&request.seen, (inner.max_body_bytes, inner.body_idle))
                }
                HoldError::Budget(after) => ProxyError::HeldBytesFull { after },
                HoldError::Late(after) => ProxyError::HeldBodyLate { after },
            }),
            () = inner.shutdown.reached(Phase::Cut) => Err(ProxyError::ShutdownCut),
        }?;
        if held.waited {
            inner.refusals.held_bytes_waited.inc();
        }

        let mut body = held.body;
        if !body.count_upload(&inner.uploads, client.addr) {
            let limit = inner.uploads.limit();
            return Err(ProxyError::UploadsPerClient { limit });
        }
        Ok(body)
    }

    /// An upstream slot, and one of the client connection's share of them, held by the exchange until
    /// it finishes.
    fn acquire(&self, request: &mut Forwarding, client: &ClientConn) -> Result<(), ProxyError> {
        let inner = &self.inner;
        let Ok(permit) = inner.upstream_slots.clone().try_acquire_owned() else {
            let limit = inner.max_upstream;
            return Err(ProxyError::UpstreamOverloaded { limit });
        };
        // The connection's own share, once there is room upstream at all: a refusal is the connection's.
        let share = match client.share.clone().map(Semaphore::try_acquire_owned) {
            Some(Err(_)) => {
                let limit = inner.per_connection;
                return Err(ProxyError::ConnectionShare { limit });
            }
            share => share.and_then(Result::ok),
        };
        if let Some(exchange) = request.guard.get_mut() {
            exchange.hold(permit, share);
        }
        Ok(())
    }

    /// The request rewritten for the upstream and sent; its message list read once it is on its way,
    /// beside the upstream's work, never before it (`Exchange::read_messages`). Ends with the response
    /// head, within `timeouts.response_headers` and a shutdown's grace.
    async fn send(
        &self, request: &mut Forwarding, target: &Target, body: Outgoing,
    ) -> Result<Response<UpstreamResponse>, Refused> {
        let inner = &self.inner;
        let held = body.held().map(|held| held as HeldBody);
        let mut parts = request.parts.take().ok_or(ProxyError::ClientBodyBroken)?;
        let trace = request.guard.get_mut().and_then(|e| e.trace());
        let upgrading = request.upgrade.is_some();
        inner.rewrite.request(&mut parts, target, trace, upgrading);
        let mut forward = std::pin::pin!(inner.connections.send(Request::from_parts(parts, body)));
        let first = std::future::poll_fn(|cx| Poll::Ready(forward.as_mut().poll(cx))).await;
        if let Some(exchange) = request.guard.get_mut() {
            exchange.read_messages(held);
        }
        let forward = async move {
            match first {
                Poll::Ready(answered) => answered,
                Poll::Pending => forward.await,
            }
        };
        let limits = (inner.max_body_bytes, inner.body_idle);
        let answered = tokio::select! {
            answered = tokio::time::timeout(inner.response_headers, forward) => match answered {
                Ok(Ok(response)) => Ok(response),
                Ok(Err(err)) => Err(ProxyError::from_client(
                    &err,
                    &inner.upstream_shown,
                    &request.seen,
                    limits,
                )),
                Err(_) => Err(ProxyError::UpstreamHeadersTimeout {
                    upstream: inner.upstream_shown.clone(),
                    after: inner.response_headers,
                }),
            },
            () = inner.shutdown.reached(Phase::Cut) => Err(ProxyError::ShutdownCut),
        };
        let answered =
            answered.and_then(
                |response| match undefined_status(response.status(), upgrading) {
                    None => Ok(response),
                    Some(why) => Err(ProxyError::UpstreamBadStatus {
                        upstream: inner.upstream_shown.clone(),
                        status: response.status().as_u16(),
                        why,
                    }),
                },
            );
        answered.map_err(|error| Refused { error, sent: true })
    }

    /// The response head rewritten for the client, and its body in the response tap, which meters it
    /// and finishes the exchange at its end. A `101` to a WebSocket handshake leaves its session to the
    /// client connection.
    fn answer(
        &self, request: &mut Forwarding, response: Response<UpstreamResponse>, client: &ClientConn,
    ) -> Response<ProxyBody> {
        let inner = &self.inner;
        let (mut parts, mut body) = response.into_parts();
        inner
            .rewrite
            .response(&mut parts, request.version, request.upgrade.is_some());
        let ended = body.is_end_stream();
        if request.upgrade.is_some() && parts.status != http::StatusCode::SWITCHING_PROTOCOLS {
            // hyper never polls it (its length is 0): it is over now all the same.
            body.length_in_place();
        }
        if parts.status == http::StatusCode::SWITCHING_PROTOCOLS {
            let upstream = parts.extensions.remove::<OnUpgrade>();
            if let (Some((client_side, Some(place))), Some(upstream), Some(handshake)) =
                (request.upgrade.take(), upstream, request.handshake.take())
            {
                let extensions = parts.headers.get_all(header::SEC_WEBSOCKET_EXTENSIONS);
                let deflate = Deflate::agreed(extensions.iter().filter_map(|v| v.to_str().ok()));
                let meter = SessionMeter::new(inner.context.clone(), handshake, deflate);
                let session = inner.sessions.session(place, client_side, upstream, meter);
                match &client.handoff {
                    Some(handoff) => handoff.put(session),
                    None => drop(tokio::spawn(session)),
                }
            }
        }
        let guard = &mut request.guard;
        if let Some(exchange) = guard.get_mut() {
            exchange.on_response(parts.status, parts.headers.get(header::CONTENT_TYPE));
            exchange.on_server_headers(&parts.headers);
        }
        if ended {
            guard.finish(End::Complete);
        }
        let guard = guard.take();
        let cut = inner.shutdown.reached(Phase::Cut);
        let body = ResponseTap::new(body, guard, inner.idle, cut);
        Response::from_parts(parts, Either::Left(body))
    }

    /// tokentap's own answer for a request refused in any phase, recorded as the exchange's response
    /// and counted where the refusal has a counter of its own; a refusal for want of room logged once
    /// per 10 s at most, any other each time.
    async fn refuse(&self, request: &mut Forwarding, refused: Refused) -> Response<ProxyBody> {
        let Refused { error, sent } = refused;
        let refusals = &self.inner.refusals;
        let counter = match &error {
            ProxyError::HeadTooLarge { .. } => Some(&refusals.header_too_large),
            ProxyError::HeldBytesFull { .. } => {
                refusals.held_bytes_waited.inc();
                Some(&refusals.held_bytes)
            }
            ProxyError::UploadsPerClient { .. } => Some(&refusals.uploads_per_client),
            ProxyError::UpstreamOverloaded { .. } => Some(&refusals.upstream_requests),
            ProxyError::ConnectionShare { .. } => Some(&refusals.connection_share),
            _ => None,
        };
        if let Some(counter) = counter {
            counter.inc();
        }
        if error.is_overload() {
            let mut overloaded =
                (self.inner.overloaded.lock()).unwrap_or_else(PoisonError::into_inner);
            if let Some(refused) = overloaded.occurred(request.arrive) {
                tracing::warn!(%error, refused, "requests refused (this one and those since the last such line)");
            }
        } else if sent {
            tracing::warn!(%error, "request not forwarded");
        } else {
            tracing::warn!(%error, "request refused");
        }
        if sent {
            if let Some(leftover) = request.leftover.take() {
                leftover.read_model(LEFTOVER_READ_LIMIT).await;
            }
        }
        let response = error.to_response();
        if let Some(exchange) = request.guard.get_mut() {
            exchange.on_response(response.status(), None);
        }
        request.guard.finish(End::Refused(error.refusal()));
        response.map(Either::Right)
    }
}
