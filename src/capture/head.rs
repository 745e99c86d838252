//! An HTTP/1.1 request or response head read off its stream (`httparse`, the parser hyper uses): the
//! bytes are gathered, within the connection's lease and `limits.max_request_header_bytes`, until the
//! empty line, then parsed once, into what the exchange needs: the method and path or the status, the
//! headers (for the request's identity, the content type, the server's timings), and how the body is
//! delimited (RFC 9112 §6.3).

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::body::{Body, Chunked};
use super::budget::Lease;

/// The most headers a head may have (as the proxy's listener allows).
const MAX_HEADERS: usize = 100;

/// Why a head cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Not HTTP/1.x: a bad request line or status line, a bad header, too many of them.
    NotHttp,
    /// Over the head's bound, or the lease's.
    TooLarge,
}

/// The bytes of a head read so far.
#[derive(Default)]
pub struct Gather {
    bytes: Vec<u8>,
}

impl Gather {
    /// Adds `bytes`: once the head is whole, it and how many of `bytes` it took (the rest are its body's).
    pub fn feed(
        &mut self, bytes: &[u8], max: usize, lease: &mut Lease,
    ) -> Result<Option<(Vec<u8>, usize)>, HeadError> {
        let searched = self.bytes.len().saturating_sub(3);
        let before = self.bytes.len();
        let take = bytes.len().min(max.saturating_sub(before) + 1);
        if !lease.grow(take) {
            return Err(HeadError::TooLarge);
        }
        self.bytes.extend_from_slice(&bytes[..take]);
        match memchr::memmem::find(&self.bytes[searched..], b"\r\n\r\n") {
            Some(end) => {
                let end = searched + end + 4;
                let mut head = std::mem::take(&mut self.bytes);
                lease.shrink(head.len());
                head.truncate(end);
                Ok(Some((head, end - before)))
            }
            None if self.bytes.len() > max => Err(HeadError::TooLarge),
            None => Ok(None),
        }
    }

    /// Gives its bytes back to `lease`.
    pub fn clear(&mut self, lease: &mut Lease) {
        lease.shrink(self.bytes.len());
        self.bytes = Vec::new();
    }
}

/// A request head.
#[derive(Debug)]
pub struct RequestHead {
    pub method: http::Method,
    /// The target's path, without its query.
    pub path: String,
    pub headers: HeaderMap,
    pub body: Body,
    /// A WebSocket (or other) upgrade: the connection may change protocol at the answer.
    pub upgrade: bool,
}

/// A response head.
#[derive(Debug)]
pub struct ResponseHead {
    pub status: StatusCode,
    pub headers: HeaderMap,
}

fn header_map(headers: &[httparse::Header<'_>]) -> Result<HeaderMap, HeadError> {
    let mut map = HeaderMap::with_capacity(headers.len());
    for header in headers {
        let name =
            HeaderName::from_bytes(header.name.as_bytes()).map_err(|_| HeadError::NotHttp)?;
        let value = HeaderValue::from_bytes(header.value).map_err(|_| HeadError::NotHttp)?;
        map.append(name, value);
    }
    Ok(map)
}

/// Whether a header's comma-separated list names `token` (any case).
fn lists(headers: &HeaderMap, name: http::header::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.to_str()
            .unwrap_or("")
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    })
}

/// The body a message with `headers` has (RFC 9112 §6.3): chunked, a length, or else `otherwise`. A
/// transfer coding other than a final `chunked`, or a length that is not one number, cannot be read.
fn body_of(headers: &HeaderMap, otherwise: Body) -> Result<Body, HeadError> {
    use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
    if headers.contains_key(TRANSFER_ENCODING) {
        let codings: Vec<&HeaderValue> = headers.get_all(TRANSFER_ENCODING).iter().collect();
        let last = codings.last().and_then(|v| v.to_str().ok()).unwrap_or("");
        let chunked = last
            .rsplit(',')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"));
        return match chunked {
            true => Ok(Body::Chunked(Chunked::default())),
            false => Err(HeadError::NotHttp),
        };
    }
    let mut lengths = headers
        .get_all(CONTENT_LENGTH)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','));
    match lengths.next() {
        None => Ok(otherwise),
        Some(first) => {
            let parse = |v: &[u8]| {
                std::str::from_utf8(v.trim_ascii())
                    .ok()?
                    .parse::<u64>()
                    .ok()
            };
            let n = parse(first).ok_or(HeadError::NotHttp)?;
            match lengths.all(|v| parse(v) == Some(n)) {
                true => Ok(Body::Length(n)),
                false => Err(HeadError::NotHttp),
            }
        }
    }
}

