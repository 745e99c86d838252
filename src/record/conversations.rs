//! Conversations recognised from the wire. No client sends a conversation id; every turn of an agent
//! repeats the conversation so far. A request is turn k+1 of a conversation when its message list
//! begins with the whole message list of that conversation's turn k (and is longer): its digests
//! (made by `decode::messages`) are looked up, longest prefix first, among the turns seen. Otherwise it
//! is turn 1 of a new conversation, whose id is drawn at random (it says nothing of the content).
//!
//! A turn continued a second time by a different list (two answers to the same history: a client
//! that sampled twice, or two conversations that began alike) starts a branch: a new id, numbered on
//! from that turn. A request whose whole list is a turn already seen (a retry, or the same prompt sent
//! again) is turn 1 of a new conversation: single-turn traffic that repeats one prompt is that many
//! conversations, not one.
//!
//! The state is bounded and holds no text: at most `conversations.max_turns` turns (a 16-byte digest,
//! an id, a number and an instant each) in least-recently-used order, and as many conversations. A
//! conversation with no turn for `conversations.idle` has ended: its turn count is handed back for the
//! turns histogram, at the next request (or scrape) after.
//!
//! The turns are shared fairly: each is leased from the governor's `conversations` budget under the
//! client whose request it was (`src/govern/`). A client at its share (`conversations.max_turns_per_client`)
//! forgets its own least recently used turn for a new one, never another client's; only when every
//! client together reaches the cap does the least recently used turn of all go. So a flood of requests
//! from one client cannot push another client's conversation out of memory.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use std::collections::HashMap;
use std::num::NonZeroUsize;

use lru::LruCache;
use tokio::time::Instant;

use crate::config::{BudgetLimits, Conversations as Config};
use crate::govern::{Budget, Client, Lease, Pool, Spent};

/// 128 bits of a SHA-256: a prefix of a message list (`decode::messages` makes them).
pub type Digest = [u8; 16];

/// The message list of one request, as digests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageList {
    /// `prefixes[j]`: the messages `0..=j`. Never empty.
    pub prefixes: Vec<Digest>,
    /// The Responses API's `previous_response_id`: the turn this one continues, named explicitly.
    pub previous_response: Option<String>,
}

impl MessageList {
    /// The whole list.
    pub fn whole(&self) -> Digest {
        self.prefixes[self.prefixes.len() - 1]
    }
}

/// A request's place in its conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// The conversation's id (`c-` and 16 hex digits, drawn at random).
    pub conversation: Arc<str>,
    /// 1 for the first turn.
    pub turn: u32,
    /// The client's time since the turn this one continues ended (its tools, its user): `t_arrive` of
    /// this turn − `t_end` of the last. `None` for a first turn.
    pub think: Option<Duration>,
}

/// The `turn` label: a position bucket, so the label stays bounded however long a conversation runs.
pub const TURN_LABELS: [&str; 6] = ["1", "2", "3", "4-7", "8-15", "16+"];

/// The `turn` label value of turn `n` (1-based).
pub fn turn_label(n: u32) -> &'static str {
    match n {
        0 | 1 => TURN_LABELS[0],
        2 => TURN_LABELS[1],
        3 => TURN_LABELS[2],
        4..=7 => TURN_LABELS[3],
        8..=15 => TURN_LABELS[4],
        _ => TURN_LABELS[5],
    }
}

struct Seen {
    /// Its room in the `conversations` budget, under the client whose request it was.
    lease: Lease,
    conversation: Arc<str>,
    turn: u32,
    /// When the turn ended.
    end: Instant,
    /// The whole list of the first later turn that continued it.
    continued_by: Option<Digest>,
}

struct Conversation {
    turns: u32,
    last: Instant,
}

struct State {
    turns: LruCache<Digest, Seen>,
    /// Each client's turns, least recently used first: the one a client at its share gives up.
    by_client: HashMap<Client, LruCache<Digest, ()>>,
    /// The Responses API's response ids, each the turn that answered it (its whole list's digest).
    responses: LruCache<String, Digest>,
    conversations: LruCache<Arc<str>, Conversation>,
    next: u64,
}

/// The `result` label of `tokentap_conversation_lookups_total`: each [`Lookup`], and a list not read.
pub const LOOKUPS: [&str; 3] = [Lookup::First.as_str(), Lookup::Continued.as_str(), UNREAD];
/// The `result` of a request whose message list was not read ([`Unread`] says why).
pub const UNREAD: &str = "unread";

