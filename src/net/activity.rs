//! What one client connection is doing, as far as its timers and the connection cap care: requests in
//! progress, an answer still waiting in its socket, and whether the cap took its place back. One word
//! holds all three, so that the cap's reclaim (`places.rs`) and a request beginning can never both win:
//! a connection is reclaimed only in the instant it is idle, and then closed by its own read side, as
//! its idle timer would close it (`client_conn.rs`), never under a request.
//!
//! A request is in progress from its head being read (the service is called) until its response body
//! is done ([`InProgress`], held by the body: [`Tracked`]); its answer is then unsent until hyper's next
//! flush that completes (`client_conn.rs`): the body's last bytes are in hyper's buffer, not yet in the
//! socket, when the body ends, and a connection closed then would lose them. A connection with neither
//! is idle: a kept-alive one waiting for its next request, or one that has not sent a whole head yet.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

/// The cap took the connection's place: it closes once idle.
const RECLAIMED: usize = 1 << (usize::BITS - 1);
/// A request ended and hyper has not flushed since.
const UNSENT: usize = 1 << (usize::BITS - 2);
/// The low bits: requests in progress.
const REQUESTS: usize = UNSENT - 1;

/// One connection's activity, shared by its read side, its requests' bodies and its port's places.
#[derive(Debug, Default)]
pub struct Activity {
    state: AtomicUsize,
    /// The connection's task, woken when its last request ends or its place is reclaimed: its read
    /// side must then start the idle timer, or close.
    reader: Mutex<Option<Waker>>,
}

/// What the read side should do while the client sends nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Now {
    /// A request is in progress: no timer runs.
    Busy,
    /// No request, but the last answer is not all written yet: the connection is not reclaimed; its
    /// timers run only where no send timeout bounds the wait (the proxy port).
    Unsent,
    /// Nothing in progress: the head or idle timer runs.
    Idle,
    /// Idle, and its place was given to a newer connection: close.
    Reclaimed,
}

impl Activity {
    /// Marks a request in progress until the returned guard is dropped.
    pub fn begin(self: &Arc<Self>) -> InProgress {
        self.state.fetch_add(1, Ordering::AcqRel);
        InProgress(self.clone())
    }

    /// What the connection is doing; `waker` is woken when that changes from busy to idle, or the place
    /// is reclaimed.
    pub fn watch(&self, waker: &Waker) -> Now {
        let mut reader = self.reader.lock().unwrap_or_else(PoisonError::into_inner);
        // Read under the lock that `reclaim` and the last `InProgress` wake under: a change after this
        // load finds the waker stored.
        let state = self.state.load(Ordering::Acquire);
        if !reader.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *reader = Some(waker.clone());
        }
        now(state)
    }

    /// Whether the place was reclaimed and the connection is idle; if not, `cx` is woken when it may be.
    /// For a connection whose reads have not begun (the proxy port's first bytes are peeked first).
    pub fn poll_reclaimed(&self, cx: &Context<'_>) -> Poll<()> {
        match self.watch(cx.waker()) {
            Now::Reclaimed => Poll::Ready(()),
            Now::Busy | Now::Unsent | Now::Idle => Poll::Pending,
        }
    }

    /// Takes the connection's place back if it is idle at this instant, and wakes it to close. False if
    /// a request is in progress, an answer unsent, or it was reclaimed already.
    pub fn reclaim(&self) -> bool {
        // A plain load first: at a cap of busy connections the walk reads each one, and a failed
        // exchange would still take each one's cache line from the core serving it.
        if self.state.load(Ordering::Acquire) != 0 {
            return false;
        }
        let exchanged =
            self.state
                .compare_exchange(0, RECLAIMED, Ordering::AcqRel, Ordering::Acquire);
        if exchanged.is_ok() {
            self.wake();
        }
        exchanged.is_ok()
    }

    /// After a flush that completed: every answer so far is written. Wakes the reader when `reader`
    /// waits on it (its timers, where a send timeout bounds the wait) or the place was reclaimed (it
    /// may close now).
    pub fn sent(&self, reader: bool) {
        if self.state.load(Ordering::Acquire) & UNSENT == 0 {
            return;
        }
        let before = self.state.fetch_and(!UNSENT, Ordering::AcqRel);
        if reader || before & RECLAIMED != 0 {
            self.wake();
        }
    }

    fn wake(&self) {
        let waker = self
            .reader
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

fn now(state: usize) -> Now {
    if state & REQUESTS != 0 {
        Now::Busy
    } else if state & UNSENT != 0 {
        Now::Unsent
    } else if state & RECLAIMED != 0 {
        Now::Reclaimed
    } else {
        Now::Idle
    }
}

/// A request in progress on its connection, until dropped.
pub struct InProgress(Arc<Activity>);

impl Drop for InProgress {
    fn drop(&mut self) {
        let activity = &self.0;
        // Unsent first, so that the connection is never idle in between.
        activity.state.fetch_or(UNSENT, Ordering::AcqRel);
        if activity.state.fetch_sub(1, Ordering::AcqRel) & REQUESTS == 1 {
            activity.wake();
        }
    }
}

pin_project! {
    /// A response body that keeps its request counted as in progress on its connection until done.
    pub struct Tracked<B> {
        #[pin]
        inner: B,
        in_progress: Option<InProgress>,
    }
}

impl<B> Tracked<B> {
    pub fn new(inner: B, in_progress: InProgress) -> Self {
        Tracked {
            inner,
            in_progress: Some(in_progress),
        }
    }
}

impl<B: Body<Data = Bytes>> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>, cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            this.in_progress.take();
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
    use super::*;
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn waker() -> (Waker, Arc<Count>) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (Waker::from(count.clone()), count)
    }

    #[test]
    fn only_an_idle_connection_is_reclaimed_and_its_reader_is_woken() {
        let activity = Arc::new(Activity::default());
        let (waker, woken) = waker();
        let woken = || woken.0.load(Ordering::Relaxed);
        assert_eq!(activity.watch(&waker), Now::Idle);
        let request = activity.begin();
        assert!(!activity.reclaim(), "a request in progress");
        drop(request);
        assert_eq!(woken(), 1, "the last request ended");
        assert!(!activity.reclaim(), "its answer not flushed yet");
        assert_eq!(activity.watch(&waker), Now::Unsent);
        activity.sent(false);
        assert_eq!(woken(), 1, "no reader waits on it");
        assert_eq!(activity.watch(&waker), Now::Idle);
        activity.sent(true);
        assert_eq!(woken(), 1, "nothing was unsent");
        assert!(activity.reclaim());
        assert_eq!(woken(), 2, "told to close");
        assert!(!activity.reclaim(), "reclaimed once");
        assert_eq!(activity.watch(&waker), Now::Reclaimed);
    }

    #[test]
    fn a_request_that_begins_after_the_reclaim_keeps_the_connection_until_it_ends() {
        let activity = Arc::new(Activity::default());
        let (waker, _) = waker();
        assert!(activity.reclaim());
        // hyper had the whole head already: its request is served, then the connection closes.
        let request = activity.begin();
        assert_eq!(activity.watch(&waker), Now::Busy);
        drop(request);
        assert_eq!(activity.watch(&waker), Now::Unsent);
        activity.sent(false);
        assert_eq!(activity.watch(&waker), Now::Reclaimed);
    }
}
