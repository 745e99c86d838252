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
//! A body that grows past the hold size, or that would take the held bytes of all requests together over
//! `limits.max_held_request_bytes`, streams as it arrives: what was read so far goes first, then the
//! rest, frame by frame. Such a request is never sent twice. The bytes are the client's, unchanged and in
//! order, either way; only the framing, which belongs to the hop, may differ (a held body from an h2
//! client goes out with a `Content-Length`).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::tap::{BoxError, RequestTap};

/// What was read of a body before it was sent: all of it, or its first part.
struct Held {
    frames: Vec<Bytes>,
    trailers: Option<HeaderMap>,
    len: u64,
    /// This body's share of `limits.max_held_request_bytes`, given back when the last copy is dropped.
    _budget: Option<OwnedSemaphorePermit>,
}

/// The body of a request as it goes upstream (see the module's documentation).
pub struct Outgoing {
    held: Arc<Held>,
    /// The next held frame to send; `held.frames.len()` once all are sent.
    next: usize,
    trailers_sent: bool,
    /// The rest of a body too large to hold, read as it arrives.
    rest: Option<RequestTap<Incoming>>,
}

/// How much a request may hold, and the budget all held bodies share.
#[derive(Clone)]
pub struct HoldLimits {
    /// `limits.hold_request_body_bytes` (never above `limits.max_request_body_bytes`); 0: hold nothing.
    pub per_request: u64,
    /// `limits.max_held_request_bytes`, in bytes.
    pub all: Arc<Semaphore>,
}

/// Reads `tap` whole if it fits the hold limits, else up to where it stopped fitting. Errors are the
/// tap's (the body broke off, went idle, or grew past `limits.max_request_body_bytes`), and the
/// [`crate::tap::RequestSeen`] behind the tap says which.
pub async fn hold(
    mut tap: RequestTap<Incoming>,
    limits: &HoldLimits,
) -> Result<Outgoing, BoxError> {
    let mut held = Held {
        frames: Vec::new(),
        trailers: None,
        len: 0,
        _budget: None,
    };
    let mut budget: Option<OwnedSemaphorePermit> = None;
    let mut streams = limits.per_request == 0;
    while !streams && !tap.is_end_stream() {
        let Some(frame) = tap.frame().await else {
            break;
        };
        match frame?.into_data() {
            Ok(data) => {
                held.len += data.len() as u64;
                let fits = held.len <= limits.per_request
                    && u32::try_from(data.len()).is_ok_and(|n| {
                        match limits.all.clone().try_acquire_many_owned(n) {
                            Ok(permit) => {
                                match &mut budget {
                                    Some(all) => all.merge(permit),
                                    None => budget = Some(permit),
                                }
                                true
                            }
                            Err(_) => false,
                        }
                    });
                held.frames.push(data);
                streams = !fits;
            }
            Err(frame) => held.trailers = frame.into_trailers().ok(),
        }
    }
    held._budget = budget;
    Ok(Outgoing {
        held: Arc::new(held),
        next: 0,
        trailers_sent: false,
        rest: streams.then_some(tap),
    })
}

impl Outgoing {
    /// A copy to send again from the start, when the whole body is held.
    pub fn replay(&self) -> Option<Outgoing> {
        self.rest.is_none().then(|| Outgoing {
            held: self.held.clone(),
            next: 0,
            trailers_sent: false,
            rest: None,
        })
    }

    /// The whole body's frames (cheap copies), when it is held.
    pub fn held_frames(&self) -> Option<Vec<Bytes>> {
        self.rest.is_none().then(|| self.held.frames.clone())
    }

    /// Whether the whole body is held (and so may be sent again).
    pub fn is_held(&self) -> bool {
        self.rest.is_none()
    }
}

impl Body for Outgoing {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(data) = this.held.frames.get(this.next) {
            this.next += 1;
            return Poll::Ready(Some(Ok(Frame::data(data.clone()))));
        }
        if let Some(rest) = &mut this.rest {
            return Pin::new(rest).poll_frame(cx);
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
        self.next == self.held.frames.len()
            && match &self.rest {
                Some(rest) => rest.is_end_stream(),
                None => self.held.trailers.is_none() || self.trailers_sent,
            }
    }

    fn size_hint(&self) -> SizeHint {
        let sent: u64 = self.held.frames[..self.next]
            .iter()
            .map(|f| f.len() as u64)
            .sum();
        let left = self.held.len - sent;
        match &self.rest {
            Some(rest) => {
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(left + rest.lower());
                if let Some(upper) = rest.upper() {
                    hint.set_upper(left + upper);
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
