//! `conversations:`: recognising the turns of a conversation from the wire, and the bound on what is
//! kept to do it (record/conversations.rs).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{format_duration, invalid, values, ConfigError};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Conversations {
    /// Turns remembered (a digest, an id and an instant each, about 100 bytes), least recently used
    /// first out; `0`: conversations are not recognised.
    pub max_turns: usize,
    /// Turns one client (its tenant where `tenants:` is configured, else its address) may hold; a
    /// client at it forgets its own least recently used turn for a new one, never another client's.
    /// `None`: an eighth of `max_turns`.
    pub max_turns_per_client: Option<usize>,
    /// A conversation with no turn for this long has ended (its turn count is observed).
    #[serde(with = "values::duration")]
    pub idle: Duration,
}

impl Default for Conversations {
    fn default() -> Self {
        Conversations {
            max_turns: 100_000,
            max_turns_per_client: None,
            idle: Duration::from_secs(30 * 60),
        }
    }
}

impl Conversations {
    pub const MAX_TURNS: usize = 10_000_000;
    /// What one turn held costs, about: its digest, id, number and instants, and the LRU's node.
    pub const TURN_BYTES: u64 = 128;

    /// Turns one client may hold: `max_turns_per_client`, else an eighth of `max_turns` (at least 1).
    pub fn turns_per_client(&self) -> usize {
        self.max_turns_per_client
            .unwrap_or(self.max_turns / 8)
            .clamp(1.min(self.max_turns), self.max_turns)
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_turns > Self::MAX_TURNS {
            let value = self.max_turns.to_string();
            let reason = "must be at most 10000000 (about 1 GB of state)";
            return Err(invalid("conversations.max_turns", "value", &value, reason));
        }
        if let Some(share) = self.max_turns_per_client {
            if self.max_turns > 0 && (share == 0 || share > self.max_turns) {
                let reason = format!(
                    "must be between 1 and conversations.max_turns ({})",
                    self.max_turns
                );
                let key = "conversations.max_turns_per_client";
                return Err(invalid(key, "value", &share.to_string(), reason));
            }
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(7 * 24 * 3600)).contains(&self.idle) {
            let value = format_duration(self.idle);
            let reason = "must be between 1s and 7d";
            return Err(invalid("conversations.idle", "duration", &value, reason));
        }
        Ok(())
    }
}
