//! One message's canonical form (the rules are the parent module's), written as the cursor reads the
//! message from the held body: no tree of values is built. What is held is the message's own
//! canonical bytes, so that the keys of each object can be put in order: at most
//! [`MAX_MESSAGE_BYTES`] of them, and with them one (start, end) pair per member kept and one scratch
//! copy, whatever the message is made of. Nesting is followed to [`MAX_DEPTH`] (on the thread's stack,
//! a frame a level); past either bound the message is not read, and neither is its request.
//!
//! The canonical bytes are tokens: a tag byte, then for a string, a number, an array or an object a
//! 4-byte little-endian length and that many bytes (a string's value with its escapes decoded, a
//! number as written, an array's elements, an object's members: each a key string then its value);
//! `true` and `false` are their tag alone. `null` and an empty string, array or object are never
//! written: a value that comes out empty is left out, with its key. Tokens say where they end, so
//! equal bytes are equal messages, and a kept part's `type` or `text` is found without reading the
//! body again.

#![deny(clippy::indexing_slicing)]

use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest as _, Sha256};

use crate::decode::json::Cursor;
use crate::record::conversations::{Digest, Unread};

/// Nesting followed, counted from the body's own object (a message is at 3, its content at 4):
/// deeper is `too_deep`.
pub const MAX_DEPTH: u32 = 64;
/// The largest canonical form of one message (a text message's is its text and a few bytes): larger
/// is `too_large`. A default-held body (`limits.hold_request_body_bytes`, 1 MiB) of text always fits.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// Body bytes read between two looks at whether the request has ended.
const POLL_BYTES: usize = 64 << 10;

const STRING: u8 = b's';
const NUMBER: u8 = b'n';
const TRUE: u8 = b't';
const FALSE: u8 = b'f';
const ARRAY: u8 = b'[';
const OBJECT: u8 = b'{';
/// A tag and its length.
const HEAD: usize = 5;

/// Keys left out wherever they stand.
const DROPPED: [&str; 5] = [
    "cache_control",
    "reasoning_content",
    "reasoning",
    "thinking",
    "signature",
];
/// Content parts that are reasoning.
const REASONING_PARTS: [&[u8]; 2] = [b"thinking", b"redacted_thinking"];
/// Content parts that are plain text, in each API's spelling.
const TEXT_PARTS: [&[u8]; 3] = [b"text", b"input_text", b"output_text"];

/// The first 128 bits of what `hasher` hashed.
pub fn first_bits(hasher: Sha256) -> Digest {
    let mut digest = [0; 16];
    digest.copy_from_slice(hasher.finalize().get(..16).unwrap_or(&[0; 16]));
    digest
}

/// Whether a value was written (`false`: it was empty, and left out), or why the body is not read.
type Wrote = Result<bool, Unread>;

/// What a content part is, as its canonical form says.
enum Part {
    Reasoning,
    Text,
    Other,
}

/// The writer of one message at a time, its buffers reused from one message to the next.
pub struct Canonical<'s> {
    /// Responses items: their own `id` and `status` are left out, and `type` makes an item.
    responses: bool,
    /// Set when the request ends: the read stops at the next look.
    stop: &'s AtomicBool,
    next_poll: usize,
    /// The message being written.
    out: Vec<u8>,
    /// The members kept of the objects being written, innermost last: where each starts and ends in
    /// `out` (its key, then its value).
    members: Vec<(usize, usize)>,
    /// An object's members put in order, or a content's text parts joined.
    scratch: Vec<u8>,
}

