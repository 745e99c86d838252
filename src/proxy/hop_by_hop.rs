//! The only headers a proxy may touch: the hop-by-hop ones of RFC 9110 §7.6.1. They describe one
//! connection, not the message, so they are removed in both directions; everything else passes unchanged
//! and in its place. The names an upstream's `Connection` header lists are removed from its response too;
//! the names a client's `Connection` lists are not removed from its request, as nginx ignores them: a
//! gateway in front of tokentap adds identity headers (`Authorization`, `X-Forwarded-For`) that a client
//! must not be able to strip by naming them (the class of Traefik's CVE-2024-45410). Framing is the one
//! other thing touched: a `Content-Length` beside `Transfer-Encoding` is dropped, and one written
//! otherwise than as a plain decimal (`007`) goes on as that decimal, so the next hop cannot read it
//! differently (as octal, or as a list). A map with nothing to remove is left as it is; otherwise it is
//! rebuilt without the removed names, never edited with `HeaderMap::remove`, which moves the last header
//! into the gap. The original case of each name travels beside the map (hyper's `preserve_header_case`,
//! keyed by name), so keeping a name keeps its case too.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
const HTTP2_SETTINGS: HeaderName = HeaderName::from_static("http2-settings");

/// The hop-by-hop names always removed (`TE` and `Transfer-Encoding` have rules of their own).
/// `HTTP2-Settings` belongs to an `Upgrade: h2c`, which is removed with it (RFC 7540 §3.2.1).
const ALWAYS_REMOVED: [HeaderName; 5] = [
    header::CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    header::UPGRADE,
    HTTP2_SETTINGS,
];

/// Which way a message travels, which decides whether its `Connection` header may remove anything
/// beyond the fixed hop-by-hop set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// A client's request: the names its `Connection` header lists are ignored.
    Request,
    /// The upstream's response: the names its `Connection` header lists are removed.
    Response,
}

/// The protocol of the hop the message is forwarded on, which decides what becomes of
/// `Transfer-Encoding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextHop {
    /// HTTP/1.x frames a body by the `Transfer-Encoding` it finds in the map, so the header stays where
    /// it was, ending in `chunked` (hyper writes it as it finds it, or leaves it out where a message may
    /// not be chunked: HTTP/1.0, HEAD, 204, 304).
    Http1,
    /// HTTP/2 frames bodies itself and forbids `Transfer-Encoding`.
    Http2,
}

impl NextHop {
    /// The hop back to a client that sent its request over `version`.
    pub fn to_client(version: http::Version) -> Self {
        if version == http::Version::HTTP_2 {
            NextHop::Http2
        } else {
            NextHop::Http1
        }
    }
}

/// Removes the hop-by-hop headers (and, in a response, every header the `Connection` header names),
/// keeping the order of the rest. `TE: trailers` survives on requests, in its place, even when
/// `Connection` names `TE`: it is how a client says it accepts trailers, which are forwarded. A request
/// that keeps it and goes out over HTTP/1.1 ends with `Connection: TE`, as RFC 9110 §10.1.4 asks of
/// every sender of `TE` (an h2 client sends no `Connection` at all). A message that came with `Transfer-Encoding` was framed by it, so any `Content-Length`
/// beside it is dropped (RFC 9112 §6.3: an intermediary must remove it before forwarding); left in place,
/// it would frame the re-encoded body for the next hop with a length the body does not have. Of the
/// transfer codings only `chunked` is undone; any other (`gzip, chunked`) stays named, since the bytes
/// still carry it, and over HTTP/1.1 the header ends in `chunked` again, which is how the body is sent.
/// A `Content-Length` written other than as one plain decimal (`007`, `7, 7`, two equal lines) goes on
/// as that decimal (`7`), in the place of the first.
pub fn strip(headers: &mut HeaderMap, next: NextHop, direction: Direction) {
    strip_except(headers, next, direction, &[]);
}

/// [`strip`] for a WebSocket handshake and its answer (RFC 6455 §4): `Connection` and `Upgrade` are
/// hop-by-hop, but they are the handshake, so they pass unchanged, in their place, in both directions
/// (`Sec-WebSocket-*` are end-to-end and pass as every other header does). Every other rule stands.
pub fn strip_for_upgrade(headers: &mut HeaderMap, next: NextHop, direction: Direction) {
    strip_except(
        headers,
        next,
        direction,
        &[header::CONNECTION, header::UPGRADE],
    );
}

