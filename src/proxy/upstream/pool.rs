//! Upstream HTTP/1.1 connections, and the idle ones kept for the next request.
//!
//! A connection is hyper's low-level client connection: a [`SendRequest`] handle and the [`Connection`]
//! that does its I/O. No task of its own drives the I/O. Whoever holds the connection polls it: the
//! request's service future while it waits for the response head, then the response body each time
//! the client's side asks for the next frame ([`super::body::UpstreamResponse`]). So the body's frames
//! are read in the task that writes them to the client. Every frame that one read of the upstream socket
//! brought is handed over in the same wake-up, and the client connection sends them together in one
//! write. Each frame is still passed on as soon as it has been read.
//!
//! An idle connection lies in the pool, not polled, until the next request takes it. At that point it is
//! polled once, so a connection the upstream closed while it was idle is seen and dropped, and is not
//! used. A sweep every few seconds drops the ones idle longer than the idle timeout and the ones the
//! upstream has closed, so their sockets do not linger.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_rustls::MaybeHttpsStream;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::UpstreamBody;

type Io = MaybeHttpsStream<TokioIo<TcpStream>>;

/// How often idle connections are checked for expiry and for a close by the upstream.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// One upstream connection: the handle requests are sent on, and the I/O that carries them.
pub struct Conn {
    pub(super) sender: SendRequest<UpstreamBody>,
    driver: Connection<Io, UpstreamBody>,
}

impl Conn {
    pub(super) fn new(
        sender: SendRequest<UpstreamBody>,
        driver: Connection<Io, UpstreamBody>,
    ) -> Self {
        Conn { sender, driver }
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
    /// by the upstream and, after a response, gets back to idle.
    fn reusable(&mut self, cx: &mut Context<'_>) -> bool {
        if self.poll_driver(cx).is_ready() {
            return false;
        }
        matches!(self.sender.poll_ready(cx), Poll::Ready(Ok(())))
    }
}

struct Idle {
    conn: Box<Conn>,
    since: Instant,
}

impl Idle {
    /// Not idle for `timeout` yet at `now`, and ready for a next request (see [`Conn::reusable`]).
    fn usable(&mut self, now: Instant, timeout: Duration, cx: &mut Context<'_>) -> bool {
        now.saturating_duration_since(self.since) < timeout && self.conn.reusable(cx)
    }
}

/// The idle connections, most recently used on top.
pub struct Pool {
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    idle_timeout: Duration,
}

impl Pool {
    /// Starts the sweep (on the current runtime); it ends when the pool is dropped.
    pub fn new(max_idle: usize, idle_timeout: Duration) -> Arc<Self> {
        let pool = Arc::new(Pool {
            idle: Mutex::default(),
            max_idle,
            idle_timeout,
        });
        tokio::spawn(sweep(Arc::downgrade(&pool)));
        pool
    }

    /// The most recently used idle connection that is still open and ready, if there is one.
    pub(super) fn take(&self, cx: &mut Context<'_>) -> Option<Box<Conn>> {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(mut entry) = idle.pop() {
            if entry.usable(now, self.idle_timeout, cx) {
                return Some(entry.conn);
            }
        }
        None
    }

    /// Keeps `conn` for the next request if it is ready for one now (its response fully read, the
    /// request fully sent, no close asked for) and the pool has room; otherwise it is dropped, which
    /// closes it.
    pub(super) fn put(&self, mut conn: Box<Conn>, cx: &mut Context<'_>) {
        if !conn.reusable(cx) {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.max_idle {
            idle.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    /// Drops the idle connections that expired or that the upstream closed.
    fn sweep_once(&self) {
        let now = Instant::now();
        let waker = Waker::from(Arc::new(NoWake));
        let mut cx = Context::from_waker(&waker);
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.retain_mut(|entry| entry.usable(now, self.idle_timeout, &mut cx));
    }
}

/// An idle connection is polled by the sweep only to see whether it has closed; nothing waits on it.
struct NoWake;

impl Wake for NoWake {
    fn wake(self: Arc<Self>) {}
}

async fn sweep(pool: Weak<Pool>) {
    let mut every = tokio::time::interval(SWEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        every.tick().await;
        match pool.upgrade() {
            Some(pool) => pool.sweep_once(),
            None => return,
        }
    }
}
