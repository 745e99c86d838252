//! Incremental scanner for a few top-level fields of a JSON object body.
//!
//! The proxy learns the request's `"model"` and a response's `"model"`/`"usage"` while
//! the body streams through, without holding it back or buffering it: bodies can be
//! megabytes, and the OpenAI Python SDK puts `"model"` after the huge `"messages"`.
//! [`FieldScanner`] is a byte-level state machine fed frames cut anywhere; it tracks
//! nesting and string/escape state and keeps the raw JSON text of wanted depth-1 keys.
//! Memory is bounded by the longest wanted key plus `max_value_bytes`. It never panics,
//! gives up on malformed or over-deep input, and stops after `max_scan_bytes`. It is
//! not a validator: inside values only strings and bracket balance are followed.

#![deny(clippy::indexing_slicing)]

use memchr::memchr2;

/// Nesting depth inside one top-level value beyond which the scanner gives up.
const MAX_NEST: u32 = 10_000;
const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Start,      // before the top-level `{` (whitespace and a leading BOM allowed)
    FirstKey,   // after `{`: a key or `}`
    NextKey,    // after `,`: a key
    InKey,      // inside a depth-1 key string
    Colon,      // after a key
    ValueStart, // after `:`
    InValue,    // inside a depth-1 value: a string, a scalar, or nested brackets
    AfterValue, // `,` or `}`
    Done,
}

/// Streaming extractor of the raw values of a few top-level keys of a JSON object.
#[derive(Clone, Debug)]
pub struct FieldScanner {
    wanted: &'static [&'static str],
    max_value_bytes: usize,
    max_scan_bytes: usize,
    scanned: usize,
    state: State,
    bom: usize,            // BOM bytes matched at the very start
    key: Vec<u8>,          // current depth-1 key, cut at key_cap + 1 bytes (then matches nothing)
    key_cap: usize,        // longest wanted key
    nest: u32,             // bracket depth inside the current value: 0 for a string or scalar
    in_str: bool,          // inside a key, or a string in the current value
    esc: bool,             // the previous string byte was a lone `\`
    target: Option<usize>, // index into `wanted` of the value being captured into `cap`
    cap: Vec<u8>,
    found: Vec<Option<Vec<u8>>>,
}

fn head(s: &[u8], n: usize) -> &[u8] {
    s.get(..n).unwrap_or(s)
}

