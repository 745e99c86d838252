//! Incremental Server-Sent-Events framer for the proxy's hot path.
//!
//! The proxy forwards response bodies untouched; to meter them it feeds every body frame (cut at
//! arbitrary byte positions by the network) to an [`SseFramer`], which calls back once per complete
//! event. Framing follows the WHATWG HTML "event stream interpretation" rules exactly (CRLF, LF and
//! lone-CR line endings, even when split across frames; one leading BOM skipped; comments; `data`
//! joining; `event` type; empty-data dispatch rules), working on raw bytes so any payload — invalid
//! UTF-8, NUL — passes through unchanged. Memory is bounded: the framer holds only the unfinished
//! line and the pending event, and once a line or event would exceed `max_event_bytes` it frees its
//! buffers and refuses all further input, so a hostile or broken stream costs no more than the bound.
#![forbid(unsafe_code)]

use crate::decode::event::{FramedEvent, Overflow};

/// Buffers whose capacity grew beyond this are shrunk once their content has been consumed.
const SHRINK_ABOVE: usize = 16 * 1024;
/// Capacity kept after such a shrink.
const KEEP_CAPACITY: usize = 4 * 1024;
const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// The event being assembled: data buffer and event type buffer.
#[derive(Debug, Default)]
struct Pending {
    data: Vec<u8>,
    event: Vec<u8>,
    /// A line other than a comment or a blank line has been seen.
    saw_field: bool,
}

impl Pending {
    fn held(&self) -> usize {
        self.data.len().saturating_add(self.event.len())
    }

