//! A budget of work per second ([`Rate`]): the bytes a client's frames make tokentap inflate to read
//! them. Each client has a bucket of its share per second, all clients together one of the cap, each
//! refilled continuously and holding at most a quarter second's worth ([`BURST`]), so what a client can
//! make one read cost is a quarter of its share; work a bucket cannot pay for is refused, and the
//! caller stops metering what asked for it ([`RateUse::spend`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

use super::{Budget, Client, Figures, Spent};
use crate::config::BudgetLimits;

/// A bucket holds this share of a second's worth.
pub const BURST: f64 = 0.25;

/// Clients whose buckets are kept before the full ones are forgotten (a full bucket is what a new one
/// would be).
const CLIENTS_KEPT: usize = 4096;

/// One rate budget (see the module's documentation).
pub struct Rate {
    budget: Budget,
    cap: u64,
    share: u64,
    state: Mutex<State>,
    refused: [AtomicU64; 2],
}

struct State {
    all: Bucket,
    clients: HashMap<Client, Bucket>,
    /// The work of the second that began at `second`, and of the one before it.
    second: Instant,
    this_second: u64,
    last_second: u64,
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(per_second: u64, now: Instant) -> Self {
        Bucket {
            tokens: per_second as f64 * BURST,
            at: now,
        }
    }

    /// Refilled to `now`.
    fn refill(&mut self, per_second: u64, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        let most = per_second as f64 * BURST;
        self.tokens = (self.tokens + elapsed * per_second as f64).min(most);
        self.at = now;
    }
}

impl Rate {
    pub fn new(budget: Budget, limits: BudgetLimits) -> Self {
        let now = Instant::now();
        Rate {
            budget,
            cap: limits.cap,
            share: limits.per_client.min(limits.cap),
            state: Mutex::new(State {
                all: Bucket::full(limits.cap, now),
                clients: HashMap::new(),
                second: now,
                this_second: 0,
                last_second: 0,
            }),
            refused: Default::default(),
        }
    }

    fn spend(&self, client: &Client, work: u64, now: Instant) -> Result<(), Spent> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut *state;
        state.all.refill(self.cap, now);
        let share = self.share;
        if *client != Client::Unknown && !state.clients.contains_key(client) {
            if state.clients.len() >= CLIENTS_KEPT {
                state.clients.retain(|_, bucket| {
                    bucket.refill(share, now);
                    bucket.tokens < share as f64 * BURST
                });
            }
            state
                .clients
                .insert(client.clone(), Bucket::full(share, now));
        }
        let mine = state.clients.get_mut(client);
        let refused = match mine {
            Some(mine) => {
                mine.refill(share, now);
                if mine.tokens < work as f64 {
                    Some(Spent::Share)
                } else if state.all.tokens < work as f64 {
                    Some(Spent::Cap)
                } else {
                    mine.tokens -= work as f64;
                    None
                }
            }
            None if state.all.tokens < work as f64 => Some(Spent::Cap),
            None => None,
        };
        if let Some(spent) = refused {
            self.refused[spent as usize].fetch_add(1, Ordering::Relaxed);
            return Err(spent);
        }
        state.all.tokens -= work as f64;
        if now.saturating_duration_since(state.second).as_secs() >= 1 {
            let seconds = now.saturating_duration_since(state.second).as_secs();
            state.last_second = if seconds == 1 { state.this_second } else { 0 };
            state.this_second = 0;
            state.second += std::time::Duration::from_secs(seconds);
        }
        state.this_second += work;
        Ok(())
    }

    pub fn figures(&self) -> Figures {
        let used = {
            let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let fresh = Instant::now()
                .saturating_duration_since(state.second)
                .as_secs()
                < 1;
            if fresh {
                state.last_second.max(state.this_second)
            } else {
                0
            }
        };
        Figures {
            used,
            cap: self.cap,
            refused: self.refused.each_ref().map(|n| n.load(Ordering::Relaxed)),
        }
    }

    pub fn budget(&self) -> Budget {
        self.budget
    }
}

/// One reader's use of a [`Rate`] for its client: the work it paid for, and the first refusal, after
/// which it is refused everything (the reader has stopped).
pub struct RateUse {
    rate: Arc<Rate>,
    client: Client,
    refused: Option<Spent>,
}

impl RateUse {
    pub fn new(rate: Arc<Rate>, client: Client) -> Self {
        RateUse {
            rate,
            client,
            refused: None,
        }
    }

    /// Pays for `work` bytes of work done now, or refuses it (and everything after).
    pub fn spend(&mut self, work: u64) -> Result<(), Spent> {
        if let Some(spent) = self.refused {
            return Err(spent);
        }
        let paid = self.rate.spend(&self.client, work, Instant::now());
        if let Err(spent) = paid {
            self.refused = Some(spent);
        }
        paid
    }

    pub fn budget(&self) -> Budget {
        self.rate.budget
    }
}
