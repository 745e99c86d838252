//! Upstream HTTP/1.1 connections, and the idle ones kept for the next request.
//!
//! A connection is hyper's low-level client connection: a [`SendRequest`] handle and the [`Connection`]
//! that does its I/O. While a request uses it, no task of its own drives the I/O: the request does, from
//! its service future until the response head, then from the response body each time the client's side
//! asks for the next frame ([`super::body::UpstreamResponse`]). So the body's frames are read in the task
//! that writes them to the client, and every frame one read brought leaves in one write.
//!
//! An idle connection is watched by the pool's one watcher task. Each idle connection is polled with a
//! waker of its own, so when the upstream closes it (its keep-alive timer, a restart) or sends anything
//! while it is idle, the socket's readiness wakes the watcher, which polls just that connection, sees it
//! is over and closes it: within milliseconds, however many connections are idle. The watcher also closes
//! a connection the moment it has been idle for `timeouts.upstream_idle`, which is set below the
//! upstream's own keep-alive so that tokentap, not the upstream, is the one to close it.
//!
//! Polling many sockets in one go runs into tokio's cooperative budget: past 128 polls in one task poll a
//! socket reads `Pending` whatever it holds, and a closed connection would look alive. The watcher and
//! [`Pool::take`] therefore poll outside the budget.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::arrival::Arrival;
use super::connect::{Stream, Traffic};
use super::Outgoing;
use crate::record::metrics::UpstreamCounters;

/// One upstream connection: the handle requests are sent on, and the I/O that carries them.
pub struct Conn {
    pub(super) sender: SendRequest<Outgoing>,
    driver: Connection<TokioIo<Stream>, Outgoing>,
    /// What has crossed the connection (`connect.rs`).
    pub(super) traffic: Arc<Traffic>,
    /// When the last read's bytes reached the socket.
    pub(super) arrival: Arc<Arrival>,
}

impl Conn {
    pub(super) fn new(
        sender: SendRequest<Outgoing>, driver: Connection<TokioIo<Stream>, Outgoing>,
        traffic: Arc<Traffic>, arrival: Arc<Arrival>,
    ) -> Self {
        Conn {
            sender,
            driver,
            traffic,
            arrival,
        }
    }

    /// Does the connection's I/O: reads what the upstream sent (a response head, body frames, a close)
    /// and writes what is to be sent. `Ready` when the connection is over (closed, or broken: an error
    /// has been handed to whoever waits on it) and must not be used again.
    pub(super) fn poll_driver(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.driver).poll(cx).map(|done| {
            if let Err(error) = done {
                tracing::debug!(%error, "upstream connection ended");
            }
        })
    }

    /// Whether the connection can carry a next request now. Polled once, so that it notices a close
    /// by the upstream and, after a response, gets back to idle; `cx`'s waker is the one the
    /// connection wakes from then on.
    fn reusable(&mut self, cx: &mut Context<'_>) -> bool {
        if self.poll_driver(cx).is_ready() {
            return false;
        }
        matches!(self.sender.poll_ready(cx), Poll::Ready(Ok(())))
    }
}

/// The waker an idle connection is polled with: it marks that connection and wakes the watcher.
struct Mark {
    woken: AtomicBool,
    watcher: Arc<Notify>,
}

impl Wake for Mark {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.watcher.notify_one();
    }
}

struct Idle {
    conn: Box<Conn>,
    since: Instant,
    mark: Arc<Mark>,
}

/// The idle connections, oldest at the front, most recently used at the back.
pub struct Pool {
    idle: Mutex<VecDeque<Idle>>,
    max_idle: usize,
    idle_timeout: Duration,
    watcher: Arc<Notify>,
    counters: UpstreamCounters,
}

impl Pool {
    /// Starts the watcher (on the current runtime); it ends when the pool is dropped.
    pub fn new(max_idle: usize, idle_timeout: Duration, counters: UpstreamCounters) -> Arc<Self> {
        let pool = Arc::new(Pool {
            idle: Mutex::default(),
            max_idle,
            idle_timeout,
            watcher: Arc::default(),
            counters,
        });
        tokio::spawn(watch(Arc::downgrade(&pool), pool.watcher.clone()));
        pool
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Idle>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most recently used idle connection that is open and ready, if there is one. Every one it
    /// finds closed or expired on the way is dropped. Polls outside tokio's cooperative budget (see the
    /// module's documentation).
    pub(super) async fn take(&self) -> Option<Box<Conn>> {
        tokio::task::coop::unconstrained(poll_fn(|cx| Poll::Ready(self.take_now(cx)))).await
    }

    fn take_now(&self, cx: &mut Context<'_>) -> Option<Box<Conn>> {
        let now = Instant::now();
        let mut idle = self.lock();
        while let Some(mut entry) = idle.pop_back() {
            self.counters.idle.dec();
            if now.saturating_duration_since(entry.since) >= self.idle_timeout {
                self.counters.expired.inc();
                continue;
            }
            if entry.conn.reusable(cx) {
                return Some(entry.conn);
            }
            self.counters.closed_by_upstream.inc();
        }
        None
    }

    /// Keeps `conn` for the next request if it is ready for one now (its response fully read, the
    /// request fully sent, no close asked for) and the pool has room; otherwise it is dropped, which
    /// closes it. From here the watcher is the one woken when anything happens on it.
    pub(super) fn put(&self, mut conn: Box<Conn>) {
        let mark = Arc::new(Mark {
            woken: AtomicBool::new(false),
            watcher: self.watcher.clone(),
        });
        let waker = Waker::from(mark.clone());
        if !conn.reusable(&mut Context::from_waker(&waker)) {
            return;
        }
        let mut idle = self.lock();
        if idle.len() < self.max_idle {
            idle.push_back(Idle {
                conn,
                since: Instant::now(),
                mark,
            });
            self.counters.idle.inc();
        }
    }

    /// Closes the connections the upstream closed (those whose waker fired since the last look) and
    /// those idle for the idle timeout. Returns when the oldest one left expires.
    fn look(&self) -> Instant {
        let now = Instant::now();
        let mut idle = self.lock();
        while idle
            .front()
            .is_some_and(|e| now.saturating_duration_since(e.since) >= self.idle_timeout)
        {
            idle.pop_front();
            self.counters.idle.dec();
            self.counters.expired.inc();
        }
        let before = idle.len();
        idle.retain_mut(|entry| {
            if !entry.mark.woken.swap(false, Ordering::AcqRel) {
                return true;
            }
            let waker = Waker::from(entry.mark.clone());
            entry.conn.reusable(&mut Context::from_waker(&waker))
        });
        let closed = (before - idle.len()) as u64;
        self.counters.idle.sub(closed as i64);
        self.counters.closed_by_upstream.inc_by(closed);
        match idle.front() {
            Some(oldest) => oldest.since + self.idle_timeout,
            // Nothing idle: a connection put from now on expires after a full idle timeout, so a look
            // then finds it (or finds the next deadline).
            None => now + self.idle_timeout,
        }
    }
}

/// The watcher: wakes when an idle connection's socket does, or when the oldest one expires.
async fn watch(pool: Weak<Pool>, woken: Arc<Notify>) {
    let mut next = Instant::now();
    loop {
        tokio::select! {
            () = woken.notified() => {}
            () = tokio::time::sleep_until(next) => {}
        }
        let Some(pool) = pool.upgrade() else {
            return;
        };
        next = tokio::task::coop::unconstrained(async { pool.look() }).await;
    }
}
