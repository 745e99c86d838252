//! `budgets:`: what clients may make tokentap hold (and inflate) on their behalf, per named budget: a
//! cap for all clients together and a share for each (`src/govern/` draws from them; docs/operations.md
//! says why each default is what it is).

use serde::{Deserialize, Serialize};

use super::{invalid, values, ConfigError};

/// One budget's bounds, in bytes (`inflate`: bytes per second).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetLimits {
    /// All clients together.
    pub cap: u64,
    /// One client; at most `cap`.
    pub per_client: u64,
}

/// Every budget but the conversations' (`conversations.max_turns` and `max_turns_per_client`, in
/// turns): its cap, and each client's share as `<budget>_per_client`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Budgets {
    /// Request bodies held whole (up to `limits.hold_request_body_bytes` each) so they can be sent
    /// again. A client over its share waits for its own bodies to go (the whole body within
    /// `timeouts.held_request_body`); one within its share never waits: when the cap is reached its
    /// body is sent as it arrives instead (not held).
    #[serde(with = "values::size")]
    pub held_bodies: u64,
    /// One client's share of `held_bodies` (its tenant where `tenants.allow` names it, else its address).
    #[serde(with = "values::size")]
    pub held_bodies_per_client: u64,
    /// The unfinished event or line of each response stream being metered (each at most
    /// `metering.max_event_bytes`).
    #[serde(with = "values::size")]
    pub event_bytes: u64,
    /// One client's share of `event_bytes` (its tenant where `tenants.allow` names it, else its address).
    #[serde(with = "values::size")]
    pub event_bytes_per_client: u64,
    /// The digests of the message lists being read (16 bytes a message).
    #[serde(with = "values::size")]
    pub message_lists: u64,
    /// One client's share of `message_lists` (its tenant where `tenants.allow` names it, else its address).
    #[serde(with = "values::size")]
    pub message_lists_per_client: u64,
    /// The realtime meter's readers of each WebSocket session: a `permessage-deflate` inflater is
    /// about 43 KiB per direction.
    #[serde(with = "values::size")]
    pub session_meters: u64,
    /// One client's share of `session_meters` (its tenant where `tenants.allow` names it, else its address).
    #[serde(with = "values::size")]
    pub session_meters_per_client: u64,
    /// Bytes inflated per second to read compressed WebSocket messages (CPU, not memory).
    #[serde(with = "values::size")]
    pub inflate: u64,
    /// One client's share of `inflate` (its tenant where `tenants.allow` names it, else its address).
    #[serde(with = "values::size")]
    pub inflate_per_client: u64,
    /// Request records waiting for the writer's thread.
    #[serde(with = "values::size")]
    pub records: u64,
    /// One client's share of `records` (its tenant where `tenants.allow` names it, else its address).
    #[serde(with = "values::size")]
    pub records_per_client: u64,
    /// Spans waiting for the exporter.
    #[serde(with = "values::size")]
    pub spans: u64,
    /// One client's share of `spans` (its tenant where `tenants.allow` names it, else its address).
    #[serde(with = "values::size")]
    pub spans_per_client: u64,
    /// `/metrics` pages encoded for scrapers that have not taken them yet.
    #[serde(with = "values::size")]
    pub metrics_pages: u64,
    /// One client's share of `metrics_pages` (its tenant where `tenants.allow` names it, else its address).
    #[serde(with = "values::size")]
    pub metrics_pages_per_client: u64,
    /// What `tokentap capture` holds of the connections it follows (each at most
    /// `capture.max_connection_bytes`).
    #[serde(with = "values::size")]
    pub capture_flows: u64,
    /// One client address's share of `capture_flows`.
    #[serde(with = "values::size")]
    pub capture_flows_per_client: u64,
}

impl Default for Budgets {
    fn default() -> Self {
        const MIB: u64 = 1 << 20;
        Budgets {
            held_bodies: 64 * MIB,
            held_bodies_per_client: 16 * MIB,
            event_bytes: 64 * MIB,
            event_bytes_per_client: 16 * MIB,
            message_lists: 16 * MIB,
            message_lists_per_client: 4 * MIB,
            session_meters: 64 * MIB,
            session_meters_per_client: 16 * MIB,
            inflate: 64 * MIB,
            inflate_per_client: 16 * MIB,
            records: 16 * MIB,
            records_per_client: 4 * MIB,
            spans: 16 * MIB,
            spans_per_client: 4 * MIB,
            metrics_pages: 64 * MIB,
            metrics_pages_per_client: 16 * MIB,
            capture_flows: 256 * MIB,
            capture_flows_per_client: 64 * MIB,
        }
    }
}

impl Budgets {
    /// Each budget with its key, in the order of the section.
    pub fn named(&self) -> [(&'static str, BudgetLimits); 9] {
        [
            (
                "held_bodies",
                BudgetLimits {
                    cap: self.held_bodies,
                    per_client: self.held_bodies_per_client,
                },
            ),
            (
                "event_bytes",
                BudgetLimits {
                    cap: self.event_bytes,
                    per_client: self.event_bytes_per_client,
                },
            ),
            (
                "message_lists",
                BudgetLimits {
                    cap: self.message_lists,
                    per_client: self.message_lists_per_client,
                },
            ),
            (
                "session_meters",
                BudgetLimits {
                    cap: self.session_meters,
                    per_client: self.session_meters_per_client,
                },
            ),
            (
                "inflate",
                BudgetLimits {
                    cap: self.inflate,
                    per_client: self.inflate_per_client,
                },
            ),
            (
                "records",
                BudgetLimits {
                    cap: self.records,
                    per_client: self.records_per_client,
                },
            ),
            (
                "spans",
                BudgetLimits {
                    cap: self.spans,
                    per_client: self.spans_per_client,
                },
            ),
            (
                "metrics_pages",
                BudgetLimits {
                    cap: self.metrics_pages,
                    per_client: self.metrics_pages_per_client,
                },
            ),
            (
                "capture_flows",
                BudgetLimits {
                    cap: self.capture_flows,
                    per_client: self.capture_flows_per_client,
                },
            ),
        ]
    }

    /// `held`: the largest body held whole (`limits.hold_request_body_bytes`), which a client's share
    /// must be able to hold.
    pub(super) fn validate(&self, held: u64) -> Result<(), ConfigError> {
        for (name, budget) in self.named() {
            if budget.cap == 0 {
                let key = format!("budgets.{name}");
                return Err(invalid(&key, "size", "0", "must be greater than zero"));
            }
            if budget.per_client == 0 || budget.per_client > budget.cap {
                let key = format!("budgets.{name}_per_client");
                let reason = format!(
                    "must be between 1 and budgets.{name} ({} bytes)",
                    budget.cap
                );
                return Err(invalid(
                    &key,
                    "size",
                    &budget.per_client.to_string(),
                    reason,
                ));
            }
        }
        let share = self.held_bodies_per_client;
        if held > 0 && share < held {
            let key = "budgets.held_bodies_per_client";
            let reason = format!(
                "must be at least limits.hold_request_body_bytes ({held} bytes), or no body of that size could be held"
            );
            return Err(invalid(key, "size", &share.to_string(), reason));
        }
        Ok(())
    }
}
