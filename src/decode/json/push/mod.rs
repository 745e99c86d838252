//! JSON read as it arrives, in pieces of any size, holding nothing of it but a few bytes: a message a
//! peer sends in fragments (a WebSocket text message, inflated as it passes) is read without joining
//! it. Each value is handed on as a [`Token`] once it is whole; a string or number is handed with its
//! value when it is short ([`CAPTURE`] bytes, unescaped), and without it when longer, so a megabyte of
//! base64 audio costs its reading and nothing held. What is held: the unfinished key or scalar (at most
//! [`CAPTURE`] bytes), the open brackets (one bit each, [`MAX_DEPTH`] at most), a few bytes of an
//! unfinished escape or UTF-8 sequence.
//!
//! It checks what serde_json checks when it reads a text into a `Value`, so a text serde_json refuses is
//! refused here too: one value and
//! only whitespace around it, strings of valid UTF-8 without control characters and with valid escapes
//! (a lone surrogate is refused), numbers as JSON writes them, the three literals, commas and colons
//! where they belong, nesting to the 127 levels serde_json reads.

use super::escape::special;

/// The longest string (unescaped) or number handed on with its value.
pub const CAPTURE: usize = 256;
/// The deepest nesting read: serde_json refuses a 128th level.
pub const MAX_DEPTH: usize = 127;

/// A value, or the start or end of an object or array, as it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token<'a> {
    ObjectStart,
    ObjectEnd,
    ArrayStart,
    ArrayEnd,
    /// An object's key, unescaped; `None` when longer than [`CAPTURE`].
    Key(Option<&'a [u8]>),
    /// A string value, unescaped (valid UTF-8); `None` when longer than [`CAPTURE`]. `empty` is exact
    /// either way.
    Str {
        value: Option<&'a [u8]>,
        empty: bool,
    },
    /// A number as written; `None` when longer than [`CAPTURE`].
    Number(Option<&'a [u8]>),
    Bool(bool),
    Null,
}

/// The text is not one JSON value (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the one value, or after `[`, `,` in an array, or `:`.
    Value,
    /// After `[`: a value or `]`.
    ValueOrEnd,
    /// After `{`: a key or `}`.
    KeyOrEnd,
    /// After `,` in an object.
    Key,
    /// After a key.
    Colon,
    /// After a value inside a container.
    CommaOrEnd,
    /// Inside a string; `key`: it is an object's key.
    Str { key: bool },
    /// After a backslash in a string.
    Escape { key: bool },
    /// `\u` and the hex digits so far.
    Unicode { key: bool, digits: u8, code: u16 },
    /// Inside a number, at this point of its grammar.
    Number(Num),
    /// Inside `true`, `false` or `null`: which, and how much of it is read.
    Literal { word: &'static [u8], read: u8 },
    /// The one value is whole: only whitespace may follow.
    Done,
}

/// Where a number is in JSON's grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    E,
    ESign,
    Exp,
}

impl Num {
    fn next(self, b: u8) -> Option<Num> {
        use Num::*;
        Some(match (self, b) {
            (Minus, b'0') => Zero,
            (Minus, b'1'..=b'9') => Int,
            (Int, b'0'..=b'9') => Int,
            (Zero | Int, b'.') => Dot,
            (Zero | Int | Frac, b'e' | b'E') => E,
            (Dot | Frac, b'0'..=b'9') => Frac,
            (E, b'+' | b'-') => ESign,
            (E | ESign | Exp, b'0'..=b'9') => Exp,
            _ => return None,
        })
    }

    /// A number may end here.
    fn complete(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Frac | Num::Exp)
    }
}

/// One text's reader (see the module's documentation).
pub struct Push {
    state: State,
    /// Open containers, one bit each (1: an object), the innermost lowest.
    stack: u128,
    depth: u8,
    capture: [u8; CAPTURE],
    len: usize,
    /// The value being captured is longer than [`CAPTURE`].
    overflow: bool,
    /// The string being read has a character.
    nonempty: bool,
    /// An unfinished UTF-8 sequence, or a high surrogate waiting for its low half.
    pending: [u8; 4],
    pending_len: u8,
    high_surrogate: Option<u16>,
    failed: bool,
}

impl Default for Push {
    fn default() -> Self {
        Push::new()
    }
}

impl Push {
    pub fn new() -> Self {
        Push {
            state: State::Value,
            stack: 0,
            depth: 0,
            capture: [0; CAPTURE],
            len: 0,
            overflow: false,
            nonempty: false,
            pending: [0; 4],
            pending_len: 0,
            high_surrogate: None,
            failed: false,
        }
    }

