//! The bytes the capture holds for the connections it follows: segments that came out of order, an
//! unfinished head, a request body kept for its message list. They are leased from the governor's
//! `capture_flows` budget (`src/govern/`: a cap for all connections, a share per client address), and
//! each connection at most `capture.max_connection_bytes`. What a connection cannot draw, it does not
//! hold, and the connection (or the part of it that needed the bytes) is not metered from there on.

use std::net::IpAddr;
use std::sync::Arc;

use crate::govern::{self, Client, Pool};

/// The `capture_flows` budget, and one connection's bound.
#[derive(Clone)]
pub struct Budget {
    pool: Arc<Pool>,
    per_connection: usize,
}

impl Budget {
    pub fn new(pool: Arc<Pool>, per_connection: usize) -> Self {
        Budget {
            pool,
            per_connection,
        }
    }

    /// The lease of a connection from `client`, holding nothing yet.
    pub fn lease(&self, client: IpAddr) -> Lease {
        Lease {
            lease: govern::Lease::on(&self.pool, Client::Address(client)),
            per_connection: self.per_connection,
            client,
        }
    }

    /// A budget of its own (unit tests): `cap` in all, `per_connection` each, no client's share.
    #[cfg(test)]
    pub fn plain(cap: usize, per_connection: usize) -> Self {
        let limits = crate::config::BudgetLimits {
            cap: cap as u64,
            per_client: cap as u64,
        };
        Budget::new(
            Arc::new(Pool::new(govern::Budget::CaptureFlows, limits)),
            per_connection,
        )
    }

    /// Bytes held by every lease now.
    pub fn used(&self) -> usize {
        usize::try_from(self.pool.figures().used).unwrap_or(usize::MAX)
    }
}

/// What one connection holds; given back when it is dropped.
pub struct Lease {
    lease: govern::Lease,
    per_connection: usize,
    client: IpAddr,
}

impl Lease {
    /// Draws `n` more bytes: false (and nothing drawn) when the connection's bound, its client's share
    /// or the budget's cap would be passed.
    #[must_use]
    pub fn grow(&mut self, n: usize) -> bool {
        if self.held().saturating_add(n) > self.per_connection {
            return false;
        }
        self.lease.grow(n as u64).is_ok()
    }

    /// Gives `n` bytes back (at most what it holds).
    pub fn shrink(&mut self, n: usize) {
        self.lease.shrink(n as u64);
    }

    /// Bytes this connection holds now.
    pub fn held(&self) -> usize {
        usize::try_from(self.lease.bytes()).unwrap_or(usize::MAX)
    }

    /// The connection's client.
    pub fn client(&self) -> IpAddr {
        self.client
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BudgetLimits;

    #[test]
    fn a_lease_draws_within_its_connection_its_client_and_the_cap_and_gives_all_back() {
        let limits = BudgetLimits {
            cap: 100,
            per_client: 70,
        };
        let pool = Arc::new(Pool::new(govern::Budget::CaptureFlows, limits));
        let budget = Budget::new(pool, 60);
        let (one, two) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        let mut a = budget.lease(one);
        let mut b = budget.lease(one);
        let mut c = budget.lease(two);
        assert!(a.grow(50));
        assert!(!a.grow(11), "over the connection's 60");
        assert!(a.grow(10));
        assert!(!b.grow(11), "over the client's 70");
        assert!(b.grow(10));
        assert!(!c.grow(31), "over the cap's 100");
        assert!(c.grow(30));
        assert_eq!(budget.used(), 100);
        a.shrink(1000);
        assert_eq!((a.held(), budget.used()), (0, 40));
        drop((b, c));
        assert_eq!(budget.used(), 0);
    }
}
