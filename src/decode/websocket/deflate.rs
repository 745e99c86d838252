//! `permessage-deflate` (RFC 7692) as the reader needs it: what the upstream's `101` agreed
//! ([`Deflate::agreed`]), and one inflater per direction that reads each compressed message into the
//! reader's bounded text.
//!
//! Each side compresses what it sends with its own window (`server_max_window_bits` for the upstream's
//! messages, `client_max_window_bits` for the client's; 8 to 15 bits, 15 when not said). A raw inflater
//! with a 32 KiB window (flate2's Rust backend always has one) reads a stream made with any smaller
//! window, so the bits are checked, not used. `*_no_context_takeover` says that side starts each
//! message afresh: its inflater is reset after each one; otherwise the context runs on across messages,
//! so a direction whose message could not be inflated cannot be read on.

use flate2::{Decompress, FlushDecompress, Status};

use super::{Skip, Stop};
use crate::govern::{Budget, RateUse};

/// The most a single compressed message is inflated before the direction is given up (the largest
/// message uvicorn accepts, 16 MiB): following a larger one, even to drop it, is not worth its work.
pub const MAX_INFLATED: u64 = 16 << 20;
/// What one inflater holds, leased from `session_meters`: miniz_oxide's state (its 32 KiB window and
/// its tables, about 43 KiB) and the piece of output it inflates into.
pub const INFLATER_BYTES: u64 = 48 << 10;
/// The piece of output inflated at a time, and paid for before the next.
const PIECE: usize = 4 << 10;
/// The tail each message's compressed data lost (RFC 7692 §7.2.1).
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// What the `101` agreed for one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Direction {
    /// The sender's window, in bits (8 to 15).
    pub window_bits: u8,
    /// The sender starts each message afresh.
    pub no_context_takeover: bool,
}

/// `permessage-deflate` as the upstream's `101` agreed it, per direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deflate {
    /// The client's messages.
    pub client: Direction,
    /// The upstream's messages.
    pub server: Direction,
}

impl Deflate {
    /// What a `101`'s `Sec-WebSocket-Extensions` values agreed: `None` when they name no
    /// `permessage-deflate`, or one with a parameter RFC 7692 does not allow (the client fails such a
    /// session itself).
    pub fn agreed<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<Deflate> {
        let offer = (values.into_iter())
            .flat_map(|value| value.split(','))
            .find(|ext| ext.split(';').next().map(str::trim) == Some("permessage-deflate"))?;
        let fresh = Direction {
            window_bits: 15,
            no_context_takeover: false,
        };
        let mut agreed = Deflate {
            client: fresh,
            server: fresh,
        };
        for param in offer.split(';').skip(1) {
            let (name, value) = match param.split_once('=') {
                Some((name, value)) => (name.trim(), Some(value.trim().trim_matches('"'))),
                None => (param.trim(), None),
            };
            let bits = || {
                value
                    .and_then(|v| v.parse::<u8>().ok())
                    .filter(|b| (8..=15).contains(b))
            };
            match name {
                "server_no_context_takeover" => agreed.server.no_context_takeover = true,
                "client_no_context_takeover" => agreed.client.no_context_takeover = true,
                "server_max_window_bits" => agreed.server.window_bits = bits()?,
                "client_max_window_bits" => {
                    agreed.client.window_bits = value.map_or(Some(15), |_| bits())?
                }
                _ => return None,
            }
        }
        Some(agreed)
    }
}

/// One direction's inflater.
pub(super) struct Inflater {
    inflate: Box<Decompress>,
    fresh_each_message: bool,
    /// Bytes inflated of the message being read.
    inflated: u64,
    /// The sender ended its deflate stream (a final block): the next message starts a new one.
    stream_ended: bool,
    out: Box<[u8; PIECE]>,
}

impl Inflater {
    pub(super) fn new(direction: Direction) -> Self {
        Inflater {
            inflate: Box::new(Decompress::new(false)),
            fresh_each_message: direction.no_context_takeover,
            inflated: 0,
            stream_ended: false,
            out: Box::new([0; PIECE]),
        }
    }

    /// Inflates `input`, the next compressed bytes of a message, handing each piece of output to
    /// `text` once `work` paid for it. A message inflated past [`MAX_INFLATED`], data that does not
    /// inflate, or work refused: the direction is given up.
    pub(super) fn inflate(
        &mut self, mut input: &[u8], work: &mut RateUse, text: &mut impl FnMut(&[u8]),
    ) -> Result<(), Stop> {
        loop {
            let (before_in, before_out) = (self.inflate.total_in(), self.inflate.total_out());
            let status = self
                .inflate
                .decompress(input, &mut self.out[..], FlushDecompress::None);
            let read = (self.inflate.total_in() - before_in) as usize;
            let made = (self.inflate.total_out() - before_out) as usize;
            input = &input[read..];
            self.inflated += made as u64;
            if self.inflated > MAX_INFLATED {
                return Err(Stop::Skip(Skip::Inflate));
            }
            // Paid for, even when it is not read (a binary message keeps the context too).
            if let Err(spent) = work.spend(made as u64 + read as u64) {
                return Err(Stop::Spent(Budget::Inflate, spent));
            }
            text(&self.out[..made]);
            match status {
                Err(_) => return Err(Stop::Skip(Skip::Inflate)),
                // A final block ends the sender's stream: nothing may follow it in this context.
                Ok(Status::StreamEnd) => {
                    self.stream_ended = true;
                    return Ok(());
                }
                Ok(_) if made == self.out.len() => continue,
                Ok(_) if input.is_empty() || (read == 0 && made == 0) => return Ok(()),
                Ok(_) => continue,
            }
        }
    }

    /// The message's compressed data ended: its lost tail is inflated, and the context reset when the
    /// sender starts each message afresh.
    pub(super) fn end_message(
        &mut self, work: &mut RateUse, text: &mut impl FnMut(&[u8]),
    ) -> Result<(), Stop> {
        let ended = self.inflate(&TAIL, work, text);
        self.inflated = 0;
        if self.fresh_each_message || std::mem::take(&mut self.stream_ended) {
            self.inflate.reset(false);
        }
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_101s_parameters_are_read_per_direction() {
        let uvicorn = "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12";
        let agreed = Deflate::agreed([uvicorn]).expect("agreed");
        assert_eq!(agreed.client.window_bits, 12);
        assert_eq!(agreed.server.window_bits, 12);
        assert!(!agreed.client.no_context_takeover && !agreed.server.no_context_takeover);
        let fresh =
            "x-other, permessage-deflate;server_no_context_takeover; client_no_context_takeover";
        let agreed = Deflate::agreed(["foo", fresh]).expect("agreed");
        assert!(agreed.client.no_context_takeover && agreed.server.no_context_takeover);
        assert_eq!(agreed.server.window_bits, 15);
        assert_eq!(Deflate::agreed(["x-webkit-deflate-frame"]), None);
        assert_eq!(
            Deflate::agreed(["permessage-deflate; server_max_window_bits=7"]),
            None
        );
        assert_eq!(Deflate::agreed(["permessage-deflate; mystery"]), None);
        assert_eq!(Deflate::agreed(std::iter::empty()), None);
    }
}