    /// Reads `bytes`, the next piece of the text, handing each token to `out` as it completes.
    pub fn feed(&mut self, bytes: &[u8], out: &mut impl FnMut(Token<'_>)) -> Result<(), Malformed> {
        if self.failed {
            return Err(Malformed);
        }
        let read = self.read(bytes, out);
        if read.is_err() {
            self.failed = true;
        }
        read
    }

    /// The text ended: whole, or malformed (cut short, or refused before).
    pub fn end(&mut self, out: &mut impl FnMut(Token<'_>)) -> Result<(), Malformed> {
        if self.failed {
            return Err(Malformed);
        }
        if let State::Number(num) = self.state {
            if self.depth == 0 && num.complete() {
                self.emit_number(out);
                self.state = State::Done;
            }
        }
        if self.state == State::Done {
            Ok(())
        } else {
            self.failed = true;
            Err(Malformed)
        }
    }

    fn read(&mut self, bytes: &[u8], out: &mut impl FnMut(Token<'_>)) -> Result<(), Malformed> {
        let mut at = 0;
        while at < bytes.len() {
            let b = bytes[at];
            match self.state {
                State::Str { key } => {
                    at = self.string_run(bytes, at, key, out)?;
                    continue;
                }
                State::Escape { key } => self.escape(b, key)?,
                State::Unicode { key, digits, code } => self.unicode(b, key, digits, code)?,
                State::Number(num) => match num.next(b) {
                    Some(next) => {
                        self.state = State::Number(next);
                        self.keep(&[b]);
                    }
                    None if num.complete() => {
                        self.emit_number(out);
                        self.after_value();
                        continue;
                    }
                    None => return Err(Malformed),
                },
                State::Literal { word, read } => {
                    if word.get(usize::from(read)) != Some(&b) {
                        return Err(Malformed);
                    }
                    let read = read + 1;
                    if usize::from(read) == word.len() {
                        out(match word {
                            b"true" => Token::Bool(true),
                            b"false" => Token::Bool(false),
                            _ => Token::Null,
                        });
                        self.after_value();
                    } else {
                        self.state = State::Literal { word, read };
                    }
                }
                _ if matches!(b, b' ' | b'\t' | b'\n' | b'\r') => {}
                State::Done => return Err(Malformed),
                State::Value | State::ValueOrEnd => self.value(b, out)?,
                State::KeyOrEnd | State::Key => match b {
                    b'"' => self.begin_string(true),
                    b'}' if self.state == State::KeyOrEnd => self.close(true, out)?,
                    _ => return Err(Malformed),
                },
                State::Colon if b == b':' => self.state = State::Value,
                State::Colon => return Err(Malformed),
                State::CommaOrEnd => match b {
                    b',' if self.in_object() => self.state = State::Key,
                    b',' => self.state = State::Value,
                    b'}' | b']' => self.close(b == b'}', out)?,
                    _ => return Err(Malformed),
                },
            }
            at += 1;
        }
        Ok(())
    }

    fn in_object(&self) -> bool {
        self.stack & 1 == 1
    }

    /// The first byte of a value (or, after `[`, of `]`).
    fn value(&mut self, b: u8, out: &mut impl FnMut(Token<'_>)) -> Result<(), Malformed> {
        match b {
            b'{' | b'[' => {
                if usize::from(self.depth) >= MAX_DEPTH {
                    return Err(Malformed);
                }
                self.depth += 1;
                self.stack = (self.stack << 1) | u128::from(b == b'{');
                if b == b'{' {
                    out(Token::ObjectStart);
                    self.state = State::KeyOrEnd;
                } else {
                    out(Token::ArrayStart);
                    self.state = State::ValueOrEnd;
                }
            }
            b']' if self.state == State::ValueOrEnd => self.close(false, out)?,
            b'"' => self.begin_string(false),
            b'-' | b'0'..=b'9' => {
                self.len = 0;
                self.overflow = false;
                self.keep(&[b]);
                self.state = State::Number(match b {
                    b'-' => Num::Minus,
                    b'0' => Num::Zero,
                    _ => Num::Int,
                });
            }
            b't' => {
                self.state = State::Literal {
                    word: b"true",
                    read: 1,
                }
            }
            b'f' => {
                self.state = State::Literal {
                    word: b"false",
                    read: 1,
                }
            }
            b'n' => {
                self.state = State::Literal {
                    word: b"null",
                    read: 1,
                }
            }
            _ => return Err(Malformed),
        }
        Ok(())
    }

    fn close(&mut self, object: bool, out: &mut impl FnMut(Token<'_>)) -> Result<(), Malformed> {
        if self.depth == 0 || self.in_object() != object {
            return Err(Malformed);
        }
        self.depth -= 1;
        self.stack >>= 1;
        out(if object {
            Token::ObjectEnd
        } else {
            Token::ArrayEnd
        });
        self.after_value();
        Ok(())
    }

    fn after_value(&mut self) {
        self.state = if self.depth == 0 {
            State::Done
        } else {
            State::CommaOrEnd
        };
    }

    fn begin_string(&mut self, key: bool) {
        self.len = 0;
        self.overflow = false;
        self.nonempty = false;
        self.pending_len = 0;
        self.high_surrogate = None;
        self.state = State::Str { key };
    }

    /// Reads a string's plain bytes from `at` up to its next quote, backslash or control character
    /// (8 bytes at a time), checking their UTF-8 across pieces; returns where reading goes on.
    fn string_run(
        &mut self, bytes: &[u8], at: usize, key: bool, out: &mut impl FnMut(Token<'_>),
    ) -> Result<usize, Malformed> {
        if self.high_surrogate.is_some() && bytes[at] != b'\\' {
            return Err(Malformed);
        }
        let stop = special(bytes, at).unwrap_or(bytes.len());
        let plain = &bytes[at..stop];
        if !plain.is_empty() {
            self.utf8(plain)?;
            self.nonempty = true;
            self.keep(plain);
        }
        let Some(&b) = bytes.get(stop) else {
            return Ok(stop);
        };
        if self.pending_len > 0 {
            return Err(Malformed);
        }
        match b {
            b'"' => {
                let value = (!self.overflow).then_some(&self.capture[..self.len]);
                out(if key {
                    Token::Key(value)
                } else {
                    Token::Str {
                        value,
                        empty: !self.nonempty,
                    }
                });
                if key {
                    self.state = State::Colon;
                } else {
                    self.after_value();
                }
            }
            b'\\' => self.state = State::Escape { key },
            _ => return Err(Malformed),
        }
        Ok(stop + 1)
    }

    /// Checks `plain`'s UTF-8, with the unfinished sequence the last piece left.
    fn utf8(&mut self, mut plain: &[u8]) -> Result<(), Malformed> {
        while self.pending_len > 0 {
            let Some((&b, rest)) = plain.split_first() else {
                return Ok(());
            };
            self.pending[usize::from(self.pending_len)] = b;
            self.pending_len += 1;
            plain = rest;
            let have = &self.pending[..usize::from(self.pending_len)];
            match std::str::from_utf8(have) {
                Ok(_) => self.pending_len = 0,
                Err(e) if e.error_len().is_none() && self.pending_len < 4 => {}
                Err(_) => return Err(Malformed),
            }
        }
        match std::str::from_utf8(plain) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_none() => {
                let tail = &plain[e.valid_up_to()..];
                self.pending[..tail.len()].copy_from_slice(tail);
                self.pending_len = tail.len() as u8;
                Ok(())
            }
            Err(_) => Err(Malformed),
        }
    }

    fn escape(&mut self, b: u8, key: bool) -> Result<(), Malformed> {
        let c = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                self.state = State::Unicode {
                    key,
                    digits: 0,
                    code: 0,
                };
                return Ok(());
            }
            _ => return Err(Malformed),
        };
        if self.high_surrogate.is_some() {
            return Err(Malformed);
        }
        self.nonempty = true;
        self.keep(&[c]);
        self.state = State::Str { key };
        Ok(())
    }

    fn unicode(&mut self, b: u8, key: bool, digits: u8, code: u16) -> Result<(), Malformed> {
        let digit = (b as char).to_digit(16).ok_or(Malformed)? as u16;
        let (digits, code) = (digits + 1, (code << 4) | digit);
        if digits < 4 {
            self.state = State::Unicode { key, digits, code };
            return Ok(());
        }
        let c = match (self.high_surrogate.take(), code) {
            (None, 0xD800..=0xDBFF) => {
                self.high_surrogate = Some(code);
                self.state = State::Str { key };
                return Ok(());
            }
            (Some(high), 0xDC00..=0xDFFF) => {
                let c = 0x10000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(code) - 0xDC00);
                char::from_u32(c).ok_or(Malformed)?
            }
            (None, _) => char::from_u32(u32::from(code)).ok_or(Malformed)?,
            (Some(_), _) => return Err(Malformed),
        };
        let mut utf8 = [0; 4];
        self.nonempty = true;
        self.keep(c.encode_utf8(&mut utf8).as_bytes());
        self.state = State::Str { key };
        Ok(())
    }

    fn keep(&mut self, bytes: &[u8]) {
        if self.overflow {
            return;
        }
        match self.capture.get_mut(self.len..self.len + bytes.len()) {
            Some(room) => {
                room.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            None => self.overflow = true,
        }
    }

    fn emit_number(&mut self, out: &mut impl FnMut(Token<'_>)) {
        out(Token::Number(
            (!self.overflow).then_some(&self.capture[..self.len]),
        ));
    }
}

#[cfg(test)]
pub(crate) mod tests;
