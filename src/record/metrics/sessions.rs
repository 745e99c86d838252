//! A finished WebSocket session counted (`tokentap_sessions_total`, its duration, its responses) under
//! its model's label, and the messages the realtime meter passed over unread. The rows are model
//! labelled, so they are registered and retired with the others (`registry.rs`); the responses inside
//! a session are requests of `api="realtime"` in the request families.

use prometheus::IntCounter;

use super::family::{self, SESSION_SKIP_REASONS};
use super::registry::Registrar;
use super::{Metrics, Series};
use crate::record::outcome::Outcome;

/// `tokentap_session_messages_skipped_total`, one counter per reason of [`SESSION_SKIP_REASONS`].
pub struct SessionSkips([IntCounter; 3]);

impl SessionSkips {
    pub(super) fn register(rows: &Registrar<'_>) -> Result<Self, prometheus::Error> {
        let skipped = rows.fixed_counter(&family::SESSION_MESSAGES_SKIPPED)?;
        Ok(SessionSkips([0, 1, 2].map(|i| {
            skipped.with_label_values(&[SESSION_SKIP_REASONS[i]])
        })))
    }

    /// One message skipped for `reason` (one of [`SESSION_SKIP_REASONS`]; another is not counted).
    pub fn count(&self, reason: &str) {
        if let Some(i) = SESSION_SKIP_REASONS.iter().position(|r| *r == reason) {
            self.0[i].inc();
        }
    }
}

impl Metrics {
    /// A session that ended as `outcome` after `seconds`, with `responses` metered in it, counted under
    /// `series`'s model and API.
    pub fn count_session(&self, series: &Series, outcome: Outcome, seconds: f64, responses: u64) {
        let (model, api) = (&*series.model, series.api.as_str());
        if let Some(total) = self.families.counter(&family::SESSIONS) {
            (total.with_label_values(&[model, api, outcome.as_str()])).inc();
        }
        if let Some(duration) = self.families.histogram(&family::SESSION_DURATION) {
            duration.with_label_values(&[model, api]).observe(seconds);
        }
        if let Some(counted) = self.families.histogram(&family::SESSION_RESPONSES) {
            counted
                .with_label_values(&[model, api])
                .observe(responses as f64);
        }
    }
}
