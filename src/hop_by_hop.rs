//! The only headers a proxy may touch: the hop-by-hop ones of RFC 9110 §7.6.1. They describe one
//! connection, not the message, so they are removed in both directions; everything else passes unchanged.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Removes the hop-by-hop headers and every header the `Connection` header names.
/// `TE: trailers` survives on requests: it is how a client says it accepts trailers, which are forwarded.
/// A message that came with `Transfer-Encoding` was framed by it, so any `Content-Length` beside it is
/// dropped too (RFC 9112 §6.3: an intermediary must remove it before forwarding); left in place, it would
/// frame the re-encoded body for the next hop with a length the body does not have. Of the transfer
/// codings only `chunked` is undone; any other (`gzip, chunked`) stays named, since the bytes still carry it.
pub fn strip(headers: &mut HeaderMap) {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        headers.remove(header::CONTENT_LENGTH);
    }
    let other_codings = non_chunked_codings(headers);
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    let te_trailers = headers.get_all(header::TE).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
        })
    });
    for name in [
        header::CONNECTION,
        KEEP_ALIVE,
        PROXY_CONNECTION,
        header::TE,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    if te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if let Some(codings) = other_codings {
        headers.insert(header::TRANSFER_ENCODING, codings);
    }
}

/// The transfer codings other than `chunked`, in order: hyper decodes only `chunked`, so the bytes still
/// carry any other coding and the next hop must be told (hyper adds `chunked` back when it sends).
fn non_chunked_codings(headers: &HeaderMap) -> Option<HeaderValue> {
    let mut codings = Vec::new();
    for value in headers.get_all(header::TRANSFER_ENCODING) {
        for coding in value.as_bytes().split(|&b| b == b',') {
            let coding = coding.trim_ascii();
            if !coding.is_empty() && !coding.eq_ignore_ascii_case(b"chunked") {
                codings.push(coding);
            }
        }
    }
    if codings.is_empty() {
        return None;
    }
    HeaderValue::from_bytes(&codings.join(&b", "[..])).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_hop_by_hop_and_connection_named_headers_only() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, X-Secret-Hop"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k"));
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.append("x-multi", HeaderValue::from_static("a"));
        h.append("x-multi", HeaderValue::from_static("b"));
        strip(&mut h);
        let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["authorization", "content-type", "x-multi"]);
        assert_eq!(h.get_all("x-multi").iter().count(), 2);
    }

    #[test]
    fn content_length_beside_transfer_encoding_is_dropped() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("7"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        strip(&mut h);
        assert!(h.is_empty());
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("7"));
        strip(&mut h);
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn transfer_codings_other_than_chunked_stay_named() {
        let mut h = HeaderMap::new();
        h.append(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("gzip, Chunked"),
        );
        h.append(header::TRANSFER_ENCODING, HeaderValue::from_static("br"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("7"));
        strip(&mut h);
        let te: Vec<_> = h.get_all(header::TRANSFER_ENCODING).iter().collect();
        assert_eq!(te, [&HeaderValue::from_static("gzip, br")]);
        assert!(h.get(header::CONTENT_LENGTH).is_none());
    }

    #[test]
    fn te_trailers_survives_other_te_values_do_not() {
        let mut h = HeaderMap::new();
        h.insert(header::TE, HeaderValue::from_static("gzip, trailers"));
        strip(&mut h);
        assert_eq!(
            h.get(header::TE).map(|v| v.as_bytes()),
            Some(&b"trailers"[..])
        );
        let mut h = HeaderMap::new();
        h.insert(header::TE, HeaderValue::from_static("gzip"));
        strip(&mut h);
        assert!(h.get(header::TE).is_none());
    }
}
