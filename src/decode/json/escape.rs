//! JSON strings as they stand in a text: where the next quote, backslash or control character is (the
//! search every string read starts with, 8 bytes at a time), what an escape stands for, and a string's
//! value, borrowed from the text unless it has escapes. [`super::cursor`] checks a string's escapes as
//! serde_json does before it hands out a [`Str`], so decoding here never meets a bad one.

#![deny(clippy::indexing_slicing)]

use std::borrow::Cow;

/// A JSON string of the event, as it stands between its quotes; its escapes (if any) are valid and
/// none is a surrogate.
#[derive(Debug, Clone, Copy)]
pub struct Str<'a> {
    raw: &'a str,
    escaped: bool,
}

impl<'a> Str<'a> {
    /// The text between a string's quotes, which [`super::cursor`] has checked (`escaped`: it has
    /// escapes).
    pub fn new(raw: &'a str, escaped: bool) -> Self {
        Str { raw, escaped }
    }

    /// Whether the string's value is empty (every escape stands for at least one character).
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The string's value: borrowed unless it has escapes.
    pub fn value(&self) -> Cow<'a, str> {
        if self.escaped {
            Cow::Owned(unescape(self.raw))
        } else {
            Cow::Borrowed(self.raw)
        }
    }
}

/// Where the first quote, backslash or control character at or after `at` is: 8 bytes at a time
/// (the test for a zero byte, `(v - 0x01..) & !v & 0x80..`, exact for the lowest match), then byte by
/// byte for the last few.
#[inline]
pub fn special(bytes: &[u8], mut at: usize) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v;
    while let Some(word) = bytes.get(at..at.saturating_add(8)) {
        let v = u64::from_le_bytes(word.try_into().ok()?);
        let control = v.wrapping_sub(ONES * 0x20) & !v;
        let found = (control | zero(v ^ (ONES * 0x22)) | zero(v ^ (ONES * 0x5C))) & HIGH;
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    let mut tail = bytes.get(at..)?.iter();
    tail.position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .map(|i| at + i)
}

/// The value of hex digits.
pub fn hex(digits: &[u8]) -> Option<u32> {
    digits
        .iter()
        .try_fold(0u32, |n, &d| Some(n * 16 + char::from(d).to_digit(16)?))
}

/// Decodes the escapes of a string [`Cursor::string`] has checked (so every `\u` has four hex
/// digits, and a surrogate is the first of a pair).
fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('\\') {
        let (plain, escape) = rest.split_at(at);
        out.push_str(plain);
        let (decoded, len) = decode_escape(escape.as_bytes());
        out.extend(decoded);
        rest = escape.get(len..).unwrap_or_default();
    }
    out.push_str(rest);
    out
}

/// The character a checked escape (`escape` begins with its backslash) stands for, and its length.
pub fn decode_escape(escape: &[u8]) -> (Option<char>, usize) {
    match escape.get(1) {
        Some(b'b') => (Some('\u{8}'), 2),
        Some(b'f') => (Some('\u{c}'), 2),
        Some(b'n') => (Some('\n'), 2),
        Some(b'r') => (Some('\r'), 2),
        Some(b't') => (Some('\t'), 2),
        Some(b'u') => {
            let high = escape.get(2..6).and_then(hex).unwrap_or(0);
            if (0xD800..=0xDBFF).contains(&high) {
                let low = escape.get(8..12).and_then(hex).unwrap_or(0);
                let n = 0x1_0000 + ((high - 0xD800) << 10) + (low.wrapping_sub(0xDC00) & 0x3FF);
                (char::from_u32(n), 12)
            } else {
                (char::from_u32(high), 6)
            }
        }
        Some(&other) => (Some(char::from(other)), 2),
        None => (None, 1),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn byte() -> impl Strategy<Value = u8> {
        let edges = prop::sample::select(
            &[
                0x00, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x5B, 0x5C, 0x5D, 0x7F, 0x80, 0xFF,
            ][..],
        );
        prop_oneof![edges, b' '..=b'~', any::<u8>()]
    }

    proptest! {
        #[test]
        fn the_word_at_a_time_search_finds_what_a_byte_loop_finds(
            bytes in prop::collection::vec(byte(), 0..40),
        ) {
            let expected = bytes.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20);
            prop_assert_eq!(special(&bytes, 0), expected);
            let from_one = bytes.iter().skip(1).position(|&b| b == b'"' || b == b'\\' || b < 0x20);
            prop_assert_eq!(special(&bytes, 1), from_one.map(|i| i + 1));
        }
    }
}
