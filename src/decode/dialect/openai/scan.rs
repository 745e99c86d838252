//! The OpenAI chunk read without serde_json: every chunk of every OpenAI-compatible stream passes here,
//! and deserialising it was the largest single cost per chunk of the whole proxy (docs/benchmark.md).
//!
//! [`scan`] reads the fields the serde structs of the parent module read, from the event's text in one
//! pass, allocating nothing (strings are borrowed as they stand between their quotes; escapes are decoded
//! only when a tokenizer asks for the text). It is not a second JSON parser with its own opinions: it
//! returns `None`, and the caller hands the event to serde_json, whenever it meets anything whose reading
//! it is not sure agrees with serde_json's: a key with an escape, a lone surrogate `\u` escape, a number where
//! serde_json would read a float or overflow, a type the structs do not expect, a duplicate field, more
//! than [`MAX_CHOICES`] choices with output, nesting deeper than [`MAX_DEPTH`]. So an event it reads is
//! one serde_json accepts and reads the same way, and every other event is serde_json's by construction.
//! The differential tests (`openai.rs`, the `openai_scan` fuzz target) hold the two readings equal.

#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)]
#![deny(clippy::expect_used)]

use std::borrow::Cow;

use super::super::timings::{LlamaTimings, VllmMetrics};
use super::{CompletionDetails, PromptDetails, Usage};

/// Output-bearing choices one chunk may carry on the fast path (`n` > 4 streams go to serde_json).
pub const MAX_CHOICES: usize = 4;
/// Nesting the fast path follows inside a skipped value; serde_json skips any depth, deeper goes to it.
pub const MAX_DEPTH: u32 = 128;

/// A JSON string of the event, as it stands between its quotes; its escapes (if any) are valid and
/// none is a surrogate.
#[derive(Debug, Clone, Copy)]
pub struct Str<'a> {
    raw: &'a str,
    escaped: bool,
}

impl<'a> Str<'a> {
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
fn special(bytes: &[u8], mut at: usize) -> Option<usize> {
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
fn hex(digits: &[u8]) -> Option<u32> {
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
        let bytes = escape.as_bytes();
        let (decoded, len) = match bytes.get(1) {
            Some(b'b') => (Some('\u{8}'), 2),
            Some(b'f') => (Some('\u{c}'), 2),
            Some(b'n') => (Some('\n'), 2),
            Some(b'r') => (Some('\r'), 2),
            Some(b't') => (Some('\t'), 2),
            Some(b'u') => {
                let high = bytes.get(2..6).and_then(hex).unwrap_or(0);
                if (0xD800..=0xDBFF).contains(&high) {
                    let low = bytes.get(8..12).and_then(hex).unwrap_or(0);
                    let n = 0x1_0000 + ((high - 0xD800) << 10) + (low.wrapping_sub(0xDC00) & 0x3FF);
                    (char::from_u32(n), 12)
                } else {
                    (char::from_u32(high), 6)
                }
            }
            Some(&other) => (Some(char::from(other)), 2),
            None => (None, 1),
        };
        out.extend(decoded);
        rest = escape.get(len..).unwrap_or_default();
    }
    out.push_str(rest);
    out
}

/// The `tool_calls` array of a delta: how many calls, and its text, walked again when a tokenizer asks
/// for the calls' names and arguments.
#[derive(Debug, Clone, Copy)]
pub struct Calls<'a> {
    pub len: usize,
    raw: &'a str,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Delta<'a> {
    pub content: Option<Str<'a>>,
    pub refusal: Option<Str<'a>>,
    pub reasoning_content: Option<Str<'a>>,
    pub reasoning: Option<Str<'a>>,
    pub tool_calls: Option<Calls<'a>>,
    /// The `function_call` object's text.
    pub function_call: Option<&'a str>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Choice<'a> {
    pub index: Option<u32>,
    pub delta: Option<Delta<'a>>,
    pub text: Option<Str<'a>>,
}

/// What the parent's `Chunk` holds, of a chunk the fast path read: the choices that carry output only
/// (the others change nothing).
#[derive(Default)]
pub struct Chunk<'a> {
    pub model: Option<Str<'a>>,
    pub usage: Option<Usage>,
    pub metrics: Option<VllmMetrics>,
    pub timings: Option<LlamaTimings>,
    pub error: bool,
    outputs: [Option<Choice<'a>>; MAX_CHOICES],
}

impl<'a> Chunk<'a> {
    /// The choices that carry output, in the chunk's order.
    pub fn outputs(&self) -> impl Iterator<Item = &Choice<'a>> {
        self.outputs.iter().map_while(Option::as_ref)
    }
}

/// Reads one chunk (the event's data, trimmed) into `chunk` (a default one), or `None` to leave it to
/// serde_json (`chunk` is then half read, and means nothing).
pub fn scan<'a>(text: &'a str, chunk: &mut Chunk<'a>) -> Option<()> {
    let mut at = Cursor::new(text);
    at.chunk(chunk)?;
    at.ws();
    at.at_end().then_some(())
}

