//! The governor: one place for everything whose size a client or an upstream decides. Every buffer
//! of that kind (a held request body, a stream's unfinished event, a realtime session's readers, a
//! message list's digests, the conversations' turns, the records and spans waiting to be written,
//! the metrics pages a slow scraper holds) and the CPU a client can make tokentap spend reading its
//! frames (inflating `permessage-deflate`) draws from a named [`Budget`]: a cap for all clients
//! together and a share for each one. A new feature that holds what a peer sends takes a [`Lease`]
//! here; it never invents a limit of its own.
//!
//! What a refusal means is the caller's rule, and it is always the same one: tokentap gives up
//! *measuring* the message, stream or session that would go past a budget and forwards its bytes
//! unchanged and at once (the request says it was not metered, and why). Only a body held so that it
//! can be sent again may wait for room, and then only the client over its share
//! ([`Lease::grow_waiting`]); a client within its share never waits behind another one.
//!
//! Who a client is: its tenant where `tenants:` is configured (behind a gateway every request shares
//! one address, and the tenant is what the operator named), else its address ([`Client`]). Each
//! budget's use, cap and refusals are read by the metrics (`tokentap_budget_bytes{budget,state}`,
//! `tokentap_budget_refusals_total{budget,reason}`) through [`Governor::figures`].

mod pool;
mod rate;

use std::net::IpAddr;
use std::sync::Arc;

pub use pool::{Lease, Pool};
pub use rate::{Rate, RateUse};

use crate::config::{BudgetLimits, Budgets, Conversations};

/// A named budget (the `budget` label; docs/operations.md lists each with its default and why).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Budget {
    /// Request bodies held whole before they are sent, so they can be sent again.
    HeldBodies,
    /// The unfinished event (SSE) or line (NDJSON) of each response stream being metered.
    EventBytes,
    /// The digests of the message lists being read for conversations.
    MessageLists,
    /// The realtime meter's readers of each WebSocket session (their inflaters above all).
    SessionMeters,
    /// Bytes inflated per second to read `permessage-deflate` messages: CPU, not memory.
    Inflate,
    /// The turns the conversations hold.
    Conversations,
    /// Request records waiting for the writer's thread.
    Records,
    /// Spans waiting for the exporter.
    Spans,
    /// `/metrics` pages encoded for scrapers that have not taken them yet.
    MetricsPages,
    /// What capture mode holds of the connections it follows (segments out of order, unfinished
    /// heads, bodies kept for their message list).
    CaptureFlows,
}

impl Budget {
    pub const ALL: [Budget; 10] = [
        Budget::HeldBodies,
        Budget::EventBytes,
        Budget::MessageLists,
        Budget::SessionMeters,
        Budget::Inflate,
        Budget::Conversations,
        Budget::Records,
        Budget::Spans,
        Budget::MetricsPages,
        Budget::CaptureFlows,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Budget::HeldBodies => "held_bodies",
            Budget::EventBytes => "event_bytes",
            Budget::MessageLists => "message_lists",
            Budget::SessionMeters => "session_meters",
            Budget::Inflate => "inflate",
            Budget::Conversations => "conversations",
            Budget::Records => "records",
            Budget::Spans => "spans",
            Budget::MetricsPages => "metrics_pages",
            Budget::CaptureFlows => "capture_flows",
        }
    }

    /// A rate (bytes per second of work), not bytes held.
    pub const fn is_rate(self) -> bool {
        matches!(self, Budget::Inflate)
    }
}

/// The `budget` label's values, in [`Budget::ALL`]'s order.
pub const BUDGET_NAMES: [&str; Budget::ALL.len()] = {
    let mut names = [""; Budget::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = Budget::ALL[i].as_str();
        i += 1;
    }
    names
};

/// Why a budget refused: the `reason` label of the refusals and of what was not metered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Spent {
    /// Every client's use together reached the cap.
    Cap,
    /// This client's use reached its share.
    Share,
}

impl Spent {
    pub const ALL: [Spent; 2] = [Spent::Cap, Spent::Share];

