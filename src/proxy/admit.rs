//! What tokentap refuses to forward, decided from a head before anything is sent upstream: a request
//! head over `limits.max_request_header_bytes` (431), `CONNECT` and transfer codings other than
//! `chunked` (501), a target that would leave the upstream's path prefix (400,
//! [`crate::proxy::request_target`]), a body declared over `limits.max_request_body_bytes` (413); and,
//! the other way, an upstream status that cannot be passed on (502).

use http::{header, Method, StatusCode, Version};

use crate::proxy::error::ProxyError;
use crate::proxy::hop_by_hop;
use crate::proxy::request_target::{Target, TargetError};

/// The request's target made safe to forward, or why tokentap refuses it before anything is sent.
/// Upgrades are not refused: a WebSocket handshake is passed on (`upgrade.rs`); any other `Upgrade` is a
/// hop-by-hop header, removed, so the upstream answers the plain request, as it does behind nginx
/// without `proxy_set_header Upgrade`.
pub fn admit(
    parts: &http::request::Parts, target: Result<Target, TargetError>, max_body_bytes: u64,
    max_head_bytes: usize,
) -> Result<Target, ProxyError> {
    if parts.version < Version::HTTP_2 && head_len(parts) > max_head_bytes {
        return Err(ProxyError::HeadTooLarge {
            limit: max_head_bytes,
        });
    }
    if parts.method == Method::CONNECT {
        return Err(ProxyError::NotImplemented { what: "CONNECT" });
    }
    if !hop_by_hop::request_coding_supported(&parts.headers) {
        return Err(ProxyError::NotImplemented {
            what: "a request transfer coding other than chunked",
        });
    }
    let target = target.map_err(|error| ProxyError::BadTarget {
        reason: error.reason(),
    })?;
    if declared_length(&parts.headers).is_some_and(|n| n > max_body_bytes) {
        return Err(ProxyError::RequestBodyTooLarge {
            limit: max_body_bytes,
        });
    }
    Ok(target)
}

/// Why an upstream's status cannot be forwarded: one HTTP does not define, or a switch of protocols
/// that was never asked for (tokentap removes `Upgrade` from every request but a WebSocket handshake,
/// the one for which `upgrading` is true). Other 1xx never get here: hyper reads them and waits for the
/// final response.
pub fn undefined_status(status: StatusCode, upgrading: bool) -> Option<&'static str> {
    if status == StatusCode::SWITCHING_PROTOCOLS && !upgrading {
        Some("switching protocols though no upgrade was asked for")
    } else if status.as_u16() > 599 {
        Some("which HTTP does not define (100 to 599)")
    } else {
        None
    }
}

/// The size of an HTTP/1 request's head as it came, but for the optional spaces around header values,
/// which the parser drops: the request line and every header line with their CRLFs, and the blank line.
/// hyper bounds its read buffer, not the head: a head up to half again `limits.max_request_header_bytes`
/// could reach the service whole in one read. So the limit is held here, exactly but for those spaces.
/// (h2 bounds its header list itself, as HTTP/2 counts it.)
fn head_len(parts: &http::request::Parts) -> usize {
    let target = parts.uri.path_and_query().map_or(1, |pq| pq.as_str().len());
    let target = match parts.uri.authority() {
        Some(authority) => target + authority.as_str().len() + "http://".len(),
        None => target,
    };
    let line = parts.method.as_str().len() + 1 + target + " HTTP/1.1\r\n".len();
    let headers: usize = (parts.headers.iter())
        .map(|(name, value)| name.as_str().len() + ": ".len() + value.len() + 2)
        .sum();
    line + headers + 2
}

/// The request's `Content-Length`, when it has one that parses.
pub fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_101_never_asked_for_or_a_status_over_599_is_not_forwarded() {
        let status = |code| StatusCode::from_u16(code).unwrap_or_default();
        for code in [101, 600, 999] {
            assert!(undefined_status(status(code), false).is_some(), "{code}");
        }
        for code in [100, 103, 200, 204, 304, 404, 599] {
            assert!(undefined_status(status(code), false).is_none(), "{code}");
        }
        assert!(
            undefined_status(status(101), true).is_none(),
            "a handshake's 101"
        );
    }

    #[test]
    fn a_head_is_measured_as_it_came_but_for_spaces_around_values() {
        let request = http::Request::post("/v1/chat/completions?x=1")
            .header("host", "x")
            .header("content-type", "application/json")
            .body(())
            .unwrap_or_default();
        let (parts, ()) = request.into_parts();
        let sent = "POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\r\n";
        assert_eq!(head_len(&parts), sent.len());
    }
}
