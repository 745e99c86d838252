//! WebSocket frames (RFC 6455 §5) read as they pass, one reader per direction, for the realtime meter:
//! fed each read of the relay as it came (any boundary, a byte at a time or many frames at once), it
//! hands on each text message in the pieces it arrives in (unmasked, inflated), each close frame's
//! status code, and each message it could not read (with a reason). It reads a copy of what is
//! forwarded, never the forwarding: nothing here can hold, alter or cut a byte of the session.
//!
//! Client frames are unmasked for reading only; a message's fragments are handed on one after another,
//! never joined; ping and pong are skipped; a binary message is passed over (no realtime event is
//! binary). A message compressed with `permessage-deflate` (RFC 7692, negotiated in the `101`:
//! [`Deflate`]) is inflated for reading a piece at a time. What one reader holds is bounded whatever the
//! peer sends: the header being read, a control frame's 125 bytes, and with compression one inflater
//! (a 32 KiB window, which reads every agreed `*_max_window_bits`, and its piece of output), leased from
//! the governor's `session_meters` budget when the first compressed message comes; the work of inflating
//! is paid from its `inflate` budget, a piece at a time.
//!
//! A reader that loses the frames' thread (a frame that breaks the protocol, compressed data it cannot
//! inflate, a compressed message larger than [`MAX_INFLATED`] while its context is kept) says so once
//! and reads nothing more of its direction. One whose budget is spent says so once
//! ([`Message::Unmetered`]), frees its inflater and from then on only follows the frames, by their
//! headers, for the close frames (no data is unmasked or inflated): the session still passes whole,
//! only the metering of its messages stops.

mod deflate;

use std::fmt;

use deflate::Inflater;
pub use deflate::{Deflate, INFLATER_BYTES, MAX_INFLATED};

use crate::govern::{Budget, Lease, RateUse, Spent};

/// The longest text message read: its bytes past this are passed over unread (`too_large`) and the
/// next message is read (uvicorn's own largest message is 16 MiB).
pub const MAX_MESSAGE: u64 = 16 << 20;
/// A control frame's payload bound (RFC 6455 §5.5).
const MAX_CONTROL: usize = 125;

/// What a reader hands on.
#[derive(Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// A text message begins.
    TextStart,
    /// The next piece of the text message (unmasked and inflated; not checked to be UTF-8).
    Text(&'a [u8]),
    /// The text message ended, all of it read.
    TextEnd,
    /// A close frame, with its status code when it has one.
    Close(Option<u16>),
    /// A message that was not read, or the end of reading this direction ([`Skip::lost`]).
    Skipped(Skip),
    /// A budget was spent: nothing more of this direction is read.
    Unmetered(Budget, Spent),
}

/// Why a message was not read (the `reason` label of the frames skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// A text message longer than [`MAX_MESSAGE`]: ended unread ([`Message::TextEnd`] does not come).
    TooLarge,
    /// A frame that breaks RFC 6455 (a control frame fragmented or over 125 bytes, a continuation
    /// with no message begun, a reserved bit or opcode not agreed): the direction is not read on.
    Malformed,
    /// Compressed data that does not inflate, or a compressed message too large to follow while its
    /// context is kept: the direction is not read on.
    Inflate,
}

impl Skip {
    pub const ALL: [Skip; 3] = [Skip::TooLarge, Skip::Malformed, Skip::Inflate];

    pub fn as_str(self) -> &'static str {
        match self {
            Skip::TooLarge => "too_large",
            Skip::Malformed => "malformed",
            Skip::Inflate => "inflate",
        }
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a reader may spend: the lease its inflater is drawn on (`session_meters`, empty until a
/// compressed message comes), and the work of inflating (`inflate`).
pub struct Allowance {
    pub memory: Lease,
    pub work: RateUse,
}

/// Why a reader stopped reading its direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Skip(Skip),
    Spent(Budget, Spent),
}

/// The frame being read.
#[derive(Default)]
struct Frame {
    fin: bool,
    opcode: u8,
    mask: Option<[u8; 4]>,
    /// Payload bytes read so far (the mask's phase).
    read: u64,
    length: u64,
}

/// The data message being read.
#[derive(Default)]
struct Joining {
    /// A message has begun and not ended.
    open: bool,
    text: bool,
    compressed: bool,
    /// The text read of it so far (inflated).
    read: u64,
    /// Its text went over [`MAX_MESSAGE`]: the rest is passed over.
    too_large: bool,
}

/// One direction's frames (see the module's documentation).
pub struct FrameReader {
    head: [u8; 14],
    have: usize,
    frame: Option<Frame>,
    message: Joining,
    control: Vec<u8>,
    /// That direction's `permessage-deflate`, when agreed.
    inflate: Option<deflate::Direction>,
    /// Made when the first compressed message comes (its memory leased then).
    inflater: Option<Inflater>,
    allowance: Allowance,
    /// The frames' thread is lost: nothing more is read.
    lost: bool,
    /// A budget was spent: only the frames' headers and the close frames are read.
    frames_only: bool,
}

impl FrameReader {
    /// A reader of one direction; `inflate`: that direction's `permessage-deflate`, when agreed;
    /// `allowance`: what it may spend.
    pub fn new(inflate: Option<deflate::Direction>, allowance: Allowance) -> Self {
        FrameReader {
            head: [0; 14],
            have: 0,
            frame: None,
            message: Joining::default(),
            control: Vec::new(),
            inflate,
            inflater: None,
            allowance,
            lost: false,
            frames_only: false,
        }
    }

