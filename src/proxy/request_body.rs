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
//! (at most twice), not what it declared. Every byte the buffer allocates is taken from `limits.max_held_request_bytes`,
//! the budget all held bodies share, and given back when the body and every copy of it (a resend's, the
//! conversation reader's) are dropped; a large body's resend copy goes as soon as only the keep-alive race
//! could have used it (`proxy/upstream/resend.rs`), not when the answer's head comes. When the budget has no room, the body waits for it (its client's
//! bytes wait in the kernel, at no cost here) at most `timeouts.request_body_idle`, then the request is
//! answered `503` with `Retry-After` ([`HoldError::Budget`]): it never streams onto an upstream slot for
//! want of memory.
//!
//! A body that grows past the hold size streams as it arrives: what was read so far goes first, then the
//! rest, frame by frame. Such a request holds an upstream slot while its client uploads, so each client
//! address may have at most `limits.max_streamed_uploads_per_client` of them unfinished at once
//! ([`PerClient`]). It is never sent twice. The bytes are the client's, unchanged and in order,
//! either way; only the framing, which belongs to the hop, may differ (a held body goes out with a
//! `Content-Length`, unless it had trailers).

use std::collections::HashMap;
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
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::tap::{BoxError, RequestTap};

/// A body declared this small, or smaller, is allocated at once; a larger one grows as it arrives.
const SMALL_BODY: usize = 4 << 10;

/// What was read of a body before it was sent: all of it, or its first part.
pub struct Held {
    bytes: Bytes,
    trailers: Option<HeaderMap>,
    /// This body's share of `limits.max_held_request_bytes` (its buffer's capacity), given back when
    /// the last copy is dropped.
    _budget: Option<OwnedSemaphorePermit>,
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
}

/// How much a request may hold, and the budget all held bodies share.
#[derive(Clone)]
pub struct HoldLimits {
    /// `limits.hold_request_body_bytes` (never above `limits.max_request_body_bytes`); 0: hold nothing.
    pub per_request: u64,
    /// `limits.max_held_request_bytes`, in bytes.
    pub all: Arc<Semaphore>,
    /// How long a body waits for room in `all`: `timeouts.request_body_idle`.
    pub wait: Duration,
}

/// Why a body was not held.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    /// The tap's error: the body broke off, went idle, or grew past `limits.max_request_body_bytes`
    /// (the [`crate::tap::RequestSeen`] behind the tap says which).
    #[error(transparent)]
    Body(BoxError),
    /// `limits.max_held_request_bytes` had no room for the body within [`HoldLimits::wait`].
    #[error("no room for the request body in limits.max_held_request_bytes within {0:?}")]
    Budget(Duration),
}

/// What [`hold`] read, and whether it had to wait for the budget.
pub struct Hold {
    pub body: Outgoing,
    /// The body waited for room in `limits.max_held_request_bytes`.
    pub waited: bool,
}

/// The buffer a body is held in, and the budget its capacity takes.
struct Buffer<'a> {
    bytes: Vec<u8>,
    budget: Option<OwnedSemaphorePermit>,
    limits: &'a HoldLimits,
    /// The most the buffer may grow to: the declared length, else the hold size.
    most: usize,
    waited: bool,
}

impl Buffer<'_> {
    /// Makes room for `more` bytes, taking what the buffer grows by from the budget (waiting for it,
    /// within the limit's wait). `Ok(false)`: the body is larger than the hold size.
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
        let Ok(more) = u32::try_from(grown - capacity) else {
            return Ok(false);
        };
        let permit = match self.limits.all.clone().try_acquire_many_owned(more) {
            Ok(permit) => permit,
            Err(_) => {
                self.waited = true;
                let wait = self.limits.all.clone().acquire_many_owned(more);
                match tokio::time::timeout(self.limits.wait, wait).await {
                    Ok(Ok(permit)) => permit,
                    // Closed (never), or no room in time.
                    _ => return Err(HoldError::Budget(self.limits.wait)),
                }
            }
        };
        match &mut self.budget {
            Some(budget) => budget.merge(permit),
            None => self.budget = Some(permit),
        }
        self.bytes.reserve_exact(grown - self.bytes.len());
        Ok(true)
    }
}

