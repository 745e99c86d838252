//! The request body on its way upstream. It is forwarded frame by frame as it arrives; while it passes,
//! a bounded scan reads its top-level `model` field (never holding a byte back), and publishes it in a
//! [`ModelSlot`] the response side reads when it resolves the request's labels.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::json_scan::FieldScanner;

/// Largest `model` value kept, quotes and escapes included.
const MAX_MODEL_VALUE_BYTES: usize = 1024;
const MODEL_FIELD: &[&str] = &["model"];

/// The request's `model`, once the scan has ended, and whether the client's body broke off.
#[derive(Debug, Default)]
pub struct ModelSlot {
    model: OnceLock<Option<String>>,
    body_broken: AtomicBool,
}

impl ModelSlot {
    pub fn get(&self) -> Option<&str> {
        self.model.get().and_then(|m| m.as_deref())
    }

    pub fn body_broken(&self) -> bool {
        self.body_broken.load(Ordering::Relaxed)
    }
}

pin_project! {
    pub struct RequestTap<B> {
        #[pin]
        inner: B,
        scanner: Option<FieldScanner>,
        slot: Arc<ModelSlot>,
    }

    impl<B> PinnedDrop for RequestTap<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            publish(this.scanner, this.slot);
        }
    }
}

fn publish(scanner: &mut Option<FieldScanner>, slot: &ModelSlot) {
    if let Some(scanner) = scanner.take() {
        let _ = slot.model.set(scanner.string("model"));
    }
}

impl<B> RequestTap<B> {
    pub fn new(inner: B, scan_bytes: usize, slot: Arc<ModelSlot>) -> Self {
        let scanner = Some(FieldScanner::new(
            MODEL_FIELD,
            MAX_MODEL_VALUE_BYTES,
            scan_bytes,
        ));
        RequestTap {
            inner,
            scanner,
            slot,
        }
    }
}

impl<B> Body for RequestTap<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        let polled = ready!(this.inner.as_mut().poll_frame(cx));
        match &polled {
            Some(Ok(frame)) => {
                if let (Some(data), Some(scanner)) = (frame.data_ref(), this.scanner.as_mut()) {
                    scanner.feed(data);
                    if scanner.is_done() || this.inner.is_end_stream() {
                        publish(this.scanner, this.slot);
                    }
                }
            }
            Some(Err(_)) => {
                this.slot.body_broken.store(true, Ordering::Relaxed);
                publish(this.scanner, this.slot);
            }
            None => publish(this.scanner, this.slot),
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
