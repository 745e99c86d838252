//! The request body on its way to the upstream: held whole, or streamed.
//!
//! An LLM request is a JSON body the server reads whole before it starts work, so reading it whole first
//! costs the request nothing. tokentap does so for every body up to `limits.hold_request_body_bytes`
//! ([`hold`]), before it takes an upstream slot and before it picks a connection. Three things follow:
//! a client that uploads slowly holds no upstream slot or connection while it does (as nginx, which
//! buffers bodies); a body that breaks off, stalls or outgrows `limits.max_request_body_bytes` is
//! answered without the upstream ever seeing a part of it; and a held request can be sent again, whole,
//! when a reused upstream connection closed under it without a byte of answer and it cannot have been
//! served (`upstream/resend.rs`, [`Outgoing::replay`]).
//!
//! **One buffer, counted by what it allocates.** A held body is copied out of the client's frames into
//! one buffer of its own as it arrives, so a body sent in a thousand small frames pins none of hyper's
//! read buffers and goes upstream as one frame, in one write. The buffer is sized from the body's
//! `Content-Length` when it has one: at once for a small body (up to 4 KiB), and by doubling, never past
//! that length, for a larger one, so a client that declares a large body and stalls holds what it sent
//! (at most twice), not what it declared. Every byte the buffer allocates is leased from the governor's
//! `held_bodies` budget (`src/govern/`) under the request's client, and given back when the body and
//! every copy of it (a resend's, the conversation reader's) are dropped; a large body's resend copy goes
//! as soon as only the keep-alive race could have used it (`proxy/upstream/resend.rs`), not when the
//! answer's head comes.
//!
//! **Only the client over its share waits.** A client whose bodies already hold its share waits for
//! room in it (its bytes wait in the kernel, at no cost here) at most `timeouts.request_body_idle`, and
//! is answered `503` with `Retry-After` ([`HoldError::Budget`]) if none comes. A client within its share never
//! waits behind another: when the budget's cap is reached, its body is sent on as it arrives instead of
//! held ([`Hold::streamed_for_room`]), which costs it only the resend a held body would have had. And
//! every held body has a deadline for the whole of it (`timeouts.held_request_body`), not only for the
//! gap between two pieces, so a body trickled a byte at a time cannot hold its room for long.
//!
//! A body that grows past the hold size streams as it arrives: what was read so far goes first, then the
//! rest, frame by frame. Such a request holds an upstream slot while its client uploads, so each client
//! address may have at most `limits.max_streamed_uploads_per_client` of them unfinished at once
//! ([`PerClient`]). It is never sent twice. The bytes are the client's, unchanged and in order,
//! either way; only the framing, which belongs to the hop, may differ (a held body goes out with a
//! `Content-Length`, unless it had trailers).

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::govern::{Client, Lease, Pool, Spent};
use crate::tap::{BoxError, RequestTap};

/// A body declared this small, or smaller, is allocated at once; a larger one grows as it arrives.
const SMALL_BODY: usize = 4 << 10;

/// What was read of a body before it was sent: all of it, or its first part.
pub struct Held {
    bytes: Bytes,
    trailers: Option<HeaderMap>,
    /// What this body holds of `budgets.held_bodies` (its buffer's capacity), given back when the
    /// last copy is dropped.
    _budget: Lease,
}

