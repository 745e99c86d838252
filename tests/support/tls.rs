//! The test TLS identity: an acceptor for a scripted upstream served over `https://` on 127.0.0.1,
//! with the certificate and CA in `tests/fixtures/tls/`.

use rustls::pki_types::pem::PemObject;

/// Where the test CA (`ca.pem`), the server's certificate (`server.pem`) and its key live.
pub const TLS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

/// A TLS acceptor with the test server certificate for 127.0.0.1, signed by tests/fixtures/tls/ca.pem.
pub fn tls_acceptor() -> tokio_rustls::TlsAcceptor {
    let certs = rustls::pki_types::CertificateDer::pem_file_iter(format!("{TLS_DIR}/server.pem"))
        .expect("pem")
        .collect::<Result<Vec<_>, _>>()
        .expect("certs");
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(format!("{TLS_DIR}/server.key"))
        .expect("key");
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(tls))
}