/// Why a request's message list was not read: the `reason` label of
/// `tokentap_conversation_unread_total`. Each is a bound a client reached or a body that is not a
/// message list, never a slower path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    /// The body streamed upstream: too large to hold.
    Streamed,
    /// Every reader was busy with another body.
    PoolBusy,
    /// The request ended before its list was read (the read is stopped).
    Late,
    /// The body is not a JSON object (malformed, not UTF-8, a key given twice).
    NotJson,
    /// An item of the list is not a message: not an object, or one with no `role` (no `role` or
    /// `type` for a Responses item).
    NotAMessage,
    /// Nested deeper than the reader follows.
    TooDeep,
    /// More messages than the reader takes.
    TooMany,
    /// One message's canonical form larger than the reader holds.
    TooLarge,
    /// The governor's `message_lists` budget had no room for its digests (`src/govern/`).
    Budget(Spent),
}

impl Unread {
    pub const ALL: [Unread; 9] = [
        Unread::Streamed,
        Unread::PoolBusy,
        Unread::Late,
        Unread::NotJson,
        Unread::NotAMessage,
        Unread::TooDeep,
        Unread::TooMany,
        Unread::TooLarge,
        // Both reasons a budget refuses are one label value.
        Unread::Budget(Spent::Cap),
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Unread::Streamed => "streamed",
            Unread::PoolBusy => "pool_busy",
            Unread::Late => "late",
            Unread::NotJson => "not_json",
            Unread::NotAMessage => "not_a_message",
            Unread::TooDeep => "too_deep",
            Unread::TooMany => "too_many",
            Unread::TooLarge => "too_large",
            Unread::Budget(_) => "budget",
        }
    }
}

/// The `reason` label of `tokentap_conversation_unread_total`, in [`Unread::ALL`]'s order.
pub const UNREAD_REASONS: [&str; Unread::ALL.len()] = [
    Unread::ALL[0].as_str(),
    Unread::ALL[1].as_str(),
    Unread::ALL[2].as_str(),
    Unread::ALL[3].as_str(),
    Unread::ALL[4].as_str(),
    Unread::ALL[5].as_str(),
    Unread::ALL[6].as_str(),
    Unread::ALL[7].as_str(),
    Unread::ALL[8].as_str(),
];

/// What recognising a request's conversation found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Turn 1 of a new conversation (or branch).
    First,
    /// A later turn of a conversation seen before.
    Continued,
}

impl Lookup {
    pub const fn as_str(self) -> &'static str {
        match self {
            Lookup::First => "first",
            Lookup::Continued => "continued",
        }
    }
}

/// Prefixes looked up under one hold of the lock (a list has up to 10,000).
const PROBES_PER_LOCK: usize = 256;

/// The turns seen, shared by every exchange of the process.
pub struct Conversations {
    state: Mutex<State>,
    /// The `conversations` budget each turn is leased from.
    budget: Arc<Pool>,
    idle: Duration,
    /// A per-process random prefix of the ids.
    prefix: u64,
}

impl Conversations {
    /// `None` when `max_turns` is 0 (recognition off). Its turns are leased from a budget of its
    /// own, which shares nothing fairly: [`Conversations::governed`] gives it the governor's.
    pub fn new(max_turns: usize, idle: Duration) -> Option<Self> {
        let cap = NonZeroUsize::new(max_turns)?;
        let bytes = max_turns as u64 * Config::TURN_BYTES;
        let limits = BudgetLimits {
            cap: bytes,
            per_client: bytes,
        };
        Some(Conversations {
            budget: Arc::new(Pool::new(Budget::Conversations, limits)),
            state: Mutex::new(State {
                by_client: HashMap::new(),
                turns: LruCache::new(cap),
                responses: LruCache::new(cap),
                conversations: LruCache::new(cap),
                next: 0,
            }),
            idle,
            prefix: random_u64(),
        })
    }

    /// The conversations with their turns leased from `budget` (the governor's `conversations`).
    pub fn governed(mut self, budget: Arc<Pool>) -> Self {
        self.budget = budget;
        self
    }

