//! A port's connection cap, and who gives up a place at it. At the cap the oldest idle connection (a
//! kept-alive one between requests, or one that has not sent a whole head) is closed to make room for
//! the newcomer, as nginx reclaims idle keep-alive connections when it runs out
//! (`ngx_drain_connections`); only when every connection has a request in progress (an h1 request and
//! its answer, any open h2 stream) or an answer unsent is the newcomer refused. Without it, idle
//! connections, which cost a client nothing to hold, could keep every later client out, the kubelet's
//! probes included.
//!
//! The pick and the connection's own state are one atomic step ([`Activity::reclaim`]): a connection
//! whose request began a moment earlier is passed over, and one whose request begins a moment later
//! is served before it closes. A reclaimed connection's place passes to the newcomer at once; the
//! connection closes at its next read (an h2 one a moment later: `client_conn.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::net::activity::Activity;

/// At most `cap` connections, oldest first.
pub struct Places {
    cap: usize,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    next: u64,
    /// Each connection holding a place, by when it was admitted.
    open: BTreeMap<u64, Arc<Activity>>,
}

/// A connection's place, given back when dropped (unless it was reclaimed: then it is the newcomer's).
pub struct Place {
    places: Arc<Places>,
    id: u64,
}

/// Whether a newcomer got a place.
pub enum Admission {
    /// A free place, or, when `reclaimed`, the oldest idle connection's.
    Admitted { place: Place, reclaimed: bool },
    /// Every place is held by a connection that is busy.
    Refused,
}

impl Places {
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Places {
            cap,
            held: Mutex::new(Held::default()),
        })
    }

    /// A place for the connection whose activity is `activity`.
    pub fn admit(self: &Arc<Self>, activity: &Arc<Activity>) -> Admission {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let mut reclaimed = false;
        if held.open.len() >= self.cap {
            // Every busy connection is passed over: an O(cap) walk of atomics, only at the cap.
            let oldest_idle = held
                .open
                .iter()
                .find(|(_, connection)| connection.reclaim())
                .map(|(id, _)| *id);
            let Some(id) = oldest_idle else {
                return Admission::Refused;
            };
            held.open.remove(&id);
            reclaimed = true;
        }
        let id = held.next;
        held.next += 1;
        held.open.insert(id, activity.clone());
        let place = Place {
            places: self.clone(),
            id,
        };
        Admission::Admitted { place, reclaimed }
    }

    /// Connections holding a place now.
    pub fn held(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
            .len()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut held = self
            .places
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.open.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::activity::Now;

    fn admitted(admission: Admission) -> (Place, bool) {
        match admission {
            Admission::Admitted { place, reclaimed } => (place, reclaimed),
            Admission::Refused => panic!("refused"),
        }
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_gives_its_place_and_busy_ones_never_do() {
        let places = Places::new(3);
        let [a, b, c, d, e]: [Arc<Activity>; 5] = Default::default();
        let waker = std::task::Waker::noop();
        let (place_a, _) = admitted(places.admit(&a));
        let (place_b, reclaimed) = admitted(places.admit(&b));
        let (_place_c, _) = admitted(places.admit(&c));
        assert!(!reclaimed, "a free place");
        // The oldest is busy: the second gives its place.
        let busy_a = a.begin();
        let (_place_d, reclaimed) = admitted(places.admit(&d));
        assert!(reclaimed);
        assert_eq!(b.watch(waker), Now::Reclaimed);
        assert_eq!(c.watch(waker), Now::Idle);
        // The reclaimed connection closing does not free the newcomer's place.
        drop(place_b);
        assert_eq!(places.held(), 3);
        // Every connection busy: refused, and none of them reclaimed.
        let (_busy_c, _busy_d) = (c.begin(), d.begin());
        assert!(matches!(places.admit(&e), Admission::Refused));
        assert_eq!([a.watch(waker), c.watch(waker)], [Now::Busy; 2]);
        // The oldest's request ends: once its answer is written, it is the one to go.
        drop(busy_a);
        assert!(matches!(places.admit(&e), Admission::Refused));
        a.sent(false);
        let (_place_e, reclaimed) = admitted(places.admit(&e));
        assert!(reclaimed);
        assert_eq!(a.watch(waker), Now::Reclaimed);
        drop(place_a);
        assert_eq!(places.held(), 3);
    }
}
