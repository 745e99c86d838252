//! The connections that carry requests to the model server: keep-alive HTTP/1.1 connections in a pool
//! of tokentap's own, TCP_NODELAY so a token is never held back by Nagle, a connect timeout, and rustls for
//! `https://` upstreams with the system's roots or a configured CA bundle.
//!
//! A request's connection is driven by the request itself, not by a task of its own: its service future
//! while the response head is awaited, then the response body as the client's side reads it
//! ([`body::UpstreamResponse`], [`pool`]). A frame therefore goes from the upstream socket to the client
//! socket in one wake-up of one task, and the frames that one read brought go out in one write.

mod body;
mod pool;
mod wake;

pub use body::UpstreamResponse;
use wake::{LookAgain, LOOK_AGAIN};

use std::future::{poll_fn, Future};
use std::path::Path;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use http::{Request, Response, Uri};
use http_body::Body;
use hyper::client::conn::http1;
use hyper::client::conn::TrySendError;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;
use tower_service::Service;

use crate::config::Config;
use crate::tap::RequestTap;

pub type UpstreamBody = RequestTap<hyper::body::Incoming>;

/// How long an unused connection is kept for the next request.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

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
}

#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("reading CA bundle {path}: {reason}")]
    CaFile { path: String, reason: String },
    #[error("CA bundle {0} holds no usable certificate")]
    NoCertificates(String),
    #[error("no usable root certificates found on this system; set upstream_ca_file")]
    NoSystemRoots,
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
}

pub(crate) fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, TlsSetupError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let shown = path.display().to_string();
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| TlsSetupError::CaFile {
                    path: shown.clone(),
                    reason: e.to_string(),
                })?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| TlsSetupError::CaFile {
                    path: shown.clone(),
                    reason: e.to_string(),
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(TlsSetupError::NoCertificates(shown));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for err in &found.errors {
                tracing::warn!(%err, "skipping unreadable system certificate");
            }
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(TlsSetupError::NoSystemRoots);
            }
        }
    }
    Ok(roots)
}

/// The upstream's connections: how to open one, and the idle ones.
pub struct Upstream {
    /// Scheme and authority to connect to (and the path prefix, which the service puts in each target).
    base: Uri,
    connector: HttpsConnector<HttpConnector>,
    handshake: http1::Builder,
    pool: Arc<pool::Pool>,
}

impl Upstream {
    /// Loads TLS roots only when the upstream is `https://`. Starts the pool's sweep, so it must be called
    /// on the runtime.
    pub fn new(config: &Config) -> Result<Self, TlsSetupError> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.timeouts.connect));
        http.set_keepalive(Some(Duration::from_secs(60)));

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = if config.upstream.scheme_str() == Some("https") {
            roots(config.upstream_ca_file.as_deref())?
        } else {
            RootCertStore::empty()
        };
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        // Header names are written in the case they came in, from the request's original case map, and
        // the response's are recorded for the client's side (see `net/server.rs`).
        let mut handshake = http1::Builder::new();
        handshake.preserve_header_case(true);
        Ok(Upstream {
            base: config.upstream.clone(),
            connector,
            handshake,
            // Never more idle connections kept than may be in use at once
            // (limits.max_upstream_connections).
            pool: pool::Pool::new(config.limits.max_upstream_connections, IDLE_TIMEOUT),
        })
    }

    /// Sends `request`, whose URI is the request line's target (origin form: path and query), on an idle connection, or a new one, and waits for the response head. A request that could not be
    /// written because the idle connection it was given had closed is sent again on a new connection;
    /// one that was written is never sent twice.
    pub async fn send(
        &self,
        request: Request<UpstreamBody>,
    ) -> Result<Response<UpstreamResponse>, UpstreamError> {
        let idle = poll_fn(|cx| Poll::Ready(self.pool.take(cx))).await;
        let (mut conn, reused) = match idle {
            Some(conn) => (conn, true),
            None => (self.connect().await?, false),
        };
        let wake = LookAgain::new();
        let response = match exchange(&mut conn, request, &wake).await {
            Ok(response) => response,
            Err(Failed::NotSent(request, _)) if reused => {
                conn = self.connect().await?;
                exchange(&mut conn, *request, &wake)
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
            poll_fn(|cx| {
                response.body_mut().give_back(cx);
                Poll::Ready(())
            })
            .await;
        }
        Ok(response)
    }

    async fn connect(&self) -> Result<Box<pool::Conn>, UpstreamError> {
        let mut connector = self.connector.clone();
        poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(UpstreamError::Connect)?;
        let io = connector
            .call(self.base.clone())
            .await
            .map_err(UpstreamError::Connect)?;
        let (sender, driver) = self.handshake.handshake(io).await?;
        Ok(Box::new(pool::Conn::new(sender, driver)))
    }
}

/// How sending a request on a connection failed.
enum Failed {
    /// Not a byte of the request was written: the connection had closed. It may be sent again.
    NotSent(Box<Request<UpstreamBody>>, hyper::Error),
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

impl From<TrySendError<Request<UpstreamBody>>> for Failed {
    fn from(mut failed: TrySendError<Request<UpstreamBody>>) -> Self {
        match failed.take_message() {
            Some(request) => Failed::NotSent(Box::new(request), failed.into_error()),
            None => Failed::Failed(UpstreamError::Http(failed.into_error())),
        }
    }
}

/// Sends the request on `conn` and drives the connection until the response head has come.
async fn exchange(
    conn: &mut pool::Conn,
    request: Request<UpstreamBody>,
    wake: &LookAgain,
) -> Result<Response<hyper::body::Incoming>, Failed> {
    let mut answer = pin!(conn.sender.try_send_request(request));
    let mut over = false;
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
    match answer {
        Some(answer) => answer.map_err(Failed::from),
        None => Err(Failed::Failed(UpstreamError::Closed)),
    }
}
