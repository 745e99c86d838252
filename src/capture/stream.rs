//! One direction of a TCP connection put back in order. Segments come as the capture saw them:
//! reordered, duplicated (retransmissions), overlapping, or never (a packet the kernel dropped or cut
//! before the capture read it). The stream hands on each byte once, in order: a segment that is next is
//! handed on at once; one that is ahead is held (copied, within the connection's [`Lease`]) until the
//! bytes before it come, and handed on then, at the time of the packet that completed the run, which
//! is when a reader of the socket would have had it; bytes already handed on are passed over.
//!
//! A hole the network made is filled by the sender's retransmission, which the capture sees. A hole only
//! the capture has (the receiver got the bytes) is never filled: the receiver's acknowledgement passes
//! it. [`Stream::lost`] says so once an acknowledgement has passed the hole for [`REORDER_WAIT`] (the
//! data may be captured a moment after the acknowledgement of it, on another CPU); so does a hole the
//! lease cannot hold the segments after. What lies beyond a lost hole cannot be read as HTTP: the
//! connection is not metered from there on.
//!
//! Positions are 64-bit offsets from where the stream was first followed, each segment's 32-bit
//! sequence number placed within 2 GiB of the next byte expected, so the sequence numbers' wrap is no
//! event.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::budget::Lease;
use crate::record::metrics::Placed;

/// How long an acknowledgement may pass bytes the capture has not seen before they count as lost.
pub const REORDER_WAIT: Duration = Duration::from_millis(200);

/// The lease could not hold a segment that came ahead of a hole: the stream cannot be read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

#[derive(Default)]
pub struct Stream {
    /// The next byte expected: its position and sequence number; `None` until the stream is followed.
    next: Option<(u64, u32)>,
    /// Segments ahead of `next`, by position.
    held: BTreeMap<u64, Vec<u8>>,
    /// The position of the sender's FIN, once seen.
    fin: Option<u64>,
    /// The furthest the receiver acknowledged beyond `next`, and since when a hole lay before it.
    acked: Option<(u64, Instant)>,
}

impl Stream {
    /// Follows the stream from sequence number `seq` (the byte after a SYN, or where a connection met
    /// mid-stream is joined).
    pub fn follow_from(&mut self, seq: u32) {
        self.next = Some((0, seq));
    }

    pub fn is_followed(&self) -> bool {
        self.next.is_some()
    }

    /// The position of sequence number `seq`, if it lies within 2 GiB of the next byte expected.
    fn position(&self, seq: u32) -> Option<u64> {
        let (at, next) = self.next?;
        let delta = i64::from(seq.wrapping_sub(next) as i32);
        u64::try_from(at as i64 + delta).ok()
    }

    /// A segment of this direction: `Ok(Some(from))` when `payload[from..]` is the next bytes (hand them
    /// on, then [`Stream::pop`] what they completed); `Ok(None)` when nothing is to be handed on now
    /// (held, or already handed on). The second value says how it was placed (`None`: no data).
    pub fn segment(
        &mut self, seq: u32, payload: &[u8], fin: bool, lease: &mut Lease,
    ) -> Result<(Option<usize>, Option<Placed>), Full> {
        let Some(start) = self.position(seq) else {
            return Ok((None, None));
        };
        let end = start + payload.len() as u64;
        if fin {
            self.fin.get_or_insert(end);
        }
        if payload.is_empty() {
            return Ok((None, None));
        }
        let (next, _) = self.next.unwrap_or_default();
        if end <= next {
            return Ok((None, Some(Placed::Duplicate)));
        }
        if start <= next {
            let from = (next - start) as usize;
            self.advance(payload.len() - from);
            let placed = if from == 0 {
                Placed::InOrder
            } else {
                Placed::Overlap
            };
            return Ok((Some(from), Some(placed)));
        }
        if self
            .held
            .get(&start)
            .is_some_and(|held| held.len() >= payload.len())
        {
            return Ok((None, Some(Placed::Duplicate)));
        }
        let replaced = self.held.get(&start).map_or(0, Vec::len);
        if !lease.grow(payload.len() - replaced) {
            return Err(Full);
        }
        self.held.insert(start, payload.to_vec());
        Ok((None, Some(Placed::OutOfOrder)))
    }

    fn advance(&mut self, bytes: usize) {
        if let Some((at, seq)) = &mut self.next {
            *at += bytes as u64;
            *seq = seq.wrapping_add(bytes as u32);
        }
        if self
            .acked
            .is_some_and(|(acked, _)| acked <= self.next.unwrap_or_default().0)
        {
            self.acked = None;
        }
    }

    /// The next held bytes that the stream now reaches, trimmed of what was handed on already; their
    /// room goes back to `lease`.
    pub fn pop(&mut self, lease: &mut Lease) -> Option<Vec<u8>> {
        loop {
            let (next, _) = self.next?;
            let entry = self.held.first_entry()?;
            if *entry.key() > next {
                return None;
            }
            let start = *entry.key();
            let mut bytes = entry.remove();
            lease.shrink(bytes.len());
            let end = start + bytes.len() as u64;
            if end <= next {
                continue;
            }
            bytes.drain(..(next - start) as usize);
            self.advance(bytes.len());
            return Some(bytes);
        }
    }

    /// The receiver acknowledged up to sequence number `ack` at `at`.
    pub fn acknowledged(&mut self, ack: u32, at: Instant) {
        let (Some(acked), Some((next, _))) = (self.position(ack), self.next) else {
            return;
        };
        // The FIN takes a sequence number of its own.
        let read = next + u64::from(self.fin == Some(next));
        if acked > read {
            let since = self.acked.map_or(at, |(_, since)| since);
            self.acked = Some((acked.max(self.acked.map_or(0, |(a, _)| a)), since));
        }
    }