impl AsRef<[u8]> for Held {
    /// The body's bytes as the client sent them (the held part, for a body that streams).
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// The body of a request as it goes upstream (see the module's documentation).
pub struct Outgoing {
    held: Arc<Held>,
    /// Whether the held bytes went out.
    held_sent: bool,
    trailers_sent: bool,
    /// The rest of a body too large to hold, read as it arrives.
    rest: Option<Streamed>,
}

/// The part of a body past the hold size.
struct Streamed {
    tap: RequestTap<Incoming>,
    /// The frame that went past the hold size, sent after the held bytes.
    first: Option<Bytes>,
    /// Its place among its client's unfinished uploads, until its last byte passed.
    place: Option<ClientPlace>,
    /// What was read after small pieces that were joined into one frame: sent next.
    after: Option<After>,
    /// Small pieces being joined, and how long they may wait for more.
    joining: Option<bytes::BytesMut>,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// What came after the pieces joined into one frame.
enum After {
    Frame(Frame<Bytes>),
    Error(BoxError),
    End,
}

/// A piece of a streamed body this small is joined with the pieces ready after it, up to
/// [`JOINED`], so a client that uploads a byte at a time does not cost a write upstream per byte.
const SMALL_PIECE: usize = 4 << 10;
/// The most pieces are joined to.
const JOINED: usize = 64 << 10;
/// The longest small pieces wait for more before what was joined goes: a millisecond, on a body too
/// large to hold (whose server reads it whole before it answers), against a write per piece.
const JOIN_WAIT: Duration = Duration::from_millis(1);

/// How much a request may hold, and the budget all held bodies share.
#[derive(Clone)]
pub struct HoldLimits {
    /// `limits.hold_request_body_bytes` (never above `limits.max_request_body_bytes`); 0: hold nothing.
    pub per_request: u64,
    /// The governor's `held_bodies` budget.
    pub all: Arc<Pool>,
    /// The whole body must arrive within this of the request head: `timeouts.held_request_body`.
    pub whole: Duration,
    /// How long a body waits for room in its client's share, at most (within `whole`):
    /// `timeouts.request_body_idle`, as tokentap reads none of it meanwhile.
    pub wait: Duration,
}

/// Why a body was not held.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    /// The tap's error: the body broke off, went idle, or grew past `limits.max_request_body_bytes`
    /// (the [`crate::tap::RequestSeen`] behind the tap says which).
    #[error(transparent)]
    Body(BoxError),
    /// The client's share of `budgets.held_bodies` had no room for the body by its deadline.
    #[error(
        "no room for the request body in this client's share of budgets.held_bodies within {0:?}"
    )]
    Budget(Duration),
    /// The body did not arrive whole within [`HoldLimits::whole`].
    #[error("the request body did not arrive whole within {0:?} (timeouts.held_request_body)")]
    Late(Duration),
}

/// What [`hold`] read, and whether it had to wait for the budget.
pub struct Hold {
    pub body: Outgoing,
    /// The body waited for room in its client's share of `budgets.held_bodies`.
    pub waited: bool,
    /// The budget's cap was reached while the client was within its share: the body is sent as it
    /// arrives rather than held.
    pub streamed_for_room: bool,
}

/// The buffer a body is held in, and the budget its capacity takes.
struct Buffer<'a> {
    bytes: Vec<u8>,
    budget: Lease,
    limits: &'a HoldLimits,
    /// The most the buffer may grow to: the declared length, else the hold size.
    most: usize,
    deadline: Instant,
    waited: bool,
    /// The cap was reached within the client's share: stop holding, send what came and stream.
    no_room: bool,
}

impl Buffer<'_> {
    /// Makes room for `more` bytes, taking what the buffer grows by from the budget (waiting for it,
    /// within the deadline, when the client is over its share). `Ok(false)`: the body is larger than the
    /// hold size, or the budget's cap has no room for it: it streams.
    async fn room_for(&mut self, more: usize) -> Result<bool, HoldError> {
        let needed = self.bytes.len() + more;
        let hold = usize::try_from(self.limits.per_request).unwrap_or(usize::MAX);
        if needed > hold {
            return Ok(false);
        }
        let capacity = self.bytes.capacity();
        if needed <= capacity {
            return Ok(true);
        }
        // A small body is allocated at once; a larger one doubles as it arrives, so a client holds at
        // most twice what it sent (or `SMALL_BODY`), never what it declared; never past the body's length.
        let most = self.most.max(needed).min(hold);
        let grown = (capacity.saturating_mul(2))
            .max(needed)
            .max(SMALL_BODY)
            .min(most);
        let more = (grown - capacity) as u64;
        let until = (Instant::now() + self.limits.wait).min(self.deadline);
        match self.budget.grow_waiting(more, until).await {
            Ok(waited) => self.waited |= waited,
            Err(Spent::Cap) => {
                self.no_room = true;
                return Ok(false);
            }
            Err(Spent::Share) if until == self.deadline => {
                return Err(HoldError::Late(self.limits.whole))
            }
            Err(Spent::Share) => return Err(HoldError::Budget(self.limits.wait)),
        }
        self.bytes.reserve_exact(grown - self.bytes.len());
        Ok(true)
    }
}

