//! The fast reading of Ollama's per-token NDJSON line (`{"model":"llama3.2","created_at":"…",
//! "message":{"role":"assistant","content":" sky"},"done":false}` on `/api/chat`, `"response":" sky"` on
//! `/api/generate`) without serde_json: one pass with the checked readers of `decode/json/cursor.rs`, the text
//! borrowed from the line, into the serde struct itself, so both readings go through one function. It
//! reads `model`, `response`, `thinking`, `message` (`content`, `thinking`) and a `done` that is `false`
//! or null, skips every other member as serde_json skips it (`created_at`, `role`, `images`, …), and gives
//! up (`None`: serde_json reads the line) on anything it is not sure to read as serde_json does: the
//! `done` line (`done: true`, or any count or duration), `tool_calls`, an `error` member, a duplicate
//! field, a key with an escape, a number where text is read, a `message` that is neither an object nor
//! null, bytes that are not UTF-8, anything malformed.

use super::{Line, Message};
use crate::decode::dialect::text::Text;
use crate::decode::json::{Cursor, Seen};

pub(super) fn line(data: &[u8]) -> Option<Line<'_>> {
    let mut line = Line::default();
    let mut seen = Seen::default();
    Cursor::whole_object(data, |c, key| {
        match key {
            b"model" | b"response" | b"thinking" => {
                let (field, slot) = match key {
                    b"model" => (0, &mut line.model),
                    b"response" => (1, &mut line.response),
                    _ => (2, &mut line.thinking),
                };
                seen.first(field)?;
                *slot = Text(c.text_field()?.map(|s| s.value()));
            }
            b"message" => {
                seen.first(3)?;
                line.message = read_message(c)?;
            }
            b"done" => {
                seen.first(4)?;
                line.done = c.opt_bool()?;
                if line.done == Some(true) {
                    return None;
                }
            }
            b"eval_count"
            | b"prompt_eval_count"
            | b"load_duration"
            | b"prompt_eval_duration"
            | b"eval_duration"
            | b"error" => return None,
            _ => return Some(false),
        }
        Some(true)
    })?;
    Some(line)
}

/// `Option<Message>`: null, or an object without `tool_calls`.
fn read_message<'a>(c: &mut Cursor<'a>) -> Option<Option<Message<'a>>> {
    if c.null_or_object()? {
        return Some(None);
    }
    let (mut message, mut seen) = (Message::default(), Seen::default());
    c.object(|c, key| {
        let (field, slot) = match key {
            b"content" => (0, &mut message.content),
            b"thinking" => (1, &mut message.thinking),
            b"tool_calls" => return None,
            _ => return Some(false),
        };
        seen.first(field)?;
        *slot = Text(c.text_field()?.map(|s| s.value()));
        Some(true)
    })?;
    Some(Some(message))
}
