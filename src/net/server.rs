//! The listeners: the proxy port (HTTP/1.1 and h2c on one socket, or both over TLS with `listen_tls:`,
//! `tls.rs`) and the metrics port (its endpoints are `admin.rs`). [`Listeners::bind`] binds both and says where they are (so tests run the whole
//! proxy in-process on `127.0.0.1:0`); [`Listeners::serve`] runs their accept loops with what each
//! connection needs, handed in by the caller (`app/`, which builds it all and shuts it down).
//!
//! The proxy port holds at most `limits.max_connections` client connections. At the cap the oldest idle
//! one gives its place to the newcomer (`places.rs`) and is counted; when every one is busy the
//! newcomer is closed at once and counted (as Envoy and nginx do at their limits: a client left in the
//! listen backlog would have a connection that looks open and a request nobody reads), while the
//! connections already open carry on untouched. Each connection is timed by `client_conn.rs`, its
//! request heads are bounded by `limits.max_request_header_bytes` (and hyper's 100 headers), and an
//! h2 connection may open `limits.max_concurrent_streams` streams at once. Accept failures (out of
//! file descriptors) back off and are logged as a [`RepeatedWarning`], not once per retry.
//!
//! Connections are served with upgrades: a WebSocket handshake the upstream accepted leaves its session
//! in the connection's [`Handoff`], and once hyper has written the `101` and handed back the socket,
//! the connection's task runs the session, counted busy, so it keeps its place, is never reclaimed nor
//! timed out as idle, and is waited for by a shutdown's drain (`proxy/upgrade.rs`).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;

use http::Response;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::config::{Config, Limits, Timeouts};
use crate::logging::repeated::RepeatedWarning;
use crate::net::activity::{Activity, InProgress, Now, Tracked};
use crate::net::admin::{serve_metrics, MetricsPort};
use crate::net::client_conn::{accept, sniff, Speaks, TimedIo};
use crate::net::delay::{Forwarding, FrameDelay};
use crate::net::places::{Admission, Places};
use crate::net::tls::TlsListener;
use crate::proxy::service::ClientConn;
use crate::proxy::upgrade::Handoff;
use crate::proxy::Proxy;
use crate::record::metrics::Refusals;
use crate::shutdown::{Count, Counted, Phase, Reached, Shutdown};

/// A port that could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("binding {what} on {addr}: {source}")]
pub struct BindError {
    what: &'static str,
    addr: SocketAddr,
    source: std::io::Error,
}

/// The proxy and metrics ports, bound and not yet served.
pub struct Listeners {
    proxy: TcpListener,
    metrics: TcpListener,
    /// Where the proxy port is bound (the port the system chose for `:0`).
    pub proxy_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
}

/// The accept loops of both ports, running until aborted.
pub struct Serving {
    pub proxy: JoinHandle<()>,
    pub metrics: JoinHandle<()>,
}

impl Listeners {
    /// Binds `listen` and `metrics_listen`.
    pub async fn bind(config: &Config) -> Result<Self, BindError> {
        let proxy = bind("the proxy listener", config.listen).await?;
        let metrics = bind("the metrics listener", config.metrics_listen).await?;
        let local = |l: &TcpListener, addr| l.local_addr().unwrap_or(addr);
        Ok(Listeners {
            proxy_addr: local(&proxy, config.listen),
            metrics_addr: local(&metrics, config.metrics_listen),
            proxy,
            metrics,
        })
    }

    /// Starts accepting on both ports.
    pub fn serve(self, proxy: ProxyPort, metrics: MetricsPort) -> Serving {
        let serve = ServeProxy {
            places: Places::new(proxy.limits.max_connections),
            builders: Builders::new(connection_builder(&proxy.limits)),
            port: proxy,
        };
        Serving {
            proxy: tokio::spawn(serve.run(self.proxy)),
            metrics: tokio::spawn(serve_metrics(self.metrics, metrics)),
        }
    }
}

/// Binds `addr` (`what` names it in the error).
pub async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { what, addr, source })
}

/// What the proxy port serves and its bounds.
pub struct ProxyPort {
    pub proxy: Proxy,
    /// `max_connections`, the request heads' bounds and `max_concurrent_streams`.
    pub limits: Limits,
    /// The client timers (`client_header_read`, `client_idle`).
    pub timeouts: Timeouts,
    /// The counters of `tokentap_connections_refused_total`, `tokentap_connections_reclaimed_total`
    /// and their kin.
    pub refused: Refusals,
    /// `tokentap_forwarding_delay_seconds`.
    pub forwarding_delay: prometheus::Histogram,
    /// Counts each client connection as open, however its task ends.
    pub connections: Count,
    pub shutdown: Shutdown,
    /// TLS on the port (`listen_tls:`); `None`: plain TCP.
    pub tls: Option<TlsListener>,
}

