//! WebSocket frames (RFC 6455 §5) read as they pass, one reader per direction, for the realtime meter:
//! fed each read of the relay as it came (any boundary, a byte at a time or many frames at once), it
//! hands on each whole text message, each close frame's status code, and each message it could not
//! read (with a reason). It reads a copy of what is forwarded, never the forwarding: nothing here can
//! hold, alter or cut a byte of the session.
//!
//! Client frames are unmasked for reading only; fragments are joined for reading only; ping and pong are
//! skipped; a binary message is passed over (no realtime event is binary). A message compressed with
//! `permessage-deflate` (RFC 7692, negotiated in the `101`: [`Deflate`]) is inflated for reading into
//! a bounded message. What one reader holds is bounded whatever the peer sends: the header being read,
//! one message of at most [`MAX_MESSAGE`] bytes (a longer one is skipped, `too_large`), a control
//! frame's 125 bytes, and with compression one inflater (a 32 KiB window, which reads every agreed
//! `*_max_window_bits`) and its output buffer.
//!
//! A reader that loses the frames' thread (a frame that breaks the protocol, compressed data it cannot
//! inflate, or a compressed message too large to follow while its context is kept) says so once and
//! reads nothing more of its direction: the session still passes whole, only its metering stops.

mod deflate;

use std::fmt;

pub use deflate::Deflate;
use deflate::Inflater;

/// The longest message kept for reading (its text, inflated): a longer one is skipped and counted.
pub const MAX_MESSAGE: usize = 1 << 20;
/// A control frame's payload bound (RFC 6455 §5.5).
const MAX_CONTROL: usize = 125;

/// What a reader hands on.
#[derive(Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// A whole text message (joined and inflated; not checked to be UTF-8).
    Text(&'a [u8]),
    /// A close frame, with its status code when it has one.
    Close(Option<u16>),
    /// A message that was not read, or the end of reading this direction ([`Skip::lost`]).
    Skipped(Skip),
}

/// Why a message was not read (the `reason` label of the frames skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Longer than [`MAX_MESSAGE`].
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

/// The data message being joined.
#[derive(Default)]
struct Joining {
    /// A message has begun and not ended.
    open: bool,
    text: bool,
    compressed: bool,
    /// Its text went over [`MAX_MESSAGE`]: the rest is not kept.
    too_large: bool,
}

/// One direction's frames (see the module's documentation).
pub struct FrameReader {
    head: [u8; 14],
    have: usize,
    frame: Option<Frame>,
    message: Joining,
    /// The message's payload (inflated), up to [`MAX_MESSAGE`].
    text: Vec<u8>,
    control: Vec<u8>,
    inflater: Option<Inflater>,
    /// The frames' thread is lost: nothing more is read.
    lost: bool,
}

impl FrameReader {
    /// A reader of one direction; `inflate`: that direction's `permessage-deflate`, when agreed.
    pub fn new(inflate: Option<deflate::Direction>) -> Self {
        FrameReader {
            head: [0; 14],
            have: 0,
            frame: None,
            message: Joining::default(),
            text: Vec::new(),
            control: Vec::new(),
            inflater: inflate.map(Inflater::new),
            lost: false,
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
            return self.lose(Skip::Malformed, out);
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
                if rsv1 && self.inflater.is_none() {
                    return false;
                }
                self.message = Joining {
                    open: true,
                    text: frame.opcode == 0x1,
                    compressed: rsv1,
                    too_large: false,
                };
                true
            }
            _ => false,
        }
    }

    /// Payload bytes of the frame being read: unmasked into a scratch piece at a time, then kept.
    fn payload(&mut self, payload: &[u8], out: &mut impl FnMut(Message<'_>)) {
        let Some(frame) = self.frame.as_mut() else {
            return;
        };
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
            let message = &mut self.message;
            let keep = message.text && !message.too_large;
            if frame.opcode >= 0x8 {
                self.control.extend_from_slice(plain);
            } else if let (true, Some(inflater)) = (message.compressed, self.inflater.as_mut()) {
                if let Err(skip) = inflater.inflate(plain, keep.then_some(&mut self.text)) {
                    return self.lose(skip, out);
                }
            } else if keep {
                let room = (MAX_MESSAGE + 1).saturating_sub(self.text.len());
                self.text.extend_from_slice(&plain[..plain.len().min(room)]);
            }
            if self.text.len() > MAX_MESSAGE {
                self.message.too_large = true;
                self.text = Vec::new();
            }
        }
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
        if self.message.compressed {
            let keep = self.message.text && !self.message.too_large;
            if let Some(inflater) = self.inflater.as_mut() {
                if let Err(skip) = inflater.end_message(keep.then_some(&mut self.text)) {
                    return self.lose(skip, out);
                }
            }
            if self.text.len() > MAX_MESSAGE {
                self.message.too_large = true;
            }
        }
        match (self.message.text, self.message.too_large) {
            (true, false) => out(Message::Text(&self.text)),
            (true, true) => out(Message::Skipped(Skip::TooLarge)),
            (false, _) => {}
        }
        self.message = Joining::default();
        self.text.clear();
        // A large message's room is not kept for the rest of the session.
        if self.text.capacity() > 64 << 10 {
            self.text = Vec::new();
        }
    }

    /// The frames' thread is lost: said once, and nothing more is read or held.
    fn lose(&mut self, skip: Skip, out: &mut impl FnMut(Message<'_>)) {
        self.lost = true;
        self.text = Vec::new();
        self.control = Vec::new();
        self.inflater = None;
        self.frame = None;
        out(Message::Skipped(skip));
    }
}

#[cfg(test)]
mod tests;
