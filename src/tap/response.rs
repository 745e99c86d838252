//! The response body on its way to the client: every frame is timestamped and lent to the exchange's meter,
//! then returned unchanged. The exchange is finished exactly once, at the first of: the last frame, an
//! upstream error (passed on, so the client's stream breaks too), the body being dropped unfinished
//! (the client went away, which also drops the upstream response and so stops the model server), or a
//! cut: the upstream sent nothing for `timeouts.idle`, or a shutdown's grace period ran out. A cut is
//! passed on as an error, so the client's stream breaks instead of ending as if it were complete, and
//! the upstream body is dropped with this one, closing its connection.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Instant;

use super::IdleTimer;
use crate::tap::exchange::{ExchangeGuard, Outcome};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why tokentap broke off a response stream itself.
#[derive(Debug, thiserror::Error)]
pub enum StreamCut {
    #[error("tokentap: the upstream sent nothing for {0:?} (timeouts.idle)")]
    Idle(Duration),
    #[error("tokentap: shutting down, and the grace period is over")]
    Shutdown,
}

pin_project! {
    pub struct ResponseTap<B> {
        #[pin]
        inner: B,
        exchange: ExchangeGuard,
        idle: IdleTimer,
        shutdown_cut: Pin<Box<dyn Future<Output = ()> + Send>>,
        cut: bool,
    }
}

impl<B> ResponseTap<B> {
    /// `shutdown_cut` completes when a shutdown's grace period is over.
    pub fn new(
        inner: B,
        exchange: ExchangeGuard,
        idle: Duration,
        shutdown_cut: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        ResponseTap {
            inner,
            exchange,
            idle: IdleTimer::new(idle),
            shutdown_cut: Box::pin(shutdown_cut),
            cut: false,
        }
    }
}

impl<B> Body for ResponseTap<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        if *this.cut {
            return Poll::Ready(None);
        }
        if let Poll::Ready(polled) = this.inner.as_mut().poll_frame(cx) {
            let now = Instant::now();
            this.idle.restart(now);
            match &polled {
                Some(Ok(frame)) => {
                    if let (Some(data), Some(exchange)) =
                        (frame.data_ref(), this.exchange.get_mut())
                    {
                        exchange.on_data(data, now);
                    }
                    if this.inner.is_end_stream() {
                        this.exchange.finish(Outcome::Ok);
                    }
                }
                Some(Err(_)) => this.exchange.finish(Outcome::UpstreamError),
                None => this.exchange.finish(Outcome::Ok),
            }
            return Poll::Ready(polled.map(|r| r.map_err(Into::into)));
        }
        let cut = if this.shutdown_cut.as_mut().poll(cx).is_ready() {
            StreamCut::Shutdown
        } else {
            ready!(this.idle.poll_expired(cx));
            StreamCut::Idle(this.idle.limit())
        };
        tracing::warn!(reason = %cut, "response stream cut");
        *this.cut = true;
        this.exchange.finish(Outcome::Timeout);
        Poll::Ready(Some(Err(cut.into())))
    }

    fn is_end_stream(&self) -> bool {
        self.cut || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
