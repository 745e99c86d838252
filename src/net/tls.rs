//! TLS on the proxy's listener (`listen_tls:`): the certificate and key read from their PEM files, a
//! handshake per connection under a deadline, and ALPN offering `h2` and `http/1.1` so the same HTTP
//! server as on plain TCP takes the connection from there (`server.rs`).
//!
//! The certificate is held by [`Certificates`], the resolver rustls asks at each handshake, so
//! [`Certificates::reload`] reads both files again and swaps them in for the handshakes that follow,
//! while every connection already open keeps the session it made (a certificate rotation, as
//! cert-manager renews a Secret). A pair that cannot be used is refused with the key, the path and what
//! is wrong with it, and a reload that fails leaves the pair in service as it was.
//!
//! A handshake that fails is one connection closed and counted by reason
//! (`tokentap_tls_handshake_failures_total`, [`Failed`]); it never touches another connection. It must
//! be done within `timeouts.client_header_read`, so a client that opens a connection and trickles a
//! ClientHello cannot hold a place longer than one that trickles a request head; the head then has its
//! own `client_header_read`. Plain HTTP sent to the port (its first byte a letter, which no TLS record
//! begins with) is answered `400` in plain HTTP saying so, as nginx answers it, then closed
//! ([`refuse_plain_http`]): the client's error names the mistake instead of a reset.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{InconsistentKeys, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::config::ListenTls;
use crate::net::client_conn::Speaks;
use crate::record::metrics::TLS_HANDSHAKE_REASONS;

/// A certificate or key file that cannot be served: `{key}: {path}: {problem}`.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {}: {problem}", path.display())]
pub struct TlsFileError {
    key: &'static str,
    path: PathBuf,
    problem: String,
}

impl TlsFileError {
    /// The key whose file it is.
    pub fn key(&self) -> &'static str {
        self.key
    }
}

const CERT_KEY: &str = "listen_tls.cert_file";
const KEY_KEY: &str = "listen_tls.key_file";

/// A certificate pair read and checked, not yet served.
pub struct Fresh(Arc<CertifiedKey>);

/// The certificate chain and key served, swapped whole by [`Certificates::reload`].
pub struct Certificates {
    files: ListenTls,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for Certificates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificates")
            .field("cert_file", &self.files.cert_file)
            .field("key_file", &self.files.key_file)
            .finish_non_exhaustive()
    }
}

impl Certificates {
    /// Reads `listen_tls`'s two files; each problem is named with its key and path.
    pub fn load(files: &ListenTls) -> Result<Arc<Self>, TlsFileError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let current = read_pair(files, &provider)?;
        Ok(Arc::new(Certificates {
            files: files.clone(),
            provider,
            current: RwLock::new(Arc::new(current)),
        }))
    }

    /// Reads both files again and serves them to every handshake from now on; connections already open
    /// keep theirs. On an error nothing changes.
    pub fn reload(&self) -> Result<(), TlsFileError> {
        let fresh = self.read()?;
        self.serve(fresh);
        Ok(())
    }

    /// Reads both files again, checked as at start, without serving them yet (a config reload reads
    /// them with everything else it prepares, and serves them once the whole reload applies).
    pub fn read(&self) -> Result<Fresh, TlsFileError> {
        Ok(Fresh(Arc::new(read_pair(&self.files, &self.provider)?)))
    }

    /// Serves the pair [`Certificates::read`] read to every handshake from now on.
    pub fn serve(&self, fresh: Fresh) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = fresh.0;
    }

    /// How many certificates the chain now served holds (the server's own first).
    pub fn chain_len(&self) -> usize {
        self.served().cert.len()
    }

    fn served(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.served())
    }
}

