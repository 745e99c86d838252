//! HTTP/1.1 on a connection's two reassembled streams, turned into exchanges: each request head read
//! off the client's stream begins an [`Exchange`] (the proxy's own, `tap/exchange.rs`) at its first
//! packet's time; its body is read for its `model` (and kept, within `limits.hold_request_body_bytes`,
//! for its message list); each response read off the server's stream answers the oldest request not
//! yet answered (keep-alive, pipelining), its head at the time of the packet that completed it, each
//! piece of its body fed to the exchange's decoder and meter at its packet's time, its end finishing
//! the exchange. So a captured request is metered by the very code an inline one is.
//!
//! How an exchange ends follows the connection: its body's last byte (`ok`), the client's FIN or RST
//! first (`cancelled`, or `ok` when the API's terminal event had passed, as inline), the server's FIN
//! or RST first (`upstream_error`), the connection going idle or the capture stopping (`timeout`).
//! Bytes that cannot be read as HTTP/1.1 end the reading of the connection ([`Stop`]): its exchanges
//! are abandoned, neither counted nor written.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::SystemTime;

use http::Method;
use tokio::time::Instant;

use super::body::Body;
use super::budget::Lease;
use super::head::{self, Gather, HeadError};
use crate::decode::dialect;
use crate::record::metrics::Unmetered;
use crate::record::outcome::End;
use crate::tap::context::ExchangeContext;
use crate::tap::exchange::{Exchange, ExchangeGuard, HeldBody};
use crate::tap::{ModelScan, RequestSeen};

/// When a packet was captured: the monotonic instant the meter reads, and the wall clock the record
/// says.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    pub at: Instant,
    pub wall: SystemTime,
}

/// Why the reading of a connection stops.
pub type Stop = Unmetered;

/// What the exchanges of every connection are given.
pub struct Shared {
    pub context: Arc<ExchangeContext>,
    /// `limits.max_request_header_bytes`: the longest head read.
    pub max_head: usize,
    /// `limits.hold_request_body_bytes`: the longest request body kept for its message list.
    pub hold_body: usize,
}

/// Which way bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client = 0,
    Server = 1,
}

/// A request sent and not yet answered whole.
struct Pending {
    guard: ExchangeGuard,
    method: Method,
    upgrade: bool,
    /// Its body is still being read.
    body: Option<RequestBody>,
}

struct RequestBody {
    seen: Arc<RequestSeen>,
    scan: ModelScan,
    /// Kept for its message list while it fits `hold_body` and the lease; `None` once it did not.
    held: Option<Vec<u8>>,
}

enum Reading {
    /// A head, and the packet its first byte came in.
    Head(Gather, Option<Stamp>),
    /// The body of the newest request (the back of `pending`, while its `body` is open).
    Body(Body),
}

/// The HTTP/1.1 exchanges of one connection.
pub struct Http {
    requests: Reading,
    responses: Reading,
    pending: VecDeque<Pending>,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            requests: Reading::Head(Gather::default(), None),
            responses: Reading::Head(Gather::default(), None),
            pending: VecDeque::new(),
        }
    }
}

