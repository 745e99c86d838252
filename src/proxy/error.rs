//! What can go wrong on the data path before a response exists, and the one place that maps each case to
//! the HTTP answer the client gets and the kind of refusal it is (from which `record::outcome` decides the
//! `outcome` it is counted with, as it does for every other end).

use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

use crate::config::format_duration;
use crate::proxy::upstream::UpstreamError;
use crate::record::outcome::Refusal;
use crate::tap::RequestSeen;

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("upstream {upstream} is unreachable: {reason}")]
    UpstreamUnreachable { upstream: String, reason: String },
    #[error("connecting to upstream {upstream} timed out")]
    UpstreamConnectTimeout { upstream: String },
    #[error("upstream {upstream} failed before sending a response: {reason}")]
    UpstreamFailed { upstream: String, reason: String },
    #[error("upstream {upstream} sent no response head within {} (timeouts.response_headers)", format_duration(*.after))]
    UpstreamHeadersTimeout { upstream: String, after: Duration },
    #[error("the client's request body broke off before it was complete")]
    ClientBodyBroken,
    #[error("the request body is larger than the limit of {limit} bytes (limits.max_request_body_bytes)")]
    RequestBodyTooLarge { limit: u64 },
    #[error("the request line and headers are larger than the limit of {limit} bytes (limits.max_request_header_bytes)")]
    HeadTooLarge { limit: usize },
    #[error("the client sent no more of its request body for {} (timeouts.request_body_idle)", format_duration(*.after))]
    RequestBodyIdle { after: Duration },
    #[error("{limit} upstream requests are in progress (limits.max_upstream_connections); retry shortly")]
    UpstreamOverloaded { limit: usize },
    #[error("this connection already has {limit} upstream requests in progress (limits.max_upstream_per_connection); retry shortly, or spread requests over more connections")]
    ConnectionShare { limit: usize },
    #[error("no room to hold the request body within {} (this client's share of budgets.held_bodies is taken by its other requests' bodies: budgets.held_bodies_per_client); retry shortly", format_duration(*.after))]
    HeldBytesFull { after: Duration },
    #[error("the request body did not arrive whole within {} (timeouts.held_request_body)", format_duration(*.after))]
    HeldBodyLate { after: Duration },
    #[error("this client address already has {limit} request bodies larger than limits.hold_request_body_bytes being uploaded (limits.max_streamed_uploads_per_client); retry shortly")]
    UploadsPerClient { limit: usize },
    #[error("{limit} WebSocket sessions are open (limits.max_sessions); retry shortly")]
    SessionsFull { limit: usize },
    #[error("this client address already has {limit} WebSocket sessions open (limits.max_sessions_per_client); retry shortly")]
    SessionsPerClient { limit: usize },
    #[error("shutting down: the grace period ran out before the upstream answered")]
    ShutdownCut,
    #[error("the request target cannot be forwarded: {reason}")]
    BadTarget { reason: &'static str },
    #[error("{what} is not supported")]
    NotImplemented { what: &'static str },
    #[error("upstream {upstream} answered with status {status}, {why}")]
    UpstreamBadStatus {
        upstream: String,
        status: u16,
        why: &'static str,
    },
}

impl ProxyError {
    /// Sorts an upstream error into the case the user must be told about.
    pub fn from_client(
        err: &UpstreamError, upstream: &str, request: &RequestSeen, limits: (u64, Duration),
    ) -> Self {
        if let Some(error) = Self::of_body(request, limits) {
            return error;
        }
        let upstream = upstream.to_owned();
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

    /// Why reading the client's body failed: it grew past `limits.max_request_body_bytes`, went idle for
    /// `timeouts.request_body_idle`, or broke off.
    pub fn from_body(request: &RequestSeen, limits: (u64, Duration)) -> Self {
        Self::of_body(request, limits).unwrap_or(ProxyError::ClientBodyBroken)
    }

    fn of_body(request: &RequestSeen, limits: (u64, Duration)) -> Option<Self> {
        let (max_body_bytes, body_idle) = limits;
        if request.body_too_large() {
            Some(ProxyError::RequestBodyTooLarge {
                limit: max_body_bytes,
            })
        } else if request.body_idle() {
            Some(ProxyError::RequestBodyIdle { after: body_idle })
        } else if request.body_broken() {
            Some(ProxyError::ClientBodyBroken)
        } else {
            None
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::UpstreamUnreachable { .. }
            | ProxyError::UpstreamFailed { .. }
            | ProxyError::UpstreamBadStatus { .. } => StatusCode::BAD_GATEWAY,
            ProxyError::UpstreamConnectTimeout { .. }
            | ProxyError::UpstreamHeadersTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::ClientBodyBroken | ProxyError::BadTarget { .. } => StatusCode::BAD_REQUEST,
            ProxyError::RequestBodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::HeadTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ProxyError::RequestBodyIdle { .. } | ProxyError::HeldBodyLate { .. } => {
                StatusCode::REQUEST_TIMEOUT
            }
            ProxyError::UpstreamOverloaded { .. }
            | ProxyError::ConnectionShare { .. }
            | ProxyError::HeldBytesFull { .. }
            | ProxyError::UploadsPerClient { .. }
            | ProxyError::SessionsFull { .. }
            | ProxyError::SessionsPerClient { .. }
            | ProxyError::ShutdownCut => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::NotImplemented { .. } => StatusCode::NOT_IMPLEMENTED,
        }
    }

    /// A refusal for want of room (upstream slots, a connection's or a client's share): logged once per
    /// 10 s at most, with the count since, as a burst of them is one event.
    pub fn is_overload(&self) -> bool {
        matches!(
            self,
            ProxyError::UpstreamOverloaded { .. }
                | ProxyError::ConnectionShare { .. }
                | ProxyError::UploadsPerClient { .. }
                | ProxyError::SessionsFull { .. }
                | ProxyError::SessionsPerClient { .. }
        )
    }

    /// What kind of refusal this is; `record::outcome::classify` decides the outcome it counts as.
    pub fn refusal(&self) -> Refusal {
        match self {
            ProxyError::UpstreamUnreachable { .. }
            | ProxyError::UpstreamFailed { .. }
            | ProxyError::UpstreamBadStatus { .. } => Refusal::UpstreamFailed,
            ProxyError::UpstreamConnectTimeout { .. }
            | ProxyError::UpstreamHeadersTimeout { .. }
            | ProxyError::RequestBodyIdle { .. }
            | ProxyError::HeldBodyLate { .. }
            | ProxyError::ShutdownCut => Refusal::TimedOut,
            ProxyError::ClientBodyBroken => Refusal::ClientBodyBroken,
            ProxyError::RequestBodyTooLarge { .. }
            | ProxyError::HeadTooLarge { .. }
            | ProxyError::UpstreamOverloaded { .. }
            | ProxyError::ConnectionShare { .. }
            | ProxyError::HeldBytesFull { .. }
            | ProxyError::UploadsPerClient { .. }
            | ProxyError::SessionsFull { .. }
            | ProxyError::SessionsPerClient { .. }
            | ProxyError::BadTarget { .. }
            | ProxyError::NotImplemented { .. } => Refusal::Declined,
        }
    }

    fn error_type(&self) -> &'static str {
        match self {
            ProxyError::UpstreamUnreachable { .. } => "upstream_unreachable",
            ProxyError::UpstreamConnectTimeout { .. }
            | ProxyError::UpstreamHeadersTimeout { .. } => "upstream_timeout",
            ProxyError::UpstreamFailed { .. } | ProxyError::UpstreamBadStatus { .. } => {
                "upstream_error"
            }
            ProxyError::ClientBodyBroken
            | ProxyError::RequestBodyTooLarge { .. }
            | ProxyError::HeadTooLarge { .. }
            | ProxyError::BadTarget { .. } => "invalid_request_error",
            ProxyError::RequestBodyIdle { .. } | ProxyError::HeldBodyLate { .. } => {
                "request_timeout"
            }
            ProxyError::UpstreamOverloaded { .. } | ProxyError::ConnectionShare { .. } => {
                "upstream_overloaded"
            }
            ProxyError::HeldBytesFull { .. }
            | ProxyError::UploadsPerClient { .. }
            | ProxyError::SessionsFull { .. }
            | ProxyError::SessionsPerClient { .. } => "overloaded",
            ProxyError::NotImplemented { .. } => "not_implemented",
            ProxyError::ShutdownCut => "shutting_down",
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
        if let ProxyError::UpstreamOverloaded { .. }
        | ProxyError::ConnectionShare { .. }
        | ProxyError::HeldBytesFull { .. }
        | ProxyError::UploadsPerClient { .. }
        | ProxyError::SessionsFull { .. }
        | ProxyError::SessionsPerClient { .. } = self
        {
            let retry = HeaderValue::from_static("1");
            response.headers_mut().insert(header::RETRY_AFTER, retry);
        }
        if let ProxyError::HeadTooLarge { .. } = self {
            // As hyper does for a head it cannot read whole: the connection ends with this answer.
            let close = HeaderValue::from_static("close");
            response.headers_mut().insert(header::CONNECTION, close);
        }
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
