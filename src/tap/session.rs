//! An upgraded (WebSocket) session's bytes, relayed both ways at once and unchanged: what one side's read
//! brought is written to the other side as it is, before that side is read again, so nothing is re-cut,
//! held back or buffered beyond one read per direction. Each read is handed to a [`Watch`] before its
//! bytes are written (a meter of the session's frames reads them there; it must not wait); a WebSocket
//! frame's header is followed per direction ([`FrameEdge`]), only to know where a frame ends.
//!
//! A side that ends its half (end of file) has the other side's write half shut down after what it sent
//! is written and flushed, so a half-close passes and the other direction runs on. The session ends
//! when both directions have ended, when either side breaks (an error: both connections are dropped,
//! which closes them), after `timeouts.session_idle` with no byte either way, or at a shutdown's cut.
//! At the cut each side that is between frames, with nothing of the other side's left to write, is
//! sent a close frame, 1001 "going away" (masked towards the upstream, as a client's must be); a side
//! in the middle of a frame is not, since a frame cannot be cut into. Then both write halves are shut
//! and what the sides still send is read and dropped for at most [`CUT_SETTLE`], so the close reaches
//! them before the connections close (a socket closed with unread bytes sends a reset, which may
//! destroy what was written before it).

use std::future::{poll_fn, Future};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;

/// Each direction's buffer: one read's worth.
const BUFFER: usize = 16 << 10;
/// Reads one direction may pass in one poll before the other gets its turn.
const READS_PER_POLL: usize = 16;
/// The work (bytes read, and inflated by the watch) one direction may do in one poll before the task
/// yields to the runtime's other tasks: what a client's frames cost is bounded per poll by bytes, not
/// by reads.
pub const WORK_PER_POLL: u64 = 256 << 10;
/// How long the close at a shutdown's cut may take: the close frames written, and the sides' last bytes
/// read.
pub const CUT_SETTLE: Duration = Duration::from_millis(500);
/// The close frame's status and reason: 1001, "going away" (RFC 6455 §7.4.1).
const GOING_AWAY: [u8; 12] = *b"\x03\xe9going away";

/// Which side of the session bytes came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Client,
    Upstream,
}

/// What reads a session's bytes as they pass: each read, as it came, before its bytes are written on.
/// It is called in the relay's task and must not wait; it says how much work the read cost it (bytes
/// read and inflated), which the relay counts against [`WORK_PER_POLL`].
pub trait Watch: Send {
    fn read(&mut self, from: Side, bytes: &[u8], at: Instant) -> u64;

    /// `from` ended its half (end of file), at `at`.
    fn ended(&mut self, _from: Side, _at: Instant) {}
}

/// No watch: the session's bytes are relayed only.
impl Watch for () {
    fn read(&mut self, _: Side, bytes: &[u8], _: Instant) -> u64 {
        bytes.len() as u64
    }
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Both sides ended their halves.
    Closed,
    /// A side's connection broke (a reset, a write that failed).
    Broke(Side),
    /// No byte either way for `timeouts.session_idle`.
    Idle,
    /// A shutdown's grace period ran out; the sides between frames were sent a close frame 1001.
    Cut,
}

/// Relays the session until it ends (see the module's documentation); `cut` completes at a shutdown's
/// cut.
pub async fn relay<C, U, W>(
    mut client: C, mut upstream: U, idle: Duration, cut: impl Future<Output = ()>, watch: &mut W,
) -> Ended
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
    W: Watch,
{
    let mut up = Pipe::new(Side::Client);
    let mut down = Pipe::new(Side::Upstream);
    let mut last = Instant::now();
    let timer = tokio::time::sleep_until(last + idle);
    tokio::pin!(timer, cut);
    let ended = poll_fn(|cx| {
        let mut moved = false;
        let sent = up.poll_pass(cx, &mut client, &mut upstream, watch, &mut moved);
        let received = down.poll_pass(cx, &mut upstream, &mut client, watch, &mut moved);
        match (sent, received) {
            (Poll::Ready(Err(_)), _) => return Poll::Ready(Some(Ended::Broke(up.broken_side()))),
            (_, Poll::Ready(Err(_))) => return Poll::Ready(Some(Ended::Broke(down.broken_side()))),
            (Poll::Ready(Ok(())), Poll::Ready(Ok(()))) => return Poll::Ready(Some(Ended::Closed)),
            _ => {}
        }
        if cut.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        if moved {
            last = Instant::now();
        }
        // Reset only when it fires: a busy session costs no timer work per read.
        while timer.as_mut().poll(cx).is_ready() {
            if last + idle <= Instant::now() {
                return Poll::Ready(Some(Ended::Idle));
            }
            timer.as_mut().reset(last + idle);
        }
        Poll::Pending
    })
    .await;
    match ended {
        Some(ended) => ended,
        None => {
            let settle = going_away(&mut client, &mut upstream, &mut up, &mut down);
            let _ = tokio::time::timeout(CUT_SETTLE, settle).await;
            Ended::Cut
        }
    }
}

