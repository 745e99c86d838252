//! The trace a request joins, read from its W3C `traceparent` and `tracestate` at admission (Trace
//! Context, <https://www.w3.org/TR/trace-context/>), with the proxy span's own id drawn there too: a
//! request with a valid `traceparent` gives the span its trace id and parent; one without (or with one
//! that does not parse) starts a new trace, its span a root. Ids are drawn before the request is
//! forwarded because `traces.propagate` sends the span's id upstream as the server span's parent
//! ([`propagate`]); without it the request's head is left exactly as it came.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use http::{HeaderMap, HeaderValue};

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";
/// The longest `tracestate` carried into a span (W3C: at least 512 characters should be propagated).
const MAX_TRACESTATE: usize = 512;
/// The sampled bit of the trace flags.
pub const SAMPLED: u8 = 0x01;

/// A 16-byte trace id, never all zeroes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(pub [u8; 16]);

/// An 8-byte span id, never all zeroes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(pub [u8; 8]);

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// What a caller's `traceparent` says, when it parses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: TraceId,
    /// The caller's span: the proxy span's parent.
    pub span_id: SpanId,
    /// The caller's trace flags (bit 0: it samples the trace).
    pub flags: u8,
}

/// The trace one request's span belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: TraceId,
    /// The proxy span's own id.
    pub span_id: SpanId,
    /// The caller's span, when a valid `traceparent` named one.
    pub parent: Option<SpanId>,
    /// The caller's flags; [`SAMPLED`] for a trace tokentap starts.
    pub flags: u8,
    /// The caller's `tracestate` (its lines joined by `,`), carried into the span; only beside a valid
    /// `traceparent`, at most 512 bytes of visible ASCII.
    pub trace_state: Option<String>,
    /// The request carried a `traceparent` that did not parse: with `propagate`, its `tracestate` is
    /// dropped with it, as it belongs to a trace tokentap could not read.
    pub replaced: bool,
}

impl TraceContext {
    /// The caller said it samples this trace.
    pub fn parent_sampled(&self) -> bool {
        self.parent.is_some() && self.flags & SAMPLED != 0
    }

    /// The `traceparent` the upstream sees with `propagate`: this span as its parent, the caller's flags
    /// (01 for a trace tokentap starts, as the server would sample a root it starts itself).
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, self.span_id, self.flags)
    }

    /// The same trace and parent with a span id of its own: each response of a realtime session is a
    /// span of the trace its handshake joined, beside the others.
    pub fn another_span(&self) -> TraceContext {
        TraceContext {
            span_id: ids().span_id(),
            ..self.clone()
        }
    }
}

/// The trace a request with these headers joins, and the proxy span's own id.
pub fn ids_for(headers: &HeaderMap) -> TraceContext {
    let ids = ids();
    let span_id = ids.span_id();
    let mut lines = headers.get_all(TRACEPARENT).iter();
    let parent = match (lines.next(), lines.next()) {
        (Some(one), None) => one.to_str().ok().and_then(parse_traceparent),
        // Two `traceparent` fields: neither is believed (W3C: a receiver may not pick one).
        _ => None,
    };
    let present = headers.contains_key(TRACEPARENT);
    match parent {
        Some(parent) => TraceContext {
            trace_id: parent.trace_id,
            span_id,
            parent: Some(parent.span_id),
            flags: parent.flags,
            trace_state: tracestate(headers),
            replaced: false,
        },
        None => TraceContext {
            trace_id: ids.trace_id(),
            span_id,
            parent: None,
            flags: SAMPLED,
            trace_state: None,
            replaced: present,
        },
    }
}

