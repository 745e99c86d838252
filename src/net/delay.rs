//! tokentap's own delay per forwarded frame, measured where it ends: at the client socket.
//!
//! A response frame's clock starts when its bytes reached tokentap's upstream socket (the kernel's receive
//! timestamp, `proxy/upstream/arrival.rs`; else when it came off the upstream connection: the response tap
//! keeps that instant, [`ReadAt`]), or, when that was before the client's side asked for the frame, when
//! it asked; and it stops when the client write that took its last byte begins: the bytes are handed to
//! the client's socket then, and the rest of that system call is the kernel's, as the part before the
//! receive timestamp is. So what tokentap adds before it reads (its worker waking up, other connections
//! served first) is inside it, and what the client holds back is not: hyper asks the body for the next
//! frame only while the client can take it (an h2 stream's flow-control window, an HTTP/1.1 client's
//! socket and hyper's 16 buffers), so the frames that wait in the upstream socket meanwhile count from
//! the moment hyper asks again. An h2 client that withheld its window for 600 ms showed the pause on
//! nearly every frame when the clock started at the arrival alone; now at most the frame or two hyper
//! already held when the window closed carry it (hyper holds one data frame a stream while it waits for
//! window, and an HTTP/1.1 connection up to 16 buffers while the client's socket is full).
//!
//! [`Forwarding`] wraps the response body on its way into hyper and notes each data frame's start in the
//! connection's [`FrameDelay`]; the client socket (`TimedIo` in `client_conn.rs`) reads the clock before
//! each write, and after one that took everything it was offered observes every noted frame into
//! `tokentap_forwarding_delay_seconds`. hyper writes what it has been handed in order and polls the body for
//! more only while it can buffer it, so the frames noted before such a write are the ones it carried. A
//! write that took only part of what it was offered (the client's socket is full) observes nothing: the
//! frames already handed over wait for the write that takes the rest.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use prometheus::Histogram;
use tokio::time::Instant;

use crate::tap::ReadAt;

/// At most this many frames wait for a write on one connection; beyond them a frame goes unobserved.
/// hyper's HTTP/1 side holds at most 16 buffers before it stops polling the body; an h2 connection with
/// many streams may hold more.
const MAX_WAITING: usize = 64;

/// One client connection's frames handed to hyper and not yet written, by the instant each came off the
/// upstream.
pub struct FrameDelay {
    waiting: Mutex<Vec<Instant>>,
    histogram: Histogram,
}

impl FrameDelay {
    pub fn new(histogram: Histogram) -> Arc<Self> {
        Arc::new(FrameDelay {
            waiting: Mutex::new(Vec::new()),
            histogram,
        })
    }

    fn handed(&self, read_at: Instant) {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if waiting.len() < MAX_WAITING {
            waiting.push(read_at);
        }
    }

    /// A write that began at `began` took everything it was offered: every frame handed over before it
    /// was handed to the client's socket then. A frame whose bytes arrived after the write began was
    /// handed over while it ran (an h2 stream's task, on another thread): it counts to the write's end.
    pub fn written(&self, began: Instant) {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let mut ended = None;
        for read_at in waiting.drain(..) {
            let at = if read_at <= began {
                began
            } else {
                *ended.get_or_insert_with(Instant::now)
            };
            self.histogram
                .observe(at.saturating_duration_since(read_at).as_secs_f64());
        }
    }
}

pin_project! {
    /// A response body on its way into hyper: each data frame's start (its upstream instant, or when
    /// hyper asked for it if that was later) is noted in the connection's [`FrameDelay`]. The frame
    /// itself passes unchanged.
    pub struct Forwarding<B> {
        #[pin]
        inner: B,
        delay: Arc<FrameDelay>,
        // When hyper first asked for the frame not yet returned.
        asked: Option<Instant>,
    }
}

