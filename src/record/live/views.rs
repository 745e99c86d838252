//! The live page's JSON views: each one computed once per snapshot and window and shared by everyone who
//! asks for it, computed off the ring's lock, and only so many held at once.
//!
//! A view costs CPU (every point of every kept model's series) and memory (its JSON, a few MiB with a long
//! history) for as long as the connection sending it holds it. Computed under the ring's lock, a thousand
//! requests for distinct windows queued their work there, and a normal refresh waited behind it for
//! seconds; held by clients that never read, each view stayed in memory until `client_idle`. So a view
//! is computed on the blocking pool from a copy of the ring's list of snapshots (the snapshots themselves
//! are shared, not copied), taken in one short hold of the lock; requests for the same window and
//! snapshot wait for that one computation and get the very same bytes; and at most [`VIEWS_HELD`]
//! distinct views are being computed or held by connections still sending them. A request that would
//! need yet another gets [`ViewError::Busy`] at once, answered `503` and counted
//! (`tokentap_metrics_port_refused_total{reason="live_busy"}`): whatever clients ask, the views in memory
//! and the work in progress are bounded. At most [`COMPUTING`] of them (besides the page's own) are
//! computed at once, on two cores that is all the blocking pool should give them.
//!
//! The page's own refresh asks for `ui.window`, and it must not be the one refused: two of the places
//! are kept for that window, its newest view stays cached for the next refresh, and when even those
//! are taken it gets that newest view, one snapshot behind perhaps, rather than a `503`.

use std::sync::{Arc, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use super::{view, Live, Ring};
use crate::config::Slo;

/// Distinct views that may be computing or held by connections at once.
pub const VIEWS_HELD: usize = 8;
/// Of those, the places only `ui.window`, the page's own, may take.
const KEPT_FOR_THE_PAGE: usize = 2;
/// Views of other windows computed at once (each needs scratch memory several times its JSON).
const COMPUTING: usize = 2;

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ViewError {
    #[error("{VIEWS_HELD} distinct views are being computed or sent; ask again in a moment")]
    Busy,
    #[error("encoding: {0}")]
    Encoding(String),
    #[error("live view unavailable: shutting down")]
    ShuttingDown,
}

/// A view is the window asked for, over the ring as of its newest snapshot and its length, with the
/// ceilings current when it was asked for (a reload's are shown from the next view on).
#[derive(Clone, PartialEq)]
struct Key {
    window: Duration,
    newest: u64,
    points: usize,
    slo: Slo,
}
type Answer = Result<Bytes, ViewError>;

/// One encoded view; everyone who gets it shares these bytes.
struct Encoded(Vec<u8>);

/// The owner of a view's bytes in every [`Bytes`] handed out: the view is freed with the last of them.
struct Shared(Arc<Encoded>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0 .0
    }
}

enum State {
    Computing(watch::Receiver<Option<Answer>>),
    /// Alive while some connection (or [`Views::latest`]) holds it.
    Held(Weak<Encoded>),
}

/// The views computing or held.
#[derive(Default)]
pub struct Views {
    entries: Vec<(Key, State)>,
    /// The newest view of `ui.window` computed, kept for the page's next refresh.
    latest: Option<Arc<Encoded>>,
}

impl Views {
    fn computing(&self) -> usize {
        let computing = |(_, state): &&(Key, State)| matches!(state, State::Computing(_));
        self.entries.iter().filter(computing).count()
    }

    /// Forgets the views no one holds any more.
    fn prune(&mut self) {
        self.entries.retain(|(_, state)| match state {
            State::Computing(_) => true,
            State::Held(view) => view.strong_count() > 0,
        });
    }
}

fn key_of(ring: &Ring, window: Duration, slo: Slo) -> Key {
    Key {
        window,
        newest: ring.points.back().map_or(0, |p| p.unix_ms),
        points: ring.points.len(),
        slo,
    }
}

/// Removes its view's entry if it is still computing when dropped: the computation ended without an
/// answer (it panicked, or the runtime is going away), and its place must not stay taken.
struct Computing {
    live: Arc<Live>,
    key: Key,
}

impl Drop for Computing {
    fn drop(&mut self) {
        let mut views = self.live.views();
        views
            .entries
            .retain(|(key, state)| *key != self.key || matches!(state, State::Held(_)));
    }
}

impl Live {
    fn views(&self) -> MutexGuard<'_, Views> {
        self.views.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The JSON view over `window` (docs/live.md), encoded once per snapshot and window, off the async
    /// workers and off the ring's lock.
    pub async fn view(self: &Arc<Self>, window: Duration) -> Result<Bytes, ViewError> {
        let slo = self.slo();
        let key = key_of(&self.ring(), window, slo);
        let the_page = window == self.ui.window;
        let places = match the_page {
            true => VIEWS_HELD,
            false => VIEWS_HELD - KEPT_FOR_THE_PAGE,
        };
        let mut answer = {
            let mut views = self.views();
            views.prune();
            let found = views.entries.iter().find(|(k, _)| *k == key);
            match found.map(|(_, state)| state) {
                Some(State::Computing(answer)) => answer.clone(),
                // Pruned just now, so it is held: shared.
                Some(State::Held(view)) if view.strong_count() > 0 => {
                    if let Some(view) = view.upgrade() {
                        return Ok(Bytes::from_owner(Shared(view)));
                    }
                    self.compute(&mut views, key)
                }
                _ if views.entries.len() >= places
                    || !the_page && views.computing() >= COMPUTING =>
                {
                    return match views.latest.as_ref().filter(|_| the_page) {
                        Some(latest) => Ok(Bytes::from_owner(Shared(latest.clone()))),
                        None => Err(ViewError::Busy),
                    };
                }
                _ => self.compute(&mut views, key),
            }
        };
        let ready = answer.wait_for(Option::is_some).await;
        let ready = ready.map_err(|_| ViewError::ShuttingDown)?;
        ready.clone().unwrap_or(Err(ViewError::ShuttingDown))
    }