/// Reads `tap` whole into one buffer if it fits the hold size (and `client`'s room in the budget),
/// else up to where it stopped fitting. `declared`: the body's `Content-Length`, when it has one;
/// `arrive`: when its head was read, from which the whole body's deadline runs.
pub async fn hold(
    mut tap: RequestTap<Incoming>, limits: &HoldLimits, declared: Option<u64>, client: &Client,
    arrive: Instant,
) -> Result<Hold, HoldError> {
    let deadline = arrive + limits.whole;
    let mut buffer = Buffer {
        bytes: Vec::new(),
        budget: Lease::on(&limits.all, client.clone()),
        limits,
        most: declared.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX)),
        deadline,
        waited: false,
        no_room: false,
    };
    let mut trailers = None;
    let mut first_over = None;
    while limits.per_request > 0 && !tap.is_end_stream() {
        let Ok(frame) = tokio::time::timeout_at(deadline, tap.frame()).await else {
            return Err(HoldError::Late(limits.whole));
        };
        let Some(frame) = frame else {
            break;
        };
        match frame.map_err(HoldError::Body)?.into_data() {
            Ok(data) => {
                if buffer.room_for(data.len()).await? {
                    buffer.bytes.extend_from_slice(&data);
                } else {
                    first_over = Some(data);
                    break;
                }
            }
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    let streams = first_over.is_some() || limits.per_request == 0;
    let (waited, streamed_for_room) = (buffer.waited, buffer.no_room);
    let held = Held {
        bytes: Bytes::from(buffer.bytes),
        trailers,
        _budget: buffer.budget,
    };
    let rest = streams.then(|| Streamed {
        tap,
        first: first_over,
        place: None,
        after: None,
        joining: None,
        wait: None,
    });
    Ok(Hold {
        body: Outgoing {
            held: Arc::new(held),
            held_sent: false,
            trailers_sent: false,
            rest,
        },
        waited,
        streamed_for_room,
    })
}

impl Outgoing {
    /// A copy to send again from the start, when the whole body is held.
    pub fn replay(&self) -> Option<Outgoing> {
        self.rest.is_none().then(|| Outgoing {
            held: self.held.clone(),
            held_sent: false,
            trailers_sent: false,
            rest: None,
        })
    }

    /// The whole body, when it is held: the same buffer (and the same share of the budget) the
    /// request goes upstream from, not a copy.
    pub fn held(&self) -> Option<Arc<Held>> {
        self.rest.is_none().then(|| self.held.clone())
    }

    /// Whether the whole body is held (and so may be sent again).
    pub fn is_held(&self) -> bool {
        self.rest.is_none()
    }

    /// For a body that streams: counts it among `client`'s unfinished uploads until its last byte
    /// passed. `false` (and nothing counted): the client has as many as it may.
    pub fn count_upload(&mut self, uploads: &PerClient, client: Option<IpAddr>) -> bool {
        let (Some(rest), Some(client)) = (&mut self.rest, client) else {
            return true;
        };
        rest.place = uploads.enter(client);
        rest.place.is_some()
    }
}

impl Body for Outgoing {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>, cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if !this.held_sent {
            this.held_sent = true;
            if !this.held.bytes.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(this.held.bytes.clone()))));
            }
        }
        if let Some(rest) = &mut this.rest {
            if let Some(first) = rest.first.take() {
                return Poll::Ready(Some(Ok(Frame::data(first))));
            }
            let polled = match rest.after.take() {
                Some(After::Frame(frame)) => Poll::Ready(Some(Ok(frame))),
                Some(After::Error(error)) => Poll::Ready(Some(Err(error))),
                Some(After::End) => Poll::Ready(None),
                None => rest.poll_joined(cx),
            };
            let ended = rest.after.is_none() && rest.tap.is_end_stream();
            if matches!(polled, Poll::Ready(None | Some(Err(_)))) || ended {
                // The upload is over: its place goes back now, not when hyper drops the body.
                rest.place = None;
            }
            return polled;
        }
        match &this.held.trailers {
            Some(trailers) if !this.trailers_sent => {
                this.trailers_sent = true;
                Poll::Ready(Some(Ok(Frame::trailers(trailers.clone()))))
            }
            _ => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        (self.held_sent || self.held.bytes.is_empty())
            && match &self.rest {
                Some(rest) => {
                    rest.first.is_none()
                        && matches!(rest.after, None | Some(After::End))
                        && (rest.tap.is_end_stream() || matches!(rest.after, Some(After::End)))
                }
                None => self.held.trailers.is_none() || self.trailers_sent,
            }
    }

    fn size_hint(&self) -> SizeHint {
        let left = if self.held_sent {
            0
        } else {
            self.held.bytes.len() as u64
        };
        match &self.rest {
            Some(rest) => {
                let first = rest.first.as_ref().map_or(0, |d| d.len() as u64);
                let rest = rest.tap.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(left + first + rest.lower());
                if let Some(upper) = rest.upper() {
                    hint.set_upper(left + first + upper);
                }
                hint
            }
            // Trailers go only in a chunked body: a length would drop them.
            None if self.held.trailers.is_some() => {
                let mut hint = SizeHint::new();
                hint.set_lower(left);
                hint
            }
            None => SizeHint::with_exact(left),
        }
    }
}

