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
    /// A conversation with no turn for this long has ended (its turn count is observed).
    #[serde(with = "values::duration")]
    pub idle: Duration,
}

impl Default for Conversations {
    fn default() -> Self {
        Conversations {
            max_turns: 100_000,
            idle: Duration::from_secs(30 * 60),
        }
    }
}

impl Conversations {
    pub const MAX_TURNS: usize = 10_000_000;

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_turns > Self::MAX_TURNS {
            let value = self.max_turns.to_string();
            let reason = "must be at most 10000000 (about 1 GB of state)";
            return Err(invalid("conversations.max_turns", "value", &value, reason));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(7 * 24 * 3600)).contains(&self.idle) {
            let value = format_duration(self.idle);
            let reason = "must be between 1s and 7d";
            return Err(invalid("conversations.idle", "duration", &value, reason));
        }
        Ok(())
    }
}
