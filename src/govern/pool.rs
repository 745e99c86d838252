//! A byte budget ([`Pool`]) and what one buffer holds of it ([`Lease`]): the cap and every client's
//! use counted under one lock, a lease given back when it is dropped, and the one wait the governor
//! allows (a client over its share, for its own room: [`Lease::grow_waiting`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Budget, Client, Figures, Spent};
use crate::config::BudgetLimits;

/// One byte budget: a cap for every client together, a share for each.
pub struct Pool {
    budget: Budget,
    cap: u64,
    share: u64,
    state: Mutex<State>,
    refused: [AtomicU64; 2],
    /// Told whenever bytes are given back, for a lease waiting for its client's room.
    freed: Notify,
}

#[derive(Default)]
struct State {
    used: u64,
    /// Each known client's use; a client with none has no entry.
    clients: HashMap<Client, u64>,
}

impl Pool {
    pub fn new(budget: Budget, limits: BudgetLimits) -> Self {
        Pool {
            budget,
            cap: limits.cap,
            share: limits.per_client.min(limits.cap),
            state: Mutex::default(),
            refused: Default::default(),
            freed: Notify::new(),
        }
    }

    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// Each client's share.
    pub fn share(&self) -> u64 {
        self.share
    }

    /// Takes `more` bytes for `client`, if its share and the cap have room; a refusal is counted.
    fn take(&self, client: &Client, more: u64) -> Result<(), Spent> {
        let taken = self.try_take(client, more);
        if let Err(spent) = taken {
            self.refused[spent as usize].fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    fn try_take(&self, client: &Client, more: u64) -> Result<(), Spent> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = match client {
            Client::Unknown => 0,
            known => state.clients.get(known).copied().unwrap_or(0),
        };
        if *client != Client::Unknown && mine.saturating_add(more) > self.share {
            return Err(Spent::Share);
        }
        if state.used.saturating_add(more) > self.cap {
            return Err(Spent::Cap);
        }
        state.used += more;
        if *client != Client::Unknown {
            *state.clients.entry(client.clone()).or_insert(0) += more;
        }
        Ok(())
    }

    fn give_back(&self, client: &Client, bytes: u64) {
        if bytes == 0 {
            return;
        }
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.used = state.used.saturating_sub(bytes);
            if let Some(mine) = state.clients.get_mut(client) {
                *mine = mine.saturating_sub(bytes);
                if *mine == 0 {
                    state.clients.remove(client);
                }
            }
        }
        self.freed.notify_waiters();
    }

    /// What `client` holds now.
    pub fn held_by(&self, client: &Client) -> u64 {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.clients.get(client).copied().unwrap_or(0)
    }

    pub fn figures(&self) -> Figures {
        let used = (self.state.lock().unwrap_or_else(PoisonError::into_inner)).used;
        Figures {
            used,
            cap: self.cap,
            refused: self.refused.each_ref().map(|n| n.load(Ordering::Relaxed)),
        }
    }
}

/// What one buffer holds of a [`Pool`], for one client; dropping it gives it all back.
pub struct Lease {
    pool: Arc<Pool>,
    client: Client,
    bytes: u64,
}

impl Lease {
    /// An empty lease on `pool` for `client`: it holds nothing until it grows.
    pub fn on(pool: &Arc<Pool>, client: Client) -> Self {
        Lease {
            pool: pool.clone(),
            client,
            bytes: 0,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn budget(&self) -> Budget {
        self.pool.budget
    }

    /// Whose the lease is.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Grows the lease by `more` bytes, at once or not at all.
    pub fn grow(&mut self, more: u64) -> Result<(), Spent> {
        self.pool.take(&self.client, more)?;
        self.bytes += more;
        Ok(())
    }

    /// Grows the lease by `more` bytes even past its share or the cap, for what exists already and
    /// must be served (a `/metrics` page encoded for the scrapers waiting on it): the use is counted
    /// whole, and `Err` says (and counts) that it went over.
    pub fn grow_over(&mut self, more: u64) -> Result<(), Spent> {
        let over = self.pool.try_take(&self.client, more);
        if let Err(spent) = over {
            self.pool.refused[spent as usize].fetch_add(1, Ordering::Relaxed);
            let mut state = self
                .pool
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            state.used += more;
            if self.client != Client::Unknown {
                *state.clients.entry(self.client.clone()).or_insert(0) += more;
            }
        }
        self.bytes += more;
        over
    }

    /// Whether `more` bytes would fit now (its client's share and the cap).
    pub fn would_fit(&self, more: u64) -> bool {
        let state = self
            .pool
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mine = state.clients.get(&self.client).copied().unwrap_or(0);
        let share = self.client == Client::Unknown || mine + more <= self.pool.share;
        share && state.used + more <= self.pool.cap
    }

    /// Grows or shrinks the lease to `bytes`.
    pub fn resize(&mut self, bytes: u64) -> Result<(), Spent> {
        match bytes.checked_sub(self.bytes) {
            Some(more) => self.grow(more),
            None => {
                self.shrink(self.bytes - bytes);
                Ok(())
            }
        }
    }

    /// Gives `less` bytes back.
    pub fn shrink(&mut self, less: u64) {
        let less = less.min(self.bytes);
        self.bytes -= less;
        self.pool.give_back(&self.client, less);
    }

    /// Grows the lease by `more` bytes, waiting until `deadline` while the client is over its share
    /// (only a body held so it can be sent again may wait: its client's bytes wait in the kernel, at no
    /// cost here). `Ok(true)`: it waited. A full cap is not waited for: `Err(Spent::Cap)` at once, so a
    /// client within its share never waits behind another one. `Err(Spent::Share)`: no room by the
    /// deadline.
    pub async fn grow_waiting(&mut self, more: u64, deadline: Instant) -> Result<bool, Spent> {
        let mut waited = false;
        loop {
            let freed = self.pool.freed.notified();
            tokio::pin!(freed);
            // Registered before the look, so a give-back between the two is not missed.
            freed.as_mut().enable();
            match self.pool.try_take(&self.client, more) {
                Ok(()) => {
                    self.bytes += more;
                    return Ok(waited);
                }
                Err(Spent::Cap) => {
                    self.pool.refused[Spent::Cap as usize].fetch_add(1, Ordering::Relaxed);
                    return Err(Spent::Cap);
                }
                Err(Spent::Share) if !waited => {
                    waited = true;
                    self.pool.refused[Spent::Share as usize].fetch_add(1, Ordering::Relaxed);
                }
                Err(Spent::Share) => {}
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(Spent::Share);
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool.give_back(&self.client, self.bytes);
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("budget", &self.pool.budget)
            .field("bytes", &self.bytes)
            .finish()
    }
}