impl<'s> Canonical<'s> {
    pub fn new(responses: bool, stop: &'s AtomicBool) -> Self {
        Canonical {
            responses,
            stop,
            next_poll: 0,
            out: Vec::new(),
            members: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// `Late` once the request has ended; looked at every [`POLL_BYTES`] of the body.
    pub fn poll(&mut self, c: &Cursor<'_>) -> Result<(), Unread> {
        if c.at >= self.next_poll {
            self.next_poll = c.at.saturating_add(POLL_BYTES);
            if self.stop.load(Ordering::Relaxed) {
                return Err(Unread::Late);
            }
        }
        Ok(())
    }

    /// Writes the list item the cursor is on, at `depth`, for [`Canonical::hash_into`]: `false` for a
    /// Responses reasoning item (left out); `NotAMessage` for anything but an object with a `role`
    /// (or, a Responses item, a `type`).
    pub fn message(&mut self, c: &mut Cursor<'_>, depth: u32) -> Result<bool, Unread> {
        match c.next() {
            Some(b'{') => {}
            // Read no further: a list with anything but messages in it is no conversation.
            Some(b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n') => {
                return Err(Unread::NotAMessage)
            }
            _ => return Err(Unread::NotJson),
        }
        self.out.clear();
        self.members.clear();
        self.members(c, depth, true)?;
        let kind = self.member(b"type").and_then(string_of);
        if self.responses && kind == Some(b"reasoning") {
            return Ok(false);
        }
        let role = self.member(b"role").and_then(string_of);
        if role.is_none() && !(self.responses && kind.is_some()) {
            return Err(Unread::NotAMessage);
        }
        Ok(true)
    }

    /// Writes a message made of a role and the value the cursor is on as its content (an Anthropic
    /// `system`, a Responses `instructions`, or its `input` given as a string), for
    /// [`Canonical::digest`] or [`Canonical::hash_into`]; `false` when that content is empty.
    pub fn wrapped(&mut self, c: &mut Cursor<'_>, depth: u32, role: &str) -> Result<bool, Unread> {
        self.out.clear();
        self.members.clear();
        self.token(STRING, b"content")?;
        if !self.content(c, depth)? {
            return Ok(false);
        }
        self.members.push((0, self.out.len()));
        let start = self.out.len();
        self.token(STRING, b"role")?;
        self.token(STRING, role.as_bytes())?;
        self.members.push((start, self.out.len()));
        Ok(true)
    }

    /// The message written, its members in key order: the first 128 bits of their SHA-256.
    pub fn digest(&mut self) -> Digest {
        let mut hasher = Sha256::new();
        self.hash_into(&mut hasher);
        first_bits(hasher)
    }

    /// Hashes the message written into `hasher`: its length, then its members in key order (the
    /// length keeps the boundary between two messages hashed one after the other).
    pub fn hash_into(&mut self, hasher: &mut Sha256) {
        let out = &self.out;
        self.members
            .sort_by(|a, b| key_at(out, a.0).cmp(key_at(out, b.0)));
        let len: usize = self.members.iter().map(|&(start, end)| end - start).sum();
        hasher.update([OBJECT]);
        hasher.update((len as u64).to_le_bytes());
        for &(start, end) in &self.members {
            hasher.update(out.get(start..end).unwrap_or_default());
        }
    }

    /// The value of the message's own member `key` (the last, if given twice).
    fn member(&self, key: &[u8]) -> Option<&[u8]> {
        let (start, end) = *self
            .members
            .iter()
            .rev()
            .find(|m| key_at(&self.out, m.0) == key)?;
        let token = self.out.get(start..end)?;
        token.get(token_len(token)..)
    }

    /// The members of the object the cursor is on, written into `out` and listed in `members`.
    /// `top`: the message itself.
    fn members(&mut self, c: &mut Cursor<'_>, depth: u32, top: bool) -> Result<(), Unread> {
        if depth > MAX_DEPTH {
            return Err(Unread::TooDeep);
        }
        c.eat(b'{').ok_or(Unread::NotJson)?;
        if c.next() == Some(b'}') {
            c.at += 1;
            return Ok(());
        }
        loop {
            self.poll(c)?;
            if c.next() != Some(b'"') {
                return Err(Unread::NotJson);
            }
            let key = c.string().ok_or(Unread::NotJson)?.value();
            c.eat(b':').ok_or(Unread::NotJson)?;
            let responses_own = top && self.responses && matches!(&*key, "id" | "status");
            if responses_own || DROPPED.contains(&&*key) {
                c.ws();
                c.skip().ok_or(Unread::NotJson)?;
            } else {
                let start = self.out.len();
                self.token(STRING, key.as_bytes())?;
                let kept = match &*key {
                    "content" => self.content(c, depth + 1)?,
                    _ => self.value(c, depth + 1)?,
                };
                match kept {
                    true => self.members.push((start, self.out.len())),
                    false => self.out.truncate(start),
                }
            }
            match c.next() {
                Some(b',') => c.at += 1,
                Some(b'}') => {
                    c.at += 1;
                    return Ok(());
                }
                _ => return Err(Unread::NotJson),
            }
        }
    }

    /// Any value, the cursor on it (after white space), at `depth` if it opens one.
    fn value(&mut self, c: &mut Cursor<'_>, depth: u32) -> Wrote {
        match c.next().ok_or(Unread::NotJson)? {
            b'{' => {
                let start = self.open(OBJECT)?;
                let base = self.members.len();
                self.members(c, depth, false)?;
                self.put_in_order(base, start + HEAD);
                self.members.truncate(base);
                Ok(self.close(start))
            }
            b'[' => {
                let start = self.open(ARRAY)?;
                self.elements(c, depth, |this, c| this.value(c, depth + 1).map(drop))?;
                Ok(self.close(start))
            }
            b'"' => self.string(c),
            b'-' | b'0'..=b'9' => {
                let start = c.at;
                c.number().ok_or(Unread::NotJson)?;
                let number = c.since(start).ok_or(Unread::NotJson)?;
                self.token(NUMBER, number.as_bytes())?;
                Ok(true)
            }
            b't' => {
                c.literal(b"true").ok_or(Unread::NotJson)?;
                self.out.push(TRUE);
                Ok(true)
            }
            b'f' => {
                c.literal(b"false").ok_or(Unread::NotJson)?;
                self.out.push(FALSE);
                Ok(true)
            }
            b'n' => c.literal(b"null").map(|()| false).ok_or(Unread::NotJson),
            _ => Err(Unread::NotJson),
        }
    }

    /// A message's content: a list of parts without its reasoning parts, and, when every part left is
    /// a text part, the string of their text instead.
    fn content(&mut self, c: &mut Cursor<'_>, depth: u32) -> Wrote {
        if c.next() != Some(b'[') {
            return self.value(c, depth);
        }
        let start = self.open(ARRAY)?;
        let mut text_only = true;
        self.elements(c, depth, |this, c| {
            let at = this.out.len();
            if this.value(c, depth + 1)? {
                match this.out.get(at..).map_or(Part::Other, part) {
                    Part::Reasoning => this.out.truncate(at),
                    Part::Text => {}
                    Part::Other => text_only = false,
                }
            }
            Ok(())
        })?;
        if !text_only {
            return Ok(self.close(start));
        }
        let mut text = std::mem::take(&mut self.scratch);
        text.clear();
        let mut parts = self.out.get(start + HEAD..).unwrap_or_default();
        while !parts.is_empty() {
            let (part, rest) = parts.split_at(token_len(parts).min(parts.len()));
            text.extend_from_slice(
                member(part, b"text")
                    .and_then(string_of)
                    .unwrap_or_default(),
            );
            parts = rest;
        }
        self.out.truncate(start);
        let wrote = match text.is_empty() {
            true => Ok(false),
            false => self.token(STRING, &text).map(|()| true),
        };
        self.scratch = text;
        wrote
    }

    /// The elements of the array the cursor is on, at `depth`, each read by `element`.
    fn elements(
        &mut self, c: &mut Cursor<'_>, depth: u32,
        mut element: impl FnMut(&mut Self, &mut Cursor<'_>) -> Result<(), Unread>,
    ) -> Result<(), Unread> {
        if depth > MAX_DEPTH {
            return Err(Unread::TooDeep);
        }
        c.eat(b'[').ok_or(Unread::NotJson)?;
        if c.next() == Some(b']') {
            c.at += 1;
            return Ok(());
        }
        loop {
            self.poll(c)?;
            element(self, c)?;
            match c.next() {
                Some(b',') => c.at += 1,
                Some(b']') => {
                    c.at += 1;
                    return Ok(());
                }
                _ => return Err(Unread::NotJson),
            }
        }
    }

    /// The string the cursor is on, its value written as it is read.
    fn string(&mut self, c: &mut Cursor<'_>) -> Wrote {
        let start = self.open(STRING)?;
        match c.string_into(&mut self.out, MAX_MESSAGE_BYTES) {
            None => Err(Unread::NotJson),
            Some(false) => Err(Unread::TooLarge),
            Some(true) => Ok(self.close(start)),
        }
    }

    /// Writes a token of `bytes`.
    fn token(&mut self, tag: u8, bytes: &[u8]) -> Result<(), Unread> {
        self.room(bytes.len())?;
        let start = self.out.len();
        self.out.push(tag);
        self.out.extend_from_slice(&[0; 4]);
        self.out.extend_from_slice(bytes);
        self.set_len(start);
        Ok(())
    }

    /// Opens an array or object token: where it starts.
    fn open(&mut self, tag: u8) -> Result<usize, Unread> {
        self.room(0)?;
        let start = self.out.len();
        self.out.push(tag);
        self.out.extend_from_slice(&[0; 4]);
        Ok(start)
    }

    /// Closes the token opened at `start`, or leaves it out if nothing was written in it.
    fn close(&mut self, start: usize) -> bool {
        if self.out.len() == start + HEAD {
            self.out.truncate(start);
            return false;
        }
        self.set_len(start);
        true
    }

    fn set_len(&mut self, start: usize) {
        let len = self.out.len().saturating_sub(start + HEAD);
        // Below MAX_MESSAGE_BYTES (`room`), so it fits.
        let len = u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes();
        if let Some(field) = self.out.get_mut(start + 1..start + HEAD) {
            field.copy_from_slice(&len);
        }
    }

    /// `TooLarge` unless a token of `bytes` more fits in [`MAX_MESSAGE_BYTES`].
    fn room(&self, bytes: usize) -> Result<(), Unread> {
        match self.out.len().saturating_add(HEAD).saturating_add(bytes) > MAX_MESSAGE_BYTES {
            true => Err(Unread::TooLarge),
            false => Ok(()),
        }
    }

    /// Puts the members listed from `members[base]` on, written from `out[from]` on, in key order (a
    /// stable sort: a key given twice keeps both, as given).
    fn put_in_order(&mut self, base: usize, from: usize) {
        let Canonical {
            out,
            members,
            scratch,
            ..
        } = self;
        let Some(members) = members.get_mut(base..) else {
            return;
        };
        let key = |m: &(usize, usize)| key_at(out, m.0);
        if members.is_sorted_by(|a, b| key(a) <= key(b)) {
            return;
        }
        members.sort_by(|a, b| key(a).cmp(key(b)));
        scratch.clear();
        for &(start, end) in members.iter() {
            scratch.extend_from_slice(out.get(start..end).unwrap_or_default());
        }
        if let Some(region) = out.get_mut(from..from + scratch.len()) {
            region.copy_from_slice(scratch);
        }
    }
}

/// The length of the token `bytes` begins with.
fn token_len(bytes: &[u8]) -> usize {
    match bytes.first() {
        Some(&TRUE | &FALSE) => 1,
        _ => {
            let len = bytes.get(1..HEAD).and_then(|b| b.try_into().ok());
            HEAD + len.map_or(0, |b| u32::from_le_bytes(b) as usize)
        }
    }
}

/// What a string, number, array or object token holds.
fn payload(token: &[u8]) -> &[u8] {
    token.get(HEAD..token_len(token)).unwrap_or_default()
}

fn string_of(token: &[u8]) -> Option<&[u8]> {
    (token.first() == Some(&STRING)).then(|| payload(token))
}

/// The key of the member written at `start` of `out`.
fn key_at(out: &[u8], start: usize) -> &[u8] {
    payload(out.get(start..).unwrap_or_default())
}

/// The value of `key` in the object token `object`.
fn member<'b>(object: &'b [u8], key: &[u8]) -> Option<&'b [u8]> {
    if object.first() != Some(&OBJECT) {
        return None;
    }
    let mut rest = payload(object);
    while !rest.is_empty() {
        let (name, after) = rest.split_at(token_len(rest).min(rest.len()));
        let (value, after) = after.split_at(token_len(after).min(after.len()));
        if payload(name) == key {
            return Some(value);
        }
        rest = after;
    }
    None
}

/// What the content part written as `token` is: a text part has a text `type` and a string `text`
/// (or an empty one, left out).
fn part(token: &[u8]) -> Part {
    match member(token, b"type").and_then(string_of) {
        Some(kind) if REASONING_PARTS.contains(&kind) => Part::Reasoning,
        Some(kind)
            if TEXT_PARTS.contains(&kind)
                && member(token, b"text").is_none_or(|text| string_of(text).is_some()) =>
        {
            Part::Text
        }
        _ => Part::Other,
    }
}
