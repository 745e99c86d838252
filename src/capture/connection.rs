//! One TCP connection to the server, as the capture follows it: its two streams put back in order
//! (`stream.rs`), their bytes handed to its HTTP/1.1 reader (`http.rs`), and its ends: the FIN of each
//! side once every byte before it was read, a RST at once.
//!
//! A connection seen from its SYN is followed from its first byte. One met mid-stream (it began before
//! the capture did) is joined at a request boundary: the client's stream from the first segment that
//! begins with a request line's method, the server's from the first segment after that which begins
//! with `HTTP/1.`; what came before is not read, and the connection is counted (`mid_stream`) once. A
//! head that does not parse where the join put it ends the reading of the connection (`not_http`), so a
//! wrong join is never a wrong figure.
//!
//! When bytes are lost (or would pass its lease), the exchanges in progress are abandoned and the
//! connection is joined again as one met mid-stream: a kept-alive connection that lost one packet is
//! metered again from its next request. When it is not HTTP/1.1 (or upgraded to another protocol), its
//! reading stops for good: it is only watched for its end, holding nothing. Either way it is counted.

use tokio::time::Instant;

use super::budget::Lease;
use super::http::{Http, Shared, Side, Stamp, Stop};
use super::packet::Segment;
use super::stream::Stream;
use crate::record::metrics::{CaptureCounters, Unmetered};
use crate::record::outcome::End;

/// The request methods a segment of a connection met mid-stream may begin with to be joined there.
const METHODS: [&[u8]; 7] = [
    b"GET ",
    b"POST ",
    b"PUT ",
    b"DELETE ",
    b"HEAD ",
    b"OPTIONS ",
    b"PATCH ",
];

/// Whether a connection is still there after a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    Yes,
    /// Both sides' FIN were read, or one side reset it.
    Closed,
}

pub struct Connection {
    /// Client to server, server to client.
    streams: [Stream; 2],
    /// Whether each side's FIN was read in order.
    ended: [bool; 2],
    http: Http,
    lease: Lease,
    /// The client's SYN, to tell a retransmitted one from a new connection on the same ports.
    syn: Option<u32>,
    /// Why its reading stopped, once it did.
    stopped: Option<Stop>,
    /// The last packet's time.
    pub last: Instant,
}

impl Connection {
    /// A connection whose first packet seen was `first`, from `side`. Met mid-stream (not a client's
    /// SYN), it is counted so.
    pub fn new(
        side: Side, first: &Segment<'_>, lease: Lease, at: Instant, counters: &CaptureCounters,
    ) -> Self {
        let syn = (side == Side::Client && first.syn && first.ack.is_none()).then_some(first.seq);
        if syn.is_none() {
            counters.unmetered(Unmetered::MidStream);
        }
        Connection {
            streams: [Stream::default(), Stream::default()],
            ended: [false; 2],
            http: Http::default(),
            lease,
            syn,
            stopped: None,
            last: at,
        }
    }

    /// Whether `segment`, a client's SYN, opens a new connection on these ports (not a retransmission).
    pub fn reopened_by(&self, segment: &Segment<'_>) -> bool {
        segment.syn && segment.ack.is_none() && self.syn != Some(segment.seq)
    }

