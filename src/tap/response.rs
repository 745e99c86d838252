//! The response body on its way to the client: every frame is timestamped and lent to the exchange's meter,
//! then returned unchanged. The exchange is finished exactly once, at the first of: the last frame, an
//! upstream error (passed on, so the client's stream breaks too), or the body being dropped unfinished
//! (the client went away, which also drops the upstream response and so stops the model server).

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Instant;

use crate::exchange::{ExchangeGuard, Outcome};

pin_project! {
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        exchange: ExchangeGuard,
    }
}

impl<B> MeteredBody<B> {
    pub fn new(inner: B, exchange: ExchangeGuard) -> Self {
        MeteredBody { inner, exchange }
    }
}

impl<B> Body for MeteredBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        let polled = ready!(this.inner.as_mut().poll_frame(cx));
        match &polled {
            Some(Ok(frame)) => {
                if let (Some(data), Some(exchange)) = (frame.data_ref(), this.exchange.get_mut()) {
                    exchange.on_data(data, Instant::now());
                }
                if this.inner.is_end_stream() {
                    this.exchange.finish(Outcome::Ok);
                }
            }
            Some(Err(_)) => this.exchange.finish(Outcome::UpstreamError),
            None => this.exchange.finish(Outcome::Ok),
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