fn strip_except(headers: &mut HeaderMap, next: NextHop, direction: Direction, kept: &[HeaderName]) {
    let framing = framing(headers, next);
    let drop_length = headers.contains_key(header::TRANSFER_ENCODING)
        && headers.contains_key(header::CONTENT_LENGTH);
    let length = canonical_length(headers);
    let hop_by_hop = headers.contains_key(header::TE)
        || ALWAYS_REMOVED.iter().any(|name| headers.contains_key(name));
    if !hop_by_hop
        && !drop_length
        && length.is_none()
        && matches!(framing, Framing::Absent | Framing::AsSent)
    {
        return;
    }
    let named: Vec<HeaderName> = match direction {
        Direction::Request => Vec::new(),
        Direction::Response => headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect(),
    };
    let te_trailers = headers.get_all(header::TE).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
        })
    });
    let keep = |name: &HeaderName| -> Keep {
        if kept.contains(name) {
            return Keep::All;
        }
        if name == header::TE {
            return if te_trailers {
                Keep::Once(Some(HeaderValue::from_static("trailers")))
            } else {
                Keep::None
            };
        }
        if ALWAYS_REMOVED.contains(name) || named.contains(name) {
            return Keep::None;
        }
        match *name {
            header::CONTENT_LENGTH if drop_length => Keep::None,
            header::CONTENT_LENGTH => match &length {
                Some(canonical) => Keep::Once(Some(canonical.clone())),
                None => Keep::All,
            },
            header::TRANSFER_ENCODING => match &framing {
                Framing::Absent | Framing::AsSent => Keep::All,
                Framing::Removed => Keep::None,
                Framing::Rewritten(value) => Keep::Once(Some(value.clone())),
            },
            _ => Keep::All,
        }
    };
    let sent = std::mem::take(headers);
    headers.reserve(sent.len());
    let mut current: Option<(HeaderName, Keep)> = None;
    for (name, value) in sent {
        if let Some(name) = name {
            let rule = keep(&name);
            current = Some((name, rule));
        }
        let Some((name, rule)) = &mut current else {
            continue;
        };
        match rule {
            Keep::All => {
                headers.append(&*name, value);
            }
            Keep::Once(first) => {
                if let Some(value) = first.take() {
                    headers.append(&*name, value);
                }
            }
            Keep::None => {}
        }
    }
    // `TE` applies to one connection only, so whoever sends it names it in `Connection` too (RFC 9110
    // §10.1.4): a next hop that does not know it then drops it instead of passing it on.
    if te_trailers && direction == Direction::Request && next == NextHop::Http1 && kept.is_empty() {
        headers.append(header::CONNECTION, HeaderValue::from_static("TE"));
    }
}

/// What an h2 request needs to become an HTTP/1.1 one beyond the hop-by-hop rules (RFC 9113 §8.2):
/// h2 lets a client split `cookie` into several fields for compression, and HTTP/1.1 servers read one
/// `Cookie` line (most keep only the first or the last of several), so the fields are joined, in order,
/// with "; " (§8.2.3), in the place of the first. The other §8.2 rules need nothing here: h2 itself
/// refuses connection-specific fields, `TE` other than `trailers` and values with CR, LF or NUL (§8.2.1,
/// §8.2.2); `Host` is the upstream's, written by the proxy (§8.3.1); the body's framing is the hop's.
pub fn join_cookies(headers: &mut HeaderMap) {
    let mut cookies = headers.get_all(header::COOKIE).iter();
    let (Some(first), Some(_)) = (cookies.next(), cookies.next()) else {
        return;
    };
    let mut joined = first.as_bytes().to_vec();
    for crumb in headers.get_all(header::COOKIE).iter().skip(1) {
        joined.extend_from_slice(b"; ");
        joined.extend_from_slice(crumb.as_bytes());
    }
    if let Ok(value) = HeaderValue::from_bytes(&joined) {
        headers.insert(header::COOKIE, value);
    }
}