/// The close at a shutdown's cut (see the module's documentation).
async fn going_away<C, U>(client: &mut C, upstream: &mut U, up: &mut Pipe, down: &mut Pipe)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let to_client = async {
        if down.between_frames() && client.write_all(&close_frame(None)).await.is_ok() {
            let _ = client.flush().await;
        }
        let _ = client.shutdown().await;
        drain(client).await;
    };
    let to_upstream = async {
        if up.between_frames() {
            let frame = close_frame(Some(mask_key()));
            if upstream.write_all(&frame).await.is_ok() {
                let _ = upstream.flush().await;
            }
        }
        let _ = upstream.shutdown().await;
        drain(upstream).await;
    };
    tokio::join!(to_client, to_upstream);
}

/// Reads and drops what a side still sends, until it ends.
async fn drain<T: AsyncRead + Unpin>(side: &mut T) {
    let mut sink = [0u8; 4096];
    while matches!(side.read(&mut sink).await, Ok(n) if n > 0) {}
}

/// A close frame 1001 "going away": unmasked towards the client, masked with `mask` towards the
/// upstream (RFC 6455 §5.3).
fn close_frame(mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut frame = vec![0x88];
    match mask {
        None => {
            frame.push(GOING_AWAY.len() as u8);
            frame.extend_from_slice(&GOING_AWAY);
        }
        Some(key) => {
            frame.push(0x80 | GOING_AWAY.len() as u8);
            frame.extend_from_slice(&key);
            frame.extend(
                GOING_AWAY
                    .iter()
                    .zip(key.iter().cycle())
                    .map(|(b, k)| b ^ k),
            );
        }
    }
    frame
}

/// A masking key the upstream cannot predict (RFC 6455 §5.3), from the standard library's randomly
/// keyed hasher.
fn mask_key() -> [u8; 4] {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    let [a, b, c, d, ..] = hasher.finish().to_le_bytes();
    [a, b, c, d]
}

/// One direction: the last read, what of it is written, and where its frames end.
struct Pipe {
    from: Side,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The reading side ended its half.
    read_done: bool,
    /// The writing side's half was shut after that.
    shut: bool,
    /// Whether the last error was the writing side's (else the reading side's).
    write_failed: bool,
    frames: FrameEdge,
}

