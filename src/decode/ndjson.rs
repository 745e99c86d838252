//! Incremental newline-delimited JSON framer (Ollama's `application/x-ndjson` streams).
//!
//! The NDJSON counterpart of [`crate::decode::sse::SseFramer`]: fed every body frame as it passes (cut at
//! arbitrary byte positions by the network), it calls back once per complete line, without its LF
//! and without a CR before it. Lines holding only whitespace are skipped. It works on raw bytes, so
//! any payload passes unchanged. Memory is bounded the same way as the SSE framer's: it holds only
//! the unfinished line, and once a line would exceed `max_line_bytes` it frees its buffer and refuses
//! all further input ([`Overflow`]), so a broken stream costs no more than the bound.

use crate::decode::event::Overflow;

/// Buffers whose capacity grew beyond this are shrunk once their content has been consumed.
const SHRINK_ABOVE: usize = 16 * 1024;
/// Capacity kept after such a shrink.
const KEEP_CAPACITY: usize = 4 * 1024;

/// Incremental, bounded-memory NDJSON framer for one response stream.
#[derive(Debug)]
pub struct NdjsonFramer {
    max_line_bytes: usize,
    /// Unfinished line carried over from previous feeds.
    line: Vec<u8>,
    poisoned: bool,
}

/// The line without a trailing CR, or `None` when it holds only JSON whitespace.
fn content(line: &[u8]) -> Option<&[u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let blank = line
        .iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'));
    (!blank).then_some(line)
}

impl NdjsonFramer {
    /// A framer refusing any line longer than `max_line_bytes` (its LF not counted).
    pub fn new(max_line_bytes: usize) -> Self {
        NdjsonFramer {
            max_line_bytes,
            line: Vec::new(),
            poisoned: false,
        }
    }

    /// Feeds the next bytes of the stream and calls `on_line` for each line completed by them.
    ///
    /// Returns `Err(Overflow)` when a line exceeds the bound (lines completed earlier in `bytes` have
    /// been delivered); the framer then frees its buffer and rejects every later feed.
    pub fn feed(&mut self, bytes: &[u8], mut on_line: impl FnMut(&[u8])) -> Result<(), Overflow> {
        if self.poisoned {
            return Err(Overflow);
        }
        let result = self.process(bytes, &mut on_line);
        if result.is_err() {
            self.poisoned = true;
            self.line = Vec::new();
        }
        result
    }

    /// The stream ended: a last line without its LF is delivered (NDJSON writers may omit it).
    pub fn finish(&mut self, mut on_line: impl FnMut(&[u8])) {
        if self.poisoned {
            return;
        }
        if let Some(line) = content(&self.line) {
            on_line(line);
        }
        self.line = Vec::new();
    }

    /// What the framer's buffer has allocated (its share of the governor's `event_bytes`).
    pub fn capacity(&self) -> usize {
        self.line.capacity()
    }

    /// Frees the buffer and refuses every later feed (metering of the stream stops).
    pub fn release(&mut self) {
        self.poisoned = true;
        self.line = Vec::new();
    }

