//! The connections that carry requests to the model server: keep-alive HTTP/1.1 connections in a pool
//! of tokentap's own (`pool.rs`), opened by `connect.rs` (TCP_NODELAY, `timeouts.connect`, rustls for
//! `https://` upstreams).
//!
//! A request's connection is driven by the request itself, not by a task of its own: its service future
//! while the response head is awaited, then the response body as the client's side reads it
//! ([`body::UpstreamResponse`], [`pool`]). A frame therefore goes from the upstream socket to the client
//! socket in one wake-up of one task, and the frames that one read brought go out in one write.
//!
//! **Sending again.** A server may close a kept-alive connection at the very moment tokentap sends the
//! next request on it (its idle timer fired as the request was on the wire). A request that failed so is
//! sent once more, on a new connection, only when it cannot have been served: hyper handed it back
//! unsent (whatever its body), or, with its whole body held ([`Outgoing::replay`]), the reused
//! connection closed or reset without a byte of answer and either nothing of the request was written,
//! or the request is idempotent (its method, or an `Idempotency-Key`), or the close came within
//! `resend::WINDOW` (100 ms) of its last byte leaving. A server that read a POST, worked on it and then
//! closed does not get it twice. `resend.rs` has the rule and why; each resend is counted in
//! `tokentap_upstream_requests_resent_total`.
//!
//! **Upgrades.** A request that still carries `Upgrade` (only a WebSocket handshake does: the rewrite
//! removes it from every other) goes on a new connection of its own, never taken from the pool nor put
//! back, never sent twice ([`Upstream::send`]). That connection is driven by a task of its own until it
//! is over: after a `101` it hands its socket, with any bytes read past the head, to whoever holds
//! `hyper::upgrade::on` of the response (the session's relay, `tap/session.rs`); after a refusal it
//! closes once the refusal's body has been read. The task is aborted if the request is dropped before
//! its answer.

mod arrival;
mod body;
mod connect;
mod pool;
mod resend;
mod wake;

pub use arrival::{Arrival, Stamped};
pub use body::UpstreamResponse;
pub(crate) use connect::roots;
pub use connect::TlsSetupError;
use wake::{LookAgain, LOOK_AGAIN};

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use http::{Request, Response};
use http_body::Body;
use hyper::client::conn::http1;
use hyper::client::conn::TrySendError;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