    /// Whether bytes the receiver has were never seen, for [`REORDER_WAIT`] by `now`.
    pub fn lost(&self, now: Instant) -> bool {
        self.acked
            .is_some_and(|(_, since)| now.saturating_duration_since(since) >= REORDER_WAIT)
    }

    /// Whether every byte up to the sender's FIN has been handed on.
    pub fn finished(&self) -> bool {
        matches!((self.fin, self.next), (Some(fin), Some((next, _))) if next >= fin)
    }

    /// Whether a FIN was seen with bytes before it not yet handed on.
    pub fn fin_ahead(&self) -> bool {
        self.fin.is_some() && !self.finished()
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::capture::budget::Budget;

    fn lease(cap: usize) -> Lease {
        Budget::plain(cap, cap).lease([127, 0, 0, 1].into())
    }

    /// Feeds `segments` (sequence number, bytes) and returns what was handed on, in order.
    fn read(stream: &mut Stream, lease: &mut Lease, segments: &[(u32, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (seq, bytes) in segments {
            if let Ok((Some(from), _)) = stream.segment(*seq, bytes, false, lease) {
                out.extend_from_slice(&bytes[from..]);
                while let Some(more) = stream.pop(lease) {
                    out.extend_from_slice(&more);
                }
            }
        }
        out
    }

    #[test]
    fn reordered_duplicated_and_overlapping_segments_come_out_once_in_order() {
        let text = b"the quick brown fox jumps over the lazy dog";
        let at = |i: usize| 1000 + i as u32;
        let cases: Vec<Vec<(u32, &[u8])>> = vec![
            vec![(at(0), &text[..10]), (at(10), &text[10..])],
            vec![
                (at(10), &text[10..20]),
                (at(0), &text[..10]),
                (at(20), &text[20..]),
            ],
            vec![
                (at(0), &text[..10]),
                (at(0), &text[..10]),
                (at(5), &text[5..30]),
                (at(30), &text[30..]),
            ],
            vec![
                (at(30), &text[30..]),
                (at(20), &text[20..30]),
                (at(20), &text[20..25]),
                (at(0), &text[..20]),
            ],
            vec![
                (at(0), &text[..4]),
                (at(8), &text[8..12]),
                (at(8), &text[8..]),
                (at(2), &text[2..9]),
            ],
        ];
        for segments in cases {
            let mut stream = Stream::default();
            stream.follow_from(1000);
            let mut lease = lease(1 << 10);
            assert_eq!(
                read(&mut stream, &mut lease, &segments),
                text,
                "{segments:?}"
            );
            assert_eq!(lease.held(), 0);
        }
    }

    #[test]
    fn each_segment_says_how_it_was_placed() {
        let mut stream = Stream::default();
        stream.follow_from(0);
        let mut lease = lease(1 << 10);
        let mut placed =
            |seq, bytes: &[u8]| stream.segment(seq, bytes, false, &mut lease).unwrap().1;
        assert_eq!(placed(0, b"abcd"), Some(Placed::InOrder));
        assert_eq!(placed(8, b"ijkl"), Some(Placed::OutOfOrder));
        assert_eq!(placed(0, b"ab"), Some(Placed::Duplicate));
        assert_eq!(placed(2, b"cdef"), Some(Placed::Overlap));
        assert_eq!(placed(8, b"ij"), Some(Placed::Duplicate));
        assert_eq!(placed(6, b""), None);
    }

    #[test]
    fn sequence_numbers_wrap_without_a_hole() {
        let mut stream = Stream::default();
        stream.follow_from(u32::MAX - 2);
        let mut lease = lease(1 << 10);
        let got = read(
            &mut stream,
            &mut lease,
            &[(0, b"def"), (u32::MAX - 2, b"abc")],
        );
        assert_eq!(got, b"abcdef");
    }

    #[test]
    fn segments_ahead_of_a_hole_beyond_the_lease_break_the_stream() {
        let mut stream = Stream::default();
        stream.follow_from(0);
        let mut lease = lease(10);
        assert!(stream.segment(5, &[1; 8], false, &mut lease).is_ok());
        assert_eq!(stream.segment(20, &[1; 8], false, &mut lease), Err(Full));
    }

    #[test]
    fn an_acknowledgement_past_a_hole_for_the_reorder_wait_is_a_loss() {
        let t0 = Instant::now();
        let mut stream = Stream::default();
        stream.follow_from(0);
        let mut lease = lease(1 << 10);
        read(&mut stream, &mut lease, &[(0, b"abc")]);
        stream.acknowledged(3, t0);
        assert!(!stream.lost(t0 + REORDER_WAIT * 10), "all read");
        stream.acknowledged(10, t0);
        assert!(!stream.lost(t0 + REORDER_WAIT / 2));
        assert!(stream.lost(t0 + REORDER_WAIT));
        // The bytes come after all (captured late): no loss.
        read(&mut stream, &mut lease, &[(3, b"defghij")]);
        assert!(!stream.lost(t0 + REORDER_WAIT * 10));
        // The FIN's own sequence number is no hole.
        stream.segment(10, b"", true, &mut lease).unwrap();
        assert!(stream.finished());
        stream.acknowledged(11, t0);
        assert!(!stream.lost(t0 + REORDER_WAIT * 10));
    }
}