    /// Bytes currently held (the unfinished line), for memory accounting in tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn buffered_bytes(&self) -> usize {
        self.line.len()
    }

    fn process<F: FnMut(&[u8])>(
        &mut self, mut bytes: &[u8], on_line: &mut F,
    ) -> Result<(), Overflow> {
        let max = self.max_line_bytes;
        while let Some(pos) = memchr::memchr(b'\n', bytes) {
            let Some((line, rest)) = bytes.split_at_checked(pos) else {
                break; // unreachable: memchr returns an index inside `bytes`
            };
            let rest = rest.get(1..).unwrap_or_default();
            if self.line.is_empty() {
                if line.len() > max {
                    return Err(Overflow);
                }
                if let Some(line) = content(line) {
                    on_line(line);
                }
            } else {
                if self.line.len().saturating_add(line.len()) > max {
                    return Err(Overflow);
                }
                self.line.extend_from_slice(line);
                if let Some(line) = content(&self.line) {
                    on_line(line);
                }
                self.line.clear();
                if self.line.capacity() > SHRINK_ABOVE {
                    self.line.shrink_to(KEEP_CAPACITY);
                }
            }
            bytes = rest;
        }
        if !bytes.is_empty() {
            if self.line.len().saturating_add(bytes.len()) > max {
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

    type Lines = Vec<Vec<u8>>;

    /// Feeds `chunks` in order into a fresh framer, then finishes it; returns the lines and the first error.
    fn run(max: usize, chunks: &[&[u8]]) -> (Lines, Result<(), Overflow>) {
        let mut framer = NdjsonFramer::new(max);
        let mut lines = Vec::new();
        for chunk in chunks {
            let r = framer.feed(chunk, |l| lines.push(l.to_vec()));
            if r.is_err() {
                return (lines, r);
            }
            assert!(framer.buffered_bytes() <= max, "held more than the bound");
        }
        framer.finish(|l| lines.push(l.to_vec()));
        (lines, Ok(()))
    }

    fn lines(chunks: &[&[u8]]) -> Lines {
        let (lines, result) = run(1 << 20, chunks);
        assert_eq!(result, Ok(()));
        lines
    }

    fn no_line(line: &[u8]) {
        panic!("unexpected line {line:?}");
    }

    /// Asserts that `input` gives `expected` however it is cut into one, two, three or n pieces.
    fn assert_split_invariant(input: &[u8], expected: &Lines) {
        assert_eq!(&lines(&[input]), expected, "whole");
        for i in 0..=input.len() {
            let (a, b) = input.split_at(i);
            assert_eq!(&lines(&[a, b]), expected, "split at {i}");
            for j in i..=input.len() {
                let (b, c) = (&input[i..j], &input[j..]);
                assert_eq!(&lines(&[a, b, c]), expected, "split at {i},{j}");
            }
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(&lines(&bytes), expected, "byte at a time");
    }

    #[test]
    fn lines_are_the_same_however_the_stream_is_split() {
        let input: &[u8] =
            b"{\"a\":1}\n\n{\"b\":\"x\\ny\"}\r\n  \r\n\t\n{\"c\":[1,2]}\n{\"d\":null}";
        let expected: Lines = vec![
            b"{\"a\":1}".to_vec(),
            b"{\"b\":\"x\\ny\"}".to_vec(),
            b"{\"c\":[1,2]}".to_vec(),
            b"{\"d\":null}".to_vec(),
        ];
        assert_split_invariant(input, &expected);
    }

    #[test]
    fn ollama_capture_gives_one_line_per_object_however_split() {
        let stream = include_bytes!("../../tests/fixtures/ollama/chat-stream.ndjson");
        let expected: Lines = stream
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        assert!(expected.len() > 5);
        for i in 0..=stream.len() {
            let (a, b) = stream.split_at(i);
            assert_eq!(lines(&[a, b]), expected, "split at {i}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(lines(&bytes), expected, "byte at a time");
    }

    #[test]
    fn line_exactly_at_the_bound_is_accepted_and_one_more_byte_overflows() {
        let input: &[u8] = b"0123456789\n0123456789A\n";
        for i in 0..=input.len() {
            let (a, b) = input.split_at(i);
            let (got, result) = run(10, &[a, b]);
            assert_eq!(result, Err(Overflow), "split at {i}");
            assert!(got.len() <= 1);
            assert_eq!(run(11, &[a, b]).0.len(), 2, "split at {i}");
        }
    }

    #[test]
    fn overlong_line_without_lf_fed_in_pieces_overflows_and_poisons() {
        let mut framer = NdjsonFramer::new(8);
        assert_eq!(framer.feed(b"{\"a\":", no_line), Ok(()));
        assert_eq!(framer.feed(b"123", no_line), Ok(())); // exactly 8
        assert_eq!(framer.feed(b"4", no_line), Err(Overflow));
        assert_eq!((framer.buffered_bytes(), framer.line.capacity()), (0, 0));
        assert_eq!(framer.feed(b"\n{}\n", no_line), Err(Overflow));
        framer.finish(no_line);
    }

    #[test]
    fn unfinished_last_line_is_held_until_finish() {
        let mut framer = NdjsonFramer::new(64);
        framer.feed(b"{\"a\":1}\n{\"b\"", |_| {}).unwrap();
        assert_eq!(framer.buffered_bytes(), 4);
        let mut last = Vec::new();
        framer.finish(|l| last = l.to_vec());
        assert_eq!(last, b"{\"b\"");
        assert_eq!(framer.buffered_bytes(), 0);
    }

    #[test]
    fn large_buffer_shrinks_after_its_line_is_delivered() {
        let mut framer = NdjsonFramer::new(1 << 20);
        let big = [&[b'x'; 100_000][..], b"\n"].concat();
        let mut len = 0;
        for chunk in big.chunks(4096) {
            framer.feed(chunk, |l| len = l.len()).unwrap();
        }
        assert_eq!(len, 100_000);
        assert!(framer.line.capacity() <= SHRINK_ABOVE);
    }
}
