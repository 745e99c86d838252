//! `listen_tls:`: TLS on the proxy's listener, from a certificate chain and its key in PEM files (as
//! cert-manager writes them into a Secret: `tls.crt`, `tls.key`). Off by default. Here only the keys and
//! that both files are there to read; what is in them (PEM, a key, the key the certificate names) is
//! read by `net/tls.rs`, at start, by `check-config`, and again at each reload.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{check_readable_file, invalid, ConfigError};

/// `listen_tls:`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenTls {
    /// Required: the certificate chain in PEM, the server's own certificate first.
    pub cert_file: PathBuf,
    /// Required: its private key in PEM (PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key_file: PathBuf,
}

impl ListenTls {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (key, path) in [
            ("listen_tls.cert_file", &self.cert_file),
            ("listen_tls.key_file", &self.key_file),
        ] {
            if path.as_os_str().is_empty() {
                return Err(invalid(key, "path", "", "required when listen_tls is set"));
            }
            check_readable_file(key, path)?;
        }
        Ok(())
    }
}
