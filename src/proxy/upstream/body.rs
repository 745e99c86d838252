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

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::pool::{Conn, Pool};

/// A connection lent to one request, and the pool it goes back to.
pub(super) struct Lease {
    pub(super) conn: Box<Conn>,
    pub(super) pool: Arc<Pool>,
}

impl Lease {
    /// Back to the pool if the connection is ready for another request now; otherwise it is closed.
    pub(super) fn give_back(self, cx: &mut Context<'_>) {
        self.pool.put(self.conn, cx);
    }
}

/// The body of a response from the upstream (see the module's documentation).
pub struct UpstreamResponse {
    body: Incoming,
    lease: Option<Lease>,
    /// An error read in the same wake-up as frames before it, held back for one poll (see `poll_frame`).
    broke: Option<hyper::Error>,
}

impl UpstreamResponse {
    pub(super) fn new(body: Incoming, lease: Lease) -> Self {
        UpstreamResponse {
            body,
            lease: Some(lease),
            broke: None,
        }
    }

    /// The connection goes back to the pool now, if it can (a response with no body: nobody will poll it).
    pub(super) fn give_back(&mut self, cx: &mut Context<'_>) {
        if let Some(lease) = self.lease.take() {
            lease.give_back(cx);
        }
    }
}

impl Body for UpstreamResponse {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if let Some(error) = this.broke.take() {
            return Poll::Ready(Some(Err(error)));
        }
        let mut drove = false;
        loop {
            if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
                match frame {
                    Some(Ok(_)) if !this.body.is_end_stream() => {}
                    // The body is over; the connection may carry the next request.
                    Some(Ok(_)) | None => this.give_back(cx),
                    // The connection broke, and goes with the body. The error may have come in the same
                    // read as the frames just handed on, which the client's side has not written yet: it
                    // ends a connection at a body's error without writing what it holds. So the error waits
                    // one poll: the client's side writes what it has when this body is pending.
                    Some(Err(error)) => {
                        this.lease = None;
                        this.broke = Some(error);
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                }
                return Poll::Ready(frame);
            }
            let Some(lease) = this.lease.as_mut().filter(|_| !drove) else {
                return Poll::Pending;
            };
            // Reads the socket: a frame it brings is in the body's channel when this returns, so the body
            // is polled once more. A connection that is over has left its last word there too (the end,
            // or the error), and is dropped.
            if lease.conn.poll_driver(cx).is_ready() {
                this.lease = None;
            }
            drove = true;
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
