//! The request as the upstream gets it: the request line's target is the upstream's path prefix joined
//! with the client's (origin form), the version HTTP/1.1, `Host` the upstream's authority (as a reverse
//! proxy must for virtual-hosted and TLS upstreams), the hop-by-hop headers dropped, and an h2 client's
//! cookie fields joined into one line. Nothing else of the head changes, except with
//! `traces.propagate`, the one documented exception (docs/tracing.md): `traceparent` rewritten (or
//! added) so that the server's span is the child of tokentap's. A WebSocket handshake keeps its
//! `Connection` and `Upgrade`, and so does its answer (`upgrade.rs`).

use http::uri::Uri;
use http::{header, HeaderValue, Version};

use crate::proxy::hop_by_hop::{self, Direction, NextHop};
use crate::proxy::request_target::Target;
use crate::record::trace::{self, TraceContext};

/// What every request's head is rewritten with.
pub struct Rewrite {
    /// The upstream's path prefix, put before every request's path (no trailing `/`).
    prefix: String,
    /// The `Host` every forwarded request carries: the upstream's authority, as an HTTP client sets it.
    host: Option<HeaderValue>,
    /// `traces.propagate`: the request's span becomes the server span's parent.
    propagate: bool,
}

impl Rewrite {
    pub fn new(upstream: &Uri, propagate: bool) -> Self {
        Rewrite {
            prefix: upstream.path().trim_end_matches('/').to_owned(),
            host: host_header(upstream),
            propagate,
        }
    }

    /// Rewrites a client's request head, whose target was admitted as `target`, for the upstream;
    /// `trace`: the trace the request joined and its span (`traces:`); an `upgrade` (a WebSocket
    /// handshake) keeps `Connection` and `Upgrade`.
    pub fn request(
        &self, parts: &mut http::request::Parts, target: &Target, trace: Option<&TraceContext>,
        upgrade: bool,
    ) {
        let client_version = parts.version;
        parts.uri = origin_form(&self.prefix, target.path_and_query());
        parts.version = Version::HTTP_11;
        let strip = match upgrade {
            true => hop_by_hop::strip_for_upgrade,
            false => hop_by_hop::strip,
        };
        strip(&mut parts.headers, NextHop::Http1, Direction::Request);
        if client_version == Version::HTTP_2 {
            hop_by_hop::join_cookies(&mut parts.headers);
        }
        if let Some(trace) = trace.filter(|_| self.propagate) {
            trace::propagate(&mut parts.headers, trace);
        }
        // In the client's `Host` line, so it keeps its place and case (`insert` replaces in place).
        match &self.host {
            Some(host) => {
                parts.headers.insert(header::HOST, host.clone());
            }
            None => {
                parts.headers.remove(header::HOST);
            }
        }
    }

    /// Rewrites the upstream's response head for a client that spoke `client_version`; the answer to
    /// an `upgrade` keeps `Connection` and `Upgrade`.
    pub fn response(
        &self, parts: &mut http::response::Parts, client_version: Version, upgrade: bool,
    ) {
        let strip = match upgrade {
            true => hop_by_hop::strip_for_upgrade,
            false => hop_by_hop::strip,
        };
        strip(
            &mut parts.headers,
            NextHop::to_client(client_version),
            Direction::Response,
        );
    }
}

/// `host[:port]` of the upstream, the port left out when it is the scheme's default, as hyper-util's
/// client writes `Host` when a request has none.
fn host_header(upstream: &Uri) -> Option<HeaderValue> {
    let host = upstream.host()?;
    let default_port = if upstream.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    let value = match upstream.port_u16() {
        Some(port) if port != default_port => format!("{host}:{port}"),
        _ => host.to_owned(),
    };
    HeaderValue::from_str(&value).ok()
}

/// The request line's target upstream: the upstream's path prefix joined with the request's path and query
/// (which starts with `/`).
fn origin_form(prefix: &str, request: &str) -> Uri {
    let joined = if prefix.is_empty() {
        request.parse()
    } else {
        format!("{prefix}{request}").parse()
    };
    joined.unwrap_or_else(|_| Uri::from_static("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_prefix_path_and_query() {
        let pq = "/v1/chat/completions?x=1";
        assert_eq!(
            origin_form("/openai", pq).to_string(),
            "/openai/v1/chat/completions?x=1"
        );
        assert_eq!(origin_form("", pq).to_string(), "/v1/chat/completions?x=1");
        assert_eq!(origin_form("", "/").to_string(), "/");
    }

    #[test]
    fn host_is_the_upstream_authority_without_a_default_port() {
        let host = |uri: &str| {
            let uri: Uri = uri.parse().unwrap_or_default();
            host_header(&uri).map(|v| v.to_str().unwrap_or_default().to_owned())
        };
        assert_eq!(
            host("http://127.0.0.1:8000").as_deref(),
            Some("127.0.0.1:8000")
        );
        assert_eq!(
            host("http://models.internal:80/v1").as_deref(),
            Some("models.internal")
        );
        assert_eq!(
            host("https://api.example.com:443").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            host("https://api.example.com:80").as_deref(),
            Some("api.example.com:80")
        );
        assert_eq!(host("http://[::1]:9000").as_deref(), Some("[::1]:9000"));
    }
}
