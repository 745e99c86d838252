//! The conversations of a record set (records with `conversation`, docs/metrics.md "Conversations"):
//! how many, their turns, their wall time (first turn's start to last turn's end), how much of it was
//! the server's (the turns' E2E) and how much the client's between turns (the think times), and the
//! slowest conversations by wall time.
//!
//! Memory is bounded: at most [`MAX_CONVERSATIONS`] conversations are followed (about 100 bytes
//! each); records of further ones are counted as not followed, and the summary says so.

use std::collections::HashMap;

use serde::Serialize;

use crate::record::request_record::RequestRecord;

/// Conversations followed at once, at most.
pub const MAX_CONVERSATIONS: usize = 200_000;
/// Conversations listed as the slowest.
pub const SLOWEST: usize = 5;

#[derive(Debug, Clone, Default)]
struct Conversation {
    turns: u64,
    last_turn: u32,
    first_start: f64,
    last_end: f64,
    server_s: f64,
    think_s: f64,
    model: String,
}

/// The conversations seen so far.
#[derive(Debug, Clone, Default)]
pub struct Conversations {
    by_id: HashMap<String, Conversation>,
    /// Records of a conversation beyond [`MAX_CONVERSATIONS`].
    not_followed: u64,
}

/// One conversation, as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConversationJson {
    pub conversation: String,
    pub model: String,
    /// Turns recorded (requests).
    pub turns: u64,
    /// The highest turn number seen (more than `turns` when some turns are outside the records).
    pub last_turn: u32,
    pub wall_s: f64,
    pub server_s: f64,
    pub between_turns_s: f64,
}

/// The summary of every conversation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConversationsJson {
    pub conversation_count: u64,
    pub turn_count: u64,
    pub turns_per_conversation_avg: f64,
    pub turns_per_conversation_max: u64,
    /// Sums over the conversations: wall time, the turns' E2E, the think times between turns.
    pub wall_s: f64,
    pub server_s: f64,
    pub between_turns_s: f64,
    /// `server_s / (server_s + between_turns_s)`: the share of a conversation's time that is the server's.
    pub server_share: Option<f64>,
    /// Records of conversations past the bound, not in these figures.
    #[serde(skip_serializing_if = "is_zero")]
    pub records_not_followed: u64,
    /// The slowest conversations by wall time, slowest first.
    pub slowest: Vec<ConversationJson>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Conversations {
    /// Adds a record that started at `start` (seconds since the epoch).
    pub fn add(&mut self, record: &RequestRecord, start: f64) {
        let Some(id) = record.conversation.as_deref() else {
            return;
        };
        if !self.by_id.contains_key(id) && self.by_id.len() >= MAX_CONVERSATIONS {
            self.not_followed += 1;
            return;
        }
        let end = start + record.e2e_s.max(0.0);
        let c = self
            .by_id
            .entry(id.to_owned())
            .or_insert_with(|| Conversation {
                first_start: start,
                last_end: end,
                model: record.model.clone(),
                ..Conversation::default()
            });
        c.turns += 1;
        c.last_turn = c.last_turn.max(record.turn.unwrap_or(0));
        c.first_start = c.first_start.min(start);
        c.last_end = c.last_end.max(end);
        c.server_s += record.e2e_s.max(0.0);
        c.think_s += record.think_s.unwrap_or(0.0).max(0.0);
    }

    /// `None` when no record carried a conversation.
    pub fn summary(&self) -> Option<ConversationsJson> {
        if self.by_id.is_empty() {
            return None;
        }
        let n = self.by_id.len() as u64;
        let turns: u64 = self.by_id.values().map(|c| c.turns).sum();
        let wall = |c: &Conversation| (c.last_end - c.first_start).max(0.0);
        let server_s: f64 = self.by_id.values().map(|c| c.server_s).sum();
        let between_turns_s: f64 = self.by_id.values().map(|c| c.think_s).sum();
        let mut slowest: Vec<(&String, &Conversation)> = self.by_id.iter().collect();
        slowest.sort_by(|a, b| wall(b.1).total_cmp(&wall(a.1)).then_with(|| a.0.cmp(b.0)));
        slowest.truncate(SLOWEST);
        let both = server_s + between_turns_s;
        Some(ConversationsJson {
            conversation_count: n,
            turn_count: turns,
            turns_per_conversation_avg: turns as f64 / n as f64,
            turns_per_conversation_max: self.by_id.values().map(|c| c.turns).max().unwrap_or(0),
            wall_s: self.by_id.values().map(wall).sum(),
            server_s,
            between_turns_s,
            server_share: (both > 0.0).then(|| server_s / both),
            records_not_followed: self.not_followed,
            slowest: slowest
                .into_iter()
                .map(|(id, c)| ConversationJson {
                    conversation: id.clone(),
                    model: c.model.clone(),
                    turns: c.turns,
                    last_turn: c.last_turn,
                    wall_s: wall(c),
                    server_s: c.server_s,
                    between_turns_s: c.think_s,
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(id: &str, turn: u32, e2e: f64, think: Option<f64>) -> RequestRecord {
        RequestRecord {
            conversation: Some(id.into()),
            turn: Some(turn),
            e2e_s: e2e,
            think_s: think,
            model: "m".into(),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn wall_time_splits_into_the_servers_and_the_clients() {
        let mut c = Conversations::default();
        // a: 1 s, then 4 s of the client's, then 2 s: 7 s of wall time, 3 s of it the server's.
        c.add(&turn("a", 1, 1.0, None), 100.0);
        c.add(&turn("a", 2, 2.0, Some(4.0)), 105.0);
        c.add(&turn("b", 1, 0.5, None), 100.0);
        c.add(&RequestRecord::default(), 100.0);
        let s = c.summary().unwrap();
        assert_eq!((s.conversation_count, s.turn_count), (2, 3));
        assert_eq!(
            (s.turns_per_conversation_avg, s.turns_per_conversation_max),
            (1.5, 2)
        );
        assert_eq!((s.wall_s, s.server_s, s.between_turns_s), (7.5, 3.5, 4.0));
        assert_eq!(s.server_share, Some(3.5 / 7.5));
        let ids: Vec<&str> = s.slowest.iter().map(|c| c.conversation.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!((s.slowest[0].wall_s, s.slowest[0].last_turn), (7.0, 2));
        assert!(Conversations::default().summary().is_none());
    }
}