/// Reads `tap` whole into one buffer if it fits the hold size, else up to where it stopped fitting.
/// `declared`: the body's `Content-Length`, when it has one.
pub async fn hold(
    mut tap: RequestTap<Incoming>, limits: &HoldLimits, declared: Option<u64>,
) -> Result<Hold, HoldError> {
    let mut buffer = Buffer {
        bytes: Vec::new(),
        budget: None,
        limits,
        most: declared.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX)),
        waited: false,
    };
    let mut trailers = None;
    let mut first_over = None;
    while limits.per_request > 0 && !tap.is_end_stream() {
        let Some(frame) = tap.frame().await else {
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
    let waited = buffer.waited;
    let held = Held {
        bytes: Bytes::from(buffer.bytes),
        trailers,
        _budget: buffer.budget,
    };
    let rest = streams.then(|| Streamed {
        tap,
        first: first_over,
        place: None,
    });
    Ok(Hold {
        body: Outgoing {
            held: Arc::new(held),
            held_sent: false,
            trailers_sent: false,
            rest,
        },
        waited,
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
            let polled = Pin::new(&mut rest.tap).poll_frame(cx);
            if matches!(polled, Poll::Ready(None | Some(Err(_)))) || rest.tap.is_end_stream() {
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
                Some(rest) => rest.first.is_none() && rest.tap.is_end_stream(),
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

    fn limits(hold: u64, all: usize) -> HoldLimits {
        HoldLimits {
            per_request: hold,
            all: Arc::new(Semaphore::new(all)),
            wait: Duration::from_secs(60),
        }
    }

    fn buffer(limits: &HoldLimits, declared: Option<usize>) -> Buffer<'_> {
        Buffer {
            bytes: Vec::new(),
            budget: None,
            limits,
            most: declared.unwrap_or(usize::MAX),
            waited: false,
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
        buffer.budget.as_ref().map_or(0, |p| p.num_permits())
    }

    #[tokio::test]
    async fn a_body_in_one_byte_frames_grows_by_doubling_and_its_budget_is_its_capacity() {
        let limits = limits(1 << 20, 64 << 20);
        let mut held = buffer(&limits, None);
        let capacities = fill(&mut held, 1 << 20, 1).await;
        assert_eq!(
            capacities,
            (12..=20).map(|p| 1usize << p).collect::<Vec<_>>(),
            "4 KiB, then doubling to 1 MiB"
        );
        assert_eq!(taken(&held), 1 << 20);
        assert_eq!(limits.all.available_permits(), 63 << 20);
    }

    #[tokio::test]
    async fn a_declared_length_is_allocated_at_once_when_small_and_never_passed() {
        let limits = limits(1 << 20, 64 << 20);
        let mut small = buffer(&limits, Some(300));
        assert_eq!(fill(&mut small, 300, 7).await, vec![300]);
        assert_eq!(taken(&small), 300);
        let mut large = buffer(&limits, Some(100_000));
        let capacities = fill(&mut large, 100_000, 16 << 10).await;
        assert_eq!(capacities.last(), Some(&100_000), "{capacities:?}");
        assert_eq!(taken(&large), 100_000);
    }

    #[tokio::test]
    async fn a_client_that_declares_much_and_sends_little_holds_what_it_sent() {
        let limits = limits(1 << 20, 64 << 20);
        let mut stalled = buffer(&limits, Some(1 << 20));
        fill(&mut stalled, 10, 10).await;
        assert_eq!(taken(&stalled), 4 << 10);
        fill(&mut stalled, 100_000, 1000).await;
        assert!(taken(&stalled) <= 2 * 100_010, "{}", taken(&stalled));
    }

    #[tokio::test]
    async fn past_the_hold_size_there_is_no_room_and_nothing_more_is_taken() {
        let limits = limits(10_000, 64 << 20);
        let mut held = buffer(&limits, None);
        fill(&mut held, 9_000, 3_000).await;
        let before = taken(&held);
        assert!(!held.room_for(1_001).await.unwrap_or(true));
        assert_eq!(taken(&held), before);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_waits_for_room_in_the_budget_and_is_refused_when_none_comes_in_time() {
        let limits = limits(64 << 10, 8 << 10);
        let mut first = buffer(&limits, Some(8 << 10));
        fill(&mut first, 8 << 10, 8 << 10).await;
        let mut second = buffer(&limits, Some(100));
        let started = tokio::time::Instant::now();
        let refused = second.room_for(100).await;
        assert!(matches!(refused, Err(HoldError::Budget(_))), "{refused:?}");
        assert_eq!(started.elapsed(), limits.wait);
        assert!(second.waited);
        // Room given back within the wait: the body is held.
        let mut third = buffer(&limits, Some(100));
        let release = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            drop(first);
        };
        let (room, ()) = tokio::join!(third.room_for(100), release);
        assert!(matches!(room, Ok(true)));
        assert_eq!(started.elapsed(), limits.wait + Duration::from_secs(1));
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