impl Streamed {
    /// The next frame of the rest: small pieces joined (see [`SMALL_PIECE`]); a larger one, trailers
    /// or the end as they come. hyper hands a request body on a piece at a time, decoding the next one
    /// only once this one is taken, so pieces the client sent together do not arrive together here:
    /// what is joined waits at most [`JOIN_WAIT`] for more, and goes at once when [`JOINED`] bytes are
    /// joined or anything but data comes.
    fn poll_joined(
        &mut self, cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            let polled = Pin::new(&mut self.tap).poll_frame(cx);
            let joined = self.joining.as_ref().map_or(0, bytes::BytesMut::len);
            match polled {
                Poll::Pending if joined == 0 => return Poll::Pending,
                Poll::Pending => {
                    let waited = match &mut self.wait {
                        Some(wait) => wait.as_mut().poll(cx).is_ready(),
                        None => true,
                    };
                    if waited {
                        return Poll::Ready(self.take_joined());
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data)
                        if joined == 0
                            && (data.len() >= SMALL_PIECE || self.tap.is_end_stream()) =>
                    {
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Ok(data) => {
                        if joined == 0 {
                            let deadline = Instant::now() + JOIN_WAIT;
                            match &mut self.wait {
                                Some(wait) => wait.as_mut().reset(deadline),
                                None => {
                                    self.wait = Some(Box::pin(tokio::time::sleep_until(deadline)))
                                }
                            }
                        }
                        let buffer = self
                            .joining
                            .get_or_insert_with(|| bytes::BytesMut::with_capacity(JOINED));
                        buffer.extend_from_slice(&data);
                        if buffer.len() >= JOINED || self.tap.is_end_stream() {
                            return Poll::Ready(self.take_joined());
                        }
                    }
                    Err(frame) if joined == 0 => return Poll::Ready(Some(Ok(frame))),
                    Err(frame) => {
                        self.after = Some(After::Frame(frame));
                        return Poll::Ready(self.take_joined());
                    }
                },
                Poll::Ready(other) if joined == 0 => return Poll::Ready(other),
                Poll::Ready(None) => {
                    self.after = Some(After::End);
                    return Poll::Ready(self.take_joined());
                }
                Poll::Ready(Some(Err(error))) => {
                    self.after = Some(After::Error(error));
                    return Poll::Ready(self.take_joined());
                }
            }
        }
    }

