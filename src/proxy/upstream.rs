//! The pooled client that carries requests to the model server: keep-alive connections, TCP_NODELAY so a
//! token is never held back by Nagle, a connect timeout, and rustls for `https://` upstreams with the
//! system's roots or a configured CA bundle.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use crate::config::Config;
use crate::tap::RequestTap;

pub type UpstreamBody = RequestTap<hyper::body::Incoming>;
pub type UpstreamClient = Client<HttpsConnector<HttpConnector>, UpstreamBody>;

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

fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, TlsSetupError> {
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

/// Builds the client. TLS roots are only loaded when the upstream is `https://`.
pub fn client(config: &Config) -> Result<UpstreamClient, TlsSetupError> {
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
    // Header names are written in the case they came in, from the request's original case map, and the
    // response's are recorded for the client's side (see `server.rs`).
    Ok(Client::builder(TokioExecutor::new())
        .http1_preserve_header_case(true)
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        // Never more idle connections kept than may be in use at once (limits.max_upstream_connections).
        .pool_max_idle_per_host(config.limits.max_upstream_connections)
        .build(connector))
}
