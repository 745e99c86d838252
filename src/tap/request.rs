//! The request body on its way upstream. It is forwarded frame by frame as it arrives; while it passes,
//! a bounded scan reads its `model` (never holding a byte back): a JSON body's top-level field, or a
//! `multipart/form-data` body's field (a transcription's upload, `decode/form.rs`), within the same
//! bound; it publishes it in a [`RequestSeen`] the response side reads when it resolves the request's
//! labels. A body whose `model` is not read (past the bound, malformed) counts under the response's
//! model, else `unknown`, whatever its kind.
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
use http::HeaderValue;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::time::Instant;

use super::{BoxError, IdleTimer};
use crate::decode::form::FormScanner;
use crate::decode::json::FieldScanner;

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

/// The reader of the body's `model`, by the body's content type.
enum Fields {
    Json(FieldScanner),
    Form(FormScanner),
}

impl Fields {
    /// A form's fields for a `multipart/form-data` body, else a JSON object's (any other type: a
    /// JSON body is often sent without one).
    fn for_body(content_type: Option<&HeaderValue>, scan_bytes: usize) -> Self {
        let form = content_type.and_then(|ct| {
            FormScanner::for_content_type(
                ct.as_bytes(),
                MODEL_FIELD,
                MAX_MODEL_VALUE_BYTES,
                scan_bytes,
            )
        });
        match form {
            Some(form) => Fields::Form(form),
            None => Fields::Json(FieldScanner::new(
                MODEL_FIELD,
                MAX_MODEL_VALUE_BYTES,
                scan_bytes,
            )),
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        match self {
            Fields::Json(scanner) => scanner.feed(bytes),
            Fields::Form(form) => form.feed(bytes),
        }
    }

    fn is_done(&self) -> bool {
        match self {
            Fields::Json(scanner) => scanner.is_done(),
            Fields::Form(form) => form.is_done(),
        }
    }

    fn model(&self) -> Option<String> {
        match self {
            Fields::Json(scanner) => scanner.string("model"),
            Fields::Form(form) => form.string("model"),
        }
    }
}

/// A request body's `model` read from bytes handed in as they are seen (capture mode, `capture/`),
/// with the same reader and bound as the [`RequestTap`]'s, and published once the body ended.
pub struct ModelScan(Option<Fields>);

impl ModelScan {
    /// A scan of a body of `content_type`, within `scan_bytes`.
    pub fn new(content_type: Option<&HeaderValue>, scan_bytes: usize) -> Self {
        ModelScan(Some(Fields::for_body(content_type, scan_bytes)))
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        if let Some(fields) = self.0.as_mut().filter(|f| !f.is_done()) {
            fields.feed(bytes);
        }
    }