fn connection_builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The upstream's response headers are passed on as they are: no `date` is added where it sent none,
    // and each name keeps the case it came in (the original case map travels in the message's
    // extensions, from this parser through the upstream client and back; HTTP/2 names are lowercase).
    // Its cost: one more small header map and an extensions entry per message; the spellings it holds
    // are slices of the read buffer the header values already share, not copies.
    // An HTTP/1.1 head must fit the read buffer whole: beyond it hyper answers 431 and closes.
    // hyper's own header_read_timeout is off: its clock also runs while a kept-alive connection waits
    // for its next request, which would cap client_idle at client_header_read; client_conn.rs times both.
    let read_buffer = limits
        .max_request_header_bytes
        .max(Limits::MIN_HEADER_BYTES);
    builder
        .http1()
        .auto_date_header(false)
        .preserve_header_case(true)
        .header_read_timeout(None)
        .max_buf_size(read_buffer);
    let h2_header_list = u32::try_from(limits.max_request_header_bytes).unwrap_or(u32::MAX);
    builder
        .http2()
        .auto_date_header(false)
        .max_header_list_size(h2_header_list)
        .max_concurrent_streams(limits.max_concurrent_streams);
    builder
}

/// The future hyper holds for a request until its response head: `handled`, and the response body
/// tracked as in progress on its connection. hyper's HTTP/1 server keeps a slot the size of this future
/// for the connection's whole life (and an h2 stream's task holds it inline for the stream's), so the
/// forwarding future, ~5 KiB and done once the response head is back, goes in a box of its own: one
/// allocation per request, freed at the head, instead of its size held per open connection.
/// Each data frame of the body is noted in `frames` on its way into hyper (`delay.rs`).
fn respond<F, B>(
    handled: F, in_progress: InProgress, frames: Arc<FrameDelay>,
) -> impl Future<Output = Result<Response<Tracked<Forwarding<B>>>, Infallible>>
where
    F: Future<Output = Result<Response<B>, Infallible>>,
{
    let handled = Box::pin(handled);
    async move {
        let response = handled.await?;
        Ok(response.map(|body| Tracked::new(Forwarding::new(body, frames), in_progress)))
    }
}

/// The proxy port's connection builders: one for each HTTP version a connection's first bytes name
/// ([`sniff`]), and the auto-detecting one for a connection they do not.
struct Builders {
    auto: auto::Builder<TokioExecutor>,
    http1: auto::Builder<TokioExecutor>,
    h2: auto::Builder<TokioExecutor>,
}

impl Builders {
    fn new(auto: auto::Builder<TokioExecutor>) -> Self {
        Builders {
            http1: auto.clone().http1_only(),
            h2: auto.clone().http2_only(),
            auto,
        }
    }
}

/// The proxy port's accept loop and what each connection needs.
struct ServeProxy {
    port: ProxyPort,
    /// One place per connection served, `limits.max_connections` in all.
    places: Arc<Places>,
    builders: Builders,
}

impl ServeProxy {
    async fn run(self, listener: TcpListener) {
        let this = Arc::new(self);
        let (mut failures, mut refusals) = (RepeatedWarning::default(), RepeatedWarning::default());
        loop {
            let stream = accept(&listener, "proxy", &mut failures).await;
            let activity = Arc::new(Activity::default());
            let place = match this.places.admit(&activity) {
                Admission::Admitted { place, reclaimed } => {
                    if reclaimed {
                        this.port.refused.reclaimed.inc();
                    }
                    place
                }
                Admission::Refused => {
                    this.port.refused.connections.inc();
                    if let Some(refused) = refusals.occurred(tokio::time::Instant::now()) {
                        let limit = this.port.limits.max_connections;
                        tracing::warn!(limit, refused, "client connections closed at limits.max_connections, every one busy (count since the last such line)");
                    }
                    drop(stream);
                    continue;
                }
            };
            let open: Counted = this.port.connections.enter();
            let this = this.clone();
            // The connection's state (hyper's connection, its buffers, the request slot) boxed once:
            // inline it made the task several KiB that tokio moved whole at spawn and at each change
            // of the task's stage, a few thousand instructions of copying per connection.
            tokio::spawn(async move {
                Box::pin(this.serve(stream, activity)).await;
                drop((open, place));
            });
        }
    }

