//! The fast reading of llama.cpp's per-token `/completion` event (`{"index":0,"content":" the",
//! "tokens":[…],"stop":false,"id_slot":0,"tokens_predicted":1,"tokens_evaluated":5}`) without serde_json:
//! one pass with the checked readers of `decode/json/cursor.rs`, the content borrowed from the event. It reads
//! what the serde struct reads (`content`, `model`, `stop`, `tokens_predicted`, `tokens_evaluated`), skips
//! every other member as serde_json skips it (`index`, `tokens`, `id_slot`, `probs`, …), and gives up
//! (`None`: serde_json reads the event) on anything it is not sure to read as serde_json does: a
//! `timings` or `error` member (the last event, once a stream, or a failure), a duplicate field, a key
//! with an escape, a number where text is read, a count that is not an integer serde_json reads as a
//! `u64`, a `stop` that is not a boolean or null, bytes that are not UTF-8, anything malformed.

use super::Chunk;
use crate::decode::dialect::text::Text;
use crate::decode::json::{Cursor, Seen};

pub(super) fn chunk(data: &[u8]) -> Option<Chunk<'_>> {
    let mut chunk = Chunk::default();
    let mut seen = Seen::default();
    Cursor::whole_object(data, |c, key| {
        match key {
            b"content" | b"model" => {
                let (field, slot) = match key {
                    b"content" => (0, &mut chunk.content),
                    _ => (1, &mut chunk.model),
                };
                seen.first(field)?;
                *slot = Text(c.text_field()?.map(|s| s.value()));
            }
            b"stop" => {
                seen.first(2)?;
                chunk.stop = c.opt_bool()?;
            }
            b"tokens_predicted" | b"tokens_evaluated" => {
                let (field, slot) = match key {
                    b"tokens_predicted" => (3, &mut chunk.tokens_predicted),
                    _ => (4, &mut chunk.tokens_evaluated),
                };
                seen.first(field)?;
                *slot = c.opt_uint()?;
            }
            b"timings" | b"error" => return None,
            _ => return Some(false),
        }
        Some(true)
    })?;
    Some(chunk)
}
