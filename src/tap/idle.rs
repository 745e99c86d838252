//! The one idle timer of both body taps: how long a body may go without its next frame before
//! tokentap gives up on it (`timeouts.idle` for the upstream's response, `timeouts.request_body_idle`
//! for the client's request). Waiting starts where the owner says ([`IdleTimer::restart`]); the sleep
//! is only re-armed when it fires early, never once per frame, so a fast stream costs no timer work.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

pub struct IdleTimer {
    limit: Duration,
    since: Instant,
    sleep: Pin<Box<Sleep>>,
}

impl IdleTimer {
    /// A timer whose wait starts now.
    pub fn new(limit: Duration) -> Self {
        let now = Instant::now();
        IdleTimer {
            limit,
            since: now,
            sleep: Box::pin(tokio::time::sleep_until(now + limit)),
        }
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// The wait starts again at `now` (a frame passed, or the owner began waiting for one).
    pub fn restart(&mut self, now: Instant) {
        self.since = now;
    }

    /// Ready once `limit` has passed since the wait started; registers `cx` for that moment otherwise.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            ready!(self.sleep.as_mut().poll(cx));
            let deadline = self.since + self.limit;
            if deadline <= Instant::now() {
                return Poll::Ready(());
            }
            self.sleep.as_mut().reset(deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    #[tokio::test(start_paused = true)]
    async fn fires_limit_after_the_last_restart() {
        let start = Instant::now();
        let mut timer = IdleTimer::new(Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(7)).await;
        timer.restart(Instant::now());
        poll_fn(|cx| timer.poll_expired(cx)).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(17));
    }
}