impl FieldScanner {
    /// `wanted`: top-level keys to capture. `max_value_bytes`: largest raw value kept.
    /// `max_scan_bytes`: after this many bytes have been fed, the scanner stops looking
    /// (values completed before that are kept).
    pub fn new(
        wanted: &'static [&'static str], max_value_bytes: usize, max_scan_bytes: usize,
    ) -> Self {
        let key_cap = wanted.iter().map(|w| w.len()).max().unwrap_or(0);
        FieldScanner {
            wanted,
            max_value_bytes,
            max_scan_bytes,
            scanned: 0,
            state: State::Start,
            bom: 0,
            key: Vec::with_capacity(key_cap + 1),
            key_cap,
            nest: 0,
            in_str: false,
            esc: false,
            target: None,
            cap: Vec::new(),
            found: vec![None; wanted.len()],
        }
    }

    /// Feeds the next bytes of the body (cut anywhere). Never panics, whatever the bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        let room = self.max_scan_bytes.saturating_sub(self.scanned);
        let chunk = head(bytes, room.min(bytes.len()));
        let mut i = 0;
        while i < chunk.len() && self.state != State::Done {
            let rest = chunk.get(i..).unwrap_or_default();
            i += match self.state {
                State::InKey => self.in_key(rest),
                State::InValue => self.in_value(rest),
                _ => {
                    let pos = self.scanned.saturating_add(i);
                    self.structural(rest.first().copied().unwrap_or(0), pos);
                    1
                }
            };
        }
        self.scanned = self.scanned.saturating_add(chunk.len());
        if self.scanned >= self.max_scan_bytes {
            self.state = State::Done;
        }
    }

    /// Raw JSON text of the wanted key's value (e.g. `"llama"` with quotes,
    /// `{"prompt_tokens":3}`, `42`, `null`), the last complete occurrence at depth 1
    /// (Python and serde_json servers take the last duplicate key). None if not seen,
    /// not complete, or over `max_value_bytes` (an oversize later duplicate also
    /// hides an earlier value, since the server would use the later one).
    pub fn raw(&self, key: &str) -> Option<&[u8]> {
        let idx = self.wanted.iter().position(|w| *w == key)?;
        self.found.get(idx)?.as_deref()
    }

    /// The value decoded as a JSON string (handles escapes via serde_json); None if
    /// absent or not a string.
    pub fn string(&self, key: &str) -> Option<String> {
        self.value(key)
    }

    /// The value decoded as a `T`; None if absent or not a `T`.
    pub fn value<T: serde::de::DeserializeOwned>(&self, key: &str) -> Option<T> {
        serde_json::from_slice(self.raw(key)?).ok()
    }

    /// True once scanning has stopped: the top-level value is not an object, the
    /// input is malformed, the object closed, or the scan budget is spent.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// One byte outside any string or value.
    fn structural(&mut self, b: u8, pos: usize) {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r') && !matches!(self.bom, 1 | 2) {
            return; // whitespace is allowed between all tokens, but not in a BOM
        }
        self.state = match self.state {
            State::Start if pos == self.bom && BOM.get(self.bom) == Some(&b) => {
                self.bom += 1;
                State::Start
            }
            State::Start if matches!(self.bom, 1 | 2) => State::Done, // partial BOM
            State::Start if b == b'{' => State::FirstKey,
            State::FirstKey | State::NextKey if b == b'"' => {
                self.key.clear();
                (self.in_str, self.esc) = (true, false);
                State::InKey
            }
            State::Colon if b == b':' => {
                // Keys compare by raw bytes: a key written with escapes
                // (`"mod\u0065l"`) never matches.
                let key = self.key.as_slice();
                self.target = self.wanted.iter().position(|w| w.as_bytes() == key);
                self.cap.clear();
                State::ValueStart
            }
            State::ValueStart => match b {
                b'"' | b'{' | b'[' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                    self.nest = u32::from(matches!(b, b'{' | b'['));
                    (self.in_str, self.esc) = (b == b'"', false);
                    self.capture(&[b]);
                    State::InValue
                }
                _ => State::Done,
            },
            State::AfterValue if b == b',' => State::NextKey,
            // `}` after `{` or a value closes the object; anything else is malformed.
            _ => State::Done,
        };
    }

    /// Consumes string content up to and including the next `"` or `\`, or the one
    /// byte after a `\`. Clears `in_str` at the closing quote. Returns bytes used.
    fn string_bytes(&mut self, rest: &[u8]) -> usize {
        if self.esc {
            self.esc = false;
            return 1;
        }
        match memchr2(b'"', b'\\', rest) {
            None => rest.len(),
            Some(j) => {
                match rest.get(j) {
                    Some(b'"') => self.in_str = false,
                    _ => self.esc = true,
                }
                j + 1
            }
        }
    }

    fn in_key(&mut self, rest: &[u8]) -> usize {
        let n = self.string_bytes(rest);
        let part = head(rest, if self.in_str { n } else { n.saturating_sub(1) });
        let room = (self.key_cap + 1).saturating_sub(self.key.len());
        self.key.extend_from_slice(head(part, room));
        if !self.in_str {
            self.state = State::Colon;
        }
        n
    }

    fn in_value(&mut self, rest: &[u8]) -> usize {
        if self.in_str {
            let n = self.string_bytes(rest);
            self.capture(head(rest, n));
            if !self.in_str && self.nest == 0 {
                self.finish_value();
            }
            return n;
        }
        if self.nest == 0 {
            // A scalar (a string or bracketed value at depth 0 has already finished).
            let scalar = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.');
            let n = rest.iter().position(|b| !scalar(b)).unwrap_or(rest.len());
            self.capture(head(rest, n));
            if n < rest.len() {
                self.finish_value(); // the delimiter is read again as structure
            }
            return n;
        }
        for (k, &b) in rest.iter().enumerate() {
            match b {
                b'"' => {
                    self.in_str = true;
                    self.capture(head(rest, k + 1));
                    return k + 1;
                }
                b'{' | b'[' if self.nest >= MAX_NEST => {
                    self.state = State::Done;
                    return k + 1;
                }
                b'{' | b'[' => self.nest += 1,
                b'}' | b']' => {
                    self.nest = self.nest.saturating_sub(1);
                    if self.nest == 0 {
                        self.capture(head(rest, k + 1));
                        self.finish_value();
                        return k + 1;
                    }
                }
                _ => {}
            }
        }
        self.capture(rest);
        rest.len()
    }

    fn capture(&mut self, part: &[u8]) {
        let Some(idx) = self.target else { return };
        if self.cap.len().saturating_add(part.len()) <= self.max_value_bytes {
            self.cap.extend_from_slice(part);
        } else {
            // Dropped, not truncated; an earlier duplicate goes too (the server
            // takes this later one).
            if let Some(slot) = self.found.get_mut(idx) {
                *slot = None;
            }
            (self.target, self.cap) = (None, Vec::new());
        }
    }

    fn finish_value(&mut self) {
        self.state = State::AfterValue;
        if let Some(slot) = self.target.take().and_then(|i| self.found.get_mut(i)) {
            let v = slot.get_or_insert_with(Vec::new);
            v.clear();
            v.extend_from_slice(&self.cap);
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::Value;

    const MODEL: &[&str] = &["model"];
    const MU: &[&str] = &["model", "usage"];

    fn scan(wanted: &'static [&'static str], pieces: &[&[u8]]) -> FieldScanner {
        let mut s = FieldScanner::new(wanted, 4096, usize::MAX);
        pieces.iter().for_each(|p| s.feed(p));
        s
    }

    fn model(body: &[u8]) -> Option<String> {
        scan(MODEL, &[body]).string("model")
    }

    fn model_and_usage(s: &FieldScanner) -> (Option<String>, Option<&[u8]>) {
        (s.string("model"), s.raw("usage"))
    }

    /// Scans `body` whole, split in two at every position, and byte by byte; each
    /// wanted key must agree with serde_json's view of the body. Returns the whole scan.
    fn scan_every_way(wanted: &'static [&'static str], body: &[u8]) -> FieldScanner {
        let doc: Value = serde_json::from_slice(body).unwrap();
        let check = |s: &FieldScanner, how: &str| {
            for key in wanted {
                let raw = s.raw(key).unwrap_or_else(|| panic!("{key}: {how}"));
                assert_eq!(serde_json::from_slice::<Value>(raw).unwrap(), doc[key]);
            }
            assert!(s.is_done(), "{how}");
        };
        for at in 0..=body.len() {
            let (a, b) = body.split_at(at);
            check(&scan(wanted, &[a, b]), &format!("split at {at}"));
        }
        let bytewise: Vec<&[u8]> = body.chunks(1).collect();
        check(&scan(wanted, &bytewise), "bytewise");
        let whole = scan(wanted, &[body]);
        check(&whole, "whole");
        whole
    }

    #[test]
    fn openai_request_model_after_messages_is_found_however_split() {
        let msg = r#"{"role":"user","content":"say \"model\": \"fake\" {[ \\\" \u0022model\u0022 }","meta":{"model":"nested","x":[1,{"model":"deeper"}]}}"#;
        let body = format!(
            r#"{{"messages":[{},{{"role":"tool","content":[{{"type":"text","text":"{{\"model\":\"x\"}}"}}]}}],"temperature":0.7,"stream":false,"tools":[],"model":"gpt-4o-mini"}}"#,
            [msg; 8].join(",")
        );
        let s = scan_every_way(MODEL, body.as_bytes());
        assert_eq!(s.string("model").as_deref(), Some("gpt-4o-mini"));
    }

    #[test]
    fn response_usage_raw_parses_to_the_counts_at_every_split() {
        let body = br#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"qwen2.5-7b","choices":[{"index":0,"message":{"role":"assistant","content":"{\"usage\": 1} }]"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}"#;
        let s = scan_every_way(MU, body);
        let usage: Value = serde_json::from_slice(s.raw("usage").unwrap()).unwrap();
        let counts = ["prompt_tokens", "completion_tokens", "total_tokens"].map(|k| &usage[k]);
        assert_eq!(counts, [12, 34, 46]);
        assert_eq!(s.string("model").as_deref(), Some("qwen2.5-7b"));
    }

    #[test]
    fn every_value_type_is_skipped_and_scalars_are_captured_verbatim() {
        let body = br#" {"a":-1.5e+3,"b":true,"c":null,"d":[],"e":{},"f":"","g":[[{"h":"]}"}]],"model" : 42 }"#;
        let s = scan_every_way(MODEL, body);
        assert_eq!(s.raw("model"), Some(&b"42"[..]));
        assert_eq!(s.string("model"), None);
    }

    #[test]
    fn duplicate_top_level_key_last_wins() {
        let body = br#"{"model":"first","x":1,"model":"second"}"#;
        assert_eq!(model(body).as_deref(), Some("second"));
    }

    #[test]
    fn key_at_depth_two_or_more_is_never_taken() {
        let body = br#"{"a":{"model":"in","b":[{"model":"deep"}]},"c":1}"#;
        assert_eq!(model(body), None);
    }

    #[test]
    fn keys_match_exactly_by_raw_bytes_so_escaped_keys_do_not_match() {
        let body = br#"{"mode":1,"modelx":2,"xmodel":3,"mod\u0065l":4,"model\"":5}"#;
        assert_eq!(model(body), None);
    }

    #[test]
    fn oversize_value_is_dropped_and_a_later_small_key_is_found() {
        let mut s = FieldScanner::new(MU, 16, usize::MAX);
        s.feed(br#"{"usage":{"prompt_tokens":123456789},"model":"m"}"#);
        assert_eq!(model_and_usage(&s), (Some("m".into()), None));
        // The server would use the later, oversize duplicate: no stale answer.
        let mut s = FieldScanner::new(MODEL, 8, usize::MAX);
        s.feed(br#"{"model":"ok","model":"much-too-long"}"#);
        assert_eq!(s.raw("model"), None);
    }

    #[test]
    fn key_starting_after_scan_budget_is_not_seen_and_scanner_is_done() {
        let body = br#"{"model":"a","messages":["long enough"],"usage":1}"#;
        let mut s = FieldScanner::new(MU, 64, body.len() - 12);
        s.feed(&body[..10]);
        assert!(!s.is_done());
        s.feed(&body[10..]);
        assert!(s.is_done());
        assert_eq!(model_and_usage(&s), (Some("a".into()), None));
    }

    #[test]
    fn non_object_inputs_capture_nothing_without_panic() {
        for input in [
            &b"[{\"model\":1}]"[..],
            b"\"s\"",
            b"4",
            b"no",
            b"\xEF{",
            b"",
        ] {
            let s = scan(MODEL, &[input]);
            assert_eq!((s.raw("model"), s.is_done()), (None, !input.is_empty()));
        }
    }

    #[test]
    fn bom_and_leading_whitespace_are_allowed_before_the_object() {
        let s = scan(MODEL, &[b"\xEF\xBB", b"\xBF \r\n\t{\"model\":\"b\"}"]);
        assert_eq!(s.string("model").as_deref(), Some("b"));
        assert_eq!(model(b" \xEF\xBB\xBF{\"model\":\"b\"}"), None);
    }

    #[test]
    fn truncated_or_malformed_input_keeps_values_completed_earlier() {
        let s = scan(MU, &[br#"{"model":"kept","usage":{"prompt_tok"#]);
        assert_eq!(model_and_usage(&s), (Some("kept".into()), None));
        assert!(!s.is_done());
        let (missing_comma, bare_key) = (br#""usage":1}"#, br#",usage:1}"#);
        for bad in [&missing_comma[..], bare_key] {
            let s = scan(MU, &[br#"{"model":"kept" "#, bad, br#","usage":1}"#]);
            assert_eq!(model_and_usage(&s), (Some("kept".into()), None));
            assert!(s.is_done());
        }
    }

    #[test]
    fn closing_the_object_stops_scanning() {
        let mut s = scan(MODEL, &[br#"{"model":"a"} {"model":"b"}"#]);
        s.feed(br#","model":"c"}"#);
        assert!(s.is_done());
        assert_eq!(s.string("model").as_deref(), Some("a"));
    }

    #[test]
    fn a_million_nested_brackets_make_it_give_up_without_panic() {
        let deep = vec![b'['; 1_000_000];
        for prefix in [&b""[..], br#"{"model":"m","x":"#] {
            let mut s = FieldScanner::new(MODEL, 1 << 20, usize::MAX);
            s.feed(prefix);
            deep.chunks(4093).for_each(|c| s.feed(c));
            assert!(s.is_done());
            assert_eq!(s.raw("model").is_some(), !prefix.is_empty());
        }
    }

    #[test]
    fn escaped_model_name_decodes() {
        let s = scan(MODEL, &[br#"{"model":"a\"b\u00e9\\"}"#]);
        assert_eq!(s.raw("model"), Some(&br#""a\"b\u00e9\\""#[..]));
        assert_eq!(s.string("model").as_deref(), Some("a\"b\u{e9}\\"));
    }

    #[test]
    fn random_json_ish_bytes_never_panic() {
        let (mut x, alphabet) = (0x9E37_79B9_7F4A_7C15_u64, b"{}[]\":,\\ 0n\"{\"model\":");
        for _ in 0..2000 {
            let mut buf = Vec::new();
            for _ in 0..64 {
                x = x.wrapping_mul(0x5851_F42D_4C95_7F2D).wrapping_add(1);
                buf.push(alphabet[(x >> 33) as usize % alphabet.len()]);
            }
            let mut s = FieldScanner::new(MU, 8, 300);
            buf.chunks((x >> 61) as usize + 1).for_each(|c| s.feed(c));
            let _ = (s.raw("model"), s.string("usage"), s.is_done());
        }
    }
}
