//! The upstream response's body, which drives its own connection.
//!
//! Each time the client's side asks for the next frame, the body first takes a frame that has already been
//! read. When none is waiting, it polls the connection's I/O, which reads the upstream socket. So a frame
//! leaves in the same wake-up in which its bytes arrived, and all the frames of one read leave together.
//! When the body ends, the connection goes back to the pool if it can carry another request. A body
//! dropped before its end (the client went away, or tokentap cut the stream) drops its connection, and
//! so closes it. The upstream sees the close and stops generating.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::tap::Arrived;

use super::arrival::Arrival;
use super::pool::{Conn, Pool};
use super::wake::{LookAgain, LOOK_AGAIN};

/// A connection lent to one request, and the pool it goes back to.
pub(super) struct Lease {
    pub(super) conn: Box<Conn>,
    pub(super) pool: Arc<Pool>,
}

impl Lease {
    /// Back to the pool if the connection is ready for another request now; otherwise it is closed.
    pub(super) fn give_back(self) {
        self.pool.put(self.conn);
    }
}

/// The body of a response from the upstream (see the module's documentation).
pub struct UpstreamResponse {
    body: Incoming,
    lease: Option<Lease>,
    /// The waker the body and its connection are polled with.
    wake: LookAgain,
    /// An error read in the same wake-up as frames before it, held back for one poll (see `poll_frame`).
    broke: Option<hyper::Error>,
    /// When the bytes of the last read on the connection reached its socket: those of the frame just
    /// returned, since hyper reads only when it has handed on everything it read before.
    arrival: Arc<Arrival>,
    /// The body does not say it has ended before it is polled ([`UpstreamResponse::length_in_place`]).
    end_unsaid: bool,
}

impl UpstreamResponse {
    pub(super) fn new(body: Incoming, lease: Lease, wake: LookAgain) -> Self {
        UpstreamResponse {
            body,
            arrival: lease.conn.arrival.clone(),
            lease: Some(lease),
            wake,
            broke: None,
            end_unsaid: false,
        }
    }

    /// The body of an answer whose connection a task of its own drives and nobody pools (a WebSocket
    /// handshake's: `mod.rs`).
    pub(super) fn driven_elsewhere(body: Incoming, arrival: Arc<Arrival>) -> Self {
        UpstreamResponse {
            body,
            lease: None,
            wake: LookAgain::new(),
            broke: None,
            arrival,
            end_unsaid: false,
        }
    }

    /// An empty body's `Content-Length: 0` stays in its line: hyper's HTTP/1 encoder writes the length
    /// of a body that says it has ended itself, after the other headers, and in place only for one it
    /// still has to poll. For a WebSocket handshake's refusal, which passes byte for byte. Only an
    /// empty body: one with bytes says so only after its last frame, and hyper stops polling it once
    /// its length is written.
    pub fn length_in_place(&mut self) {
        self.end_unsaid = self.body.is_end_stream();
    }

    /// The connection goes back to the pool now, if it can (a response with no body: nobody will poll it).
    pub(super) fn give_back(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.give_back();
        }
    }
}

/// One look: a frame already read, else the connection's I/O, which reads the socket (a frame it brings
/// is in the body's channel when it returns), then the body's channel again. A connection that is over
/// has left its last word there too (the end, or the error), and is dropped. At the body's end the
/// connection goes back to the pool if it can carry the next request.
fn look(
    body: &mut Incoming, lease: &mut Option<Lease>, cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
    let mut frame = Pin::new(&mut *body).poll_frame(cx);
    if frame.is_pending() {
        let Some(held) = lease else {
            return Poll::Pending;
        };
        if held.conn.poll_driver(cx).is_ready() {
            *lease = None;
        }
        frame = Pin::new(&mut *body).poll_frame(cx);
    }
    match &frame {
        Poll::Ready(Some(Ok(_))) if !body.is_end_stream() => {}
        Poll::Ready(Some(Ok(_)) | None) => {
            if let Some(lease) = lease.take() {
                lease.give_back();
            }
        }
        _ => {}
    }
    frame
}

impl Arrived for UpstreamResponse {
    fn waited(&self) -> Option<Duration> {
        self.arrival.waited()
    }
}

impl Body for UpstreamResponse {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>, cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if let Some(error) = this.broke.take() {
            return Poll::Ready(Some(Err(error)));
        }
        for _ in 0..LOOK_AGAIN {
            let (body, lease) = (&mut this.body, &mut this.lease);
            let (frame, woken) = this.wake.poll(cx, |cx| look(body, lease, cx));
            match frame {
                // The connection broke, and goes with the body. The error may have come in the same read
                // as the frames just handed on, which the client's side has not written yet: it ends a
                // connection at a body's error without writing what it holds. So the error waits one
                // poll: the client's side writes what it has when this body is pending.
                Poll::Ready(Some(Err(error))) => {
                    this.lease = None;
                    this.broke = Some(error);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Ready(frame) => return Poll::Ready(frame),
                Poll::Pending if woken => continue,
                Poll::Pending => return Poll::Pending,
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        !self.end_unsaid && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
