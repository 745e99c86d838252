//! Opening a connection to the upstream: TCP by hyper-util's connector (name resolution, TCP_NODELAY so
//! a token is never held back by Nagle, keep-alive probes), then TLS by rustls for an `https://` upstream,
//! with the system's roots or a configured CA bundle. `timeouts.connect` bounds both together.
//!
//! The stream counts the bytes it has read (after TLS: what the upstream said, not the records that
//! carried it), and its TCP reads note when their bytes reached the socket (`arrival.rs`). A request
//! that failed on a reused connection is sent again only if this count did not move while it was out:
//! the upstream closed the connection without answering it (see `mod.rs`).

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
                read: Arc::default(),
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

/// An open connection to the upstream, how many bytes have been read from it, and when the last read's
/// bytes reached the socket.
pub struct Stream {
    inner: Inner,
    read: Arc<AtomicU64>,
    arrival: Arc<Arrival>,
}

impl Stream {
    /// The count of bytes read, shared with whoever holds the connection it carries.
    pub(super) fn read_count(&self) -> Arc<AtomicU64> {
        self.read.clone()
    }

    /// When the last read's bytes reached the socket, shared likewise.
    pub(super) fn arrival(&self) -> Arc<Arrival> {
        self.arrival.clone()
    }
}

/// Bytes read so far from a [`Stream`].
pub(super) fn bytes_read(count: &AtomicU64) -> u64 {
    count.load(Ordering::Relaxed)
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = match &mut this.inner {
            Inner::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        let read = (buf.filled().len() - before) as u64;
        if read > 0 {
            this.read.fetch_add(read, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().inner {
            Inner::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().inner {
            Inner::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
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