/// The chain in `cert_file` and the key in `key_file`, checked to belong together.
fn read_pair(files: &ListenTls, provider: &CryptoProvider) -> Result<CertifiedKey, TlsFileError> {
    let (cert_path, key_path) = (&files.cert_file, &files.key_file);
    let problem = |key, path: &Path, problem: String| TlsFileError {
        key,
        path: path.to_owned(),
        problem,
    };
    let pem_error = |e: pem::Error| format!("a PEM block cannot be read: {e}");
    let text = read_pem(CERT_KEY, cert_path)?;
    let chain = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| problem(CERT_KEY, cert_path, pem_error(e)))?;
    if chain.is_empty() {
        let holds = "holds no certificate (no -----BEGIN CERTIFICATE----- block)";
        return Err(problem(CERT_KEY, cert_path, holds.into()));
    }
    let text = read_pem(KEY_KEY, key_path)?;
    let key = PrivateKeyDer::from_pem_slice(&text).map_err(|e| match e {
        pem::Error::NoItemsFound => {
            let holds = "holds no private key (no -----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY block)";
            problem(KEY_KEY, key_path, holds.into())
        }
        e => problem(KEY_KEY, key_path, pem_error(e)),
    })?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| problem(KEY_KEY, key_path, format!("the key cannot be used: {e}")))?;
    let pair = CertifiedKey::new(chain, signing);
    match pair.keys_match() {
        // A key that cannot name its public half is taken on trust, as rustls itself does.
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(pair),
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            let cert = cert_path.display();
            let reason = format!("is not the key of the certificate in {cert} (the first certificate of the chain must be the server's own)");
            Err(problem(KEY_KEY, key_path, reason))
        }
        Err(e) => {
            let reason = format!("its first certificate cannot be read: {e}");
            Err(problem(CERT_KEY, cert_path, reason))
        }
    }
}

/// A file's bytes, refused unless it has PEM's `-----BEGIN` line (a DER file, the wrong file).
fn read_pem(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsFileError> {
    let problem = |problem: String| TlsFileError {
        key,
        path: path.to_owned(),
        problem,
    };
    let bytes = std::fs::read(path).map_err(|e| problem(format!("cannot read it: {e}")))?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        let reason = "is not PEM (no -----BEGIN line; a DER file converts with `openssl x509 -inform der` or `openssl pkey -inform der`)";
        return Err(problem(reason.into()));
    }
    Ok(bytes)
}

/// Why a handshake failed: the `reason` of `tokentap_tls_handshake_failures_total`, in the order of
/// [`TLS_HANDSHAKE_REASONS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failed {
    Timeout,
    Closed,
    NotTls,
    /// Plain HTTP: answered `400`, then closed.
    PlainHttp,
    ClientAlert,
    Incompatible,
    Other,
}

impl Failed {
    pub const ALL: [Failed; 7] = [
        Failed::Timeout,
        Failed::Closed,
        Failed::NotTls,
        Failed::PlainHttp,
        Failed::ClientAlert,
        Failed::Incompatible,
        Failed::Other,
    ];

    /// Its place among [`TLS_HANDSHAKE_REASONS`] (and the counters made from them).
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn reason(self) -> &'static str {
        TLS_HANDSHAKE_REASONS[self.index()]
    }

    fn of(err: &io::Error) -> Failed {
        use io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
        if matches!(
            err.kind(),
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe
        ) {
            return Failed::Closed;
        }
        let tls = err
            .get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>());
        match tls {
            Some(rustls::Error::InvalidMessage(_)) => Failed::NotTls,
            Some(rustls::Error::AlertReceived(_)) => Failed::ClientAlert,
            Some(rustls::Error::PeerIncompatible(_) | rustls::Error::NoApplicationProtocol) => {
                Failed::Incompatible
            }
            _ => Failed::Other,
        }
    }
}

/// The proxy port's TLS: one server config whose certificate comes from [`Certificates`].
#[derive(Clone)]
pub struct TlsListener {
    acceptor: TlsAcceptor,
}

