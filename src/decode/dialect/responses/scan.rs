//! The fast reading of the Responses API's per-token events (`response.*.delta`) without serde_json: one
//! pass over the event with the checked readers of `decode/json/cursor.rs`, strings borrowed from the event.
//! It reads what the serde struct reads (`type` and `delta`), skips every other member as serde_json skips
//! it, and gives up (`None`: serde_json reads the event) on anything it is not sure to read as serde_json
//! does: an event whose type does not end in `.delta` (the lifecycle events, a few a stream), a
//! `response` member, a duplicate field, a key with an escape, a number where text is read, bytes that are
//! not UTF-8, anything malformed.

use super::Event;
use crate::decode::dialect::text::Text;
use crate::decode::json::{Cursor, Seen};

/// A delta event read whole: its type and its `delta`.
pub(super) fn delta_event(data: &[u8]) -> Option<Event<'_>> {
    let (mut kind, mut delta, mut seen) = (None, Text::default(), Seen::default());
    Cursor::whole_object(data, |c, key| match key {
        b"type" => {
            seen.first(0)?;
            kind = c.opt_str()?;
            Some(true)
        }
        b"delta" => {
            seen.first(1)?;
            delta = Text(c.text_field()?.map(|s| s.value()));
            Some(true)
        }
        b"response" => None,
        _ => Some(false),
    })?;
    let kind = kind?.value();
    kind.ends_with(".delta").then_some(Event {
        kind: Some(kind),
        delta,
        ..Event::default()
    })
}