/// Parses a whole request head.
pub fn request(head: &[u8]) -> Result<RequestHead, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(HeadError::NotHttp),
    }
    let method = parsed.method.ok_or(HeadError::NotHttp)?;
    let method = http::Method::from_bytes(method.as_bytes()).map_err(|_| HeadError::NotHttp)?;
    let target = parsed.path.ok_or(HeadError::NotHttp)?;
    // An absolute form's path (`http://host/v1/...`), else the origin form's.
    let origin = match target.find("://") {
        Some(scheme) => target[scheme + 3..]
            .find('/')
            .map_or("/", |p| &target[scheme + 3 + p..]),
        None => target,
    };
    let path = origin
        .split_once('?')
        .map_or(origin, |(path, _)| path)
        .to_owned();
    let headers = header_map(parsed.headers)?;
    let body = body_of(&headers, Body::Length(0))?;
    let upgrade = headers.contains_key(http::header::UPGRADE)
        && lists(&headers, http::header::CONNECTION, "upgrade");
    Ok(RequestHead {
        method,
        path,
        headers,
        body,
        upgrade,
    })
}

/// Parses a whole response head.
pub fn response(head: &[u8]) -> Result<ResponseHead, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut headers);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(HeadError::NotHttp),
    }
    let status = parsed.code.ok_or(HeadError::NotHttp)?;
    let status = StatusCode::from_u16(status).map_err(|_| HeadError::NotHttp)?;
    let headers = header_map(parsed.headers)?;
    Ok(ResponseHead { status, headers })
}

impl ResponseHead {
    /// The body of this response to a request of `method` (RFC 9112 §6.3): none for HEAD, 1xx, 204 and
    /// 304; else chunked, a length, or to the connection's close.
    pub fn body(&self, method: &http::Method) -> Result<Body, HeadError> {
        let s = self.status.as_u16();
        if method == http::Method::HEAD || (100..200).contains(&s) || s == 204 || s == 304 {
            return Ok(Body::Length(0));
        }
        body_of(&self.headers, Body::Close)
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::capture::budget::Budget;

    #[test]
    fn a_head_is_gathered_across_any_split_and_hands_back_the_bytes_after_it() {
        let wire =
            b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}";
        let budget = Budget::plain(1 << 20, 1 << 20);
        for split in 1..wire.len() {
            let mut lease = budget.lease([127, 0, 0, 1].into());
            let mut gather = Gather::default();
            let mut got = None;
            let mut offset = 0;
            for piece in wire.chunks(split) {
                if let Some((head, used)) = gather.feed(piece, 1024, &mut lease).unwrap() {
                    got = Some((head, offset + used));
                    break;
                }
                offset += piece.len();
            }
            let (head, end) = got.unwrap();
            assert_eq!(&wire[end..], b"{}", "split {split}");
            let head = request(&head).unwrap();
            assert_eq!(
                (head.method.as_str(), head.path.as_str()),
                ("POST", "/v1/chat/completions")
            );
            assert_eq!(head.body, Body::Length(2));
            assert_eq!(lease.held(), 0);
        }
    }

    #[test]
    fn a_head_over_its_bound_or_not_http_is_refused() {
        let budget = Budget::plain(1 << 20, 1 << 20);
        let mut lease = budget.lease([127, 0, 0, 1].into());
        let mut gather = Gather::default();
        assert_eq!(
            gather.feed(&[b'a'; 100], 64, &mut lease),
            Err(HeadError::TooLarge)
        );
        assert_eq!(
            request(b"\x16\x03\x01\x02\x00\r\n\r\n").err(),
            Some(HeadError::NotHttp)
        );
        assert_eq!(
            request(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").err(),
            Some(HeadError::NotHttp)
        );
        let both = b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(request(both).err(), Some(HeadError::NotHttp));
        let gzip = b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n";
        assert_eq!(request(gzip).err(), Some(HeadError::NotHttp));
    }

    #[test]
    fn a_responses_body_follows_its_status_its_headers_and_the_requests_method() {
        let sse = response(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n").unwrap();
        assert!(matches!(
            sse.body(&http::Method::POST),
            Ok(Body::Chunked(_))
        ));
        assert_eq!(sse.body(&http::Method::HEAD), Ok(Body::Length(0)));
        let close = response(b"HTTP/1.0 200 OK\r\n\r\n").unwrap();
        assert_eq!(close.body(&http::Method::GET), Ok(Body::Close));
        let early = response(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap();
        assert_eq!(early.body(&http::Method::POST), Ok(Body::Length(0)));
    }
}
