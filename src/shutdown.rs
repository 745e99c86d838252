//! Graceful shutdown, as three phases every part of the proxy can watch. `Serving`; `Draining` (from
//! SIGTERM/SIGINT: `/readyz` answers 503 at once, the proxy port closes, open connections finish the
//! request they carry and close, idle ones close now); `Cut` (the grace period is over: streams still
//! running are broken, requests still waiting for a response head get a 503, each counted
//! `outcome="timeout"`). `drain` runs the sequence and reports what it had to cut ([`Drained`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How long a shutdown waits, once it has cut what was left, for those requests to be recorded.
const CUT_SETTLE: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Serving,
    Draining,
    Cut,
}

/// The shared shutdown phase; clones watch the same one.
#[derive(Clone)]
pub struct Shutdown {
    tx: Arc<watch::Sender<Phase>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown {
            tx: Arc::new(watch::Sender::new(Phase::Serving)),
        }
    }
}

impl Shutdown {
    pub fn phase(&self) -> Phase {
        *self.tx.borrow()
    }

    /// Moves forward to `phase`; a shutdown never goes back.
    pub fn advance(&self, phase: Phase) {
        self.tx.send_if_modified(|now| {
            let forward = *now < phase;
            if forward {
                *now = phase;
            }
            forward
        });
    }

    /// Completes once the shutdown has reached `phase` (at once if it already has).
    pub fn reached(&self, phase: Phase) -> Reached {
        let mut rx = self.tx.subscribe();
        let wait = async move {
            if rx.wait_for(|now| *now >= phase).await.is_err() {
                // The sender lives as long as any clone of `Shutdown`: this cannot happen while the
                // proxy runs, and must never read as "cut".
                std::future::pending::<()>().await;
            }
        };
        Reached {
            wait: Box::pin(wait),
            probe: self.tx.subscribe(),
            waker: None,
        }
    }
}

/// [`Shutdown::reached`]: a future that is cheap to poll again and again. The response tap and the
/// connection task poll it each time they wait for anything else (every body frame of every stream);
/// the watch underneath costs a lock and a coop-budget round each poll. It is polled only when the
/// phase has changed since the last poll or the task's waker is not the one it registered: otherwise
/// the registration it holds still stands and still wakes the task on a change.
pub struct Reached {
    wait: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Its own receiver, only read for whether the phase has changed since it last looked.
    probe: watch::Receiver<Phase>,
    /// The waker `wait` registered when it was last polled.
    waker: Option<Waker>,
}

impl Future for Reached {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let changed = this.probe.has_changed().unwrap_or(true);
        let registered = this.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
        if registered && !changed {
            return Poll::Pending;
        }
        if changed {
            this.probe.borrow_and_update();
        }
        match this.wait.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(()),
            Poll::Pending => {
                this.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A count of things in progress (requests, client connections) that a shutdown waits to see reach
/// zero; clones share the count. Each thing counts from [`Count::enter`] until its [`Counted`] is
/// dropped, so it is given back however its task ends.
#[derive(Clone, Default)]
pub struct Count {
    shared: Arc<CountShared>,
}

#[derive(Default)]
struct CountShared {
    now: AtomicUsize,
    /// Woken each time the count falls to zero.
    zero: Notify,
}

impl Count {
    /// Counts one more until the returned guard is dropped.
    pub fn enter(&self) -> Counted {
        self.shared.now.fetch_add(1, Ordering::AcqRel);
        Counted(self.shared.clone())
    }

    pub fn get(&self) -> usize {
        self.shared.now.load(Ordering::Acquire)
    }

    /// Completes once the count is zero (at once if it is).
    pub async fn zero(&self) {
        loop {
            let fallen = self.shared.zero.notified();
            tokio::pin!(fallen);
            // Registered before the count is read, so a fall to zero in between is not missed.
            fallen.as_mut().enable();
            if self.get() == 0 {
                return;
            }
            fallen.await;
        }
    }
}

/// One thing counted by a [`Count`], until dropped.
pub struct Counted(Arc<CountShared>);

impl Drop for Counted {
    fn drop(&mut self) {
        if self.0.now.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.zero.notify_waiters();
        }
    }
}

/// What a shutdown left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Requests still in flight when the grace period ran out, cut and counted `outcome="timeout"`.
    pub cut: i64,
}