    /// Whether the reader gave up on its direction.
    pub fn lost(&self) -> bool {
        self.lost
    }

    /// Reads `bytes`, the next of the direction, handing each message read to `out`.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut impl FnMut(Message<'_>)) {
        while !bytes.is_empty() && !self.lost {
            match self.frame.as_mut() {
                Some(frame) if frame.read < frame.length => {
                    let left = frame.length - frame.read;
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(bytes.len());
                    let (payload, rest) = bytes.split_at(n);
                    bytes = rest;
                    self.payload(payload, out);
                }
                Some(_) => self.end_frame(out),
                None => {
                    self.head[self.have] = bytes[0];
                    self.have += 1;
                    bytes = &bytes[1..];
                    self.header(out);
                }
            }
        }
        // A frame whose payload is all read ends now, not with the next read's first byte.
        if self.frame.as_ref().is_some_and(|f| f.read == f.length) && !self.lost {
            self.end_frame(out);
        }
    }

    /// The header byte just read: the frame begins once its header is whole.
    fn header(&mut self, out: &mut impl FnMut(Message<'_>)) {
        if self.have < 2 {
            return;
        }
        let (first, second) = (self.head[0], self.head[1]);
        let extended = match second & 0x7f {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let masked = second & 0x80 != 0;
        let need = 2 + extended + if masked { 4 } else { 0 };
        if self.have < need {
            return;
        }
        let length = match extended {
            0 => u64::from(second & 0x7f),
            _ => (self.head[2..2 + extended])
                .iter()
                .fold(0, |n, &b| (n << 8) | u64::from(b)),
        };
        let mask = masked.then(|| {
            let at = 2 + extended;
            [
                self.head[at],
                self.head[at + 1],
                self.head[at + 2],
                self.head[at + 3],
            ]
        });
        self.have = 0;
        let frame = Frame {
            fin: first & 0x80 != 0,
            opcode: first & 0x0f,
            mask,
            read: 0,
            length,
        };
        let rsv1 = first & 0x40 != 0;
        if first & 0x30 != 0 || !self.begin(&frame, rsv1) {
            return self.lose(Stop::Skip(Skip::Malformed), out);
        }
        self.frame = Some(frame);
    }

    /// Whether `frame` may begin here (RFC 6455 §5.4, §5.5; RFC 7692 §6.1); a data frame that begins a
    /// message opens it.
    fn begin(&mut self, frame: &Frame, rsv1: bool) -> bool {
        match frame.opcode {
            0x8..=0xa => frame.fin && frame.length <= MAX_CONTROL as u64 && !rsv1,
            0x0 => self.message.open && !rsv1,
            0x1 | 0x2 if !self.message.open => {
                if rsv1 && self.inflate.is_none() {
                    return false;
                }
                self.message = Joining {
                    open: true,
                    text: frame.opcode == 0x1,
                    compressed: rsv1,
                    read: 0,
                    too_large: false,
                };
                true
            }
            _ => false,
        }
    }

    /// Payload bytes of the frame being read: unmasked into a scratch piece at a time, inflated when
    /// compressed, and each piece of a text message handed on.
    fn payload(&mut self, payload: &[u8], out: &mut impl FnMut(Message<'_>)) {
        let Some(frame) = self.frame.as_mut() else {
            return;
        };
        if self.frames_only && frame.opcode < 0x8 {
            frame.read += payload.len() as u64;
            return;
        }
        let end = frame.read + payload.len() as u64;
        let mut piece = [0u8; 1024];
        for chunk in payload.chunks(piece.len()) {
            let plain = match frame.mask {
                Some(mask) => {
                    let phase = (frame.read % 4) as usize;
                    for (i, (to, from)) in piece.iter_mut().zip(chunk).enumerate() {
                        *to = from ^ mask[(phase + i) % 4];
                    }
                    &piece[..chunk.len()]
                }
                None => chunk,
            };
            frame.read += chunk.len() as u64;
            if frame.opcode >= 0x8 {
                self.control.extend_from_slice(plain);
                continue;
            }
            let message = &mut self.message;
            let read = if message.compressed {
                match Self::inflater(&mut self.inflater, self.inflate, &mut self.allowance) {
                    Ok(inflater) => {
                        let work = &mut self.allowance.work;
                        inflater.inflate(plain, work, &mut |text| Self::text(message, text, out))
                    }
                    Err(stop) => Err(stop),
                }
            } else {
                Self::text(message, plain, out);
                Ok(())
            };
            if let Err(stop) = read {
                frame.read = end;
                return self.lose(stop, out);
            }
        }
    }

    /// The inflater, made (and its memory leased) when the first compressed message comes.
    fn inflater<'a>(
        inflater: &'a mut Option<Inflater>, inflate: Option<deflate::Direction>,
        allowance: &mut Allowance,
    ) -> Result<&'a mut Inflater, Stop> {
        let made = match (inflater.take(), inflate) {
            (Some(made), _) => made,
            // `begin` lets no compressed frame through without an agreed direction.
            (None, None) => return Err(Stop::Skip(Skip::Malformed)),
            (None, Some(direction)) => {
                let leased = allowance.memory.grow(INFLATER_BYTES);
                leased.map_err(|spent| Stop::Spent(Budget::SessionMeters, spent))?;
                Inflater::new(direction)
            }
        };
        Ok(inflater.insert(made))
    }

    /// A piece of a message's (inflated) payload: handed on when it is a text message still read.
    fn text(message: &mut Joining, text: &[u8], out: &mut impl FnMut(Message<'_>)) {
        if !message.text || message.too_large || text.is_empty() {
            return;
        }
        if message.read == 0 {
            out(Message::TextStart);
        }
        message.read += text.len() as u64;
        if message.read > MAX_MESSAGE {
            message.too_large = true;
            out(Message::Skipped(Skip::TooLarge));
            return;
        }
        out(Message::Text(text));
    }

    /// The frame's payload is all read: a control frame is read, a message's last frame ends it.
    fn end_frame(&mut self, out: &mut impl FnMut(Message<'_>)) {
        let Some(frame) = self.frame.take() else {
            return;
        };
        if frame.opcode >= 0x8 {
            if frame.opcode == 0x8 {
                let code = (self.control.len() >= 2)
                    .then(|| u16::from_be_bytes([self.control[0], self.control[1]]));
                out(Message::Close(code));
            }
            self.control.clear();
            return;
        }
        if !frame.fin {
            return;
        }
        if self.frames_only {
            self.message = Joining::default();
            return;
        }
        if self.message.compressed {
            if let Some(inflater) = self.inflater.as_mut() {
                let (message, work) = (&mut self.message, &mut self.allowance.work);
                let ended = inflater.end_message(work, &mut |text| Self::text(message, text, out));
                if let Err(stop) = ended {
                    return self.lose(stop, out);
                }
            }
        }
        let message = std::mem::take(&mut self.message);
        if message.text && !message.too_large {
            if message.read == 0 {
                out(Message::TextStart);
            }
            out(Message::TextEnd);
        }
    }

    /// The frames' thread is lost (nothing more is read or held), or a budget spent (only the frames
    /// are followed, the inflater freed): said once.
    fn lose(&mut self, stop: Stop, out: &mut impl FnMut(Message<'_>)) {
        self.inflater = None;
        self.allowance.memory.shrink(u64::MAX);
        match stop {
            Stop::Skip(skip) => {
                self.lost = true;
                self.control = Vec::new();
                self.frame = None;
                out(Message::Skipped(skip));
            }
            Stop::Spent(budget, spent) => {
                self.frames_only = true;
                out(Message::Unmetered(budget, spent));
            }
        }
    }

    /// Stops reading messages (a budget elsewhere was spent): only the frames are followed from now.
    pub fn frames_only(&mut self) {
        self.frames_only = true;
        self.inflater = None;
        self.allowance.memory.shrink(u64::MAX);
    }
}

#[cfg(test)]
mod tests;