    /// The body ended (or was given up): its `model`, as read, is what `slot` says from now on.
    pub fn publish(&mut self, slot: &RequestSeen) {
        if let Some(fields) = self.0.take() {
            let _ = slot.model.set(fields.model());
        }
    }
}

struct Shared<B> {
    body: Option<B>,
    scanner: Option<Fields>,
    /// Bytes still allowed before the body is over `limits.max_request_body_bytes`.
    allowed: u64,
    limit: u64,
}

impl<B> Shared<B> {
    fn publish(&mut self, slot: &RequestSeen) {
        if let Some(scanner) = self.scanner.take() {
            let _ = slot.model.set(scanner.model());
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
    /// `content_type`: the request's, which says how its `model` is read.
    pub fn new(
        inner: B, content_type: Option<&HeaderValue>, scan_bytes: usize, max_body_bytes: u64,
        body_idle: Duration, slot: Arc<RequestSeen>,
    ) -> (Self, Leftover<B>) {
        let scanner = Some(Fields::for_body(content_type, scan_bytes));
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
        let _ = self.slot.model.set(scanner.model());
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
        self: Pin<&mut Self>, cx: &mut Context<'_>,
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

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;
    use crate::tap::mock::{data, MockBody, Step};

    const IDLE: Duration = Duration::from_secs(5);

    fn tap(body: MockBody, max_body_bytes: u64) -> (RequestTap<MockBody>, Arc<RequestSeen>) {
        let slot = Arc::new(RequestSeen::default());
        let (tap, _leftover) =
            RequestTap::new(body, None, 64 * 1024, max_body_bytes, IDLE, slot.clone());
        (tap, slot)
    }

    async fn next(body: &mut RequestTap<MockBody>) -> Option<Result<Frame<Bytes>, BoxError>> {
        body.frame().await
    }

    #[tokio::test(start_paused = true)]
    async fn frames_pass_through_as_the_very_same_bytes() {
        let sent = Bytes::from_static(br#"{"model":"m"}"#);
        let (mut body, _) = tap(MockBody::new([Step::Data(sent.clone())]), 1024);
        let got = match next(&mut body).await {
            Some(Ok(frame)) => frame.into_data().unwrap_or_default(),
            other => panic!("expected a data frame, got {other:?}"),
        };
        assert_eq!(got, sent);
        assert_eq!(got.as_ptr(), sent.as_ptr(), "the same buffer, not a copy");
    }

    #[tokio::test(start_paused = true)]
    async fn is_end_stream_and_size_hint_are_those_of_the_inner_body() {
        let body = MockBody::new([data("{}")]).with_size_hint(SizeHint::with_exact(2));
        let (mut body, _) = tap(body, 1024);
        assert_eq!(body.size_hint().exact(), Some(2));
        assert!(!body.is_end_stream());
        assert!(next(&mut body).await.is_some());
        assert!(body.is_end_stream());
    }

    #[tokio::test(start_paused = true)]
    async fn the_model_is_read_across_every_frame_split() {
        let whole =
            r#"{"messages":[{"role":"user","content":"a \"model\": x"}],"model":"llama-3"}"#;
        for split in 1..whole.len() {
            let (head, tail) = whole.split_at(split);
            let frames = [
                Step::Data(Bytes::copy_from_slice(head.as_bytes())),
                Step::Data(Bytes::copy_from_slice(tail.as_bytes())),
            ];
            let (mut body, slot) = tap(MockBody::new(frames), 1024);
            while let Some(frame) = next(&mut body).await {
                assert!(frame.is_ok());
            }
            assert_eq!(slot.get(), Some("llama-3"), "split at {split}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_model_is_published_when_a_body_ends_with_none() {
        let body = MockBody::new([data(r#"{"model":"m","#), data(r#""x":1}"#)]).ending_with_none();
        let (mut body, slot) = tap(body, 1024);
        assert!(next(&mut body).await.is_some());
        assert!(next(&mut body).await.is_some());
        assert!(next(&mut body).await.is_none());
        assert_eq!(slot.get(), Some("m"));
        assert!(!slot.body_broken());
    }

    #[tokio::test(start_paused = true)]
    async fn a_broken_body_is_passed_on_and_recorded_in_the_slot() {
        let (mut body, slot) = tap(MockBody::new([data(r#"{"model":"m""#), Step::Error]), 1024);
        assert!(next(&mut body).await.is_some());
        assert!(matches!(next(&mut body).await, Some(Err(_))));
        assert!(slot.body_broken());
        assert!(!slot.body_idle() && !slot.body_too_large());
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_over_the_size_limit_is_replaced_by_an_error() {
        let (mut body, slot) = tap(MockBody::new([data("12345"), data("678")]), 7);
        assert!(matches!(next(&mut body).await, Some(Ok(_))));
        let err = match next(&mut body).await {
            Some(Err(err)) => err,
            other => panic!("expected the size cut, got {other:?}"),
        };
        assert_eq!(err.downcast_ref::<BodyTooLarge>().map(|e| e.limit), Some(7));
        assert!(slot.body_too_large());
        assert!(next(&mut body).await.is_none(), "nothing after the cut");
        assert!(body.is_end_stream());
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_cut_fires_exactly_request_body_idle_after_the_wait_began() {
        let (mut body, slot) = tap(MockBody::new([data("{"), Step::Pending]), 1024);
        assert!(next(&mut body).await.is_some());
        // Time the upstream spends not reading is not the client's.
        tokio::time::sleep(Duration::from_secs(60)).await;
        let waiting = Instant::now();
        let cut = next(&mut body).await;
        assert_eq!(Instant::now() - waiting, IDLE);
        let err = match cut {
            Some(Err(err)) => err,
            other => panic!("expected the idle cut, got {other:?}"),
        };
        assert_eq!(err.downcast_ref::<BodyIdle>().map(|e| e.0), Some(IDLE));
        assert!(slot.body_idle());
        assert!(next(&mut body).await.is_none(), "nothing after the cut");
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_within_request_body_idle_is_not_cut() {
        let slow = Step::Sleep(IDLE - Duration::from_millis(1));
        let (mut body, slot) = tap(MockBody::new([data("{"), slow, data("}")]), 1024);
        assert!(next(&mut body).await.is_some());
        assert!(matches!(next(&mut body).await, Some(Ok(_))));
        assert!(!slot.body_idle());
    }
}