    /// Interprets one complete line (without its terminator).
    fn line<F: FnMut(FramedEvent<'_>)>(
        &mut self, line: &[u8], max: usize, on_event: &mut F,
    ) -> Result<(), Overflow> {
        if line.is_empty() {
            self.dispatch(on_event);
            return Ok(());
        }
        if self.held().saturating_add(line.len()) > max {
            return Err(Overflow);
        }
        self.saw_field |= line.first() != Some(&b':');
        let (name, value) = match memchr::memchr(b':', line) {
            Some(0) => return Ok(()), // comment
            Some(colon) => {
                let name = line.get(..colon).unwrap_or_default();
                let value = line.get(colon + 1..).unwrap_or_default();
                (name, value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match name {
            b"data" => {
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
            b"event" => {
                self.event.clear();
                self.event.extend_from_slice(value);
            }
            _ => {} // `id`, `retry` and unknown fields are ignored
        }
        Ok(())
    }

    fn dispatch<F: FnMut(FramedEvent<'_>)>(&mut self, on_event: &mut F) {
        if !self.data.is_empty() {
            let data = self.data.strip_suffix(b"\n").unwrap_or(&self.data);
            on_event(FramedEvent {
                event: &self.event,
                data,
            });
        }
        self.data.clear();
        self.event.clear();
        shrink(&mut self.data);
        shrink(&mut self.event);
    }
}

fn shrink(buf: &mut Vec<u8>) {
    if buf.capacity() > SHRINK_ABOVE {
        buf.shrink_to(KEEP_CAPACITY);
    }
}

/// Incremental, bounded-memory SSE framer for one response stream.
#[derive(Debug)]
pub struct SseFramer {
    max_event_bytes: usize,
    /// Unfinished line carried over from previous feeds.
    line: Vec<u8>,
    pending: Pending,
    /// The previous feed ended with CR, so an LF starting the next one belongs to that line ending.
    last_was_cr: bool,
    /// Bytes of a leading BOM matched so far; `None` once past the start of the stream.
    bom_matched: Option<usize>,
    poisoned: bool,
}

impl SseFramer {
    /// A framer refusing any line, or any event (pending data + event type + current line),
    /// larger than `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        SseFramer {
            max_event_bytes,
            line: Vec::new(),
            pending: Pending::default(),
            last_was_cr: false,
            bom_matched: Some(0),
            poisoned: false,
        }
    }

    /// Feeds the next bytes of the stream and calls `on_event` for each event completed by them.
    ///
    /// Returns `Err(Overflow)` when the bound is exceeded (events completed earlier in `bytes` have
    /// been delivered); the framer then frees its buffers and rejects every later feed.
    pub fn feed(
        &mut self, bytes: &[u8], mut on_event: impl FnMut(FramedEvent<'_>),
    ) -> Result<(), Overflow> {
        if self.poisoned {
            return Err(Overflow);
        }
        let result = self.feed_inner(bytes, &mut on_event);
        if result.is_err() {
            self.poisoned = true;
            self.line = Vec::new();
            self.pending = Pending::default();
        }
        result
    }

    /// Whether the stream so far holds anything but comments and blank lines (a finished line, or the
    /// unfinished one): a stream of keep-alive comments only is still an event stream.
    pub fn saw_non_comment(&self) -> bool {
        self.pending.saw_field || self.line.first().is_some_and(|&b| b != b':')
    }

    /// What the framer's buffers have allocated (its share of the governor's `event_bytes`).
    pub fn capacity(&self) -> usize {
        self.line.capacity() + self.pending.data.capacity() + self.pending.event.capacity()
    }

    /// Frees the buffers and refuses every later feed (metering of the stream stops).
    pub fn release(&mut self) {
        self.poisoned = true;
        self.line = Vec::new();
        self.pending = Pending::default();
    }

    /// Bytes currently held (unfinished line + pending event data), for memory accounting in tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn buffered_bytes(&self) -> usize {
        self.line.len().saturating_add(self.pending.held())
    }

    fn feed_inner<F: FnMut(FramedEvent<'_>)>(
        &mut self, mut bytes: &[u8], on_event: &mut F,
    ) -> Result<(), Overflow> {
        while let Some(matched) = self.bom_matched {
            let Some((&b, rest)) = bytes.split_first() else {
                return Ok(()); // still possibly inside a split BOM
            };
            if BOM.get(matched) == Some(&b) {
                bytes = rest;
                self.bom_matched = Some(matched + 1).filter(|&n| n < BOM.len());
            } else {
                // Not a BOM after all: the bytes matched so far are ordinary stream bytes.
                self.bom_matched = None;
                self.process(BOM.get(..matched).unwrap_or_default(), on_event)?;
            }
        }
        self.process(bytes, on_event)
    }

    fn process<F: FnMut(FramedEvent<'_>)>(
        &mut self, mut bytes: &[u8], on_event: &mut F,
    ) -> Result<(), Overflow> {
        if self.last_was_cr {
            match bytes.split_first() {
                None => return Ok(()),
                Some((&b'\n', rest)) => bytes = rest,
                Some(_) => {}
            }
            self.last_was_cr = false;
        }
        let max = self.max_event_bytes;
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', bytes) {
            let Some((line, mut rest)) = bytes.split_at_checked(pos) else {
                break; // unreachable: memchr2 returns an index inside `bytes`
            };
            if let Some((&terminator, after)) = rest.split_first() {
                rest = after;
                if terminator == b'\r' {
                    match rest.split_first() {
                        Some((&b'\n', after)) => rest = after,
                        Some(_) => {}
                        None => self.last_was_cr = true,
                    }
                }
            }
            if self.line.is_empty() {
                self.pending.line(line, max, on_event)?;
            } else {
                let total = self.line.len().saturating_add(line.len());
                if self.pending.held().saturating_add(total) > max {
                    return Err(Overflow);
                }
                self.line.extend_from_slice(line);
                self.pending.line(&self.line, max, on_event)?;
                self.line.clear();
                shrink(&mut self.line);
            }
            bytes = rest;
        }
        if !bytes.is_empty() {
            if self.buffered_bytes().saturating_add(bytes.len()) > max {
                return Err(Overflow);
            }
            self.line.extend_from_slice(bytes);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Events = Vec<(Vec<u8>, Vec<u8>)>;

    /// Feeds `chunks` in order into a fresh framer, returning the events and the first error.
    fn run(max: usize, chunks: &[&[u8]]) -> (Events, Result<(), Overflow>) {
        let mut framer = SseFramer::new(max);
        let mut events = Vec::new();
        for chunk in chunks {
            let r = framer.feed(chunk, |e| events.push((e.event.to_vec(), e.data.to_vec())));
            if r.is_err() {
                return (events, r);
            }
            assert!(framer.buffered_bytes() <= max, "held more than the bound");
        }
        (events, Ok(()))
    }

    fn events(chunks: &[&[u8]]) -> Events {
        let (events, result) = run(1 << 20, chunks);
        assert_eq!(result, Ok(()));
        events
    }

    fn no_event(e: FramedEvent<'_>) {
        panic!("unexpected event {e:?}");
    }

    fn ev(event: &str, data: &[u8]) -> (Vec<u8>, Vec<u8>) {
        (event.as_bytes().to_vec(), data.to_vec())
    }

    /// Asserts that `input` gives `expected` however it is cut into one, two, three or n pieces.
    fn assert_split_invariant(input: &[u8], expected: &Events) {
        assert_eq!(&events(&[input]), expected, "whole");
        for i in 0..=input.len() {
            let (a, b) = input.split_at(i);
            assert_eq!(&events(&[a, b]), expected, "split at {i}");
            for j in i..=input.len() {
                let (b, c) = (&input[i..j], &input[j..]);
                assert_eq!(&events(&[a, b, c]), expected, "split at {i},{j}");
            }
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(&events(&bytes), expected, "byte at a time");
    }

    const MIXED: &[u8] = b"\xEF\xBB\xBF: ping\r\n\
        event: greeting\r\n\
        data: hello\r\n\
        data:world\r\n\
        id: 1\r\n\
        retry: 500\r\n\
        \r\n\
        : ping\r\
        data: one\rdata\rdata:  three\r\r\
        data:\n\n\
        \n\n\
        event:update\n\
        unknown: field\n\
        nocolon\n\
        data: {\"x\": 1}\r\n\
        \r\n\
        event: orphan\n\
        \n\
        data: last\n\
        \n";

    #[test]
    fn mixed_stream_gives_same_events_however_it_is_split() {
        let expected = vec![
            ev("greeting", b"hello\nworld"),
            ev("", b"one\n\n three"),
            ev("", b""),
            ev("update", b"{\"x\": 1}"),
            ev("", b"last"),
        ];
        assert_split_invariant(MIXED, &expected);
    }

    #[test]
    fn cr_ending_one_feed_and_lf_starting_next_is_one_line_ending() {
        let expected = vec![ev("", b"a\nb")];
        assert_eq!(events(&[b"data: a\r", b"\ndata: b\n\n"]), expected);
        assert_eq!(
            events(&[b"data: a\r", b"", b"\ndata: b\r", b"\n\r", b"\n"]),
            expected
        );
        // A lone CR at the end of a feed still ends the line at once.
        assert_eq!(events(&[b"data: a\r\r"]), vec![ev("", b"a")]);
    }

    #[test]
    fn only_one_leading_bom_is_skipped_and_partial_bom_bytes_are_kept() {
        assert_split_invariant(b"\xEF\xBB\xBFdata: x\n\n", &vec![ev("", b"x")]);
        // A second BOM, or a BOM prefix, is part of the first field name, which is then unknown.
        assert_split_invariant(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\n", &vec![]);
        assert_split_invariant(b"\xEF\xBBdata: x\n\ndata: y\n\n", &vec![ev("", b"y")]);
        assert_split_invariant(b"\xEF\ndata: y\n\n", &vec![ev("", b"y")]);
        let mut framer = SseFramer::new(64);
        framer.feed(b"\xEF\xBB", |_| {}).unwrap();
        assert_eq!(framer.buffered_bytes(), 0);
        framer.feed(b"x", |_| {}).unwrap();
        assert_eq!(framer.buffered_bytes(), 3);
    }

    #[test]
    fn vllm_capture_gives_19_events_ending_with_done() {
        let stream = include_bytes!("../../tests/fixtures/openai/vllm-0.32-chat-stream.sse");
        for size in [stream.len(), 1, 7, 64, 1000] {
            let chunks: Vec<&[u8]> = stream.chunks(size).collect();
            let got = events(&chunks);
            assert_eq!(got.len(), 19, "chunk size {size}");
            assert!(got.iter().all(|(event, _)| event.is_empty()));
            assert!(got[..18]
                .iter()
                .all(|(_, data)| data.starts_with(b"{\"id\":")));
            assert_eq!(got[18], ev("", b"[DONE]"));
        }
    }

    #[test]
    fn overlong_line_without_line_ending_fed_in_pieces_overflows_and_poisons() {
        let mut framer = SseFramer::new(16);
        assert_eq!(framer.feed(b"data: ", no_event), Ok(()));
        assert_eq!(framer.feed(b"0123456789", no_event), Ok(())); // exactly 16
        assert_eq!(framer.feed(b"x", no_event), Err(Overflow));
        assert_eq!(framer.buffered_bytes(), 0);
        assert_eq!(framer.line.capacity(), 0);
        assert_eq!(framer.feed(b"\n\ndata: ok\n\n", no_event), Err(Overflow));
        assert_eq!(framer.feed(b"", no_event), Err(Overflow));
        let message = Overflow.to_string();
        assert_eq!(message, "stream line or event exceeds max_event_bytes");
    }

    #[test]
    fn overlong_line_with_line_ending_overflows_whole_or_in_pieces() {
        let input: &[u8] = b"data: ok\n\ndata: 01234567890\n\n";
        for i in 0..=input.len() {
            let (a, b) = input.split_at(i);
            let (got, result) = run(16, &[a, b]);
            assert_eq!(result, Err(Overflow), "split at {i}");
            assert!(got.len() <= 1);
        }
        let (got, result) = run(16, &[input]);
        assert_eq!((got, result), (vec![ev("", b"ok")], Err(Overflow)));
        // A long comment is a long line too.
        assert_eq!(run(8, &[b": 0123456789\n"]).1, Err(Overflow));
    }

    #[test]
    fn many_short_data_lines_adding_past_the_bound_overflow() {
        // Each `data:ab` line is 7 bytes and adds 3 to the data buffer; line 33 sees 96 + 7 > 100.
        let ok = b"data:ab\n".repeat(32);
        let (got, result) = run(100, &[&ok, b"\n"]);
        assert_eq!(result, Ok(()));
        assert_eq!(got[0].1.len(), 32 * 3 - 1);
        let mut framer = SseFramer::new(100);
        let too_many = b"data:ab\n".repeat(33);
        assert_eq!(framer.feed(&too_many, no_event), Err(Overflow));
        assert_eq!(framer.buffered_bytes(), 0);
        assert_eq!(framer.pending.data.capacity(), 0);
        assert_eq!(framer.feed(b"\n", no_event), Err(Overflow));
    }

    #[test]
    fn event_exactly_at_the_bound_is_accepted() {
        // Peak is the last data line: event type (1) + data so far (3) + line (9) = 13 bytes.
        let input: &[u8] = b"event:e\ndata:ab\ndata:abcd\n\n";
        let expected = vec![ev("e", b"ab\nabcd")];
        for i in 0..=input.len() {
            let (a, b) = input.split_at(i);
            assert_eq!(run(13, &[a, b]), (expected.clone(), Ok(())), "split {i}");
            assert_eq!(run(12, &[a, b]), (vec![], Err(Overflow)), "split {i}");
        }
        assert_eq!(run(16, &[b"data: 0123456789\n\n"]).1, Ok(()));
    }

    #[test]
    fn non_utf8_and_nul_bytes_pass_through_unchanged() {
        let input: &[u8] = b"event: \xff\x00\ndata: \x00\xfe\x80\xc3\x28\r\ndata:\x00\n\n";
        assert_split_invariant(
            input,
            &vec![(b"\xff\x00".to_vec(), b"\x00\xfe\x80\xc3\x28\n\x00".to_vec())],
        );
    }

    #[test]
    fn incomplete_final_event_is_not_dispatched() {
        let (got, result) = run(1024, &[b"data: a\n\ndata: b\ndata: c"]);
        assert_eq!((got, result), (vec![ev("", b"a")], Ok(())));
        let mut framer = SseFramer::new(1024);
        framer.feed(b"data: b\ndata: c", no_event).unwrap();
        assert_eq!(framer.buffered_bytes(), "b\n".len() + "data: c".len());
    }

    #[test]
    fn large_buffers_shrink_after_dispatch_and_capacity_is_reused() {
        let mut framer = SseFramer::new(1 << 20);
        let big = [b"data: ".as_slice(), &[b'x'; 100_000], b"\n\n"].concat();
        let mut len = 0;
        for chunk in big.chunks(4096) {
            framer.feed(chunk, |e| len = e.data.len()).unwrap();
        }
        assert_eq!(len, 100_000);
        assert!(framer.pending.data.capacity() <= SHRINK_ABOVE);
        assert!(framer.line.capacity() <= SHRINK_ABOVE);
        framer.feed(b"data: small\n\n", |_| {}).unwrap();
        let cap = framer.pending.data.capacity();
        framer.feed(b"data: small\n\n", |_| {}).unwrap();
        assert_eq!(framer.pending.data.capacity(), cap);
    }
}
