//! WebSocket upgrades (RFC 6455 §4) passed through: which requests are handshakes, the sessions'
//! limits, and the session that follows an upstream's `101`.
//!
//! A handshake is an HTTP/1.1 `GET` whose `Upgrade` names `websocket` and whose `Connection` names
//! `upgrade`, with no body. It goes upstream with `Connection` and `Upgrade` unchanged
//! (`hop_by_hop::strip_for_upgrade`), on a connection of its own (`upstream/`), and the answer comes
//! back with them: a `101` and its headers, or any refusal, as the upstream sent it. Any other
//! `Upgrade` (`h2c`, or `websocket` on another method, another version, or with a body) is dropped as a
//! hop-by-hop header, as before: the upstream answers the plain request, as a server that ignores
//! `Upgrade` would (RFC 9110 §7.8).
//!
//! Before anything goes upstream a handshake takes one of `limits.max_sessions` places and one of its
//! client address's `limits.max_sessions_per_client`, or is answered 503 (counted). It holds them until
//! its session ends, or until the upstream refuses it. Once upgraded, a session holds no
//! `limits.max_upstream_connections` slot: the handshake's is given back at the `101`, like any
//! request's at the end of its body, so hours-long sessions cannot starve the requests.
//!
//! The session is run by the client connection's own task once hyper has handed over its socket
//! ([`Handoff`]): so it keeps that connection's place among `limits.max_connections` and is waited for
//! by a shutdown's drain like any open connection; at the cut it is closed (`tap/session.rs`).

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::{header, HeaderMap, Method, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Config;
use crate::proxy::error::ProxyError;
use crate::proxy::request_body::{ClientPlace, PerClient};
use crate::record::metrics::SessionCounts;
use crate::shutdown::{Phase, Shutdown};
use crate::tap::realtime::SessionMeter;
use crate::tap::session::{self, Ended};

/// A session, to be run once the client's socket is handed over.
pub type Session = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Whether a request is a WebSocket handshake tokentap passes on (see the module's documentation).
pub fn is_websocket(parts: &http::request::Parts) -> bool {
    parts.version == Version::HTTP_11
        && parts.method == Method::GET
        && names(&parts.headers, header::UPGRADE, "websocket")
        && names(&parts.headers, header::CONNECTION, "upgrade")
        && !parts.headers.contains_key(header::TRANSFER_ENCODING)
        && (parts.headers.get_all(header::CONTENT_LENGTH).iter()).all(|v| v.as_bytes() == b"0")
}

/// Whether a comma-separated header names `token` (in any case).
fn names(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|value| {
        (value.to_str().ok())
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
}

/// The sessions' limits, and what a session needs to run.
pub struct Sessions {
    open: Arc<Semaphore>,
    max: usize,
    per_client: PerClient,
    counts: SessionCounts,
    idle: Duration,
    shutdown: Shutdown,
}

/// A session's place among `limits.max_sessions` and its client's share; given back when dropped.
pub struct Place {
    _open: OwnedSemaphorePermit,
    _client: Option<ClientPlace>,
}

impl Sessions {
    pub fn new(config: &Config, counts: SessionCounts, shutdown: Shutdown) -> Self {
        let limits = &config.limits;
        Sessions {
            open: Arc::new(Semaphore::new(limits.max_sessions)),
            max: limits.max_sessions,
            per_client: PerClient::new(limits.max_sessions_per_client.min(limits.max_sessions)),
            counts,
            idle: config.timeouts.session_idle,
            shutdown,
        }
    }

    /// A place for a handshake from `client`, or the refusal, counted.
    pub fn admit(&self, client: Option<IpAddr>) -> Result<Place, ProxyError> {
        let Ok(open) = self.open.clone().try_acquire_owned() else {
            self.counts.full.inc();
            return Err(ProxyError::SessionsFull { limit: self.max });
        };
        let client = match client.map(|addr| self.per_client.enter(addr)) {
            Some(None) => {
                self.counts.per_client.inc();
                let limit = self.per_client.limit();
                return Err(ProxyError::SessionsPerClient { limit });
            }
            place => place.flatten(),
        };
        Ok(Place {
            _open: open,
            _client: client,
        })
    }

    /// The session between the client's socket and the upstream's, each handed over by hyper once its
    /// `101` is through, metered by `meter` as it passes; it holds `place` until it ends.
    pub fn session(
        &self, place: Place, client: OnUpgrade, upstream: OnUpgrade, mut meter: SessionMeter,
    ) -> Session {
        let (idle, cut) = (self.idle, self.shutdown.reached(Phase::Cut));
        let open = Open::new(self.counts.open.clone());
        Box::pin(async move {
            let _held = (place, open);
            let (client, upstream) = match tokio::join!(client, upstream) {
                (Ok(client), Ok(upstream)) => (TokioIo::new(client), TokioIo::new(upstream)),
                (client, upstream) => {
                    let (client, upstream) = (client.err(), upstream.err());
                    tracing::debug!(?client, ?upstream, "an upgrade was not handed over");
                    return;
                }
            };
            let ended = session::relay(client, upstream, idle, cut, &mut meter).await;
            meter.finish(&ended);
            match ended {
                Ended::Idle => tracing::debug!(
                    after = ?idle,
                    "a WebSocket session with no byte either way closed (timeouts.session_idle)"
                ),
                ended => tracing::debug!(?ended, "a WebSocket session ended"),
            }
        })
    }
}

/// One session counted in `tokentap_sessions_in_flight` until dropped.
struct Open(IntGauge);

impl Open {
    fn new(gauge: IntGauge) -> Self {
        gauge.inc();
        Open(gauge)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Where the forwarding service leaves a session for the client connection's task, which runs it once
/// hyper has handed over the socket (see the module's documentation). Clones share the slot.
#[derive(Clone, Default)]
pub struct Handoff(Arc<Mutex<Option<Session>>>);

impl Handoff {
    pub fn put(&self, session: Session) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(session);
    }

    pub fn take(&self) -> Option<Session> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: Method, version: Version, headers: &[(&'static str, &'static str)]) -> bool {
        let mut request = http::Request::builder().method(method).version(version);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let (parts, ()) = request.body(()).unwrap_or_default().into_parts();
        is_websocket(&parts)
    }

    #[test]
    fn only_an_http11_get_without_a_body_naming_websocket_and_upgrade_is_a_handshake() {
        let handshake = [
            ("upgrade", "WebSocket"),
            ("connection", "keep-alive, Upgrade"),
        ];
        assert!(parts(Method::GET, Version::HTTP_11, &handshake));
        assert!(parts(
            Method::GET,
            Version::HTTP_11,
            &[handshake[0], handshake[1], ("content-length", "0")]
        ));
        for (method, version, headers) in [
            (Method::POST, Version::HTTP_11, &handshake[..]),
            (Method::GET, Version::HTTP_10, &handshake[..]),
            (
                Method::GET,
                Version::HTTP_11,
                &[("upgrade", "h2c"), ("connection", "upgrade")][..],
            ),
            (
                Method::GET,
                Version::HTTP_11,
                &[("upgrade", "websocket")][..],
            ),
            (
                Method::GET,
                Version::HTTP_11,
                &[handshake[0], handshake[1], ("content-length", "5")][..],
            ),
            (
                Method::GET,
                Version::HTTP_11,
                &[handshake[0], handshake[1], ("transfer-encoding", "chunked")][..],
            ),
        ] {
            assert!(
                !parts(method.clone(), version, headers),
                "{method} {version:?} {headers:?}"
            );
        }
    }
}
