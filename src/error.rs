//! What can go wrong on the data path before a response exists, and the one place that maps each case to
//! the HTTP answer the client gets and the `outcome` the request is counted with.

use std::error::Error as StdError;
use std::io;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

use crate::exchange::Outcome;

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("upstream {upstream} is unreachable: {reason}")]
    UpstreamUnreachable { upstream: String, reason: String },
    #[error("connecting to upstream {upstream} timed out")]
    UpstreamConnectTimeout { upstream: String },
    #[error("upstream {upstream} failed before sending a response: {reason}")]
    UpstreamFailed { upstream: String, reason: String },
    #[error("the client's request body broke off before it was complete")]
    ClientBodyBroken,
}

impl ProxyError {
    /// Sorts a client error from hyper-util's pooled client into the case the user must be told about.
    pub fn from_client(
        err: &hyper_util::client::legacy::Error,
        upstream: &str,
        client_body_broken: bool,
    ) -> Self {
        let upstream = upstream.to_owned();
        if client_body_broken {
            return ProxyError::ClientBodyBroken;
        }
        let reason = root_cause(err);
        if err.is_connect() {
            if has_io_kind(err, io::ErrorKind::TimedOut) {
                ProxyError::UpstreamConnectTimeout { upstream }
            } else {
                ProxyError::UpstreamUnreachable { upstream, reason }
            }
        } else {
            ProxyError::UpstreamFailed { upstream, reason }
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::UpstreamUnreachable { .. } | ProxyError::UpstreamFailed { .. } => {
                StatusCode::BAD_GATEWAY
            }
            ProxyError::UpstreamConnectTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::ClientBodyBroken => StatusCode::BAD_REQUEST,
        }
    }

    pub fn outcome(&self) -> Outcome {
        match self {
            ProxyError::UpstreamUnreachable { .. } | ProxyError::UpstreamFailed { .. } => {
                Outcome::UpstreamError
            }
            ProxyError::UpstreamConnectTimeout { .. } => Outcome::Timeout,
            ProxyError::ClientBodyBroken => Outcome::Cancelled,
        }
    }

    fn error_type(&self) -> &'static str {
        match self {
            ProxyError::UpstreamUnreachable { .. } => "upstream_unreachable",
            ProxyError::UpstreamConnectTimeout { .. } => "upstream_timeout",
            ProxyError::UpstreamFailed { .. } => "upstream_error",
            ProxyError::ClientBodyBroken => "invalid_request_error",
        }
    }

    /// The answer in the OpenAI error shape, so SDKs surface the message instead of a parse failure.
    pub fn to_response(&self) -> Response<Full<Bytes>> {
        let body = serde_json::json!({
            "error": {
                "message": format!("tokentap: {self}"),
                "type": self.error_type(),
                "code": self.status().as_u16(),
            }
        });
        let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
        *response.status_mut() = self.status();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

fn root_cause(err: &(dyn StdError + 'static)) -> String {
    let mut current: &(dyn StdError + 'static) = err;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}

fn has_io_kind(err: &(dyn StdError + 'static), kind: io::ErrorKind) -> bool {
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        if e.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == kind)
        {
            return true;
        }
        current = e.source();
    }
    false
}