impl<B> Forwarding<B> {
    pub fn new(inner: B, delay: Arc<FrameDelay>) -> Self {
        Forwarding {
            inner,
            delay,
            asked: None,
        }
    }
}

impl<B: Body<Data = Bytes> + ReadAt> Body for Forwarding<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>, cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        let asked = *this.asked.get_or_insert_with(Instant::now);
        let polled = this.inner.as_mut().poll_frame(cx);
        if let Poll::Ready(ready) = &polled {
            *this.asked = None;
            if let Some(Ok(frame)) = ready {
                if let (true, Some(read_at)) = (frame.is_data(), this.inner.read_at()) {
                    this.delay.handed(read_at.max(asked));
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prometheus::HistogramOpts;

    use super::*;

    /// A body whose next frame is pending or has arrived at a given instant.
    struct Arriving {
        next: std::collections::VecDeque<Option<Instant>>,
        read_at: Option<Instant>,
    }

    impl Body for Arriving {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>, _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            match self.next.pop_front() {
                Some(Some(at)) => {
                    self.read_at = Some(at);
                    Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
                }
                Some(None) => Poll::Pending,
                None => Poll::Ready(None),
            }
        }
    }

    impl ReadAt for Arriving {
        fn read_at(&self) -> Option<Instant> {
            self.read_at
        }
    }

    fn poll(body: &mut Pin<Box<Forwarding<Arriving>>>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        body.as_mut().poll_frame(&mut cx).is_ready()
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_counts_from_its_arrival_or_from_when_hyper_asked_for_it_whichever_is_later() {
        let Ok(histogram) = Histogram::with_opts(HistogramOpts::new("h", "h")) else {
            panic!("a histogram");
        };
        let delay = FrameDelay::new(histogram.clone());
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Asked for at t0; the frame arrives at t0 + 2 ms and is read at t0 + 3 ms: from the arrival.
        // The second arrived at t0 + 4 ms, but the client took nothing (its window closed) until hyper
        // asked again at t0 + 600 ms: from the asking.
        let body = Arriving {
            next: [None, Some(t0 + ms(2)), Some(t0 + ms(4))].into(),
            read_at: None,
        };
        let mut body = Box::pin(Forwarding::new(body, delay.clone()));
        assert!(!poll(&mut body));
        tokio::time::sleep(ms(3)).await;
        assert!(poll(&mut body));
        tokio::time::sleep(ms(2)).await;
        delay.written(Instant::now());
        assert!((histogram.get_sample_sum() - 0.003).abs() < 1e-9, "3 ms");
        tokio::time::sleep(ms(595)).await;
        assert!(poll(&mut body));
        tokio::time::sleep(ms(1)).await;
        delay.written(Instant::now());
        assert_eq!(histogram.get_sample_count(), 2);
        assert!(
            (histogram.get_sample_sum() - 0.004).abs() < 1e-9,
            "3 ms + 1 ms, not the 597 ms the frame waited for the client: {}",
            histogram.get_sample_sum()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_counts_to_the_start_of_the_write_that_took_it_or_to_its_end_if_it_came_during_it(
    ) {
        let Ok(histogram) = Histogram::with_opts(HistogramOpts::new("h", "h")) else {
            panic!("a histogram");
        };
        let delay = FrameDelay::new(histogram.clone());
        delay.handed(Instant::now());
        tokio::time::sleep(Duration::from_millis(3)).await;
        let began = Instant::now();
        tokio::time::sleep(Duration::from_millis(1)).await;
        // Handed over by another stream's task while the write ran.
        delay.handed(Instant::now());
        tokio::time::sleep(Duration::from_millis(2)).await;
        delay.written(began);
        assert_eq!(histogram.get_sample_count(), 2);
        assert!(
            (histogram.get_sample_sum() - 0.005).abs() < 1e-9,
            "3 ms + 2 ms"
        );
        delay.written(Instant::now());
        assert_eq!(histogram.get_sample_count(), 2, "each frame once");
    }
}