/// `traceparent` as W3C Trace Context reads it: `version-traceid-parentid-flags`, lowercase hex. Version
/// `00` is exactly 55 characters; a later version (not `ff`) may append fields after a `-`, which are
/// ignored. An all-zero trace or parent id is invalid.
pub fn parse_traceparent(value: &str) -> Option<Parent> {
    let bytes = value.trim_matches([' ', '\t']).as_bytes();
    if bytes.len() < 55 {
        return None;
    }
    let version = hex::<1>(&bytes[0..2])?[0];
    if version == 0xff || (version == 0 && bytes.len() != 55) {
        return None;
    }
    if bytes.len() > 55 && bytes[55] != b'-' {
        return None;
    }
    if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
        return None;
    }
    let trace_id = hex::<16>(&bytes[3..35])?;
    let span_id = hex::<8>(&bytes[36..52])?;
    let flags = hex::<1>(&bytes[53..55])?[0];
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some(Parent {
        trace_id: TraceId(trace_id),
        span_id: SpanId(span_id),
        flags,
    })
}

/// `N` bytes from `2 × N` lowercase hex digits.
fn hex<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// The request's `tracestate` lines joined by `,` (RFC 9110 §5.3), when they are visible ASCII and
/// fit in [`MAX_TRACESTATE`] bytes; otherwise none is carried.
fn tracestate(headers: &HeaderMap) -> Option<String> {
    let mut joined = String::new();
    for line in headers.get_all(TRACESTATE) {
        let text = line.to_str().ok()?.trim();
        if text.is_empty() {
            continue;
        }
        if !joined.is_empty() {
            joined.push(',');
        }
        joined.push_str(text);
        if joined.len() > MAX_TRACESTATE {
            return None;
        }
    }
    (!joined.is_empty()).then_some(joined)
}

/// With `traces.propagate`: the request goes upstream with this span as the server's parent. Its
/// `traceparent` is replaced in place (added when it had none); a `tracestate` stays as the caller sent
/// it, unless it came beside a `traceparent` that did not parse.
pub fn propagate(headers: &mut HeaderMap, context: &TraceContext) {
    if let Ok(value) = HeaderValue::from_str(&context.traceparent()) {
        headers.insert(TRACEPARENT, value);
    }
    if context.replaced {
        headers.remove(TRACESTATE);
    }
}

/// Where ids come from: a per-process keyed hash (SipHash under the standard library's random keys,
/// drawn from the OS) of a counter. Unpredictable without the keys, never repeated within the process,
/// and cheap enough to draw for every request.
struct Ids {
    keys: std::collections::hash_map::RandomState,
    next: AtomicU64,
}

fn ids() -> &'static Ids {
    static IDS: OnceLock<Ids> = OnceLock::new();
    IDS.get_or_init(|| Ids {
        keys: std::collections::hash_map::RandomState::new(),
        next: AtomicU64::new(1),
    })
}

impl Ids {
    fn draw(&self, n: u64, lane: u64) -> u64 {
        let mut hasher = self.keys.build_hasher();
        hasher.write_u64(n);
        hasher.write_u64(lane);
        hasher.finish()
    }

    fn span_id(&self) -> SpanId {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        SpanId(self.draw(n, 0).max(1).to_be_bytes())
    }