    /// Starts computing the view of `key` on the blocking pool and enters it in `views`.
    fn compute(self: &Arc<Self>, views: &mut Views, key: Key) -> watch::Receiver<Option<Answer>> {
        let (tx, answer) = watch::channel(None);
        views
            .entries
            .push((key.clone(), State::Computing(answer.clone())));
        let ring = self.ring().clone();
        let computing = Computing {
            live: self.clone(),
            key,
        };
        tokio::task::spawn_blocking(move || {
            let live = &computing.live;
            let window = computing.key.window;
            let mut shown = view::view(&ring, &computing.key.slo, live.ui.interval, window);
            shown.fleet = live.ui.prometheus.is_some();
            let encoded = serde_json::to_vec(&shown);
            let answer = match encoded {
                Ok(mut json) => {
                    // Held for as long as a client takes to read it: no spare capacity with it.
                    json.shrink_to_fit();
                    let json = Arc::new(Encoded(json));
                    let mut views = live.views();
                    let key = &computing.key;
                    if let Some(entry) = views.entries.iter_mut().find(|(k, _)| k == key) {
                        entry.1 = State::Held(Arc::downgrade(&json));
                    }
                    if window == live.ui.window {
                        views.latest = Some(json.clone());
                    }
                    Ok(Bytes::from_owner(Shared(json)))
                }
                Err(err) => Err(ViewError::Encoding(err.to_string())),
            };
            drop(computing);
            tx.send_replace(Some(answer));
        });
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn live() -> Arc<Live> {
        let live = Arc::new(Live::new(&Config::default()));
        live.ring().push(&[], tokio::time::Instant::now(), 1_000);
        live
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_window_asked_twice_is_computed_once_and_shares_its_bytes() {
        let live = live();
        let minute = Duration::from_secs(60);
        let (a, b) = (
            live.view(minute).await.unwrap(),
            live.view(minute).await.unwrap(),
        );
        assert_eq!((a.as_ptr(), a.len()), (b.as_ptr(), b.len()));
        let other = live.view(Duration::from_secs(30)).await.unwrap();
        assert_ne!(other.as_ptr(), a.as_ptr());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn beyond_the_views_held_another_window_is_busy_and_the_page_still_gets_its_own() {
        let live = live();
        let page = live.ui.window;
        let first = live.view(page).await.unwrap();
        let others = VIEWS_HELD - KEPT_FOR_THE_PAGE - 1;
        let mut held = Vec::new();
        for seconds in 0..others as u64 {
            held.push(live.view(Duration::from_secs(10 + seconds)).await.unwrap());
        }
        let another = Duration::from_secs(1000);
        assert_eq!(live.view(another).await, Err(ViewError::Busy));
        // A window already held is still answered, from memory.
        let again = live.view(Duration::from_secs(10)).await.unwrap();
        assert_eq!(again.as_ptr(), held[0].as_ptr());
        drop(again);
        held.remove(0);
        // Another window may have the place let go; the next is busy again.
        let got = live.view(another).await.unwrap();
        assert_eq!(
            live.view(Duration::from_secs(2000)).await,
            Err(ViewError::Busy)
        );
        // The page's window has places of its own, and past those its newest view.
        live.ring().push(&[], tokio::time::Instant::now(), 2_000);
        let second = live.view(page).await.unwrap();
        assert_ne!(second.as_ptr(), first.as_ptr());
        live.ring().push(&[], tokio::time::Instant::now(), 3_000);
        let third = live.view(page).await.unwrap();
        assert_ne!(third.as_ptr(), second.as_ptr());
        live.ring().push(&[], tokio::time::Instant::now(), 4_000);
        let fourth = live.view(page).await.unwrap();
        assert_eq!(
            fourth.as_ptr(),
            third.as_ptr(),
            "every place taken: the newest it has"
        );
        drop((first, second, held, got));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // The lock is held across the wait on purpose: the view must not need it.
    #[allow(clippy::await_holding_lock)]
    async fn a_view_is_computed_while_the_ring_takes_new_snapshots() {
        let live = live();
        // Holding the ring's lock would stall a view computed under it; this one only needs it to start.
        let view = live.view(Duration::from_secs(60));
        tokio::pin!(view);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(std::future::Future::poll(view.as_mut(), &mut cx).is_pending());
        let ring = live.ring();
        let done = tokio::time::timeout(Duration::from_secs(30), view).await;
        assert!(matches!(done, Ok(Ok(_))), "{done:?}");
        drop(ring);
    }
}
