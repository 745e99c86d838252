//! A checked position in one JSON text: the readers the dialects' fast scanners (OpenAI's chunks,
//! Anthropic's deltas) and the request's message reader (`decode::messages`) are built of: strings,
//! keys, integers, literals, objects, arrays, and any value skipped, each checking its bytes as
//! serde_json checks them and returning `None` wherever serde_json might read them otherwise, so a
//! scanner hands the event to serde_json (or the message reader gives up). Nothing here allocates but
//! the decoding of an escaped string (into the caller's buffer, for [`Cursor::string_into`]); nothing
//! panics.

#![deny(clippy::indexing_slicing)]

use super::escape::{decode_escape, hex, special, Str};

/// Nesting the fast path follows inside a skipped value; serde_json skips any depth, deeper goes to it.
const MAX_DEPTH: u32 = 128;

/// The fields of a struct met so far: a second occurrence is a duplicate field, which serde_json
/// rejects.
#[derive(Default)]
pub struct Seen(u8);

impl Seen {
    pub fn first(&mut self, field: u8) -> Option<()> {
        let bit = 1 << field;
        if self.0 & bit != 0 {
            return None;
        }
        self.0 |= bit;
        Some(())
    }
}

/// Sets a field once (see [`Seen`]).
pub fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

/// A position in an event's text, and the JSON readers that move it.
pub struct Cursor<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pub at: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(text: &'a str) -> Self {
        Cursor {
            text,
            bytes: text.as_bytes(),
            at: 0,
        }
    }

    pub fn at_end(&self) -> bool {
        self.at >= self.bytes.len()
    }

    pub fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// JSON whitespace (not the form feed `trim_ascii` also takes).
    pub fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    pub fn next(&mut self) -> Option<u8> {
        self.ws();
        self.peek()
    }

    pub fn eat(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then(|| self.at += 1)
    }

    pub fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at.checked_add(word.len())?;
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// `null` (true) or not (false, nothing consumed).
    pub fn null(&mut self) -> Option<bool> {
        if self.next()? == b'n' {
            self.literal(b"null")?;
            return Some(true);
        }
        Some(false)
    }

    /// The text between `start` and the cursor.
    pub fn since(&self, start: usize) -> Option<&'a str> {
        self.text.get(start..self.at)
    }

    /// A string, the cursor on its opening quote.
    pub fn string(&mut self) -> Option<Str<'a>> {
        let start = self.at + 1;
        let escaped = self.skip_string()?;
        let raw = self.text.get(start..self.at - 1)?;
        Some(Str::new(raw, escaped))
    }

    /// Past a string, the cursor on its opening quote; whether it had escapes.
    pub fn skip_string(&mut self) -> Option<bool> {
        if self.peek()? != b'"' {
            return None;
        }
        self.at += 1;
        let mut escaped = false;
        loop {
            self.at = special(self.bytes, self.at)?;
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(escaped);
                }
                b'\\' => {
                    escaped = true;
                    self.at += 1;
                    self.escape()?;
                }
                _ => return None,
            }
        }
    }

    /// A string, the cursor on its opening quote, checked as [`Cursor::string`] checks it and its
    /// value (escapes decoded) appended to `out` in the same pass; `Some(false)` once `out` has grown
    /// past `max` bytes (the string is then left unread).
    pub fn string_into(&mut self, out: &mut Vec<u8>, max: usize) -> Option<bool> {
        if self.peek()? != b'"' {
            return None;
        }
        self.at += 1;
        loop {
            let start = self.at;
            self.at = special(self.bytes, self.at)?;
            out.extend_from_slice(self.bytes.get(start..self.at)?);
            if out.len() > max {
                return Some(false);
            }
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(true);
                }
                b'\\' => {
                    let escape = self.at;
                    self.at += 1;
                    // The one-byte escapes (code's quotes and newlines) are most of them.
                    let byte = match self.peek()? {
                        b @ (b'"' | b'\\' | b'/') => Some(b),
                        b'n' => Some(b'\n'),
                        b't' => Some(b'\t'),
                        b'r' => Some(b'\r'),
                        b'b' => Some(8),
                        b'f' => Some(12),
                        _ => None,
                    };
                    if let Some(byte) = byte {
                        self.at += 1;
                        out.push(byte);
                        continue;
                    }
                    self.escape()?;
                    let (decoded, _) = decode_escape(self.bytes.get(escape..self.at)?);
                    out.extend_from_slice(decoded?.encode_utf8(&mut [0; 4]).as_bytes());
                }
                _ => return None,
            }
        }
    }

    /// One escape after its backslash. A surrogate pair (`\ud83d\ude00`) is one escape; a lone
    /// surrogate is left to serde_json, which rejects it or not depending on where the string is.
    pub fn escape(&mut self) -> Option<()> {
        let byte = self.peek()?;
        self.at += 1;
        match byte {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(()),
            b'u' => match self.hex4()? {
                0xD800..=0xDBFF => {
                    self.literal(b"\\u")?;
                    (0xDC00..=0xDFFF).contains(&self.hex4()?).then_some(())
                }
                0xDC00..=0xDFFF => None,
                _ => Some(()),
            },
            _ => None,
        }
    }

    /// The four hex digits of a `\u` escape.
    pub fn hex4(&mut self) -> Option<u32> {
        let end = self.at.checked_add(4)?;
        let n = hex(self.bytes.get(self.at..end)?)?;
        self.at = end;
        Some(n)
    }

    /// A key without escapes (an escaped key might spell a field name; a control character is
    /// malformed) and its colon.
    pub fn key(&mut self) -> Option<&'a [u8]> {
        if self.next()? != b'"' {
            return None;
        }
        let start = self.at + 1;
        let end = special(self.bytes, start)?;
        if self.bytes.get(end) != Some(&b'"') {
            return None;
        }
        self.at = end + 1;
        self.eat(b':')?;
        self.ws();
        self.bytes.get(start..end)
    }

    /// A number as serde_json checks a number it skips: `-`, one `0` or digits not starting with 0,
    /// then optional fraction and exponent.
    pub fn number(&mut self) -> Option<()> {
        if self.peek()? == b'-' {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if let Some(b'0'..=b'9') = self.peek() {
            return None;
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.some_digits()?;
        }
        Some(())
    }

    pub fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
    }

    pub fn some_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }

    /// A non-negative integer serde_json reads as a `u64`: no sign, fraction or exponent (those it reads
    /// as a float, which a `u64` field rejects), no leading zero, no overflow.
    pub fn uint(&mut self) -> Option<u64> {
        let mut n: u64 = 0;
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => {
                while let Some(d @ b'0'..=b'9') = self.peek() {
                    n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
                    self.at += 1;
                }
            }
            _ => return None,
        }
        match self.peek() {
            Some(b'0'..=b'9' | b'.' | b'e' | b'E') => None,
            _ => Some(n),
        }
    }

    /// Any value, checked as serde_json checks a value it ignores, up to [`MAX_DEPTH`] levels.
    pub fn skip(&mut self) -> Option<()> {
        // One bit a level: 1 for an object, 0 for an array.
        let mut stack: u128 = 0;
        let mut depth: u32 = 0;
        loop {
            match self.next()? {
                open @ (b'{' | b'[') => {
                    if depth >= MAX_DEPTH {
                        return None;
                    }
                    self.at += 1;
                    stack = (stack << 1) | u128::from(open == b'{');
                    depth += 1;
                    let close = if open == b'{' { b'}' } else { b']' };
                    if self.next()? != close {
                        if open == b'{' {
                            self.skip_string()?;
                            self.eat(b':')?;
                        }
                        continue;
                    }
                }
                b'"' => {
                    self.skip_string()?;
                }
                b'-' | b'0'..=b'9' => self.number()?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                _ => return None,
            }
            // After a value (or an empty container, not yet closed): commas and closing brackets.
            loop {
                if depth == 0 {
                    return Some(());
                }
                let object = stack & 1 == 1;
                match self.next()? {
                    b',' => {
                        self.at += 1;
                        if object {
                            self.ws();
                            self.skip_string()?;
                            self.eat(b':')?;
                        }
                        break;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return None,
                }
                self.at += 1;
                stack >>= 1;
                depth -= 1;
            }
        }
    }

    /// An object, the cursor on `{`: `member` reads the value of each key it knows and says so; the
    /// others are skipped.
    pub fn object(
        &mut self, mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<bool>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.next()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let key = self.key()?;
            if !member(self, key)? {
                self.skip()?;
            }
            match self.next()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `data` as one object and nothing after it but white space, `member` called for each key as in
    /// [`Cursor::object`]; `None` when it is not that (invalid UTF-8 included): an event's whole body.
    pub fn whole_object(
        data: &'a [u8], member: impl FnMut(&mut Self, &'a [u8]) -> Option<bool>,
    ) -> Option<()> {
        let mut c = Cursor::new(std::str::from_utf8(data).ok()?);
        c.object(member)?;
        c.ws();
        c.at_end().then_some(())
    }

    /// An array, the cursor on `[`.
    pub fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.next()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.ws();
            element(self)?;
            match self.next()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `Option<Cow<str>>`: null or a string.
    pub fn opt_str(&mut self) -> Option<Option<Str<'a>>> {
        if self.null()? {
            return Some(None);
        }
        self.string().map(Some)
    }

    /// `Option<bool>`: null, `true` or `false`.
    pub fn opt_bool(&mut self) -> Option<Option<bool>> {
        match self.next()? {
            b'n' => self.literal(b"null").map(|()| None),
            b't' => self.literal(b"true").map(|()| Some(true)),
            b'f' => self.literal(b"false").map(|()| Some(false)),
            _ => None,
        }
    }

    /// `Option<u64>`: null or an integer serde_json reads as one.
    pub fn opt_uint(&mut self) -> Option<Option<u64>> {
        if self.null()? {
            return Some(None);
        }
        self.uint().map(Some)
    }

    /// The lenient `Text`: a string, or nothing for `true`, `false`, `null`, an array or an object.
    /// A number goes to serde_json, which reads it in full (and rejects one out of range).
    pub fn text_field(&mut self) -> Option<Option<Str<'a>>> {
        match self.next()? {
            b'"' => self.string().map(Some),
            b't' | b'f' | b'n' | b'[' | b'{' => self.skip().map(|()| None),
            _ => None,
        }
    }

    /// `true` for null, after checking the cursor is on an object otherwise: the structs read neither
    /// an array (which serde_json would read field by field) nor anything else.
    pub fn null_or_object(&mut self) -> Option<bool> {
        match self.next()? {
            b'n' => self.literal(b"null").map(|()| true),
            b'{' => Some(false),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_decoded_as_serde_json_decodes_them() {
        let raw = r#"a\"b\\c\/d\be\ff\ng\rh\ti\u00e9j\u263ak\ud83d\ude00l"#;
        let quoted = format!("\"{raw}\"");
        let scanned = Cursor::new(&quoted)
            .string()
            .map(|s| s.value().into_owned());
        let expected: String = serde_json::from_str(&quoted).unwrap_or_default();
        assert_eq!(scanned.as_deref(), Some(expected.as_str()));
        let mut into = b"kept".to_vec();
        let mut c = Cursor::new(&quoted);
        assert_eq!(c.string_into(&mut into, usize::MAX), Some(true));
        assert_eq!(into, format!("kept{expected}").into_bytes());
        assert!(c.at_end());
    }

    #[test]
    fn a_string_read_into_a_buffer_is_checked_and_bounded() {
        for bad in [
            r#""a\qb""#,
            r#""\ud83d""#,
            r#""\ude00""#,
            r#""\u12""#,
            "\"a\u{1}b\"",
            r#""open"#,
            "x",
        ] {
            let mut out = Vec::new();
            let read = Cursor::new(bad).string_into(&mut out, usize::MAX);
            assert_eq!(read, None, "{bad}");
        }
        let mut out = Vec::new();
        let long = format!("\"{}\"", "x".repeat(100));
        assert_eq!(Cursor::new(&long).string_into(&mut out, 64), Some(false));
        assert!(out.len() <= 100);
        out.clear();
        assert_eq!(Cursor::new(&long).string_into(&mut out, 100), Some(true));
    }
}
