//! What every framer hands on and how every framer fails: one [`FramedEvent`] per complete event of a
//! stream, whatever its framing (an SSE event, an NDJSON line), and [`Overflow`] when a line or an
//! event outgrows the framer's bound. The framers, the dialects and the response decoder all speak
//! these types, so no framer imports another.

use std::fmt;

/// One event of a stream, borrowing the framer's buffers for the duration of the callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramedEvent<'a> {
    /// SSE: the value of the event's last `event:` field. Empty when the event had none, and for every
    /// NDJSON line.
    pub event: &'a [u8],
    /// SSE: the event's `data:` lines joined with LF, without the final LF. NDJSON: the line, without
    /// its line ending.
    pub data: &'a [u8],
}

impl<'a> FramedEvent<'a> {
    /// An event with no name: an NDJSON line, or an SSE event without an `event:` field.
    pub fn unnamed(data: &'a [u8]) -> Self {
        FramedEvent { event: b"", data }
    }
}

/// A line or the accumulated event exceeded `max_event_bytes`; the framer (SSE or NDJSON) is poisoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow;

impl fmt::Display for Overflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stream line or event exceeds max_event_bytes")
    }
}

impl std::error::Error for Overflow {}