/// Whether a request's transfer coding is one tokentap forwards: none, or exactly `chunked`. Any other
/// (`gzip, chunked`) is answered `501`, as nginx does: the upstream would have to undo a coding few
/// servers implement, and tokentap could not read the body's `model`.
pub fn request_coding_supported(headers: &HeaderMap) -> bool {
    let mut codings = codings(headers);
    match (codings.next(), codings.next()) {
        (None, _) => !headers.contains_key(header::TRANSFER_ENCODING),
        (Some(only), None) => only.eq_ignore_ascii_case(b"chunked"),
        (Some(_), Some(_)) => false,
    }
}

/// The one plain decimal a `Content-Length` written otherwise stands for; `None` when it is already
/// plain, absent, or not a length at all (the HTTP layer refuses those before they get here).
fn canonical_length(headers: &HeaderMap) -> Option<HeaderValue> {
    let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
    let first = values.next()?;
    let several = values.next().is_some();
    let plain =
        |v: &[u8]| !v.is_empty() && v.iter().all(u8::is_ascii_digit) && (v == b"0" || v[0] != b'0');
    if !several && plain(first.as_bytes()) {
        return None;
    }
    let mut length: Option<u64> = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for part in value.as_bytes().split(|&b| b == b',') {
            let part = part.trim_ascii();
            if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let n: u64 = std::str::from_utf8(part).ok()?.parse().ok()?;
            if length.is_some_and(|seen| seen != n) {
                return None;
            }
            length = Some(n);
        }
    }
    length.map(HeaderValue::from)
}

/// What is kept of the values of one name.
enum Keep {
    All,
    /// This value instead of all of them, at the place of the first.
    Once(Option<HeaderValue>),
    None,
}

/// What becomes of `Transfer-Encoding`.
enum Framing {
    Absent,
    /// One value ending in its only `chunked`: it goes on as it came (for HTTP/1.1, which frames with it).
    AsSent,
    Removed,
    /// The codings other than `chunked`, in order, then `chunked`, in place of the values that came.
    Rewritten(HeaderValue),
}

fn framing(headers: &HeaderMap, next: NextHop) -> Framing {
    let mut values = headers.get_all(header::TRANSFER_ENCODING).iter();
    let Some(first) = values.next() else {
        return Framing::Absent;
    };
    if next == NextHop::Http2 {
        return Framing::Removed;
    }
    if values.next().is_none() && ends_in_its_only_chunked(first) {
        return Framing::AsSent;
    }
    let mut codings: Vec<&[u8]> = codings(headers)
        .filter(|coding| !coding.eq_ignore_ascii_case(b"chunked"))
        .collect();
    codings.push(b"chunked");
    HeaderValue::from_bytes(&codings.join(&b", "[..])).map_or(Framing::Removed, Framing::Rewritten)
}

/// The transfer codings named, in order, over all `Transfer-Encoding` values.
fn codings(headers: &HeaderMap) -> impl Iterator<Item = &[u8]> {
    headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|coding| !coding.is_empty())
}

