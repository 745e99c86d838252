//! The fast reading of Anthropic's per-token event, `content_block_delta`, without serde_json: one pass
//! over the event with the checked readers of `decode/json/cursor.rs`, strings borrowed from the event. It
//! reads what the serde struct reads (`type`, and `delta`'s `text`, `thinking`, `partial_json`,
//! `content`), skips every other member as serde_json skips it, and gives up (`None`: serde_json reads the
//! event) on anything it is not sure to read as serde_json does: another event type (those come once a
//! stream), a `message` or `usage` member, a duplicate field, a key with an escape, a number where text
//! is read, a `delta` that is neither an object nor null, bytes that are not UTF-8, anything malformed.

use std::borrow::Cow;

use super::{Delta, Event};
use crate::decode::dialect::text::Text;
use crate::decode::json::{once, Cursor, Seen};

/// The one event type the scanner reads.
const TYPE: &str = "content_block_delta";

/// A `content_block_delta` the scanner read whole: its type and its `delta` (`None`: absent or null);
/// `None` when serde_json is to read the event.
pub(super) fn content_block_delta(data: &[u8]) -> Option<Event<'_>> {
    let (mut kind, mut delta, mut seen) = (None, None, Seen::default());
    Cursor::whole_object(data, |c, key| match key {
        b"type" => {
            seen.first(0)?;
            kind = c.opt_str()?;
            Some(true)
        }
        b"delta" => {
            seen.first(1)?;
            if !c.null()? {
                once(&mut delta, read_delta(c)?)?;
            }
            Some(true)
        }
        b"message" | b"usage" => None,
        _ => Some(false),
    })?;
    if kind?.value() != TYPE {
        return None;
    }
    Some(Event {
        kind: Some(Cow::Borrowed(TYPE)),
        delta,
        ..Event::default()
    })
}

fn read_delta<'a>(c: &mut Cursor<'a>) -> Option<Delta<'a>> {
    if c.null_or_object()? {
        return None;
    }
    let mut delta = Delta::default();
    let mut seen = Seen::default();
    c.object(|c, key| {
        let (field, slot) = match key {
            b"text" => (0, &mut delta.text),
            b"thinking" => (1, &mut delta.thinking),
            b"partial_json" => (2, &mut delta.partial_json),
            b"content" => (3, &mut delta.content),
            _ => return Some(false),
        };
        seen.first(field)?;
        *slot = Text(c.text_field()?.map(|s| s.value()).map(|v: Cow<'a, str>| v));
        Some(true)
    })?;
    Some(delta)
}