impl Pipe {
    fn new(from: Side) -> Self {
        Pipe {
            from,
            buf: vec![0; BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            read_done: false,
            shut: false,
            write_failed: false,
            frames: FrameEdge::default(),
        }
    }

    fn broken_side(&self) -> Side {
        match (self.from, self.write_failed) {
            (Side::Client, false) | (Side::Upstream, true) => Side::Client,
            (Side::Upstream, false) | (Side::Client, true) => Side::Upstream,
        }
    }

    /// Everything read is written and the reading side is between two frames: a frame of tokentap's
    /// own may go out on the writing side.
    fn between_frames(&self) -> bool {
        self.start == self.end && self.frames.between()
    }

    /// Moves what it can from `from` to `to`. Ready with `Ok` once `from` has ended and `to`'s half has
    /// been shut; `moved` is set when any byte was read or written.
    fn poll_pass<R, T, W>(
        &mut self, cx: &mut Context<'_>, from: &mut R, to: &mut T, watch: &mut W, moved: &mut bool,
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin,
        T: AsyncWrite + Unpin,
        W: Watch,
    {
        let mut work = 0;
        for _ in 0..READS_PER_POLL {
            while self.start < self.end {
                let written = Pin::new(&mut *to).poll_write(cx, &self.buf[self.start..self.end]);
                match written {
                    Poll::Ready(Ok(0)) => return self.write_error(io::ErrorKind::WriteZero.into()),
                    Poll::Ready(Ok(n)) => {
                        self.start += n;
                        *moved = true;
                    }
                    Poll::Ready(Err(error)) => return self.write_error(error),
                    Poll::Pending => return Poll::Pending,
                }
            }
            if self.read_done {
                if !self.shut {
                    match Pin::new(&mut *to).poll_shutdown(cx) {
                        Poll::Ready(Ok(())) => self.shut = true,
                        // The other side may be gone already: its own direction says so.
                        Poll::Ready(Err(_)) => self.shut = true,
                        Poll::Pending => return Poll::Pending,
                    }
                }
                return Poll::Ready(Ok(()));
            }
            // Everything read so far is written: past its work, the task yields before reading more.
            if work >= WORK_PER_POLL {
                break;
            }
            let mut read = ReadBuf::new(&mut self.buf);
            match Pin::new(&mut *from).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {
                    let n = read.filled().len();
                    if n == 0 {
                        self.read_done = true;
                        watch.ended(self.from, Instant::now());
                        continue;
                    }
                    let bytes = &self.buf[..n];
                    work += watch.read(self.from, bytes, Instant::now());
                    self.frames.feed(bytes);
                    (self.start, self.end) = (0, n);
                    *moved = true;
                }
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => {
                    // Nothing more to read now: what was written goes out.
                    return match Pin::new(&mut *to).poll_flush(cx) {
                        Poll::Ready(Err(error)) => self.write_error(error),
                        _ => Poll::Pending,
                    };
                }
            }
        }
        // A side that always has more: the other direction's turn, and this one's again soon.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn write_error(&mut self, error: io::Error) -> Poll<io::Result<()>> {
        self.write_failed = true;
        Poll::Ready(Err(error))
    }
}

/// Where a WebSocket frame ends in one direction's bytes: its header read byte by byte (2 to 14 bytes,
/// RFC 6455 §5.2), its payload skipped by length. Nothing is kept but the header being read.
#[derive(Default)]
struct FrameEdge {
    head: [u8; 14],
    /// Header bytes read of the frame begun.
    have: usize,
    /// The payload bytes still to come.
    payload: u64,
}

impl FrameEdge {
    fn between(&self) -> bool {
        self.have == 0 && self.payload == 0
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.payload > 0 {
                let n = usize::try_from(self.payload)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                self.payload -= n as u64;
                bytes = &bytes[n..];
                continue;
            }
            self.head[self.have] = bytes[0];
            self.have += 1;
            bytes = &bytes[1..];
            if self.have < 2 {
                continue;
            }
            let (length, mask) = (self.head[1] & 0x7f, self.head[1] & 0x80 != 0);
            let extended = match length {
                126 => 2,
                127 => 8,
                _ => 0,
            };
            let need = 2 + extended + if mask { 4 } else { 0 };
            if self.have < need {
                continue;
            }
            self.payload = match extended {
                0 => u64::from(length),
                _ => (self.head[2..2 + extended])
                    .iter()
                    .fold(0, |n, &b| (n << 8) | u64::from(b)),
            };
            self.have = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload: usize, masked: bool) -> Vec<u8> {
        let mut f = vec![0x81];
        let bit = if masked { 0x80 } else { 0 };
        match payload {
            0..=125 => f.push(bit | payload as u8),
            126..=0xffff => {
                f.push(bit | 126);
                f.extend_from_slice(&(payload as u16).to_be_bytes());
            }
            _ => {
                f.push(bit | 127);
                f.extend_from_slice(&(payload as u64).to_be_bytes());
            }
        }
        if masked {
            f.extend_from_slice(&[1, 2, 3, 4]);
        }
        f.extend(std::iter::repeat_n(b'x', payload));
        f
    }

    #[test]
    fn a_frames_end_is_found_at_every_cut_of_the_stream() {
        let mut stream = Vec::new();
        let mut ends = vec![];
        for (payload, masked) in [
            (0, false),
            (5, true),
            (125, false),
            (126, true),
            (70_000, false),
        ] {
            stream.extend(frame(payload, masked));
            ends.push(stream.len());
        }
        for cut in [1, 2, 3, 7, 100, 4096] {
            let mut edge = FrameEdge::default();
            let mut at = 0;
            for piece in stream.chunks(cut) {
                edge.feed(piece);
                at += piece.len();
                assert_eq!(edge.between(), ends.contains(&at), "cut {cut}, at {at}");
            }
        }
    }

    #[test]
    fn the_close_frames_say_1001_going_away_masked_only_towards_the_upstream() {
        assert_eq!(close_frame(None), b"\x88\x0c\x03\xe9going away");
        let masked = close_frame(Some([1, 2, 3, 4]));
        assert_eq!(masked[..6], [0x88, 0x8c, 1, 2, 3, 4]);
        let unmasked: Vec<u8> = (masked[6..].iter())
            .zip([1u8, 2, 3, 4].iter().cycle())
            .map(|(b, k)| b ^ k)
            .collect();
        assert_eq!(unmasked, GOING_AWAY);
    }
}