/// Runs a shutdown that [`Shutdown::advance`] has already moved to `Draining`: waits for the
/// accept loop to end (so the port is closed), then for every request and client connection to
/// finish, at most `grace`; then cuts what is left and waits (briefly) until it is recorded.
pub async fn drain(
    shutdown: Shutdown, accept_loop: Option<JoinHandle<()>>, requests: Count, connections: Count,
    grace: Duration,
) -> Drained {
    let deadline = Instant::now() + grace;
    if let Some(task) = accept_loop {
        task.abort();
        let _ = task.await;
    }
    // Connections are awaited too: a request stops counting as in flight when its last frame is
    // handed to the connection, a moment before that connection has written it. With the accept
    // loop gone, no request can start once every connection has closed.
    let finished = || async {
        loop {
            requests.zero().await;
            connections.zero().await;
            if requests.get() == 0 {
                return;
            }
        }
    };
    let _ = tokio::time::timeout_at(deadline, finished()).await;
    let cut = i64::try_from(requests.get()).unwrap_or(i64::MAX);
    if cut > 0 || connections.get() > 0 {
        shutdown.advance(Phase::Cut);
        let _ = tokio::time::timeout_at(Instant::now() + CUT_SETTLE, finished()).await;
    }
    Drained { cut }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Wakes(AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn wakes() -> (Arc<Wakes>, Waker) {
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        (wakes.clone(), Waker::from(wakes))
    }

    #[test]
    fn reached_polled_again_and_again_wakes_on_each_change_and_completes_only_at_its_phase() {
        let shutdown = Shutdown::default();
        let mut cut = shutdown.reached(Phase::Cut);
        let (first, waker) = wakes();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..3 {
            assert!(Pin::new(&mut cut).poll(&mut cx).is_pending());
        }
        shutdown.advance(Phase::Draining);
        assert_eq!(first.0.load(Ordering::SeqCst), 1, "woken by the change");
        assert!(
            Pin::new(&mut cut).poll(&mut cx).is_pending(),
            "draining is not cut"
        );
        // Polled from another task now: that task's waker is the one woken.
        let (second, other) = wakes();
        assert!(Pin::new(&mut cut)
            .poll(&mut Context::from_waker(&other))
            .is_pending());
        shutdown.advance(Phase::Cut);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        assert!(Pin::new(&mut cut).poll(&mut cx).is_ready());
        // Created after the phase was reached: ready at once.
        let mut late = shutdown.reached(Phase::Draining);
        assert!(Pin::new(&mut late).poll(&mut cx).is_ready());
    }

    #[tokio::test(start_paused = true)]
    async fn a_count_wakes_its_waiter_when_the_last_thing_ends_however_many_came_and_went() {
        let count = Count::default();
        count.zero().await;
        let (first, second) = (count.enter(), count.enter());
        assert_eq!(count.get(), 2);
        let waiter = tokio::spawn({
            let count = count.clone();
            async move { count.zero().await }
        });
        tokio::task::yield_now().await;
        drop(first);
        let third = count.enter();
        drop(second);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one is still counted");
        drop(third);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("woken at zero")
            .expect("task");
        assert_eq!(count.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn drain_cuts_what_outlives_the_grace_and_reports_it() {
        let shutdown = Shutdown::default();
        let (requests, connections) = (Count::default(), Count::default());
        let request = requests.enter();
        let connection = connections.enter();
        let cut = shutdown.reached(Phase::Cut);
        let ends = tokio::spawn(async move {
            cut.await;
            drop(request);
            drop(connection);
        });
        let started = Instant::now();
        let drained = drain(
            shutdown,
            None,
            requests,
            connections,
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(drained, Drained { cut: 1 });
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(5),
            "the whole grace, then the cut"
        );
        ends.await.expect("task");
    }

    #[tokio::test]
    async fn phases_only_move_forward_and_reached_sees_past_phases() {
        let shutdown = Shutdown::default();
        assert_eq!(shutdown.phase(), Phase::Serving);
        let cut = tokio::spawn(shutdown.reached(Phase::Cut));
        shutdown.advance(Phase::Draining);
        assert_eq!(shutdown.phase(), Phase::Draining);
        // Already reached: completes at once.
        shutdown.reached(Phase::Draining).await;
        shutdown.reached(Phase::Serving).await;
        assert!(!cut.is_finished());
        shutdown.advance(Phase::Cut);
        shutdown.advance(Phase::Draining);
        assert_eq!(shutdown.phase(), Phase::Cut, "never goes back");
        tokio::time::timeout(Duration::from_secs(5), cut)
            .await
            .expect("a watcher created before the cut sees it")
            .expect("task");
    }
}
