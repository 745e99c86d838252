//! The fast reading of TGI's per-token event (`{"index":…,"token":{…},"generated_text":null,
//! "details":null}`) without serde_json: one pass with the checked readers of `decode/json/cursor.rs`, the
//! token's text borrowed from the event. It reads what the serde structs read of such an event (the
//! token's `text` and `special`), skips every other member as serde_json skips it (`index`, the token's
//! `id` and `logprob`, `top_tokens`), and gives up (`None`: serde_json reads the event) on anything it is
//! not sure to read as serde_json does: a `generated_text` or `details` that is not null (the last event,
//! once a stream), an `error` member, a token that is not an object, a duplicate field, a key with an
//! escape, a number where text is read, a `special` that is not a boolean or null, bytes that are not
//! UTF-8, anything malformed.

use super::{Event, Token};
use crate::decode::dialect::text::Text;
use crate::decode::json::{Cursor, Seen};

/// A token event read whole: its token (`generated_text`, `details` and `error` absent or null).
pub(super) fn token_event(data: &[u8]) -> Option<Event<'_>> {
    let (mut token, mut seen) = (None, Seen::default());
    Cursor::whole_object(data, |c, key| match key {
        b"token" => {
            seen.first(0)?;
            token = Some(read_token(c)?);
            Some(true)
        }
        // Null or absent on every event but the last; the last one serde_json reads.
        b"generated_text" | b"details" => {
            seen.first(if key == b"details" { 2 } else { 1 })?;
            c.null()?.then_some(true)
        }
        b"error" => None,
        _ => Some(false),
    })?;
    Some(Event {
        token: Some(token?),
        ..Event::default()
    })
}

fn read_token<'a>(c: &mut Cursor<'a>) -> Option<Token<'a>> {
    if c.null_or_object()? {
        return None;
    }
    let (mut text, mut special, mut seen) = (Text::default(), None, Seen::default());
    c.object(|c, key| match key {
        b"text" => {
            seen.first(0)?;
            text = Text(c.text_field()?.map(|s| s.value()));
            Some(true)
        }
        b"special" => {
            seen.first(1)?;
            special = c.opt_bool()?;
            Some(true)
        }
        _ => Some(false),
    })?;
    Some(Token { text, special })
}