    /// A packet of this connection, from `side`.
    pub fn packet(
        &mut self, side: Side, segment: &Segment<'_>, stamp: Stamp, shared: &Shared,
        counters: &CaptureCounters,
    ) -> Open {
        let at = stamp.at;
        self.last = at;
        if segment.rst {
            self.http.reset(side, at);
            return Open::Closed;
        }
        let (this, other) = match side {
            Side::Client => (0, 1),
            Side::Server => (1, 0),
        };
        if segment.syn {
            if !self.streams[this].is_followed() {
                self.streams[this].follow_from(segment.seq.wrapping_add(1));
            }
            return Open::Yes;
        }
        if let Some(ack) = segment.ack {
            self.streams[other].acknowledged(ack, at);
        }
        if self.stopped.is_none() && !self.streams[this].is_followed() {
            self.join(side, segment);
        }
        if self.stopped.is_none() && self.streams[this].is_followed() {
            if let Err(stop) = self.read(this, side, segment, stamp, shared, counters) {
                self.stop(stop, counters);
            }
        }
        if segment.fin && (self.stopped.is_some() || !self.streams[this].is_followed()) {
            self.ended[this] = true;
        }
        if self.stopped.is_none() && self.streams.iter().any(|s| s.lost(at)) {
            self.stop(Unmetered::LostSegment, counters);
        }
        match self.ended {
            [true, true] => Open::Closed,
            _ => Open::Yes,
        }
    }

    /// Joins `side`'s stream of a connection met mid-stream where `segment` begins a message.
    fn join(&mut self, side: Side, segment: &Segment<'_>) {
        let payload = segment.payload;
        let begins = match side {
            Side::Client => METHODS.iter().any(|m| payload.starts_with(m)),
            Side::Server => self.http.awaits_answer() && payload.starts_with(b"HTTP/1."),
        };
        if begins {
            self.streams[side as usize].follow_from(segment.seq);
        }
    }

    fn read(
        &mut self, this: usize, side: Side, segment: &Segment<'_>, stamp: Stamp, shared: &Shared,
        counters: &CaptureCounters,
    ) -> Result<(), Stop> {
        let stream = &mut self.streams[this];
        let placed = stream.segment(segment.seq, segment.payload, segment.fin, &mut self.lease);
        let (from, placed) = placed.map_err(|_| Unmetered::Buffer)?;
        if let Some(placed) = placed {
            counters.placed(placed);
        }
        if let Some(from) = from {
            let bytes = &segment.payload[from..];
            self.http
                .bytes(side, bytes, stamp, shared, &mut self.lease)?;
            while let Some(more) = self.streams[this].pop(&mut self.lease) {
                self.http
                    .bytes(side, &more, stamp, shared, &mut self.lease)?;
            }
        }
        if self.streams[this].finished() && !self.ended[this] {
            self.ended[this] = true;
            self.http.fin(side, stamp.at);
        }
        Ok(())
    }

    /// Stops reading the connection for `why`: its exchanges abandoned, its bytes given back. After
    /// bytes lost or over the lease it is joined again at its next request; otherwise never read again.
    fn stop(&mut self, why: Stop, counters: &CaptureCounters) {
        self.http.abandon(&mut self.lease);
        self.http = Http::default();
        self.streams = [Stream::default(), Stream::default()];
        self.lease.shrink(self.lease.held());
        counters.unmetered(why);
        if !matches!(why, Unmetered::LostSegment | Unmetered::Buffer) {
            self.stopped = Some(why);
        }
    }

    /// Checks the connection at `now` without a packet: a loss an acknowledgement showed is counted
    /// and its reading stopped.
    pub fn check(&mut self, now: Instant, counters: &CaptureCounters) {
        if self.stopped.is_none() && self.streams.iter().any(|s| s.lost(now)) {
            self.stop(Unmetered::LostSegment, counters);
        }
    }

    /// The connection is forgotten at `now` (idle, or the capture stops): every request not yet
    /// answered whole ends as `end`. One whose FIN was seen with bytes still missing before it lost
    /// them.
    pub fn forget(mut self, end: End, now: Instant, counters: &CaptureCounters) {
        if self.stopped.is_none() && self.streams.iter().any(Stream::fin_ahead) {
            self.stop(Unmetered::LostSegment, counters);
        }
        self.http.end_all(end, now);
    }

    /// Replaced by a new connection on the same ports: what it had not read whole is lost.
    pub fn replaced(mut self, counters: &CaptureCounters) {
        if self.stopped.is_none() && self.http.awaits_answer() {
            self.stop(Unmetered::LostSegment, counters);
        }
    }
}