    /// Places a finished request of `client` whose message list is `list`, which arrived at `arrive`
    /// and ended at `end`, answered as `response_id` (the Responses API's id, which a later turn may
    /// name): the turn it is, and whether it continued a conversation. The turn is then one later
    /// requests may continue, the next one's think time running from `end`.
    pub fn place(
        &self, list: &MessageList, arrive: Instant, end: Instant, response_id: Option<&str>,
        client: &Client,
    ) -> (Turn, Lookup) {
        let whole = list.whole();
        let continued = self.continued(list);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let (Some(id), Some(_)) = (&list.previous_response, continued) {
            state.responses.promote(id);
        }
        // Looked up again under this lock: the turn may have been forgotten since.
        let found = continued
            .and_then(|prefix| state.turns.get_mut(&prefix))
            .map(|seen| {
                let branch = seen.continued_by.is_some_and(|by| by != whole);
                if seen.continued_by.is_none() {
                    seen.continued_by = Some(whole);
                }
                let think = Some(arrive.saturating_duration_since(seen.end));
                (seen.conversation.clone(), seen.turn + 1, think, branch)
            });
        let (conversation, number, think, lookup) = match found {
            Some((conversation, number, think, false)) => {
                (conversation, number, think, Lookup::Continued)
            }
            Some((_, number, think, true)) => {
                (state.new_id(self.prefix), number, think, Lookup::First)
            }
            None => (state.new_id(self.prefix), 1, None, Lookup::First),
        };
        let lease = state.room(&self.budget, client, whole);
        let seen = Seen {
            lease,
            conversation: conversation.clone(),
            turn: number,
            end,
            continued_by: None,
        };
        if let Some((digest, old)) = state.turns.push(whole, seen) {
            state.forget(&digest, &old);
        }
        (state.by_client.entry(client.clone()))
            .or_insert_with(LruCache::unbounded)
            .put(whole, ());
        if let Some(id) = response_id {
            state.responses.put(id.to_owned(), whole);
        }
        let entry = state
            .conversations
            .get_or_insert_mut(conversation.clone(), || Conversation {
                turns: 0,
                last: end,
            });
        entry.turns = entry.turns.max(number);
        entry.last = entry.last.max(end);
        let turn = Turn {
            conversation,
            turn: number,
            think,
        };
        (turn, lookup)
    }

    /// The turn `list` continues: the one named by its response id, else the longest earlier list it
    /// begins with. Looked up without reordering the turns, [`PROBES_PER_LOCK`] prefixes per hold of
    /// the lock, so a long list never keeps the other requests' places waiting.
    fn continued(&self, list: &MessageList) -> Option<Digest> {
        let shorter = list.prefixes.get(..list.prefixes.len().saturating_sub(1))?;
        if let Some(id) = &list.previous_response {
            let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let named = state.responses.peek(id).copied();
            if let Some(named) = named.filter(|named| state.turns.contains(named)) {
                return Some(named);
            }
        }
        shorter.rchunks(PROBES_PER_LOCK).find_map(|probes| {
            let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            probes
                .iter()
                .rev()
                .find(|p| state.turns.contains(*p))
                .copied()
        })
    }

    /// The turn counts of the conversations that have had no turn for `conversations.idle` by `now`,
    /// which are forgotten, and the turns still held.
    pub fn take_ended(&self, now: Instant) -> (Vec<u32>, usize) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut ended = Vec::new();
        while let Some((_, c)) = state.conversations.peek_lru() {
            if now.saturating_duration_since(c.last) < self.idle {
                break;
            }
            if let Some((_, c)) = state.conversations.pop_lru() {
                ended.push(c.turns);
            }
        }
        (ended, state.turns.len())
    }

    /// Turns held now.
    pub fn turns_held(&self) -> usize {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.turns.len()
    }
}

impl State {
    /// A turn's room for `client` (`whole` is its digest, which it may replace): its own least recently
    /// used turn goes while it is at its share, the least recently used of all while the cap is reached.
    fn room(&mut self, budget: &Arc<Pool>, client: &Client, whole: Digest) -> Lease {
        let mut lease = Lease::on(budget, client.clone());
        // A turn seen again is replaced: its room is given back first.
        if let Some(old) = self.turns.pop(&whole) {
            self.forget(&whole, &old);
        }
        loop {
            let victim = match lease.grow(Config::TURN_BYTES) {
                Ok(()) => return lease,
                Err(Spent::Share) => {
                    let own = self.by_client.get_mut(client).and_then(LruCache::pop_lru);
                    own.map(|(digest, ())| digest)
                }
                Err(Spent::Cap) => self.turns.peek_lru().map(|(digest, _)| *digest),
            };
            let Some(digest) = victim else {
                // Nothing to give up (a share smaller than one turn): the turn is kept unleased.
                return lease;
            };
            if let Some(seen) = self.turns.pop(&digest) {
                self.forget(&digest, &seen);
            }
        }
    }

    /// `seen`, the turn of `digest`, is no longer held: out of its client's order too.
    fn forget(&mut self, digest: &Digest, seen: &Seen) {
        let client = seen.lease.client();
        if let Some(order) = self.by_client.get_mut(client) {
            order.pop(digest);
            if order.is_empty() {
                self.by_client.remove(client);
            }
        }
    }

