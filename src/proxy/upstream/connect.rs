//! Opening a connection to the upstream: TCP by hyper-util's connector (name resolution, TCP_NODELAY so
//! a token is never held back by Nagle, keep-alive probes), then TLS by rustls for an `https://` upstream,
//! with the system's roots or a configured CA bundle. `timeouts.connect` bounds both together.
//!
//! The stream counts the bytes it has read and written (after TLS: what the upstream said and what it
//! was sent, not the records that carried them) and notes when its last write went out ([`Traffic`]);
//! its TCP reads note when their bytes reached the socket (`arrival.rs`). Whether a request that failed
//! on a reused connection may be sent again is read from these: not a byte read while it was out, and
//! how long after its last byte the connection closed (see `resend.rs`).

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::RootCertStore;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use tower_service::Service;

use super::arrival::{Arrival, Keeper, Stamped};
use crate::config::Config;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
            let bad = |e: rustls::pki_types::pem::Error| TlsSetupError::CaFile {
                path: shown.clone(),
                reason: e.to_string(),
            };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(bad)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(bad)?;
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

/// How to reach the upstream: its address, and TLS when it is `https://`.
pub(super) struct Connector {
    tcp: HttpConnector,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    timeout: Duration,
    base: Uri,
    _stamping: Keeper,
}

impl Connector {
    /// Loads TLS roots only when the upstream is `https://`.
    pub(super) fn new(config: &Config) -> Result<Self, TlsSetupError> {
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_keepalive(Some(Duration::from_secs(60)));
        let base = config.upstream.clone();
        let tls = if base.scheme_str() == Some("https") {
            let roots = roots(config.upstream_ca_file.as_deref())?;
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            // HTTP/1.1 only, so no ALPN is offered (as hyper-rustls does for an HTTP/1-only client).
            let tls = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth();
            let host = base.host().unwrap_or_default();
            let host = host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host);
            let name = ServerName::try_from(host.to_owned()).map_err(|e| {
                TlsSetupError::Rustls(rustls::Error::General(format!(
                    "{host} cannot be a TLS server name: {e}"
                )))
            })?;
            Some((TlsConnector::from(Arc::new(tls)), name))
        } else {
            None
        };
        Ok(Connector {
            tcp,
            tls,
            timeout: config.timeouts.connect,
            base,
            _stamping: Keeper::new(),
        })
    }

    /// A new connection, TLS handshake done, within `timeouts.connect`.
    pub(super) async fn connect(&self) -> Result<Stream, BoxError> {
        let open = async {
            let mut tcp = self.tcp.clone();
            std::future::poll_fn(|cx| tcp.poll_ready(cx)).await?;
            let arrival = Arc::<Arrival>::default();
            let socket = Stamped::new(
                tcp.call(self.base.clone()).await?.into_inner(),
                arrival.clone(),
            );
            let inner = match &self.tls {
                None => Inner::Plain(socket),
                Some((tls, name)) => Inner::Tls(Box::new(tls.connect(name.clone(), socket).await?)),
            };
            Ok::<_, BoxError>(Stream {
                inner,
                traffic: Arc::new(Traffic::new()),
                arrival,
            })
        };
        match tokio::time::timeout(self.timeout, open).await {
            Ok(opened) => opened,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out").into()),
        }
    }
}

enum Inner {
    Plain(Stamped),
    Tls(Box<TlsStream<Stamped>>),
}

/// An open connection to the upstream, what has crossed it, and when the last read's bytes reached the
/// socket.
pub struct Stream {
    inner: Inner,
    traffic: Arc<Traffic>,
    arrival: Arc<Arrival>,
}

impl Stream {
    /// What has crossed the connection, shared with whoever holds the connection it carries.
    pub(super) fn traffic(&self) -> Arc<Traffic> {
        self.traffic.clone()
    }

    /// When the last read's bytes reached the socket, shared likewise.
    pub(super) fn arrival(&self) -> Arc<Arrival> {
        self.arrival.clone()
    }

    fn note_written(&self, polled: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                self.traffic.wrote(n);
            }
        }
        polled
    }
}

/// The bytes read from and written to a connection, and when the last write went out.
pub(super) struct Traffic {
    read: AtomicU64,
    written: AtomicU64,
    /// When the last write went out, in nanoseconds after `opened`.
    last_write: AtomicU64,
    opened: Instant,
}

/// The counts of a [`Traffic`] at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) read: u64,
    pub(super) written: u64,
}

impl Traffic {
    fn new() -> Self {
        Traffic {
            read: AtomicU64::new(0),
            written: AtomicU64::new(0),
            last_write: AtomicU64::new(0),
            opened: Instant::now(),
        }
    }

    pub(super) fn counts(&self) -> Counts {
        Counts {
            read: self.read.load(Ordering::Relaxed),
            written: self.written.load(Ordering::Relaxed),
        }
    }

    /// When the last write went out (when the connection opened, if nothing was written).
    pub(super) fn last_write(&self) -> Instant {
        self.opened + Duration::from_nanos(self.last_write.load(Ordering::Relaxed))
    }

    fn wrote(&self, n: usize) {
        let at = Instant::now().saturating_duration_since(self.opened);
        self.written.fetch_add(n as u64, Ordering::Relaxed);
        let at = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
        self.last_write.store(at, Ordering::Relaxed);
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = match &mut this.inner {
            Inner::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        let read = (buf.filled().len() - before) as u64;
        if read > 0 {
            this.traffic.read.fetch_add(read, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = match &mut this.inner {
            Inner::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        };
        this.note_written(polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = match &mut this.inner {
            Inner::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        };
        this.note_written(polled)
    }

    fn is_write_vectored(&self) -> bool {
        match &self.inner {
            Inner::Plain(s) => s.is_write_vectored(),
            Inner::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            Inner::Plain(s) => Pin::new(s).poll_flush(cx),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            Inner::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
