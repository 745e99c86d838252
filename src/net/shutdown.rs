//! Graceful shutdown, as three phases every part of the proxy can watch. `Serving`; `Draining` (from
//! SIGTERM/SIGINT: `/readyz` answers 503 at once, the proxy port closes, open connections finish the
//! request they carry and close, idle ones close now); `Cut` (the grace period is over: streams still
//! running are broken, requests still waiting for a response head get a 503, each counted
//! `outcome="timeout"`). `drain` runs the sequence and reports what it had to cut ([`Drained`]).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::record::exchange::Recorder;

/// How long a shutdown waits, once it has cut what was left, for those requests to be recorded.
const CUT_SETTLE: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(10);

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
    pub fn reached(&self, phase: Phase) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.tx.subscribe();
        async move {
            if rx.wait_for(|now| *now >= phase).await.is_err() {
                // The sender lives as long as any clone of `Shutdown`: this cannot happen while the
                // proxy runs, and must never read as "cut".
                std::future::pending::<()>().await;
            }
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
pub(crate) async fn drain(
    shutdown: Shutdown,
    accept_loop: Option<JoinHandle<()>>,
    recorder: Arc<Recorder>,
    open_connections: Arc<AtomicUsize>,
    grace: Duration,
) -> Drained {
    let deadline = Instant::now() + grace;
    if let Some(task) = accept_loop {
        task.abort();
        let _ = task.await;
    }
    let in_flight = || recorder.metrics.in_flight_total();
    let open = || open_connections.load(Ordering::Acquire);
    // Connections are awaited too: a request stops counting as in flight when its last frame is
    // handed to the connection, a moment before that connection has written it.
    while (in_flight() > 0 || open() > 0) && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
    let cut = in_flight();
    if cut > 0 || open() > 0 {
        shutdown.advance(Phase::Cut);
        let settle = Instant::now() + CUT_SETTLE;
        while (in_flight() > 0 || open() > 0) && Instant::now() < settle {
            tokio::time::sleep(POLL).await;
        }
    }
    Drained { cut }
}

#[cfg(test)]
mod tests {
    use super::*;

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