    fn new_id(&mut self, prefix: u64) -> Arc<str> {
        self.next += 1;
        let mixed = prefix ^ self.next.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Arc::from(format!("c-{mixed:016x}"))
    }
}

/// 64 random bits from the standard library's per-process SipHash keys (the OS's randomness).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x636f_6e76);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list of `n` messages whose contents are `tags`.
    fn list(tags: &[u8]) -> MessageList {
        let mut prefixes = Vec::new();
        let mut digest = [0u8; 16];
        for (i, tag) in tags.iter().enumerate() {
            digest[i % 16] ^= tag.wrapping_add((i as u8).wrapping_mul(31));
            digest[15] = digest[15].wrapping_add(*tag).wrapping_mul(7);
            prefixes.push(digest);
        }
        MessageList {
            prefixes,
            previous_response: None,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn an_agent_loop_is_one_conversation_numbered_with_its_think_times() {
        let c = Conversations::new(100, Duration::from_secs(60)).unwrap();
        let t0 = Instant::now();
        // system, user → answer; + assistant, tool → answer; + assistant, user.
        let turns = [list(b"su"), list(b"suat"), list(b"suatau")];
        let (first, lookup) = c.place(&turns[0], t0, t0 + ms(800), None, &Client::Unknown);
        assert_eq!((first.turn, first.think, lookup), (1, None, Lookup::First));
        let (second, lookup) = c.place(
            &turns[1],
            t0 + ms(1_000),
            t0 + ms(1_500),
            None,
            &Client::Unknown,
        );
        assert_eq!(second.conversation, first.conversation);
        assert_eq!(
            (second.turn, second.think, lookup),
            (2, Some(ms(200)), Lookup::Continued)
        );
        let (third, _) = c.place(
            &turns[2],
            t0 + ms(4_500),
            t0 + ms(4_500),
            None,
            &Client::Unknown,
        );
        assert_eq!((third.turn, third.think), (3, Some(ms(3_000))));
        assert_eq!(third.conversation, first.conversation);
        assert_eq!(c.turns_held(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_repeat_is_a_new_conversation_and_a_second_continuation_a_branch() {
        let c = Conversations::new(100, Duration::from_secs(60)).unwrap();
        let t0 = Instant::now();
        let (a, _) = c.place(&list(b"su"), t0, t0, None, &Client::Unknown);
        let (again, lookup) = c.place(&list(b"su"), t0, t0, None, &Client::Unknown);
        assert_ne!(again.conversation, a.conversation, "the same prompt again");
        assert_eq!((again.turn, lookup), (1, Lookup::First));
        let (b, _) = c.place(&list(b"suau"), t0, t0, None, &Client::Unknown);
        let (retry, lookup) = c.place(&list(b"suau"), t0, t0, None, &Client::Unknown);
        assert_eq!(
            (retry.turn, lookup),
            (2, Lookup::Continued),
            "continues the same turn 1"
        );
        assert_eq!(retry.conversation, b.conversation);
        let (fork, lookup) = c.place(&list(b"suxu"), t0, t0, None, &Client::Unknown);
        assert_eq!((fork.turn, lookup), (2, Lookup::First));
        assert_ne!(
            fork.conversation, b.conversation,
            "another answer to the same history"
        );
        let (on, _) = c.place(&list(b"suxuau"), t0, t0, None, &Client::Unknown);
        assert_eq!((on.conversation.clone(), on.turn), (fork.conversation, 3));
    }

    #[tokio::test(start_paused = true)]
    async fn the_state_is_bounded_and_idle_conversations_end_with_their_turn_count() {
        let c = Conversations::new(4, Duration::from_secs(10)).unwrap();
        let t0 = Instant::now();
        for i in 0..10u8 {
            c.place(&list(&[b's', i]), t0, t0, None, &Client::Unknown);
        }
        assert_eq!(c.turns_held(), 4);
        // The oldest turns are gone: their continuation starts over.
        let (lost, _) = c.place(
            &list(&[b's', 0, b'a', b'u']),
            t0,
            t0,
            None,
            &Client::Unknown,
        );
        assert_eq!(lost.turn, 1);
        let c = Conversations::new(100, Duration::from_secs(10)).unwrap();
        c.place(&list(b"su"), t0, t0, None, &Client::Unknown);
        c.place(
            &list(b"suau"),
            t0 + ms(100),
            t0 + ms(500),
            None,
            &Client::Unknown,
        );
        c.place(
            &list(b"xu"),
            t0 + ms(6_000),
            t0 + ms(6_000),
            None,
            &Client::Unknown,
        );
        assert_eq!(c.take_ended(t0 + ms(9_000)).0, Vec::<u32>::new());
        assert_eq!(
            c.take_ended(t0 + ms(10_500)).0,
            vec![2],
            "idle 10 s after its last end"
        );
        assert_eq!(c.take_ended(t0 + ms(16_000)).0, vec![1]);
        assert!(Conversations::new(0, Duration::from_secs(1)).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_longer_than_one_hold_of_the_lock_finds_the_turn_it_continues() {
        let c = Conversations::new(100, Duration::from_secs(60)).unwrap();
        let t0 = Instant::now();
        let tags: Vec<u8> = (0..2_000u32).map(|i| (i % 251) as u8).collect();
        // The earlier turn is 10 messages long: 1,990 prefixes (eight holds of the lock) before it.
        let (first, _) = c.place(&list(&tags[..10]), t0, t0, None, &Client::Unknown);
        let (next, lookup) = c.place(&list(&tags), t0, t0, None, &Client::Unknown);
        assert_eq!((next.turn, lookup), (2, Lookup::Continued));
        assert_eq!(next.conversation, first.conversation);
    }

    #[tokio::test(start_paused = true)]
    async fn a_responses_turn_named_by_previous_response_id_continues_it() {
        let c = Conversations::new(100, Duration::from_secs(60)).unwrap();
        let t0 = Instant::now();
        let (first, _) = c.place(
            &list(b"su"),
            t0,
            t0 + ms(300),
            Some("resp_1"),
            &Client::Unknown,
        );
        // Only the new input, and the id of the answer it follows.
        let next = MessageList {
            previous_response: Some("resp_1".into()),
            ..list(b"t")
        };
        let (second, lookup) = c.place(
            &next,
            t0 + ms(1_300),
            t0 + ms(1_500),
            Some("resp_2"),
            &Client::Unknown,
        );
        assert_eq!(second.conversation, first.conversation);
        assert_eq!(
            (second.turn, second.think, lookup),
            (2, Some(ms(1_000)), Lookup::Continued)
        );
        let unknown = MessageList {
            previous_response: Some("resp_9".into()),
            ..list(b"x")
        };
        assert_eq!(
            c.place(&unknown, t0, t0, None, &Client::Unknown).0.turn,
            1,
            "an id never seen starts over"
        );
        assert_eq!(
            [1, 2, 3, 4, 7, 8, 15, 16, 400].map(turn_label),
            ["1", "2", "3", "4-7", "4-7", "8-15", "8-15", "16+", "16+"]
        );
    }

    #[test]
    fn a_flood_from_one_client_forgets_its_own_turns_never_anothers() {
        let budget = Arc::new(Pool::new(
            Budget::Conversations,
            BudgetLimits {
                cap: 100 * Config::TURN_BYTES,
                per_client: 10 * Config::TURN_BYTES,
            },
        ));
        let c = Conversations::new(100, Duration::from_secs(600))
            .unwrap()
            .governed(budget.clone());
        let (victim, flooder) = (
            Client::Address([10, 0, 0, 1].into()),
            Client::Address([10, 0, 0, 2].into()),
        );
        let t0 = Instant::now();
        let (first, _) = c.place(&list(b"su"), t0, t0, None, &victim);
        for i in 0..10_000u32 {
            let bytes = i.to_le_bytes();
            c.place(
                &list(&[b'f', bytes[0], bytes[1], b'u']),
                t0,
                t0,
                None,
                &flooder,
            );
        }
        assert_eq!(budget.held_by(&flooder), 10 * Config::TURN_BYTES);
        assert_eq!(
            budget.held_by(&victim),
            Config::TURN_BYTES,
            "{}",
            c.turns_held()
        );
        let (second, lookup) = c.place(&list(b"suau"), t0, t0, None, &victim);
        assert_eq!(lookup, Lookup::Continued, "the victim's turn was kept");
        assert_eq!((second.conversation, second.turn), (first.conversation, 2));
        // Many clients reach the cap together: then the least recently used of all goes.
        for client in 3..=30u8 {
            let client = Client::Address([10, 0, 0, client].into());
            for i in 0..10u8 {
                c.place(
                    &list(&[b'g', client_byte(&client), i, b'u']),
                    t0,
                    t0,
                    None,
                    &client,
                );
            }
        }
        assert!(budget.figures().used <= 100 * Config::TURN_BYTES);
        assert_eq!(
            c.turns_held() as u64,
            budget.figures().used / Config::TURN_BYTES
        );
    }

    fn client_byte(client: &Client) -> u8 {
        match client {
            Client::Address(std::net::IpAddr::V4(a)) => a.octets()[3],
            _ => 0,
        }
    }
}