    /// What was joined, as one frame.
    fn take_joined(&mut self) -> Option<Result<Frame<Bytes>, BoxError>> {
        let joined = self.joining.take()?;
        Some(Ok(Frame::data(joined.freeze())))
    }
}

/// What each client address holds of something with a per-client share: its unfinished streamed uploads
/// (`limits.max_streamed_uploads_per_client`: such an upload holds an upstream slot for as long as its
/// client takes to send it), or its open WebSocket sessions (`limits.max_sessions_per_client`).
pub struct PerClient {
    limit: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One place of a client address (an unfinished upload, an open session); dropping it gives it back.
pub struct ClientPlace {
    client: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PerClient {
    pub fn new(limit: usize) -> Self {
        PerClient {
            limit,
            open: Arc::default(),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A place for `client`, if it has fewer than its limit.
    pub fn enter(&self, client: IpAddr) -> Option<ClientPlace> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(client).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(ClientPlace {
            client,
            open: self.open.clone(),
        })
    }

    /// Client addresses with an unfinished upload (for tests).
    #[cfg(test)]
    fn clients(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for ClientPlace {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.client) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BudgetLimits;
    use crate::govern::Budget;

    const A: Client = Client::Address(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)));
    const B: Client = Client::Address(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)));

    fn limits(hold: u64, cap: u64, per_client: u64) -> HoldLimits {
        HoldLimits {
            per_request: hold,
            all: Arc::new(Pool::new(
                Budget::HeldBodies,
                BudgetLimits { cap, per_client },
            )),
            whole: Duration::from_secs(60),
            wait: Duration::from_secs(60),
        }
    }

