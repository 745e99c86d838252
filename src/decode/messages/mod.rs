//! The conversation a request carries: its message list, read from the body the proxy held, as one
//! digest per prefix (`prefixes[j]` covers messages `0..=j`). No text is kept: only SHA-256 digests of
//! each message's canonical content, so two requests are compared by what they say, not by their bytes.
//!
//! Clients re-serialise the history they send back (key order, spacing, `null` fields, a string content
//! turned into text parts), and agent frameworks move markers between turns. The canonical form
//! therefore drops what does not change what a message says:
//! - object keys are sorted; `null`, `""`, `[]` and `{}` values are left out, and so is a value that
//!   is empty once what is left out of it is;
//! - `cache_control` (Anthropic prompt-cache markers, moved to the last message each turn) is left out;
//! - reasoning (`reasoning_content`, `reasoning`, `thinking`, Anthropic `thinking` and
//!   `redacted_thinking` parts, Responses `reasoning` items) is left out: servers and clients differ on
//!   whether an answer's reasoning is sent back;
//! - a content that is a list of text parts only is the same as the string of their text;
//! - Responses items lose their server-made `id` and `status` (a client may send an output item back
//!   as it came, or rebuild it).
//!
//! Strings are compared by their value (escapes decoded), numbers as written, a key given twice as
//! given (both kept).
//!
//! Which list: chat and Ollama `messages`; Anthropic `system` (as the first message) and `messages`;
//! Responses `instructions` (likewise) and `input` (a string is one user message). A message is an
//! object with a string `role`; a Responses `input` item is one with a `role` or a string `type` (any
//! type: the item types grow with the API, `function_call_output`, `mcp_call`, `custom_tool_call`, …).
//! Anything else in the list, and any body that is not a JSON object, is not read ([`Unread`]).
//!
//! The body is read once, front to back, by the cursor the dialects' scanners use (`decode::json`),
//! each message written in its canonical form ([`canonical`]) and hashed as it ends; what is held is
//! one message's canonical bytes and 16 bytes a message. Bounds, each a reason a request is not read:
//! [`MAX_MESSAGES`] messages, nesting to [`canonical::MAX_DEPTH`] (128 in values outside the list,
//! skipped unread), [`canonical::MAX_MESSAGE_BYTES`] of one message's canonical form. The read stops
//! within 64 KiB of the body once the caller's `stop` is set (its request ended).

mod canonical;

use std::sync::atomic::AtomicBool;

use sha2::{Digest as _, Sha256};

use crate::decode::dialect::MAX_RESPONSE_ID;
use crate::decode::json::{Cursor, Seen};
use crate::govern::Lease;
use crate::record::api::Api;
use crate::record::conversations::{Digest, MessageList, Unread};
use canonical::Canonical;

pub use canonical::{MAX_DEPTH, MAX_MESSAGE_BYTES};

/// The most messages a list may have (`too_many`).
pub const MAX_MESSAGES: usize = 10_000;

/// Whether requests to `api` carry a message list.
pub fn has_messages(api: Api) -> bool {
    matches!(
        api,
        Api::Chat | Api::Messages | Api::Responses | Api::Ollama
    )
}

/// The message list of a request body to `api`: `Ok(None)` when the body has no list (or an empty
/// one) or the API carries none (text completions, TGI, llama.cpp's `/completion`, Ollama's
/// `/api/generate`); `Err` when the body is not read, and why. `stop`: set when the request ends, the
/// read then gives up (`Late`).
///
/// The digests are leased from `lease` (the governor's `message_lists`, the request's client's) as
/// the list grows, [`LEASE_STEP`] digests at a time; a refused lease stops the read (`Budget`).
pub fn read(
    api: Api, body: &[u8], stop: &AtomicBool, lease: &mut Lease,
) -> Result<Option<MessageList>, Unread> {
    if !has_messages(api) {
        return Ok(None);
    }
    let text = std::str::from_utf8(body).map_err(|_| Unread::NotJson)?;
    let mut c = Cursor::new(text);
    let mut reader = Canonical::new(api == Api::Responses, stop);
    let mut found = Found::default();
    let mut seen = Seen::default();
    if c.next() != Some(b'{') {
        return Err(Unread::NotJson);
    }
    c.at += 1;
    if c.next() != Some(b'}') {
        loop {
            reader.poll(&c)?;
            if c.next() != Some(b'"') {
                return Err(Unread::NotJson);
            }
            let key = c.string().ok_or(Unread::NotJson)?.value();
            c.eat(b':').ok_or(Unread::NotJson)?;
            c.ws();
            let field = Field::of(api, &key);
            if field != Field::Other {
                // A key given twice: serde_json (and most servers' parsers) refuse the body.
                seen.first(field as u8).ok_or(Unread::NotJson)?;
            }
            match field {
                Field::List => {
                    found.list = list(&mut reader, &mut c, api, &mut found.messages, lease)?
                }
                Field::System => {
                    found.system = (reader.wrapped(&mut c, 2, "system")?).then(|| reader.digest())
                }
                Field::Previous if c.peek() == Some(b'"') => {
                    let id = c.string().ok_or(Unread::NotJson)?.value();
                    found.previous =
                        (!id.is_empty() && id.len() <= MAX_RESPONSE_ID).then(|| id.into_owned());
                }
                Field::Previous | Field::Other => c.skip().ok_or(Unread::NotJson)?,
            }
            match c.next() {
                Some(b',') => c.at += 1,
                Some(b'}') => break,
                _ => return Err(Unread::NotJson),
            }
        }
    }
    c.at += 1;
    c.ws();
    if !c.at_end() {
        return Err(Unread::NotJson);
    }
    Ok(match found.list {
        true => found.prefixes(api),
        false => None,
    })
}