impl TlsListener {
    pub fn new(certificates: Arc<Certificates>) -> Result<Self, rustls::Error> {
        let provider = certificates.provider.clone();
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(certificates);
        // The server's order: h2 where the client offers it, as nginx and Envoy do.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(TlsListener {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// The handshake, given up at `deadline`; then which HTTP the client chose by ALPN (none chosen:
    /// the auto server reads its first bytes, as on plain TCP).
    pub async fn handshake(
        &self, stream: TcpStream, deadline: Instant,
    ) -> Result<(TlsStream<TcpStream>, Speaks), Failed> {
        let mut first = [0u8; 1];
        match tokio::time::timeout_at(deadline, stream.peek(&mut first)).await {
            Err(_) => return Err(Failed::Timeout),
            Ok(Err(_) | Ok(0)) => return Err(Failed::Closed),
            // A TLS record starts with its content type (22 for a ClientHello); an HTTP method with
            // a capital letter.
            Ok(Ok(_)) if first[0].is_ascii_uppercase() => {
                refuse_plain_http(stream, deadline).await;
                return Err(Failed::PlainHttp);
            }
            Ok(Ok(_)) => {}
        }
        let accepted = tokio::time::timeout_at(deadline, self.acceptor.accept(stream)).await;
        let stream = match accepted {
            Err(_) => return Err(Failed::Timeout),
            Ok(Err(err)) => {
                let failed = Failed::of(&err);
                tracing::debug!(%err, reason = failed.reason(), "TLS handshake failed");
                return Err(failed);
            }
            Ok(Ok(stream)) => stream,
        };
        let speaks = match stream.get_ref().1.alpn_protocol() {
            Some(b"h2") => Speaks::H2,
            Some(b"http/1.1") => Speaks::Http1,
            _ => Speaks::Undecided,
        };
        Ok((stream, speaks))
    }
}

/// What a plain HTTP request to the TLS port is answered, as nginx answers it.
const PLAIN_HTTP: &str = "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 92\r\n\
     connection: close\r\n\r\nThis port speaks HTTPS: a plain HTTP request was sent to it. Use https:// for this address.\n";

/// Answers plain HTTP with [`PLAIN_HTTP`], then reads what the client sent (at most 64 KiB, until
/// `deadline`) before closing: closed with the request unread, the socket would reset and the client
/// could lose the answer.
async fn refuse_plain_http(mut stream: TcpStream, deadline: Instant) {
    let answered = async {
        stream.write_all(PLAIN_HTTP.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut left = 64usize << 10;
        while left > 0 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => left = left.saturating_sub(n),
            }
        }
        Ok::<_, io::Error>(())
    };
    let _ = tokio::time::timeout_at(deadline, answered).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_http_answer_is_a_whole_400_of_its_declared_length() {
        let (head, body) = PLAIN_HTTP.split_once("\r\n\r\n").expect("a head");
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"));
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
    }

    #[test]
    fn each_failure_is_its_reason_in_the_metrics_order() {
        let names: Vec<&str> = Failed::ALL.iter().map(|f| f.reason()).collect();
        assert_eq!(names, TLS_HANDSHAKE_REASONS);
        assert_eq!(Failed::ClientAlert.reason(), "client_alert");
    }

    #[test]
    fn an_error_is_read_for_its_reason() {
        let tls = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
        let cases = [
            (io::ErrorKind::UnexpectedEof.into(), Failed::Closed),
            (io::ErrorKind::ConnectionReset.into(), Failed::Closed),
            (
                tls(rustls::Error::InvalidMessage(
                    rustls::InvalidMessage::InvalidContentType,
                )),
                Failed::NotTls,
            ),
            (
                tls(rustls::Error::AlertReceived(
                    rustls::AlertDescription::UnknownCA,
                )),
                Failed::ClientAlert,
            ),
            (
                tls(rustls::Error::NoApplicationProtocol),
                Failed::Incompatible,
            ),
            (tls(rustls::Error::DecryptError), Failed::Other),
        ];
        for (err, failed) in cases {
            assert_eq!(Failed::of(&err), failed, "{err}");
        }
    }
}
