//! A waker for polling that looks again at once instead of through the scheduler.
//!
//! An upstream connection is driven by the task that reads its response (see `body.rs`). Within one
//! poll, its parts wake each other: the connection puts a frame in the body's channel and wakes the
//! reader, and the reader takes the frame and wakes the connection. Both are the same task, which is
//! running at that moment. With the task's own waker, each of those wakes schedules that task once more,
//! and the whole client connection is polled again for nothing, once per frame. With this waker, a wake
//! that comes while the poll is running only notes that something changed, and the poll looks again
//! before it returns. A wake that comes at any other time (the socket is readable, a timer fired) wakes
//! the task as usual.
//!
//! While the request waits for its response head, such a wake is also timed ([`LookAgain::woken_at`]):
//! it is when the connection's socket became ready (a close, an answer), before the task got to run,
//! which is what `resend.rs` measures a close by.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Wake, Waker};

use tokio::time::Instant;

/// How many times one poll looks again after a wake among the connection's own parts before it leaves the
/// rest to the scheduler (so that a connection with a lot to read cannot hold its task).
pub(super) const LOOK_AGAIN: usize = 8;

#[derive(Default)]
struct Shared {
    polling: AtomicBool,
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
    /// Whether a wake from outside a poll is timed; only while a head is awaited, so that a streamed
    /// body's frames cost no clock read.
    timing: AtomicBool,
    woken_at: Mutex<Option<Instant>>,
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::Acquire) {
            self.woken.store(true, Ordering::Release);
            return;
        }
        if self.timing.load(Ordering::Relaxed) {
            *self.woken_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        }
        if let Some(task) = &*self.task.lock().unwrap_or_else(PoisonError::into_inner) {
            task.wake_by_ref();
        }
    }
}

/// See the module's documentation. One per request: it is cloned into whatever the request's connection
/// and body register it with.
pub(super) struct LookAgain {
    shared: Arc<Shared>,
    waker: Waker,
}

impl LookAgain {
    pub(super) fn new() -> Self {
        let shared = Arc::new(Shared::default());
        LookAgain {
            waker: Waker::from(shared.clone()),
            shared,
        }
    }

    /// Times the wakes from outside a poll from now on, or no longer.
    pub(super) fn time_wakes(&self, on: bool) {
        self.shared.timing.store(on, Ordering::Relaxed);
    }

    /// When the last timed wake came from outside a poll: when the task was woken, not when it ran.
    pub(super) fn woken_at(&self) -> Option<Instant> {
        *self
            .shared
            .woken_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `poll` with this waker in place of `cx`'s. Also says whether anything was woken while it ran,
    /// so the caller polls again before it returns pending.
    pub(super) fn poll<R>(
        &self, cx: &Context<'_>, poll: impl FnOnce(&mut Context<'_>) -> R,
    ) -> (R, bool) {
        {
            let mut task = self
                .shared
                .task
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !task.as_ref().is_some_and(|task| task.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        self.shared.polling.store(true, Ordering::Release);
        let polled = poll(&mut Context::from_waker(&self.waker));
        self.shared.polling.store(false, Ordering::Release);
        // A wake between the two stores went to the task itself: nothing is lost either way.
        (polled, self.shared.woken.swap(false, Ordering::AcqRel))
    }
}
