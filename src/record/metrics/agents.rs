//! The conversation families without a `model` label: what recognising conversations found, the turns
//! held to do it, and the turns of each conversation that ended (record/conversations.rs).

use prometheus::{Histogram, IntCounterVec, IntGauge};

use super::family::{self, Registrar};
use crate::record::conversations::{Conversations, Lookup, LOOKUPS, UNREAD};

pub struct Agents {
    lookups: IntCounterVec,
    turns_held: IntGauge,
    conversation_turns: Histogram,
}

impl Agents {
    pub fn register(rows: &Registrar<'_>) -> Result<Self, prometheus::Error> {
        let lookups = rows.fixed_counter(&family::CONVERSATION_LOOKUPS)?;
        for result in LOOKUPS {
            lookups.with_label_values(&[result]);
        }
        Ok(Agents {
            lookups,
            turns_held: rows.single_gauge(&family::CONVERSATION_TURNS_HELD)?,
            conversation_turns: rows.single_histogram(&family::CONVERSATION_TURNS)?,
        })
    }

    /// A request with a message list was placed (`Some`), or its list was not read in time (`None`).
    pub fn count_lookup(&self, lookup: Option<Lookup>) {
        let result = lookup.map_or(UNREAD, Lookup::as_str);
        self.lookups.with_label_values(&[result]).inc();
    }

    /// Observes the conversations that have ended by now and the turns still held.
    pub fn sweep(&self, conversations: &Conversations, now: tokio::time::Instant) {
        let (ended, held) = conversations.take_ended(now);
        for turns in ended {
            self.conversation_turns.observe(f64::from(turns));
        }
        self.turns_held.set(i64::try_from(held).unwrap_or(i64::MAX));
    }
}