    fn buffer<'a>(limits: &'a HoldLimits, declared: Option<usize>, client: &Client) -> Buffer<'a> {
        Buffer {
            bytes: Vec::new(),
            budget: Lease::on(&limits.all, client.clone()),
            limits,
            most: declared.unwrap_or(usize::MAX),
            deadline: Instant::now() + limits.whole,
            waited: false,
            no_room: false,
        }
    }

    /// Fills `buffer` with `len` bytes in frames of `frame` bytes; the capacities it went through.
    async fn fill(buffer: &mut Buffer<'_>, len: usize, frame: usize) -> Vec<usize> {
        let mut capacities = vec![];
        let mut sent = 0;
        while sent < len {
            let n = frame.min(len - sent);
            assert!(buffer.room_for(n).await.unwrap_or(false), "room at {sent}");
            buffer.bytes.extend(std::iter::repeat_n(b'x', n));
            sent += n;
            if capacities.last() != Some(&buffer.bytes.capacity()) {
                capacities.push(buffer.bytes.capacity());
            }
        }
        capacities
    }

    fn taken(buffer: &Buffer<'_>) -> usize {
        buffer.budget.bytes() as usize
    }

    #[tokio::test]
    async fn a_body_in_one_byte_frames_grows_by_doubling_and_its_budget_is_its_capacity() {
        let limits = limits(1 << 20, 64 << 20, 16 << 20);
        let mut held = buffer(&limits, None, &A);
        let capacities = fill(&mut held, 1 << 20, 1).await;
        assert_eq!(
            capacities,
            (12..=20).map(|p| 1usize << p).collect::<Vec<_>>(),
            "4 KiB, then doubling to 1 MiB"
        );
        assert_eq!(taken(&held), 1 << 20);
        assert_eq!(limits.all.figures().used, 1 << 20);
        assert_eq!(limits.all.held_by(&A), 1 << 20);
        drop(held);
        assert_eq!(limits.all.figures().used, 0, "all given back");
    }

    #[tokio::test]
    async fn a_declared_length_is_allocated_at_once_when_small_and_never_passed() {
        let limits = limits(1 << 20, 64 << 20, 16 << 20);
        let mut small = buffer(&limits, Some(300), &A);
        assert_eq!(fill(&mut small, 300, 7).await, vec![300]);
        assert_eq!(taken(&small), 300);
        let mut large = buffer(&limits, Some(100_000), &A);
        let capacities = fill(&mut large, 100_000, 16 << 10).await;
        assert_eq!(capacities.last(), Some(&100_000), "{capacities:?}");
        assert_eq!(taken(&large), 100_000);
    }

    #[tokio::test]
    async fn a_client_that_declares_much_and_sends_little_holds_what_it_sent() {
        let limits = limits(1 << 20, 64 << 20, 16 << 20);
        let mut stalled = buffer(&limits, Some(1 << 20), &A);
        fill(&mut stalled, 10, 10).await;
        assert_eq!(taken(&stalled), 4 << 10);
        fill(&mut stalled, 100_000, 1000).await;
        assert!(taken(&stalled) <= 2 * 100_010, "{}", taken(&stalled));
    }

    #[tokio::test]
    async fn past_the_hold_size_there_is_no_room_and_nothing_more_is_taken() {
        let limits = limits(10_000, 64 << 20, 16 << 20);
        let mut held = buffer(&limits, None, &A);
        fill(&mut held, 9_000, 3_000).await;
        let before = taken(&held);
        assert!(!held.room_for(1_001).await.unwrap_or(true));
        assert_eq!(taken(&held), before);
        assert!(!held.no_room, "over the hold size, not out of room");
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_over_its_share_waits_for_its_own_room_and_is_refused_at_the_deadline() {
        let mut limits = limits(64 << 10, 1 << 20, 8 << 10);
        limits.wait = Duration::from_secs(10);
        let mut first = buffer(&limits, Some(8 << 10), &A);
        fill(&mut first, 8 << 10, 8 << 10).await;
        let mut second = buffer(&limits, Some(100), &A);
        let started = Instant::now();
        let refused = second.room_for(100).await;
        assert!(matches!(refused, Err(HoldError::Budget(_))), "{refused:?}");
        assert_eq!(started.elapsed(), limits.wait, "the wait, exactly");
        // Room given back within the wait: the body is held.
        let mut third = buffer(&limits, Some(100), &A);
        let release = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            drop(first);
        };
        let (room, ()) = tokio::join!(third.room_for(100), release);
        assert!(matches!(room, Ok(true)));
        assert!(third.waited);
        assert_eq!(started.elapsed(), limits.wait + Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn another_client_never_waits_behind_one_over_its_share() {
        let limits = limits(64 << 10, 1 << 20, 8 << 10);
        let mut greedy = buffer(&limits, Some(8 << 10), &A);
        fill(&mut greedy, 8 << 10, 8 << 10).await;
        let started = Instant::now();
        let mut other = buffer(&limits, Some(300), &B);
        assert!(matches!(other.room_for(300).await, Ok(true)));
        assert_eq!(started.elapsed(), Duration::ZERO, "at once");
        assert!(!other.waited);
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_a_client_within_its_share_streams_at_once_instead_of_waiting() {
        let limits = limits(64 << 10, 16 << 10, 8 << 10);
        let mut a = buffer(&limits, Some(8 << 10), &A);
        fill(&mut a, 8 << 10, 8 << 10).await;
        let c = Client::Address([10, 0, 0, 3].into());
        let mut b = buffer(&limits, Some(8 << 10), &B);
        fill(&mut b, 8 << 10, 8 << 10).await;
        let started = Instant::now();
        let mut third = buffer(&limits, Some(300), &c);
        assert!(matches!(third.room_for(300).await, Ok(false)));
        assert!(third.no_room, "streams for want of room");
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(
            limits.all.figures().refused,
            [1, 0],
            "one refusal at the cap"
        );
    }

    #[test]
    fn a_client_has_at_most_its_share_of_unfinished_uploads_and_leaves_no_entry() {
        let uploads = PerClient::new(2);
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let first = uploads.enter(a);
        let second = uploads.enter(a);
        assert!(first.is_some() && second.is_some());
        assert!(uploads.enter(a).is_none(), "a third for the same address");
        assert!(uploads.enter(b).is_some(), "another address has its own");
        drop(first);
        let third = uploads.enter(a);
        assert!(third.is_some(), "a place given back is taken again");
        drop((second, third));
        assert_eq!(
            uploads.clients(),
            0,
            "no entry is kept for an address with none"
        );
    }
}