    fn trace_id(&self) -> TraceId {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut id = [0; 16];
        id[..8].copy_from_slice(&self.draw(n, 1).to_be_bytes());
        id[8..].copy_from_slice(&self.draw(n, 2).max(1).to_be_bytes());
        TraceId(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            let name = http::HeaderName::from_bytes(name.as_bytes()).unwrap();
            map.append(name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn a_valid_traceparent_gives_the_trace_the_parent_and_the_flags() {
        let parent = parse_traceparent(VALID).unwrap();
        assert_eq!(
            parent.trace_id.to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(parent.span_id.to_string(), "00f067aa0ba902b7");
        assert_eq!(parent.flags, 1);
        let unsampled = parse_traceparent(&VALID.replace("-01", "-00")).unwrap();
        assert_eq!(unsampled.flags, 0);
        // A later version may append fields; they are ignored.
        let later = format!("cc{}-what-comes-next", &VALID[2..]);
        assert_eq!(
            parse_traceparent(&later).map(|p| p.span_id),
            Some(parent.span_id)
        );
        assert_eq!(
            parse_traceparent(&format!("cc{}", &VALID[2..])),
            Some(parent)
        );
    }

    #[test]
    fn an_invalid_traceparent_is_none() {
        let zero_trace = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        let zero_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01";
        let upper = VALID.to_uppercase();
        let longer = format!("{VALID}-00");
        let later_glued = format!("cc{}x", &VALID[2..]);
        let ff = format!("ff{}", &VALID[2..]);
        for bad in [
            "",
            "00",
            &VALID[..54],
            &longer,
            &later_glued,
            &ff,
            zero_trace,
            zero_parent,
            &upper,
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
            "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_request_with_a_traceparent_joins_its_trace_and_carries_its_tracestate() {
        let head = headers(&[
            ("traceparent", VALID),
            ("tracestate", "congo=t61rcWkgMzE"),
            ("tracestate", "rojo=00f067aa0ba902b7"),
        ]);
        let context = ids_for(&head);
        assert_eq!(
            context.trace_id.to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(
            context.parent.map(|p| p.to_string()).as_deref(),
            Some("00f067aa0ba902b7")
        );
        assert_ne!(context.span_id, SpanId([0; 8]));
        assert_ne!(Some(context.span_id), context.parent);
        assert!(context.parent_sampled());
        assert_eq!(
            context.trace_state.as_deref(),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
    }

    #[test]
    fn a_request_without_one_or_with_two_starts_a_trace_of_its_own() {
        for head in [
            headers(&[]),
            headers(&[("tracestate", "congo=t61rcWkgMzE")]),
            headers(&[("traceparent", VALID), ("traceparent", VALID)]),
            headers(&[("traceparent", "garbage")]),
        ] {
            let a = ids_for(&head);
            let b = ids_for(&head);
            assert_eq!((a.parent, a.trace_state.as_deref()), (None, None));
            assert_eq!(a.flags, SAMPLED);
            assert!(!a.parent_sampled());
            assert_ne!(a.trace_id, b.trace_id);
            assert_ne!(a.trace_id, TraceId([0; 16]));
            assert_eq!(a.replaced, head.contains_key(TRACEPARENT));
        }
    }

    #[test]
    fn propagation_rewrites_the_traceparent_in_place_and_adds_one_when_none_came() {
        let mut head = headers(&[
            ("accept", "*/*"),
            ("traceparent", VALID),
            ("tracestate", "congo=t61rcWkgMzE"),
        ]);
        let context = ids_for(&head);
        propagate(&mut head, &context);
        let sent = head.get("traceparent").unwrap().to_str().unwrap();
        assert_eq!(
            sent,
            format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{}-01", context.span_id)
        );
        assert_eq!(
            parse_traceparent(sent).map(|p| p.span_id),
            Some(context.span_id)
        );
        assert_eq!(head.get("tracestate").unwrap(), "congo=t61rcWkgMzE");
        let names: Vec<&str> = head.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["accept", "traceparent", "tracestate"]);

        let mut none = headers(&[]);
        let started = ids_for(&none);
        propagate(&mut none, &started);
        let sent = none.get("traceparent").unwrap().to_str().unwrap();
        let parsed = parse_traceparent(sent).unwrap();
        assert_eq!(
            (parsed.trace_id, parsed.span_id, parsed.flags),
            (started.trace_id, started.span_id, 1)
        );

        let mut broken = headers(&[("traceparent", "00-zz"), ("tracestate", "a=b")]);
        let restarted = ids_for(&broken);
        propagate(&mut broken, &restarted);
        assert!(broken.get("tracestate").is_none());
        assert_eq!(broken.get_all("traceparent").iter().count(), 1);
    }

    #[test]
    fn an_unsampled_caller_keeps_its_flag_upstream() {
        let unsampled = VALID.replace("-01", "-00");
        let context = ids_for(&headers(&[("traceparent", &unsampled)]));
        assert!(context.traceparent().ends_with("-00"));
        assert!(!context.parent_sampled());
    }
}
