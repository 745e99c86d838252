//! The bytes the capture holds for the connections it follows, bounded per connection
//! (`capture.max_connection_bytes`) and for all of them (`capture.max_buffered_bytes`): segments that
//! came out of order, an unfinished head, a request body kept for its message list. Each connection
//! holds one [`Lease`]; what it cannot draw, it does not hold, and the connection (or the part of it
//! that needed the bytes) is not metered from there on. One small type, so that the shared governor
//! (issue 49) can take its place without the rest of the capture changing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus::IntGauge;

/// The bytes every connection holds together.
#[derive(Clone)]
pub struct Budget(Arc<Shared>);

struct Shared {
    cap: usize,
    used: AtomicUsize,
    /// One connection's cap.
    per_connection: usize,
    /// `tokentap_capture_buffered_bytes`.
    gauge: IntGauge,
}

impl Budget {
    pub fn new(cap: usize, per_connection: usize, gauge: IntGauge) -> Self {
        gauge.set(0);
        Budget(Arc::new(Shared {
            cap,
            used: AtomicUsize::new(0),
            per_connection,
            gauge,
        }))
    }

    /// A connection's lease, holding nothing yet.
    pub fn lease(&self) -> Lease {
        Lease {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// Bytes held by every lease now.
    pub fn used(&self) -> usize {
        self.0.used.load(Ordering::Relaxed)
    }
}

/// What one connection holds; given back when it is dropped.
pub struct Lease {
    budget: Budget,
    bytes: usize,
}

impl Lease {
    /// Draws `n` more bytes: false (and nothing drawn) when the connection's cap or the total would be
    /// passed.
    #[must_use]
    pub fn grow(&mut self, n: usize) -> bool {
        let shared = &self.budget.0;
        if self.bytes.saturating_add(n) > shared.per_connection {
            return false;
        }
        let drawn = shared
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(n).filter(|total| *total <= shared.cap)
            });
        if drawn.is_err() {
            return false;
        }
        self.bytes += n;
        shared.gauge.add(n as i64);
        true
    }

    /// Gives `n` bytes back (at most what it holds).
    pub fn shrink(&mut self, n: usize) {
        let n = n.min(self.bytes);
        self.bytes -= n;
        self.budget.0.used.fetch_sub(n, Ordering::Relaxed);
        self.budget.0.gauge.sub(n as i64);
    }

    /// Bytes this connection holds now.
    pub fn held(&self) -> usize {
        self.bytes
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.shrink(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_draws_within_its_connections_cap_and_the_total_and_gives_all_back_when_dropped() {
        let gauge = IntGauge::new("g", "g").unwrap();
        let budget = Budget::new(100, 60, gauge.clone());
        let mut a = budget.lease();
        let mut b = budget.lease();
        assert!(a.grow(50));
        assert!(!a.grow(11), "over the connection's 60");
        assert!(a.grow(10));
        assert!(!b.grow(41), "over the total's 100");
        assert!(b.grow(40));
        assert_eq!((budget.used(), gauge.get()), (100, 100));
        a.shrink(1000);
        assert_eq!((a.held(), budget.used()), (0, 40));
        drop(b);
        assert_eq!((budget.used(), gauge.get()), (0, 0));
    }
}