    async fn serve(&self, stream: tokio::net::TcpStream, activity: Arc<Activity>) {
        let addr = stream.peer_addr().ok().map(|a| a.ip());
        let header_read = self.port.timeouts.client_header_read;
        let frames = FrameDelay::new(self.port.forwarding_delay.clone());
        let mut draining = self.port.shutdown.reached(Phase::Draining);
        let reclaimed = || std::future::poll_fn(|cx| activity.poll_reclaimed(cx));
        let Some(tls) = &self.port.tls else {
            let io = self.timed(stream, &activity, &frames);
            let speaks = tokio::select! {
                // The head's deadline: a silent connection is given up on when its timer closes it.
                speaks = sniff(io.get_ref(), io.deadline()) => speaks,
                // A connection that has sent nothing yet is closed, as hyper-util closes one still
                // reading its first bytes.
                () = &mut draining => return,
                () = reclaimed() => return,
            };
            return self
                .serve_http(io, speaks, addr, activity, frames, draining)
                .await;
        };
        let deadline = tokio::time::Instant::now() + header_read;
        let (stream, speaks) = tokio::select! {
            shaken = tls.handshake(stream, deadline) => match shaken {
                Ok(shaken) => shaken,
                Err(failed) => {
                    self.port.refused.tls_handshakes[failed.index()].inc();
                    return;
                }
            },
            // Like a connection that has sent no head yet.
            () = &mut draining => return,
            () = reclaimed() => return,
        };
        let io = self.timed(stream, &activity, &frames);
        self.serve_http(io, speaks, addr, activity, frames, draining)
            .await;
    }

    /// The client's socket (or its TLS stream) with the connection's timers.
    fn timed<T>(
        &self, stream: T, activity: &Arc<Activity>, frames: &Arc<FrameDelay>,
    ) -> TimedIo<T> {
        let timeouts = &self.port.timeouts;
        let (header_read, idle) = (timeouts.client_header_read, timeouts.client_idle);
        TimedIo::new(stream, activity.clone(), header_read, idle)
            .counting_head_timeouts(self.port.refused.head_timeouts.clone())
            .timing_frames(frames.clone())
    }

    /// Serves HTTP on a connection whose version is known as far as `speaks` says, until it ends.
    async fn serve_http<T>(
        &self, io: TimedIo<T>, speaks: Speaks, addr: Option<std::net::IpAddr>,
        activity: Arc<Activity>, frames: Arc<FrameDelay>, draining: Reached,
    ) where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let builder = match speaks {
            Speaks::Http1 => &self.builders.http1,
            Speaks::H2 => &self.builders.h2,
            Speaks::Undecided => &self.builders.auto,
        };
        let io = TokioIo::new(io);
        let proxy = self.port.proxy.clone();
        // An HTTP/1.1 connection carries one request at a time: only h2 needs a share of its own.
        let handoff = Handoff::default();
        let client = ClientConn {
            share: (!matches!(speaks, Speaks::Http1)).then(|| proxy.connection_share()),
            addr,
            handoff: (!matches!(speaks, Speaks::H2)).then(|| handoff.clone()),
        };
        let busy = activity.clone();
        let service = service_fn(move |request| {
            let in_progress = activity.begin();
            let handled = proxy.clone().handle(request, client.clone());
            respond(handled, in_progress, frames.clone())
        });
        let conn = builder.serve_connection_with_upgrades(io, service);
        tokio::pin!(conn);
        let result = tokio::select! {
            result = conn.as_mut() => result,
            () = draining => {
                // Finish the request in progress (h1) or the open streams (h2), take no more. An h2
                // client that reads nothing while it has no request (a sync client between calls)
                // never answers the GOAWAY's PING: once the connection has nothing in progress it is
                // closed, as an idle one is when its place is reclaimed.
                conn.as_mut().graceful_shutdown();
                tokio::select! {
                    result = conn.as_mut() => result,
                    () = close_when_idle(&busy) => conn.await,
                }
            }
        };
        if let Err(err) = result {
            // hyper has answered 431 (or 414) and closed; it gives no other hook to count it by.
            let head_too_large = err
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_parse_too_large);
            if head_too_large {
                self.port.refused.header_too_large.inc();
            }
            tracing::debug!(%err, "client connection ended with an error");
        }
        if let Some(session) = handoff.take() {
            let _in_progress = busy.begin();
            session.await;
        }
    }
}

/// Takes the connection's place back the moment it has no request in progress and its answers are
/// written (so its read side reads it as closed); pending until then.
async fn close_when_idle(activity: &Activity) {
    std::future::poll_fn(|cx| loop {
        match activity.watch(cx.waker()) {
            Now::Reclaimed => return Poll::Ready(()),
            Now::Idle if activity.reclaim() => return Poll::Ready(()),
            // A request began between the look and the reclaim: look again.
            Now::Idle => continue,
            Now::Busy | Now::Unsent => return Poll::Pending,
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_holds_a_small_slot_for_its_request_whatever_the_forwarding_future_weighs() {
        let heavy = async {
            let state = [1u8; 4096];
            tokio::task::yield_now().await;
            Ok::<_, Infallible>(Response::new(std::hint::black_box(state)[0]))
        };
        assert!(std::mem::size_of_val(&heavy) > 4096);
        let activity = Arc::new(Activity::default());
        let histogram = prometheus::Histogram::with_opts(prometheus::HistogramOpts::new("h", "h"));
        let Ok(histogram) = histogram else {
            panic!("a histogram");
        };
        let slot = respond(heavy, activity.begin(), FrameDelay::new(histogram));
        assert!(
            std::mem::size_of_val(&slot) <= 64,
            "{}",
            std::mem::size_of_val(&slot)
        );
    }
}