/// The top-level fields read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    List,
    System,
    Previous,
    Other,
}

impl Field {
    fn of(api: Api, key: &str) -> Field {
        match (api, key) {
            (Api::Responses, "input") => Field::List,
            (Api::Responses, "instructions") => Field::System,
            (Api::Responses, "previous_response_id") => Field::Previous,
            (Api::Messages, "system") => Field::System,
            (Api::Responses, _) => Field::Other,
            (_, "messages") => Field::List,
            _ => Field::Other,
        }
    }
}

/// What the body's top-level fields gave.
#[derive(Default)]
struct Found {
    /// Whether the body has a list (an array; a string for Responses).
    list: bool,
    system: Option<Digest>,
    messages: Chain,
    previous: Option<String>,
}

/// The list's messages hashed one after another as they are read, a digest taken after each: the
/// digest of each prefix of the list, without a hash of each message of its own.
#[derive(Default)]
struct Chain {
    hasher: Sha256,
    prefixes: Vec<Digest>,
}

impl Chain {
    /// Adds the message `reader` has written, its digest leased first.
    fn push(
        &mut self, api: Api, reader: &mut Canonical<'_>, lease: &mut Lease,
    ) -> Result<(), Unread> {
        let room = lease.bytes() / DIGEST_BYTES;
        if self.prefixes.len() as u64 >= room {
            lease
                .grow(LEASE_STEP * DIGEST_BYTES)
                .map_err(Unread::Budget)?;
        }
        if self.prefixes.is_empty() {
            self.hasher.update(api.as_str());
            self.hasher.update(b"m");
        }
        reader.hash_into(&mut self.hasher);
        self.prefixes
            .push(canonical::first_bits(self.hasher.clone()));
        Ok(())
    }
}

/// What one digest holds.
const DIGEST_BYTES: u64 = std::mem::size_of::<Digest>() as u64;
/// Digests leased at a time.
pub const LEASE_STEP: u64 = 64;

impl Found {
    /// Each prefix's digest: the API's and the list's chain (a conversation stays on one API: the
    /// same words sent to another are another conversation); with a system message, which is the
    /// list's first but may stand anywhere in the body, first its own prefix and then each of the
    /// chain's taken with it. `None` for no message.
    fn prefixes(self, api: Api) -> Option<MessageList> {
        let chain = self.messages.prefixes;
        let prefixes = match self.system {
            None => chain,
            Some(system) => {
                let with = |tag: &[u8], digest: &Digest| {
                    let mut hasher = Sha256::new();
                    hasher.update(api.as_str());
                    hasher.update(tag);
                    hasher.update(system);
                    hasher.update(digest);
                    canonical::first_bits(hasher)
                };
                let first = with(b"s", &[0; 16]);
                std::iter::once(first)
                    .chain(chain.iter().map(|prefix| with(b"p", prefix)))
                    .collect()
            }
        };
        (!prefixes.is_empty()).then_some(MessageList {
            prefixes,
            previous_response: self.previous,
        })
    }
}

/// The list the cursor is on, each message added to `messages`: whether it is a list (an
/// array, or for Responses a string: one user message); anything else is skipped, no list.
fn list(
    reader: &mut Canonical<'_>, c: &mut Cursor<'_>, api: Api, messages: &mut Chain,
    lease: &mut Lease,
) -> Result<bool, Unread> {
    match c.peek() {
        Some(b'[') => {}
        Some(b'"') if api == Api::Responses => {
            if reader.wrapped(c, 2, "user")? {
                messages.push(api, reader, lease)?;
            }
            return Ok(true);
        }
        _ => return c.skip().map(|()| false).ok_or(Unread::NotJson),
    }
    c.at += 1;
    if c.next() == Some(b']') {
        c.at += 1;
        return Ok(true);
    }
    let mut items = 0;
    loop {
        items += 1;
        if items > MAX_MESSAGES {
            return Err(Unread::TooMany);
        }
        reader.poll(c)?;
        if reader.message(c, 3)? {
            messages.push(api, reader, lease)?;
        }
        match c.next() {
            Some(b',') => c.at += 1,
            Some(b']') => {
                c.at += 1;
                return Ok(true);
            }
            _ => return Err(Unread::NotJson),
        }
    }
}

#[cfg(test)]
mod tests;