use crate::config::Config;
pub use crate::proxy::request_body::Outgoing;
use crate::record::metrics::UpstreamCounters;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a request got no response head from the upstream.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No connection: refused, unreachable, timed out (`timeouts.connect`), or the TLS handshake failed.
    #[error("connect: {0}")]
    Connect(#[source] BoxError),
    /// The connection broke, or the upstream answered with something that is not HTTP/1.
    #[error(transparent)]
    Http(#[from] hyper::Error),
    /// The connection ended and hyper said nothing about the request.
    #[error("the connection closed before a response")]
    Closed,
}

impl UpstreamError {
    pub fn is_connect(&self) -> bool {
        matches!(self, UpstreamError::Connect(_))
    }

    /// A close or a reset of the connection, which a server that never got to the request causes: not a
    /// reply it could not parse, nor anything of tokentap's own making.
    fn is_close(&self) -> bool {
        match self {
            UpstreamError::Connect(_) => false,
            UpstreamError::Closed => true,
            UpstreamError::Http(e) => !e.is_parse() && !e.is_user() && !e.is_timeout(),
        }
    }
}

/// The upstream's connections: how to open one, and the idle ones.
pub struct Upstream {
    connector: connect::Connector,
    handshake: http1::Builder,
    pool: Arc<pool::Pool>,
    counters: UpstreamCounters,
}

impl Upstream {
    /// Loads TLS roots only when the upstream is `https://`. Starts the pool's watcher, so it must be
    /// called on the runtime.
    pub fn new(config: &Config, counters: UpstreamCounters) -> Result<Self, TlsSetupError> {
        // Header names are written in the case they came in, from the request's original case map, and
        // the response's are recorded for the client's side (see `net/server.rs`).
        let mut handshake = http1::Builder::new();
        handshake.preserve_header_case(true);
        Ok(Upstream {
            connector: connect::Connector::new(config)?,
            handshake,
            // Never more idle connections kept than may be in use at once
            // (limits.max_upstream_connections).
            pool: pool::Pool::new(
                config.limits.max_upstream_connections,
                config.timeouts.upstream_idle,
                counters.clone(),
            ),
            counters,
        })
    }

    /// Sends `request`, whose URI is the request line's target (origin form: path and query), on an
    /// idle connection or a new one, and waits for the response head. A request that failed on a reused
    /// connection the upstream closed without answering is sent once more on a new one (see the module's
    /// documentation).
    pub async fn send(
        &self, request: Request<Outgoing>,
    ) -> Result<Response<UpstreamResponse>, UpstreamError> {
        if request.headers().contains_key(http::header::UPGRADE) {
            // Boxed: its connect and handshake futures are large, and inline they made every
            // request's future (moved into its box at each request) ~8k instructions dearer.
            return Box::pin(self.send_upgrade(request)).await;
        }
        let (mut conn, reused) = match self.pool.take().await {
            Some(conn) => (conn, true),
            None => (self.connect().await?, false),
        };
        // A copy to send again, only where it may be: a fresh connection never is.
        let mut again = reused
            .then(|| request.body().replay())
            .flatten()
            .map(|body| Request::from_parts(clone_head(&request), body));
        let before = conn.traffic.counts();
        let wake = LookAgain::new();
        // A large copy that only the keep-alive race could send again goes once that race is over.
        let release = again.as_ref().is_some_and(|r| {
            !resend::idempotent(r) && r.body().size_hint().lower() >= resend::RELEASE_COPY_BYTES
        });
        let traffic = conn.traffic.clone();
        let answered = {
            let mut answer = pin!(exchange(&mut conn, request, &wake));
            loop {
                tokio::select! {
                    biased;
                    answered = &mut answer => break answered,
                    () = tokio::time::sleep(resend::WINDOW), if release && again.is_some() => {
                        let written = traffic.counts().written != before.written;
                        if written && traffic.last_write().elapsed() >= resend::WINDOW {
                            again = None;
                        }
                    }
                }
            }
        };
        let response = match answered {
            Ok(response) => response,
            Err(Failed::NotSent(request, error)) if reused => {
                tracing::debug!(%error, "a reused upstream connection was closed before the request was written: sending it on a new one");
                self.counters.resent.inc();
                conn = self.connect().await?;
                exchange(&mut conn, *request, &wake)
                    .await
                    .map_err(Failed::into_error)?
            }
            Err(Failed::Failed(error)) => {
                let failure = failure(&conn, before, &wake, &error);
                let Some((request, why)) = again.and_then(|request| {
                    let why = resend::again(&request, &failure)?;
                    Some((request, why))
                }) else {
                    return Err(error);
                };
                tracing::debug!(%error, ?why, after_last_write = ?failure.after_last_write, "a reused upstream connection closed without answering: sending the request again");
                self.counters.resent.inc();
                conn = self.connect().await?;
                exchange(&mut conn, request, &wake)
                    .await
                    .map_err(Failed::into_error)?
            }
            Err(failed) => return Err(failed.into_error()),
        };
        let lease = body::Lease {
            conn,
            pool: self.pool.clone(),
        };
        let mut response = response.map(|body| UpstreamResponse::new(body, lease, wake));
        if response.body().is_end_stream() {
            // Nobody polls a body that is already over: the connection goes back now.
            response.body_mut().give_back();
        }
        Ok(response)
    }

    /// An upgrade request on a new connection of its own (see the module's documentation).
    async fn send_upgrade(
        &self, request: Request<Outgoing>,
    ) -> Result<Response<UpstreamResponse>, UpstreamError> {
        let stream = (self.connector.connect().await).map_err(UpstreamError::Connect)?;
        let arrival = stream.arrival();
        let (mut sender, driver) = self.handshake.handshake(TokioIo::new(stream)).await?;
        let driving = AbortOnDrop(Some(tokio::spawn(async move {
            if let Err(error) = driver.with_upgrades().await {
                tracing::debug!(%error, "upstream connection of an upgrade ended");
            }
        })));
        let response = sender.send_request(request).await?;
        driving.disarm();
        Ok(response.map(|body| UpstreamResponse::driven_elsewhere(body, arrival)))
    }

    async fn connect(&self) -> Result<Box<pool::Conn>, UpstreamError> {
        let stream = self
            .connector
            .connect()
            .await
            .map_err(UpstreamError::Connect)?;
        let (traffic, arrival) = (stream.traffic(), stream.arrival());
        let (sender, driver) = self.handshake.handshake(TokioIo::new(stream)).await?;
        Ok(Box::new(pool::Conn::new(sender, driver, traffic, arrival)))
    }
}

/// A task aborted when dropped, unless disarmed first.
struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl AbortOnDrop {
    /// The task runs on by itself (a dropped handle detaches it).
    fn disarm(mut self) {
        self.0.take();
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// What is known of a try on `conn` that failed with `error`; `before` are the connection's counts
/// when it began. The close is timed by when it woke the request's task, not by when the task ran.
fn failure(
    conn: &pool::Conn, before: connect::Counts, wake: &LookAgain, error: &UpstreamError,
) -> resend::Failure {
    let after = conn.traffic.counts();
    let last_write = conn.traffic.last_write();
    let seen = wake
        .woken_at()
        .filter(|woken| *woken >= last_write)
        .unwrap_or_else(Instant::now);
    resend::Failure {
        answered: after.read != before.read,
        written: after.written != before.written,
        closed: error.is_close(),
        after_last_write: seen.saturating_duration_since(last_write),
    }
}

/// The request's head, copied for a second try (its body is copied by [`Outgoing::replay`]).
fn clone_head(request: &Request<Outgoing>) -> http::request::Parts {
    let mut copy = Request::new(());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    *copy.extensions_mut() = request.extensions().clone();
    copy.into_parts().0
}

/// How sending a request on a connection failed.
enum Failed {
    /// Not a byte of the request was written: the connection had closed. It may be sent again.
    NotSent(Box<Request<Outgoing>>, hyper::Error),
    Failed(UpstreamError),
}

impl Failed {
    fn into_error(self) -> UpstreamError {
        match self {
            Failed::NotSent(_, error) => UpstreamError::Http(error),
            Failed::Failed(error) => error,
        }
    }
}

impl From<TrySendError<Request<Outgoing>>> for Failed {
    fn from(mut failed: TrySendError<Request<Outgoing>>) -> Self {
        match failed.take_message() {
            Some(request) => Failed::NotSent(Box::new(request), failed.into_error()),
            None => Failed::Failed(UpstreamError::Http(failed.into_error())),
        }
    }
}

/// Sends the request on `conn` and drives the connection until the response head has come.
async fn exchange(
    conn: &mut pool::Conn, request: Request<Outgoing>, wake: &LookAgain,
) -> Result<Response<hyper::body::Incoming>, Failed> {
    let mut answer = pin!(conn.sender.try_send_request(request));
    let mut over = false;
    wake.time_wakes(true);
    let answer = poll_fn(|cx| {
        for _ in 0..LOOK_AGAIN {
            let (polled, woken) = wake.poll(cx, |cx| {
                if let Poll::Ready(answer) = answer.as_mut().poll(cx) {
                    return Poll::Ready(Some(answer));
                }
                if over {
                    // hyper answers every request of a connection that ends (with an error if nothing
                    // else), so this is not expected; it must not hang either.
                    return Poll::Ready(None);
                }
                // Writes the request and reads the answer; a head it brings is ready when this returns.
                over = conn.poll_driver(cx).is_ready();
                match answer.as_mut().poll(cx) {
                    Poll::Ready(answer) => Poll::Ready(Some(answer)),
                    Poll::Pending if over => Poll::Ready(None),
                    Poll::Pending => Poll::Pending,
                }
            });
            if polled.is_ready() || !woken {
                return polled;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
    wake.time_wakes(false);
    match answer {
        Some(answer) => answer.map_err(Failed::from),
        None => Err(Failed::Failed(UpstreamError::Closed)),
    }
}
