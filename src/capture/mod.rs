//! Capture mode (`tokentap capture`, SPEC §15): the same meter fed from packets instead of a proxied
//! connection, for those who will not put anything in the traffic's path. A source of bytes like `net`
//! and `proxy`, before every stage on the path: it may use the later ones (it drives `tap`'s
//! exchanges), and only the app and the binary use it.
//!
//! Packets come from the interface (`socket.rs`: an `AF_PACKET` socket with the kernel's receive
//! timestamps and a filter on the server's ports) or a capture file (`file.rs`), each with the time it
//! was captured; [`Capture`] reads each one down to its TCP segment (`packet.rs`), finds its connection
//! (`connection.rs`: the two streams put back in order by `stream.rs`), and the connection's HTTP/1.1
//! reader (`http.rs`, with `head.rs` and `body.rs`) turns the bytes into exchanges: the proxy's own
//! (`tap/exchange.rs`), so decoding, metering and emitting are the same code, and a captured request
//! comes out as the same metrics, record and span, marked `captured`.
//!
//! What it holds is bounded: `capture.max_connections` connections, each one's bytes within
//! `capture.max_connection_bytes` and all within the governor's `capture_flows` (`budget.rs`); a
//! connection it cannot follow (bytes lost, a bound reached, not HTTP/1.1) is counted and not metered
//! from there on, never guessed at (`tokentap_capture_unmetered_total{reason}`).

mod body;
mod budget;
mod connection;
mod file;
mod head;
mod http;
pub mod packet;
mod socket;
mod stream;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Config;
use crate::record::metrics::{CaptureCounters, Unmetered};
use crate::record::outcome::End;
use crate::tap::context::ExchangeContext;

pub use self::budget::Budget;
use self::connection::{Connection, Open};
pub use self::file::{read_file, FileError};
pub use self::http::Stamp;
use self::http::{Shared, Side};
pub use self::packet::Link;
pub use self::socket::{Interface, SocketError};

/// How often connections are checked for idleness and for losses an acknowledgement showed, in the
/// packets' time.
const SWEEP: Duration = Duration::from_millis(100);

/// The connections followed, and what their exchanges are given.
pub struct Capture {
    shared: Shared,
    counters: CaptureCounters,
    ports: Vec<u16>,
    /// By (client, server).
    connections: HashMap<(SocketAddr, SocketAddr), Connection>,
    budget: Budget,
    max_connections: usize,
    idle: Duration,
    swept: Option<Instant>,
}

impl Capture {
    /// A capture of the server's ports (`capture.ports`, else `upstream`'s) metering into `context`.
    pub fn new(config: &Config, context: Arc<ExchangeContext>) -> Self {
        let settings = context.settings();
        let counters = settings.meter.metrics.capture.clone();
        let c = &config.capture;
        let pool = context
            .governor
            .pool(crate::govern::Budget::CaptureFlows)
            .clone();
        let budget = Budget::new(pool, c.max_connection_bytes);
        counters.connections.set(0);
        Capture {
            shared: Shared {
                context,
                max_head: config.limits.max_request_header_bytes,
                hold_body: usize::try_from(config.limits.hold_request_body_bytes)
                    .unwrap_or(usize::MAX),
            },
            counters,
            ports: c.ports_of(&config.upstream),
            connections: HashMap::new(),
            budget,
            max_connections: c.max_connections,
            idle: c.connection_idle,
            swept: None,
        }
    }

    /// The server's ports this capture reads.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// Connections followed now.
    pub fn connections(&self) -> usize {
        self.connections.len()
    }

    /// The bytes held for them now.
    pub fn buffered(&self) -> usize {
        self.budget.used()
    }

    /// One captured packet, its bytes beginning with `link`'s header.
    pub fn packet(&mut self, link: Link, data: &[u8], stamp: Stamp) {
        self.sweep_every(stamp.at);
        let Some(segment) = packet::segment(link, data) else {
            return;
        };
        let (side, key) = if self.ports.contains(&segment.to.port()) {
            (Side::Client, (segment.from, segment.to))
        } else if self.ports.contains(&segment.from.port()) {
            (Side::Server, (segment.to, segment.from))
        } else {
            return;
        };
        self.counters.packets.inc();
        let reopened = side == Side::Client
            && (self.connections.get(&key)).is_some_and(|c| c.reopened_by(&segment));
        if reopened {
            if let Some(old) = self.connections.remove(&key) {
                old.replaced(&self.counters);
            }
        }
        let connection = match self.connections.get_mut(&key) {
            Some(connection) => connection,
            None => {
                let opens = segment.syn || !segment.payload.is_empty();
                if !opens || segment.rst {
                    return;
                }
                if self.connections.len() >= self.max_connections {
                    if segment.syn && segment.ack.is_none() {
                        self.counters.unmetered(Unmetered::MaxConnections);
                    }
                    return;
                }
                let lease = self.budget.lease(key.0.ip());
                let new = Connection::new(side, &segment, lease, stamp.at, &self.counters);
                self.connections.entry(key).or_insert(new)
            }
        };
        if connection.packet(side, &segment, stamp, &self.shared, &self.counters) == Open::Closed {
            self.connections.remove(&key);
        }
        self.counters.connections.set(self.connections.len() as i64);
    }

    fn sweep_every(&mut self, now: Instant) {
        match self.swept {
            Some(swept) if now.saturating_duration_since(swept) < SWEEP => {}
            _ => {
                self.swept = Some(now);
                self.sweep(now);
            }
        }
    }

    /// Checks every connection at `now`: one idle for `capture.connection_idle` is forgotten (what it
    /// had not answered ends as a timeout), a loss an acknowledgement showed is counted.
    pub fn sweep(&mut self, now: Instant) {
        let idle = self.idle;
        let expired: Vec<_> = (self.connections.iter())
            .filter(|(_, c)| now.saturating_duration_since(c.last) >= idle)
            .map(|(key, _)| *key)
            .collect();
        for key in expired {
            if let Some(connection) = self.connections.remove(&key) {
                connection.forget(End::Cut, now, &self.counters);
            }
        }
        for connection in self.connections.values_mut() {
            connection.check(now, &self.counters);
        }
        self.counters.connections.set(self.connections.len() as i64);
    }

    /// The capture stops at `now`: every connection is forgotten, what it had not answered ending as a
    /// timeout.
    pub fn finish(&mut self, now: Instant) {
        for (_, connection) in self.connections.drain() {
            connection.forget(End::Cut, now, &self.counters);
        }
        self.counters.connections.set(0);
    }
}