    pub const fn as_str(self) -> &'static str {
        match self {
            Spent::Cap => "cap",
            Spent::Share => "share",
        }
    }
}

/// The `reason` label's values of the refusals, in [`Spent::ALL`]'s order.
pub const SPENT_REASONS: [&str; 2] = [Spent::Cap.as_str(), Spent::Share.as_str()];

/// Who a client is, for its share: its tenant where tenants are configured, else its address. A
/// request with neither (a unit test, a capture with no address) has no share: only the cap holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Client {
    #[default]
    Unknown,
    Address(IpAddr),
    Tenant(Arc<str>),
}

impl Client {
    /// The client of a request from `address` with `tenant` (the tenant label, when configured).
    pub fn of(address: Option<IpAddr>, tenant: Option<&str>) -> Client {
        match (tenant, address) {
            (Some(tenant), _) => Client::Tenant(Arc::from(tenant)),
            (None, Some(address)) => Client::Address(address),
            (None, None) => Client::Unknown,
        }
    }
}

/// One budget's figures now, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    /// Bytes held now (a rate: bytes spent in the last second).
    pub used: u64,
    pub cap: u64,
    /// Refusals since start, by [`Spent`] in [`Spent::ALL`]'s order.
    pub refused: [u64; 2],
}

/// Every budget (see the module's documentation); one per process, shared by every request.
pub struct Governor {
    pools: [Arc<Pool>; Budget::ALL.len()],
    inflate: Arc<Rate>,
}

impl Governor {
    /// The budgets of `budgets:`, and the conversations' from `conversations:` (turns, each
    /// [`Conversations::TURN_BYTES`]).
    pub fn new(budgets: &Budgets, conversations: &Conversations) -> Arc<Governor> {
        let turns = BudgetLimits {
            cap: conversations.max_turns as u64 * Conversations::TURN_BYTES,
            per_client: conversations.turns_per_client() as u64 * Conversations::TURN_BYTES,
        };
        let pools = Budget::ALL.map(|budget| {
            let limits = match budget {
                Budget::Conversations => turns,
                _ => budgets.limits(budget),
            };
            Arc::new(Pool::new(budget, limits))
        });
        Arc::new(Governor {
            pools,
            inflate: Arc::new(Rate::new(Budget::Inflate, budgets.limits(Budget::Inflate))),
        })
    }

    /// A governor with the documented defaults (tests, benchmarks).
    pub fn with_defaults() -> Arc<Governor> {
        Governor::new(&Budgets::default(), &Conversations::default())
    }

    /// An empty lease on `budget` for `client`: it holds nothing until it grows.
    pub fn lease(&self, budget: Budget, client: &Client) -> Lease {
        Lease::on(self.pool(budget), client.clone())
    }

    /// `budget`'s pool (a byte budget; the rate budget has its own, [`Governor::inflate`]).
    pub fn pool(&self, budget: Budget) -> &Arc<Pool> {
        &self.pools[budget as usize]
    }

    /// The CPU budget for inflating what a client's frames compressed.
    pub fn inflate(&self, client: &Client) -> RateUse {
        RateUse::new(self.inflate.clone(), client.clone())
    }

    /// Each budget's figures now, in [`Budget::ALL`]'s order.
    pub fn figures(&self) -> [Figures; Budget::ALL.len()] {
        Budget::ALL.map(|budget| match budget {
            Budget::Inflate => self.inflate.figures(),
            _ => self.pools[budget as usize].figures(),
        })
    }
}

impl Budgets {
    /// `budget`'s cap and share as configured (the conversations' are in turns: [`Governor::new`]).
    fn limits(&self, budget: Budget) -> BudgetLimits {
        let named = self.named();
        (named.iter())
            .find(|(name, _)| *name == budget.as_str())
            .map_or(
                BudgetLimits {
                    cap: 0,
                    per_client: 0,
                },
                |(_, limits)| *limits,
            )
    }
}

#[cfg(test)]
mod tests;