fn ends_in_its_only_chunked(value: &HeaderValue) -> bool {
    let mut chunked_at = None;
    let mut count = 0;
    for (i, coding) in value
        .as_bytes()
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .enumerate()
    {
        count = i + 1;
        if coding.eq_ignore_ascii_case(b"chunked") {
            if chunked_at.is_some() {
                return false;
            }
            chunked_at = Some(i);
        }
    }
    chunked_at.is_some_and(|at| at + 1 == count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h2_cookie_fields_are_joined_in_order_in_the_place_of_the_first() {
        let mut headers = HeaderMap::new();
        headers.append(header::ACCEPT, HeaderValue::from_static("*/*"));
        for crumb in ["a=1", "b=2", "c=3"] {
            headers.append(header::COOKIE, HeaderValue::from_static(crumb));
        }
        headers.append(header::USER_AGENT, HeaderValue::from_static("x"));
        join_cookies(&mut headers);
        let cookies: Vec<_> = headers.get_all(header::COOKIE).iter().collect();
        assert_eq!(cookies, ["a=1; b=2; c=3"]);
        let names: Vec<_> = headers.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["accept", "cookie", "user-agent"]);

        let mut one = HeaderMap::new();
        one.append(header::COOKIE, HeaderValue::from_static("a=1"));
        join_cookies(&mut one);
        assert_eq!(one[header::COOKIE], "a=1");
    }

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_static(value));
        }
        h
    }

    fn pairs(h: &HeaderMap) -> Vec<(&str, &str)> {
        h.iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap_or("?")))
            .collect()
    }

    #[test]
    fn removes_hop_by_hop_and_connection_named_headers_and_keeps_the_order_of_the_rest() {
        let mut h = map(&[
            ("x-first", "1"),
            ("connection", "keep-alive, X-Secret-Hop"),
            ("authorization", "Bearer k"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("content-type", "application/json"),
            ("upgrade", "websocket"),
            ("x-multi", "a"),
            ("x-multi", "b"),
            ("proxy-connection", "keep-alive"),
            ("vary", "origin"),
        ]);
        strip(&mut h, NextHop::Http1, Direction::Response);
        assert_eq!(
            pairs(&h),
            [
                ("x-first", "1"),
                ("authorization", "Bearer k"),
                ("content-type", "application/json"),
                ("x-multi", "a"),
                ("x-multi", "b"),
                ("vary", "origin"),
            ]
        );
    }

    #[test]
    fn a_map_without_hop_by_hop_headers_is_left_as_it_is() {
        let mut spare = HeaderMap::with_capacity(64);
        spare.append("x-b", HeaderValue::from_static("1"));
        spare.append(header::CONTENT_LENGTH, HeaderValue::from_static("7"));
        spare.append("x-a", HeaderValue::from_static("2"));
        let chunked = map(&[("x-a", "1"), ("transfer-encoding", "Chunked"), ("x-b", "2")]);
        for mut h in [spare, chunked] {
            let (capacity, sent) = (h.capacity(), h.clone());
            strip(&mut h, NextHop::Http1, Direction::Response);
            assert_eq!(
                h.capacity(),
                capacity,
                "rebuilt although nothing was removed"
            );
            assert_eq!(pairs(&h), pairs(&sent));
        }
    }

    #[test]
    fn content_length_beside_transfer_encoding_is_dropped() {
        for next in [NextHop::Http1, NextHop::Http2] {
            let mut h = map(&[
                ("content-length", "7"),
                ("x-a", "1"),
                ("transfer-encoding", "chunked"),
            ]);
            strip(&mut h, next, Direction::Response);
            assert!(h.get(header::CONTENT_LENGTH).is_none());
            assert_eq!(
                h.get(header::TRANSFER_ENCODING).is_some(),
                next == NextHop::Http1
            );
            let mut h = map(&[("content-length", "7")]);
            strip(&mut h, next, Direction::Response);
            assert_eq!(h.len(), 1);
        }
    }

    #[test]
    fn transfer_codings_other_than_chunked_stay_named_in_place_over_http1() {
        let mut h = map(&[
            ("x-a", "1"),
            ("transfer-encoding", "gzip, Chunked"),
            ("x-b", "2"),
            ("transfer-encoding", "br"),
            ("content-length", "7"),
        ]);
        let mut h2 = h.clone();
        strip(&mut h2, NextHop::Http2, Direction::Response);
        assert_eq!(pairs(&h2), [("x-a", "1"), ("x-b", "2")]);
        strip(&mut h, NextHop::Http1, Direction::Response);
        assert_eq!(
            pairs(&h),
            [
                ("x-a", "1"),
                ("transfer-encoding", "gzip, br, chunked"),
                ("x-b", "2"),
            ]
        );
        let mut h = map(&[("transfer-encoding", "gzip")]);
        strip(&mut h, NextHop::Http1, Direction::Response);
        assert_eq!(pairs(&h), [("transfer-encoding", "gzip, chunked")]);
        let mut h = map(&[("transfer-encoding", "chunked, gzip")]);
        strip(&mut h, NextHop::Http1, Direction::Response);
        assert_eq!(pairs(&h), [("transfer-encoding", "gzip, chunked")]);
    }

    #[test]
    fn te_trailers_survives_in_place_other_te_values_do_not() {
        let mut h = map(&[
            ("x-a", "1"),
            ("te", "gzip, Trailers"),
            ("connection", "TE"),
            ("x-b", "2"),
        ]);
        strip(&mut h, NextHop::Http1, Direction::Response);
        assert_eq!(pairs(&h), [("x-a", "1"), ("te", "trailers"), ("x-b", "2")]);
        let mut h = map(&[("te", "gzip"), ("x-a", "1")]);
        strip(&mut h, NextHop::Http1, Direction::Response);
        assert_eq!(pairs(&h), [("x-a", "1")]);
    }

    #[test]
    fn a_requests_connection_header_removes_nothing_beyond_the_fixed_set() {
        let sent = [
            ("x-first", "1"),
            (
                "connection",
                "authorization, X-Forwarded-For, keep-alive, upgrade, te",
            ),
            ("authorization", "Bearer from-the-gateway"),
            ("x-forwarded-for", "10.0.0.1"),
            ("keep-alive", "timeout=5"),
            ("upgrade", "h2c"),
            ("http2-settings", "AAMAAABkAAQAoAAAAAIAAAAA"),
            ("te", "trailers"),
            ("proxy-authorization", "Basic eA=="),
        ];
        let request = vec![
            ("x-first", "1"),
            ("authorization", "Bearer from-the-gateway"),
            ("x-forwarded-for", "10.0.0.1"),
            ("te", "trailers"),
            ("proxy-authorization", "Basic eA=="),
            ("connection", "TE"),
        ];
        let response = vec![
            ("x-first", "1"),
            ("te", "trailers"),
            ("proxy-authorization", "Basic eA=="),
        ];
        for (direction, want) in [
            (Direction::Request, request),
            (Direction::Response, response),
        ] {
            let mut h = map(&sent);
            strip(&mut h, NextHop::Http1, direction);
            assert_eq!(pairs(&h), want, "{direction:?}");
        }
    }

    #[test]
    fn a_websocket_handshake_keeps_connection_and_upgrade_in_place_and_loses_the_other_hop_by_hop_headers(
    ) {
        let sent = [
            ("host", "x"),
            ("Upgrade", "websocket"),
            ("Connection", "keep-alive, Upgrade"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("keep-alive", "timeout=5"),
            ("sec-websocket-extensions", "permessage-deflate"),
        ];
        let want = [
            ("host", "x"),
            ("upgrade", "websocket"),
            ("connection", "keep-alive, Upgrade"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-extensions", "permessage-deflate"),
        ];
        for direction in [Direction::Request, Direction::Response] {
            let mut h = map(&sent);
            strip_for_upgrade(&mut h, NextHop::Http1, direction);
            assert_eq!(pairs(&h), want, "{direction:?}");
            let mut plain = map(&sent);
            strip(&mut plain, NextHop::Http1, direction);
            assert!(
                plain.get(header::UPGRADE).is_none() && plain.get(header::CONNECTION).is_none()
            );
        }
    }

    #[test]
    fn a_content_length_written_otherwise_goes_on_as_one_plain_decimal_in_place() {
        for direction in [Direction::Request, Direction::Response] {
            for (sent, want) in [
                (vec![("content-length", "007")], "7"),
                (vec![("content-length", "00")], "0"),
                (vec![("content-length", "7, 7")], "7"),
                (
                    vec![("content-length", "7"), ("content-length", "007")],
                    "7",
                ),
            ] {
                let mut sent = sent.clone();
                sent.insert(0, ("x-a", "1"));
                sent.push(("x-b", "2"));
                let mut h = map(&sent);
                strip(&mut h, NextHop::Http1, direction);
                assert_eq!(
                    pairs(&h),
                    [("x-a", "1"), ("content-length", want), ("x-b", "2")]
                );
            }
            for plain in ["0", "7", "1234567890"] {
                let mut h = map(&[("content-length", plain)]);
                strip(&mut h, NextHop::Http1, direction);
                assert_eq!(pairs(&h), [("content-length", plain)]);
            }
        }
    }

    #[test]
    fn only_chunked_alone_is_a_supported_request_coding() {
        assert!(request_coding_supported(&HeaderMap::new()));
        assert!(request_coding_supported(&map(&[(
            "transfer-encoding",
            "chunked"
        )])));
        assert!(request_coding_supported(&map(&[(
            "transfer-encoding",
            " Chunked "
        )])));
        for codings in [
            &[("transfer-encoding", "gzip, chunked")][..],
            &[
                ("transfer-encoding", "gzip"),
                ("transfer-encoding", "chunked"),
            ],
            &[("transfer-encoding", "chunked, chunked")],
            &[("transfer-encoding", "identity")],
            &[("transfer-encoding", "")],
        ] {
            assert!(!request_coding_supported(&map(codings)), "{codings:?}");
        }
    }
}
