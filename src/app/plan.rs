//! One plan for start, reload and `tokentap check-config` (vector's `ConfigDiff::initial` and `vector
//! validate` are the model: start is a reload from nothing, validate builds the same plan and stops
//! short of applying it). Everything a valid config names that can still fail outside the file — the
//! series bound, the tokenizer files, the `listen_tls` pair, the request_log path's directory — is
//! prepared here, once, by one code path: `check-config` refuses exactly what start refuses, in the
//! same words, and a reload refuses a new request_log path with them too. Only binding the ports is
//! left to start (a port in use is a fact of the machine, not of the file).

use std::path::Path;
use std::sync::Arc;

use crate::config::{Config, ConfigError, RecordPath};
use crate::decode::tokenizer::Tokenizers;
use crate::net::server::BindError;
use crate::net::tls::{Certificates, TlsFileError};
use crate::proxy::upstream;
use crate::record::metrics::Metrics;
use crate::record::trace;

/// Why a tokentap did not start (or `check-config` refused its file): the plan's refusals, each naming
/// its key, and binding the ports.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Bind(#[from] BindError),
    #[error("registering metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("{0}")]
    Tokenizer(#[from] crate::config::ConfigError),
    #[error("upstream TLS: {0}")]
    Tls(#[from] upstream::TlsSetupError),
    #[error("{0}")]
    RequestLog(#[from] RecordsOpen),
    /// `listen_tls:`'s files: the message names the key, the path and what is wrong.
    #[error("{0}")]
    ListenTls(#[from] TlsFileError),
    #[error("listen_tls: {0}")]
    ListenTlsSetup(#[source] rustls::Error),
    /// The configuration's series limit is above `metrics.max_series`; the message names the product.
    #[error("{0}")]
    SeriesBudget(String),
    #[error("{0}")]
    ModelList(#[from] crate::proxy::models::ModelListError),
    #[error("traces: {0}")]
    Traces(#[from] trace::SetupError),
    #[error("otlp_metrics: {0}")]
    OtlpMetrics(#[source] trace::SetupError),
}

/// What the plan prepared: the metrics registered (their series bound checked), the tokenizers loaded,
/// the certificate pair read and matched.
pub struct Prepared {
    pub metrics: Metrics,
    pub tokenizers: Tokenizers,
    pub certificates: Option<Arc<Certificates>>,
}

/// Prepares everything `config` names that can fail, or says what cannot be, naming its key.
pub fn prepare(config: &Config) -> Result<Prepared, StartError> {
    let metrics = Metrics::new(config)?;
    (metrics.bound())
        .check(config.metrics.max_series)
        .map_err(StartError::SeriesBudget)?;
    let tokenizers = Tokenizers::load(config, Some(&metrics.served))?;
    request_log(config)?;
    let certificates = match &config.listen_tls {
        Some(files) => Some(Certificates::load(files)?),
        None => None,
    };
    Ok(Prepared {
        metrics,
        tokenizers,
        certificates,
    })
}

/// A request_log path that cannot be opened (at start, or a reload's new one).
#[derive(Debug, thiserror::Error)]
#[error("request_log.path: cannot open {path} for appending: {source}")]
pub struct RecordsOpen {
    pub(super) path: String,
    pub(super) source: std::io::Error,
}

/// The request_log path can be opened to append without opening it (a FIFO waits for a reader, and
/// check-config must create nothing): it is not a directory, and when it does not exist yet its
/// directory does.
pub fn request_log(config: &Config) -> Result<(), RecordsOpen> {
    let Some(RecordPath::File(path)) = config.request_log.as_ref().map(|log| &log.path) else {
        return Ok(());
    };
    let refused = |source| RecordsOpen {
        path: path.display().to_string(),
        source,
    };
    match std::fs::metadata(path) {
        Ok(found) if found.is_dir() => Err(refused(std::io::Error::other("it is a directory"))),
        Ok(_) => Ok(()),
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(refused(error)),
        Err(error) => {
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            match std::fs::metadata(parent.unwrap_or(Path::new("."))) {
                Ok(dir) if dir.is_dir() => Ok(()),
                _ => Err(refused(error)),
            }
        }
    }
}

impl StartError {
    /// The config key a refusal is about, when it is one key's: where `check-config` finds its line.
    pub fn key(&self) -> Option<&str> {
        match self {
            StartError::RequestLog(_) => Some("request_log.path"),
            StartError::ListenTls(error) => Some(error.key()),
            StartError::SeriesBudget(_) => Some("metrics.max_series"),
            StartError::Tokenizer(ConfigError::Invalid { key, .. }) => Some(key),
            _ => None,
        }
    }
}
