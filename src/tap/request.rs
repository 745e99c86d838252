//! The request body on its way upstream. It is forwarded frame by frame as it arrives; while it passes,
//! a bounded scan reads its top-level `model` field (never holding a byte back), and publishes it in a
//! [`RequestSeen`] the response side reads when it resolves the request's labels.
//!
//! A body that grows past `limits.max_request_body_bytes` is cut: the tap returns an error instead of the
//! frame that crossed the limit, so the upstream sees an aborted request, never a complete truncated one,
//! and the [`RequestSeen`] notes why, for the 413 answer.
//!
//! A client that stops sending its body is cut the same way once it has sent nothing for
//! `timeouts.request_body_idle` while tokentap was waiting for more (time the upstream spends not
//! reading is not the client's), and the [`RequestSeen`] notes it, for the 408 answer.
//!
//! When the upstream cannot be reached, the client library drops the request unread; the [`Leftover`]
//! handle then lets the proxy read what is left of the body (bounded in bytes and time) so that even a 502
//! is counted under the request's model.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::time::Instant;

use super::{BoxError, IdleTimer};
use crate::decode::json_scan::FieldScanner;

/// Largest `model` value kept, quotes and escapes included.
const MAX_MODEL_VALUE_BYTES: usize = 1024;
const MODEL_FIELD: &[&str] = &["model"];

/// What the request tap saw of the body: its `model`, once the scan has ended, and whether the body
/// broke off or was cut for its size or for going idle.
#[derive(Debug, Default)]
pub struct RequestSeen {
    model: OnceLock<Option<String>>,
    body_broken: AtomicBool,
    body_too_large: AtomicBool,
    body_idle: AtomicBool,
}

/// The error a [`RequestTap`] returns in place of the frame that took the body over its limit.
#[derive(Debug, thiserror::Error)]
#[error("the request body is larger than {limit} bytes (limits.max_request_body_bytes)")]
pub struct BodyTooLarge {
    pub limit: u64,
}

/// The error a [`RequestTap`] returns when the client sent no more of its body in time.
#[derive(Debug, thiserror::Error)]
#[error("the client sent no more of its request body for {0:?} (timeouts.request_body_idle)")]
pub struct BodyIdle(pub Duration);

impl RequestSeen {
    pub fn get(&self) -> Option<&str> {
        self.model.get().and_then(|m| m.as_deref())
    }

    pub fn body_broken(&self) -> bool {
        self.body_broken.load(Ordering::Relaxed)
    }

    pub fn body_too_large(&self) -> bool {
        self.body_too_large.load(Ordering::Relaxed)
    }

    /// The client's body was cut after `timeouts.request_body_idle` without a frame.
    pub fn body_idle(&self) -> bool {
        self.body_idle.load(Ordering::Relaxed)
    }
}

struct Shared<B> {
    body: Option<B>,
    scanner: Option<FieldScanner>,
    /// Bytes still allowed before the body is over `limits.max_request_body_bytes`.
    allowed: u64,
    limit: u64,
}

impl<B> Shared<B> {
    fn publish(&mut self, slot: &RequestSeen) {
        if let Some(scanner) = self.scanner.take() {
            let _ = slot.model.set(scanner.string("model"));
        }
    }
}

fn lock<B>(shared: &Mutex<Shared<B>>) -> MutexGuard<'_, Shared<B>> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

pub struct RequestTap<B> {
    shared: Arc<Mutex<Shared<B>>>,
    slot: Arc<RequestSeen>,
    idle: IdleTimer,
    /// Whether the last poll found no frame: the idle wait runs from that first empty poll.
    waiting: bool,
}

/// The proxy's hold on the request body, for when the upstream never read it.
pub struct Leftover<B> {
    shared: Arc<Mutex<Shared<B>>>,
    slot: Arc<RequestSeen>,
}

impl<B> RequestTap<B> {
    pub fn new(
        inner: B,
        scan_bytes: usize,
        max_body_bytes: u64,
        body_idle: Duration,
        slot: Arc<RequestSeen>,
    ) -> (Self, Leftover<B>) {
        let scanner = Some(FieldScanner::new(
            MODEL_FIELD,
            MAX_MODEL_VALUE_BYTES,
            scan_bytes,
        ));
        let shared = Arc::new(Mutex::new(Shared {
            body: Some(inner),
            scanner,
            allowed: max_body_bytes,
            limit: max_body_bytes,
        }));
        (
            RequestTap {
                shared: shared.clone(),
                slot: slot.clone(),
                idle: IdleTimer::new(body_idle),
                waiting: false,
            },
            Leftover { shared, slot },
        )
    }
}

impl<B> Leftover<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    /// Reads what the upstream left unread of the body, up to the scan bound or `within`, to learn the model.
    pub async fn read_model(self, within: Duration) {
        let (body, scanner) = {
            let mut shared = lock(&self.shared);
            (shared.body.take(), shared.scanner.take())
        };
        let (Some(mut body), Some(mut scanner)) = (body, scanner) else {
            return;
        };
        let _ = tokio::time::timeout(within, async {
            while !scanner.is_done() {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Some(data) = frame.data_ref() {
                            scanner.feed(data);
                        }
                    }
                    _ => break,
                }
            }
        })
        .await;
        let _ = self.slot.model.set(scanner.string("model"));
    }
}

impl<B> Body for RequestTap<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let mut shared = lock(&this.shared);
        let Some(body) = shared.body.as_mut() else {
            return Poll::Ready(None);
        };
        let Poll::Ready(polled) = Pin::new(&mut *body).poll_frame(cx) else {
            if !this.waiting {
                this.waiting = true;
                this.idle.restart(Instant::now());
            }
            ready!(this.idle.poll_expired(cx));
            this.slot.body_idle.store(true, Ordering::Relaxed);
            shared.body = None;
            shared.publish(&this.slot);
            return Poll::Ready(Some(Err(BodyIdle(this.idle.limit()).into())));
        };
        this.waiting = false;
        let ended = body.is_end_stream();
        match &polled {
            Some(Ok(frame)) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                if len > shared.allowed {
                    this.slot.body_too_large.store(true, Ordering::Relaxed);
                    shared.body = None;
                    shared.publish(&this.slot);
                    let limit = shared.limit;
                    return Poll::Ready(Some(Err(BodyTooLarge { limit }.into())));
                }
                shared.allowed -= len;
                if let (Some(data), Some(scanner)) = (frame.data_ref(), shared.scanner.as_mut()) {
                    scanner.feed(data);
                    if scanner.is_done() || ended {
                        shared.publish(&this.slot);
                    }
                }
            }
            Some(Err(_)) => {
                this.slot.body_broken.store(true, Ordering::Relaxed);
                shared.publish(&this.slot);
            }
            None => shared.publish(&this.slot),
        }
        Poll::Ready(polled.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        lock(&self.shared)
            .body
            .as_ref()
            .is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        lock(&self.shared)
            .body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}
