//! The conversation families without a `model` label: what recognising conversations found (and why a
//! list was not read), the turns held to do it, and the turns of each conversation that ended
//! (record/conversations.rs).

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge};

use super::family;
use super::registry::Registrar;
use crate::record::conversations::{Conversations, Lookup, Unread, LOOKUPS, UNREAD};

pub struct Agents {
    lookups: IntCounterVec,
    /// One counter per [`Unread::ALL`], in its order.
    unread: [IntCounter; Unread::ALL.len()],
    turns_held: IntGauge,
    conversation_turns: Histogram,
}

impl Agents {
    pub fn register(rows: &Registrar<'_>) -> Result<Self, prometheus::Error> {
        let lookups = rows.fixed_counter(&family::CONVERSATION_LOOKUPS)?;
        for result in LOOKUPS {
            lookups.with_label_values(&[result]);
        }
        let unread = rows.fixed_counter(&family::CONVERSATION_UNREAD)?;
        let unread = Unread::ALL.map(|reason| unread.with_label_values(&[reason.as_str()]));
        Ok(Agents {
            lookups,
            unread,
            turns_held: rows.single_gauge(&family::CONVERSATION_TURNS_HELD)?,
            conversation_turns: rows.single_histogram(&family::CONVERSATION_TURNS)?,
        })
    }

    /// A request with a message list was placed.
    pub fn count_lookup(&self, lookup: Lookup) {
        self.lookups.with_label_values(&[lookup.as_str()]).inc();
    }

    /// A request's message list was not read, for `reason`.
    pub fn count_unread(&self, reason: Unread) {
        self.lookups.with_label_values(&[UNREAD]).inc();
        // `Unread::ALL` lists the reasons in their declared order.
        let at = Unread::ALL
            .iter()
            .position(|r| r.as_str() == reason.as_str());
        if let Some(counter) = at.and_then(|i| self.unread.get(i)) {
            counter.inc();
        }
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
