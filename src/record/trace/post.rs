//! The collector, as an exporter's one HTTP/1.1 connection: `POST {endpoint}/v1/traces` (or
//! `/v1/metrics`, for `otlp_metrics:`'s exporter, `record/otlp_metrics`) with the export's protobuf (`Content-Type: application/x-protobuf`, gzip when configured) and the configured
//! headers, TLS by rustls for `https://` (the system's roots). Exports are sent one at a time by one
//! task, so one connection kept alive between them is all it needs; whatever goes wrong with it (an
//! error, a timeout, an answer not read whole) closes it, and the next export connects again.
//!
//! Every export, connecting included, ends within its limit: a collector that never answers, or never
//! reads, costs one timeout and the batch, never a request's time.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

use crate::config::{Compression, Headers, Traces};

/// The largest answer read (an `ExportTraceServiceResponse` is a few bytes; an error page may be more).
const MAX_ANSWER: usize = 64 << 10;

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("endpoint: {0}")]
    Endpoint(String),
    #[error("the endpoint is https:// but no usable root certificates were found on this system")]
    NoRoots,
    #[error("TLS setup: {0}")]
    Tls(#[from] rustls::Error),
}

/// What the collector said of a batch it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 2xx; `rejected` spans (or data points) named in a partial success.
    Accepted { rejected: u64 },
    /// Any other status.
    Refused(StatusCode),
}

/// Why an export got no answer.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error("no answer within {}", crate::config::format_duration(*.0))]
    Timeout(Duration),
    #[error("{0}")]
    Failed(String),
}

pub struct Collector {
    uri: Uri,
    host: String,
    port: u16,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    /// The configured headers, then `Host`, `Content-Type` and (with gzip) `Content-Encoding`.
    headers: HeaderMap,
    /// The connection kept between exports, and the task that drives it.
    open: Option<(SendRequest<Full<Bytes>>, JoinHandle<()>)>,
    /// How many items an accepted answer's partial success rejected.
    rejected: fn(Bytes) -> u64,
}

/// The spans a trace export's answer rejected (its partial success).
fn rejected_spans(answer: Bytes) -> u64 {
    let partial = ExportTraceServiceResponse::decode(answer)
        .ok()
        .and_then(|r| r.partial_success);
    partial.map_or(0, |p| u64::try_from(p.rejected_spans).unwrap_or(0))
}

impl Collector {
    /// The collector of `traces:`.
    pub fn new(config: &Traces) -> Result<Self, SetupError> {
        let uri = config.export_url().map_err(SetupError::Endpoint)?;
        Collector::to(uri, &config.headers, config.compression, rejected_spans)
    }

    /// A collector at `uri`, sent `headers`; `rejected` reads an accepted answer's partial success.
    pub fn to(
        uri: Uri, configured: &Headers, compression: Compression, rejected: fn(Bytes) -> u64,
    ) -> Result<Self, SetupError> {
        let https = uri.scheme_str() == Some("https");
        let authority = uri.authority().cloned();
        let authority = authority.ok_or_else(|| SetupError::Endpoint("missing host".into()))?;
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .to_owned();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let mut headers = HeaderMap::new();
        for (name, value) in &configured.0 {
            // Checked with the config.
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.append(name, sensitive(value));
            }
        }
        if let Ok(value) = HeaderValue::from_str(authority.as_str()) {
            headers.insert(HOST, value);
        }
        let protobuf = HeaderValue::from_static("application/x-protobuf");
        headers.insert(CONTENT_TYPE, protobuf);
        if compression == Compression::Gzip {
            headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        let tls = match https {
            true => Some(tls(&host)?),
            false => None,
        };
        Ok(Collector {
            uri,
            host,
            port,
            tls,
            headers,
            open: None,
            rejected,
        })
    }

    /// Where spans go, for the log (the headers are never shown).
    pub fn url(&self) -> &Uri {
        &self.uri
    }

    /// Posts one batch's body, within `limit` from connecting to the answer's last byte.
    pub async fn post(&mut self, body: Bytes, limit: Duration) -> Result<Answer, PostError> {
        match tokio::time::timeout(limit, self.exchange(body)).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(error)) => {
                self.close();
                Err(PostError::Failed(error))
            }
            Err(_) => {
                self.close();
                Err(PostError::Timeout(limit))
            }
        }
    }

    async fn exchange(&mut self, body: Bytes) -> Result<Answer, String> {
        if self
            .open
            .as_ref()
            .is_some_and(|(sender, _)| sender.is_closed())
        {
            self.close();
        }
        if self.open.is_none() {
            self.open = Some(self.connect().await?);
        }
        let Some((sender, _)) = self.open.as_mut() else {
            return Err("no connection".into());
        };
        sender.ready().await.map_err(|e| e.to_string())?;
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.path_and_query().map_or_else(
            || Uri::from_static("/v1/traces"),
            |pq| Uri::from(pq.clone()),
        );
        *request.headers_mut() = self.headers.clone();
        let answer = sender.send_request(request).await;
        let answer = answer.map_err(|e| e.to_string())?;
        let status = answer.status();
        let read = Limited::new(answer.into_body(), MAX_ANSWER).collect().await;
        // An answer not read whole leaves the connection in an unknown state: it is not kept.
        let read = read.map_err(|e| format!("reading the answer: {e}"))?;
        if !status.is_success() {
            return Ok(Answer::Refused(status));
        }
        let rejected = (self.rejected)(read.to_bytes());
        Ok(Answer::Accepted { rejected })
    }

    async fn connect(&self) -> Result<(SendRequest<Full<Bytes>>, JoinHandle<()>), String> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port)).await;
        let tcp = tcp.map_err(|e| format!("connecting to {}:{}: {e}", self.host, self.port))?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => handshake(tcp).await,
            Some((connector, name)) => {
                let stream = connector.connect(name.clone(), tcp).await;
                handshake(stream.map_err(|e| format!("TLS: {e}"))?).await
            }
        }
    }

    fn close(&mut self) {
        if let Some((_, task)) = self.open.take() {
            task.abort();
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.close();
    }
}

async fn handshake<IO>(io: IO) -> Result<(SendRequest<Full<Bytes>>, JoinHandle<()>), String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    let task = tokio::spawn(async move {
        // Its end is seen by the sender (`is_closed`, a failed send).
        let _ = connection.await;
    });
    Ok((sender, task))
}

fn sensitive(mut value: HeaderValue) -> HeaderValue {
    value.set_sensitive(true);
    value
}

/// rustls with the system's roots, HTTP/1.1 only (no ALPN offered).
fn tls(host: &str) -> Result<(TlsConnector, ServerName<'static>), SetupError> {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(SetupError::NoRoots);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| SetupError::Endpoint(format!("{host} cannot be a TLS server name: {e}")))?;
    Ok((TlsConnector::from(Arc::new(config)), name))
}
