//! The forwarding service: one request in from the client, the same request out to the upstream, the
//! upstream's response back. The clock starts when the request head has been read (t_arrive). Only
//! hop-by-hop headers are touched and `Host` is set to the upstream's, as a reverse proxy must for
//! virtual-hosted and TLS upstreams; bodies stream through the taps in both directions.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::uri::{PathAndQuery, Uri};
use http::{header, Request, Response, Version};
use http_body::Body;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::dialect;
use crate::error::ProxyError;
use crate::exchange::{Exchange, ExchangeGuard, Outcome, Recorder};
use crate::hop_by_hop;
use crate::tap::{MeteredBody, ModelSlot, RequestTap};
use crate::upstream::UpstreamClient;

/// How long a request the upstream refused may take to yield its `model` before the error answer goes out.
const LEFTOVER_READ_LIMIT: Duration = Duration::from_millis(250);

pub type ProxyBody = Either<MeteredBody<Incoming>, Full<Bytes>>;

#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    client: UpstreamClient,
    upstream: Uri,
    upstream_shown: String,
    recorder: Arc<Recorder>,
}

impl Proxy {
    pub fn new(client: UpstreamClient, upstream: Uri, recorder: Arc<Recorder>) -> Self {
        let upstream_shown = upstream.to_string().trim_end_matches('/').to_owned();
        Proxy {
            inner: Arc::new(Inner {
                client,
                upstream,
                upstream_shown,
                recorder,
            }),
        }
    }

    pub async fn handle(
        self,
        request: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, std::convert::Infallible> {
        let arrive = Instant::now();
        let inner = &self.inner;
        let (mut parts, body) = request.into_parts();
        let path = parts.uri.path().to_owned();
        let (api, dialect) = dialect::detect(&path);
        let slot = Arc::new(ModelSlot::default());
        let mut guard = ExchangeGuard::new(Exchange::begin(
            inner.recorder.clone(),
            api,
            dialect,
            parts.method.clone(),
            path,
            arrive,
            slot.clone(),
        ));

        parts.uri = upstream_uri(&inner.upstream, parts.uri.path_and_query());
        parts.version = Version::HTTP_11;
        hop_by_hop::strip(&mut parts.headers);
        parts.headers.remove(header::HOST);
        let (body, leftover) =
            RequestTap::new(body, inner.recorder.metering.model_scan_bytes, slot.clone());

        match inner.client.request(Request::from_parts(parts, body)).await {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                hop_by_hop::strip(&mut parts.headers);
                if let Some(exchange) = guard.get_mut() {
                    exchange.on_response(parts.status, parts.headers.get(header::CONTENT_TYPE));
                }
                if body.is_end_stream() {
                    guard.finish(Outcome::Ok);
                }
                Ok(Response::from_parts(
                    parts,
                    Either::Left(MeteredBody::new(body, guard)),
                ))
            }
            Err(err) => {
                let error =
                    ProxyError::from_client(&err, &inner.upstream_shown, slot.body_broken());
                tracing::warn!(%error, "request not forwarded");
                leftover.read_model(LEFTOVER_READ_LIMIT).await;
                let response = error.to_response();
                if let Some(exchange) = guard.get_mut() {
                    exchange.on_response(response.status(), None);
                }
                guard.finish(error.outcome());
                Ok(response.map(Either::Right))
            }
        }
    }
}

/// The upstream base (scheme, authority, optional path prefix) joined with the request's path and query.
fn upstream_uri(base: &Uri, request: Option<&PathAndQuery>) -> Uri {
    let prefix = base.path().trim_end_matches('/');
    let tail = request.map_or("/", PathAndQuery::as_str);
    let mut parts = base.clone().into_parts();
    parts.path_and_query = format!("{prefix}{tail}")
        .parse()
        .ok()
        .or_else(|| request.cloned());
    Uri::from_parts(parts).unwrap_or_else(|_| base.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_prefix_path_and_query() {
        let base: Uri = "https://api.example.com/openai".parse().unwrap_or_default();
        let pq = PathAndQuery::from_static("/v1/chat/completions?x=1");
        assert_eq!(
            upstream_uri(&base, Some(&pq)).to_string(),
            "https://api.example.com/openai/v1/chat/completions?x=1"
        );
        let base: Uri = "http://127.0.0.1:8000".parse().unwrap_or_default();
        assert_eq!(
            upstream_uri(&base, Some(&pq)).to_string(),
            "http://127.0.0.1:8000/v1/chat/completions?x=1"
        );
        assert_eq!(
            upstream_uri(&base, None).to_string(),
            "http://127.0.0.1:8000/"
        );
    }
}