impl Http {
    /// Whether a request was read that is not yet answered: a connection met mid-stream joins the
    /// server's stream only then.
    pub fn awaits_answer(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Bytes of `side`'s stream, in order, from a packet captured at `stamp`.
    pub fn bytes(
        &mut self, side: Side, mut bytes: &[u8], stamp: Stamp, shared: &Shared, lease: &mut Lease,
    ) -> Result<(), Stop> {
        while !bytes.is_empty() {
            let used = match side {
                Side::Client => self.request_bytes(bytes, stamp, shared, lease)?,
                Side::Server => self.response_bytes(bytes, stamp, shared, lease)?,
            };
            bytes = &bytes[used..];
        }
        Ok(())
    }

    fn request_bytes(
        &mut self, bytes: &[u8], stamp: Stamp, shared: &Shared, lease: &mut Lease,
    ) -> Result<usize, Stop> {
        match &mut self.requests {
            Reading::Head(gather, first) => {
                first.get_or_insert(stamp);
                let Some((head, used)) =
                    gather.feed(bytes, shared.max_head, lease).map_err(stop)?
                else {
                    return Ok(bytes.len());
                };
                let first = first.take().unwrap_or(stamp);
                let body = self.begin(&head, first, shared, lease.client())?;
                self.requests = match body {
                    Body::Length(0) => {
                        self.end_of_request_body(lease);
                        Reading::Head(Gather::default(), None)
                    }
                    body => Reading::Body(body),
                };
                Ok(used)
            }
            Reading::Body(body) => {
                let mut open = self.pending.back_mut().and_then(|p| p.body.as_mut());
                let mut data = |piece: &[u8]| {
                    if let Some(open) = open.as_deref_mut() {
                        open.scan.feed(piece);
                        let keep = open
                            .held
                            .as_ref()
                            .is_some_and(|h| h.len() + piece.len() <= shared.hold_body);
                        match open.held.as_mut() {
                            Some(held) if keep && lease.grow(piece.len()) => {
                                held.extend_from_slice(piece)
                            }
                            Some(held) => {
                                lease.shrink(held.len());
                                open.held = None;
                            }
                            None => {}
                        }
                    }
                };
                let (used, done) = body
                    .feed(bytes, &mut data)
                    .map_err(|_| Unmetered::NotHttp)?;
                if done {
                    self.requests = Reading::Head(Gather::default(), None);
                    self.end_of_request_body(lease);
                }
                Ok(used)
            }
        }
    }

    /// A request head, read whole: its exchange begins at `first`, the packet its first byte came in.
    fn begin(
        &mut self, head: &[u8], first: Stamp, shared: &Shared, client: std::net::IpAddr,
    ) -> Result<Body, Stop> {
        let head = head::request(head).map_err(stop)?;
        let (api, dialect) = dialect::detect(&head.path);
        let seen = Arc::new(RequestSeen::default());
        let mut exchange = Exchange::begin(
            shared.context.clone(),
            api,
            dialect,
            head.method.clone(),
            head.path.clone(),
            first.at,
            seen.clone(),
        );
        exchange.captured(first.wall);
        exchange.identify(&head.headers, Some(client));
        let content_type = head.headers.get(http::header::CONTENT_TYPE);
        let scan = ModelScan::new(content_type, shared.context.metering.model_scan_bytes);
        self.pending.push_back(Pending {
            guard: ExchangeGuard::new(exchange),
            method: head.method,
            upgrade: head.upgrade,
            body: Some(RequestBody {
                seen,
                scan,
                held: (shared.hold_body > 0).then(Vec::new),
            }),
        });
        Ok(head.body)
    }

    /// The newest request's body ended: its `model` is published and its message list read from the
    /// body kept, if any (one answered already had this done at its answer's head).
    fn end_of_request_body(&mut self, lease: &mut Lease) {
        if let Some(pending) = self.pending.back_mut() {
            finish_body(pending, lease);
        }
    }

    fn response_bytes(
        &mut self, bytes: &[u8], stamp: Stamp, shared: &Shared, lease: &mut Lease,
    ) -> Result<usize, Stop> {
        match &mut self.responses {
            Reading::Head(gather, _) => {
                let Some((head, used)) =
                    gather.feed(bytes, shared.max_head, lease).map_err(stop)?
                else {
                    return Ok(bytes.len());
                };
                let head = head::response(&head).map_err(stop)?;
                let status = head.status.as_u16();
                let front = self.pending.front_mut().ok_or(Unmetered::NotHttp)?;
                if status == 101 {
                    return Err(match front.upgrade {
                        true => Unmetered::Upgrade,
                        false => Unmetered::NotHttp,
                    });
                }
                if (100..200).contains(&status) {
                    return Ok(used);
                }
                finish_body(front, lease);
                let body = head.body(&front.method).map_err(stop)?;
                if let Some(exchange) = front.guard.get_mut() {
                    let content_type = head.headers.get(http::header::CONTENT_TYPE);
                    exchange.on_response_at(head.status, content_type, stamp.at);
                    exchange.on_server_headers(&head.headers);
                }
                if body == Body::Length(0) {
                    self.answered(End::Complete, stamp.at);
                } else {
                    self.responses = Reading::Body(body);
                }
                Ok(used)
            }
            Reading::Body(body) => {
                let exchange = self.pending.front_mut().and_then(|p| p.guard.get_mut());
                let mut exchange = exchange;
                let mut data = |piece: &[u8]| {
                    if let Some(exchange) = exchange.as_deref_mut() {
                        exchange.on_data(piece, stamp.at);
                    }
                };
                let (used, done) = body
                    .feed(bytes, &mut data)
                    .map_err(|_| Unmetered::NotHttp)?;
                if done {
                    self.answered(End::Complete, stamp.at);
                }
                Ok(used)
            }
        }
    }

    /// The oldest request's answer ended as `end` at `at`.
    fn answered(&mut self, end: End, at: Instant) {
        if let Some(mut pending) = self.pending.pop_front() {
            pending.guard.finish_at(end, at);
        }
        self.responses = Reading::Head(Gather::default(), None);
    }

    /// `side`'s stream ended (its FIN, in order) at `at`.
    pub fn fin(&mut self, side: Side, at: Instant) {
        match side {
            Side::Server => {
                if matches!(&self.responses, Reading::Body(body) if body.to_close()) {
                    self.answered(End::Complete, at);
                }
                self.end_all(End::UpstreamBroke, at);
            }
            Side::Client => self.end_all(End::ClientGone, at),
        }
    }

    /// `side` reset the connection at `at`.
    pub fn reset(&mut self, side: Side, at: Instant) {
        let end = match side {
            Side::Client => End::ClientGone,
            Side::Server => End::UpstreamBroke,
        };
        self.end_all(end, at);
    }

    /// Every request not yet answered whole ends as `end` at `at`.
    pub fn end_all(&mut self, end: End, at: Instant) {
        while !self.pending.is_empty() {
            self.answered(end, at);
        }
    }

    /// The connection can be read no further: every request not yet answered whole is abandoned.
    pub fn abandon(&mut self, lease: &mut Lease) {
        for mut pending in self.pending.drain(..) {
            pending.guard.abandon();
        }
        for reading in [&mut self.requests, &mut self.responses] {
            if let Reading::Head(gather, _) = reading {
                gather.clear(lease);
            }
        }
    }
}

/// `pending`'s body ended, or is taken as it is: its `model` published, its message list read from
/// what was kept (not kept: read as a streamed body's, i.e. not at all).
fn finish_body(pending: &mut Pending, lease: &mut Lease) {
    let Some(mut body) = pending.body.take() else {
        return;
    };
    body.scan.publish(&body.seen);
    let held = body.held.take().map(|held| {
        lease.shrink(held.len());
        Arc::new(held) as HeldBody
    });
    if let Some(exchange) = pending.guard.get_mut() {
        exchange.read_messages(held);
    }
}

fn stop(error: HeadError) -> Stop {
    match error {
        HeadError::NotHttp => Unmetered::NotHttp,
        HeadError::TooLarge => Unmetered::Buffer,
    }
}