/// Calls `each` with every tool call's function name and arguments (strings only), in the order the
/// parent's serde path pushes them: each call in turn, its name before its arguments.
pub fn each_call_text<'a>(calls: &Calls<'a>, each: &mut dyn FnMut(Str<'a>)) {
    let _ = Cursor::new(calls.raw).tool_calls(each);
}

/// Calls `each` with a `function_call` object's name and then its arguments (strings only).
pub fn each_function_text<'a>(function: &'a str, each: &mut dyn FnMut(Str<'a>)) {
    let _ = Cursor::new(function).function(each);
}

/// The fields of a struct met so far: a second occurrence is a duplicate field, which serde_json
/// rejects.
#[derive(Default)]
struct Seen(u8);

impl Seen {
    fn first(&mut self, field: u8) -> Option<()> {
        let bit = 1 << field;
        if self.0 & bit != 0 {
            return None;
        }
        self.0 |= bit;
        Some(())
    }
}

/// Sets a field once (see [`Seen`]).
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

struct Cursor<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(text: &'a str) -> Self {
        Cursor {
            text,
            bytes: text.as_bytes(),
            at: 0,
        }
    }

    fn at_end(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// JSON whitespace (not the form feed `trim_ascii` also takes).
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    fn next(&mut self) -> Option<u8> {
        self.ws();
        self.peek()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then(|| self.at += 1)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at.checked_add(word.len())?;
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// `null` (true) or not (false, nothing consumed).
    fn null(&mut self) -> Option<bool> {
        if self.next()? == b'n' {
            self.literal(b"null")?;
            return Some(true);
        }
        Some(false)
    }

    /// The text between `start` and the cursor.
    fn since(&self, start: usize) -> Option<&'a str> {
        self.text.get(start..self.at)
    }

    /// A string, the cursor on its opening quote.
    fn string(&mut self) -> Option<Str<'a>> {
        let start = self.at + 1;
        let escaped = self.skip_string()?;
        let raw = self.text.get(start..self.at - 1)?;
        Some(Str { raw, escaped })
    }

    /// Past a string, the cursor on its opening quote; whether it had escapes.
    fn skip_string(&mut self) -> Option<bool> {
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

    /// One escape after its backslash. A surrogate pair (`\ud83d\ude00`) is one escape; a lone
    /// surrogate is left to serde_json, which rejects it or not depending on where the string is.
    fn escape(&mut self) -> Option<()> {
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
    fn hex4(&mut self) -> Option<u32> {
        let end = self.at.checked_add(4)?;
        let n = hex(self.bytes.get(self.at..end)?)?;
        self.at = end;
        Some(n)
    }

    /// A key without escapes (an escaped key might spell a field name; a control character is
    /// malformed) and its colon.
    fn key(&mut self) -> Option<&'a [u8]> {
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
    fn number(&mut self) -> Option<()> {
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

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }

    /// A non-negative integer serde_json reads as a `u64`: no sign, fraction or exponent (those it reads
    /// as a float, which a `u64` field rejects), no leading zero, no overflow.
    fn uint(&mut self) -> Option<u64> {
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
    fn skip(&mut self) -> Option<()> {
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
    fn object(
        &mut self,
        mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<bool>,
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

    /// An array, the cursor on `[`.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
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
    fn opt_str(&mut self) -> Option<Option<Str<'a>>> {
        if self.null()? {
            return Some(None);
        }
        self.string().map(Some)
    }

    /// `Option<u64>`: null or an integer serde_json reads as one.
    fn opt_uint(&mut self) -> Option<Option<u64>> {
        if self.null()? {
            return Some(None);
        }
        self.uint().map(Some)
    }

    /// The lenient `Text`: a string, or nothing for `true`, `false`, `null`, an array or an object.
    /// A number goes to serde_json, which reads it in full (and rejects one out of range).
    fn text_field(&mut self) -> Option<Option<Str<'a>>> {
        match self.next()? {
            b'"' => self.string().map(Some),
            b't' | b'f' | b'n' | b'[' | b'{' => self.skip().map(|()| None),
            _ => None,
        }
    }

    /// `true` for null, after checking the cursor is on an object otherwise: the structs read neither
    /// an array (which serde_json would read field by field) nor anything else.
    fn null_or_object(&mut self) -> Option<bool> {
        match self.next()? {
            b'n' => self.literal(b"null").map(|()| true),
            b'{' => Some(false),
            _ => None,
        }
    }

    fn chunk(&mut self, chunk: &mut Chunk<'a>) -> Option<()> {
        let mut seen = Seen::default();
        let mut n = 0;
        self.object(|at, key| {
            match key {
                b"model" => {
                    seen.first(0)?;
                    chunk.model = at.opt_str()?;
                }
                b"choices" => {
                    seen.first(1)?;
                    if !at.null()? {
                        at.array(|at| {
                            let choice = at.choice()?;
                            if choice.carries_output() {
                                *chunk.outputs.get_mut(n)? = Some(choice);
                                n += 1;
                            }
                            Some(())
                        })?;
                    }
                }
                b"usage" => {
                    seen.first(2)?;
                    if !at.null_or_object()? {
                        chunk.usage = Some(at.usage()?);
                    }
                }
                b"metrics" => {
                    seen.first(3)?;
                    chunk.metrics = at.by_serde::<VllmMetrics>()?;
                }
                b"timings" => {
                    seen.first(4)?;
                    chunk.timings = at.by_serde::<LlamaTimings>()?;
                }
                b"error" => {
                    seen.first(5)?;
                    chunk.error = !at.null()?;
                    if chunk.error {
                        at.skip()?;
                    }
                }
                _ => return Some(false),
            }
            Some(true)
        })
    }

    /// A small struct of floats (the server's timings, on the last chunk only): the value's extent
    /// checked here, its reading left to serde_json on that extent alone, so it is serde_json's own.
    fn by_serde<T: serde::de::DeserializeOwned>(&mut self) -> Option<Option<T>> {
        if self.null_or_object()? {
            return Some(None);
        }
        let start = self.at;
        self.skip()?;
        serde_json::from_str(self.since(start)?).ok().map(Some)
    }

    fn usage(&mut self) -> Option<Usage> {
        let mut usage = Usage {
            prompt_tokens: None,
            completion_tokens: None,
            completion_tokens_details: None,
            prompt_tokens_details: None,
        };
        let mut seen = Seen::default();
        self.object(|at, key| {
            match key {
                b"prompt_tokens" => {
                    seen.first(0)?;
                    usage.prompt_tokens = at.opt_uint()?;
                }
                b"completion_tokens" => {
                    seen.first(1)?;
                    usage.completion_tokens = at.opt_uint()?;
                }
                b"completion_tokens_details" => {
                    seen.first(2)?;
                    let details = at.details(b"reasoning_tokens")?;
                    usage.completion_tokens_details =
                        details.map(|reasoning_tokens| CompletionDetails { reasoning_tokens });
                }
                b"prompt_tokens_details" => {
                    seen.first(3)?;
                    let details = at.details(b"cached_tokens")?;
                    usage.prompt_tokens_details =
                        details.map(|cached_tokens| PromptDetails { cached_tokens });
                }
                _ => return Some(false),
            }
            Some(true)
        })?;
        Some(usage)
    }

    /// A usage details object with one integer field read: `None` for null, else the field.
    fn details(&mut self, field: &[u8]) -> Option<Option<Option<u64>>> {
        if self.null_or_object()? {
            return Some(None);
        }
        let mut value = None;
        self.object(|at, key| {
            if key != field {
                return Some(false);
            }
            once(&mut value, at.opt_uint()?)?;
            Some(true)
        })?;
        Some(Some(value.flatten()))
    }

    fn choice(&mut self) -> Option<Choice<'a>> {
        if self.peek()? != b'{' {
            return None;
        }
        let mut choice = Choice::default();
        let mut seen = Seen::default();
        self.object(|at, key| {
            match key {
                b"index" => {
                    seen.first(0)?;
                    choice.index = match at.opt_uint()? {
                        Some(n) => Some(u32::try_from(n).ok()?),
                        None => None,
                    };
                }
                b"delta" => {
                    seen.first(1)?;
                    if !at.null_or_object()? {
                        choice.delta = Some(at.delta()?);
                    }
                }
                b"text" => {
                    seen.first(2)?;
                    choice.text = at.opt_str()?;
                }
                _ => return Some(false),
            }
            Some(true)
        })?;
        Some(choice)
    }

    fn delta(&mut self) -> Option<Delta<'a>> {
        let mut delta = Delta::default();
        let mut seen = Seen::default();
        self.object(|at, key| {
            match key {
                b"content" => {
                    seen.first(0)?;
                    delta.content = at.opt_str()?;
                }
                b"refusal" => {
                    seen.first(1)?;
                    delta.refusal = at.opt_str()?;
                }
                b"reasoning_content" => {
                    seen.first(2)?;
                    delta.reasoning_content = at.opt_str()?;
                }
                b"reasoning" => {
                    seen.first(3)?;
                    delta.reasoning = at.opt_str()?;
                }
                b"tool_calls" => {
                    seen.first(4)?;
                    if !at.null()? {
                        let start = at.at;
                        let len = at.tool_calls(&mut |_| {})?;
                        let raw = at.since(start)?;
                        delta.tool_calls = Some(Calls { len, raw });
                    }
                }
                b"function_call" => {
                    seen.first(5)?;
                    if !at.null_or_object()? {
                        let start = at.at;
                        at.function(&mut |_| {})?;
                        delta.function_call = Some(at.since(start)?);
                    }
                }
                _ => return Some(false),
            }
            Some(true)
        })?;
        Some(delta)
    }

    /// A `tool_calls` array (each call an object whose `function` is null or an object); calls
    /// `each` with the functions' texts and returns how many calls there are.
    fn tool_calls(&mut self, each: &mut dyn FnMut(Str<'a>)) -> Option<usize> {
        let mut len = 0;
        self.array(|at| {
            if at.peek()? != b'{' {
                return None;
            }
            let mut function = None;
            at.object(|at, key| {
                if key != b"function" {
                    return Some(false);
                }
                once(&mut function, ())?;
                if !at.null_or_object()? {
                    at.function(each)?;
                }
                Some(true)
            })?;
            len += 1;
            Some(())
        })?;
        Some(len)
    }

    /// A function object: calls `each` with its non-empty string `name`, then its `arguments`.
    fn function(&mut self, each: &mut dyn FnMut(Str<'a>)) -> Option<()> {
        let (mut name, mut arguments) = (None, None);
        self.object(|at, key| {
            match key {
                b"name" => once(&mut name, at.text_field()?)?,
                b"arguments" => once(&mut arguments, at.text_field()?)?,
                _ => return Some(false),
            }
            Some(true)
        })?;
        for part in [name, arguments].into_iter().flatten().flatten() {
            if !part.is_empty() {
                each(part);
            }
        }
        Some(())
    }
}

fn non_empty(s: &Option<Str<'_>>) -> bool {
    s.is_some_and(|s| !s.is_empty())
}

impl Delta<'_> {
    pub fn carries_reasoning(&self) -> bool {
        non_empty(&self.reasoning_content) || non_empty(&self.reasoning)
    }

    pub fn carries_answer(&self) -> bool {
        non_empty(&self.content)
            || non_empty(&self.refusal)
            || self.tool_calls.is_some_and(|calls| calls.len > 0)
            || self.function_call.is_some()
    }
}

impl Choice<'_> {
    pub fn carries_output(&self) -> bool {
        self.delta
            .is_some_and(|d| d.carries_answer() || d.carries_reasoning())
            || non_empty(&self.text)
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

    #[test]
    fn escapes_are_decoded_as_serde_json_decodes_them() {
        let raw = r#"a\"b\\c\/d\be\ff\ng\rh\ti\u00e9j\u263ak\ud83d\ude00l"#;
        let quoted = format!("\"{raw}\"");
        let scanned = Cursor::new(&quoted)
            .string()
            .map(|s| s.value().into_owned());
        let expected: String = serde_json::from_str(&quoted).unwrap_or_default();
        assert_eq!(scanned.as_deref(), Some(expected.as_str()));
    }
}
