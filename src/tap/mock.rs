//! A scripted body for the taps' unit tests, as linkerd2-proxy's mock bodies: it yields data, trailers
//! and errors, sleeps on tokio's clock between them, or stays pending for good, in the order scripted.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

use super::Arrived;

pub enum Step {
    Data(Bytes),
    Trailers(HeaderMap),
    Error,
    Sleep(Duration),
    /// Pending for good (nothing will ever wake it).
    Pending,
}

pub struct MockBody {
    steps: VecDeque<Step>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// Whether the body says it has ended once its script is used up (else it answers `None` first).
    eos_with_last: bool,
    hint: SizeHint,
    /// What the body says of how long ago its frames' bytes reached the socket.
    waited: Option<Duration>,
}

impl MockBody {
    /// A body that says `is_end_stream` as soon as its last scripted frame has been taken.
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        MockBody {
            steps: steps.into_iter().collect(),
            sleep: None,
            eos_with_last: true,
            hint: SizeHint::default(),
            waited: None,
        }
    }

    /// A body that only ends by answering `None` after its script.
    pub fn ending_with_none(mut self) -> Self {
        self.eos_with_last = false;
        self
    }

    pub fn with_size_hint(mut self, hint: SizeHint) -> Self {
        self.hint = hint;
        self
    }

    /// A body whose frames' bytes each reached the socket `waited` before they are returned.
    pub fn arrived(mut self, waited: Duration) -> Self {
        self.waited = Some(waited);
        self
    }
}

impl Arrived for MockBody {
    fn waited(&self) -> Option<Duration> {
        self.waited
    }
}

pub fn data(s: &'static str) -> Step {
    Step::Data(Bytes::from_static(s.as_bytes()))
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>, cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        loop {
            if let Some(sleep) = self.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                self.sleep = None;
            }
            let Some(step) = self.steps.pop_front() else {
                return Poll::Ready(None);
            };
            return Poll::Ready(Some(match step {
                Step::Data(bytes) => Ok(Frame::data(bytes)),
                Step::Trailers(trailers) => Ok(Frame::trailers(trailers)),
                Step::Error => Err(std::io::Error::other("scripted error")),
                Step::Sleep(d) => {
                    self.sleep = Some(Box::pin(tokio::time::sleep(d)));
                    continue;
                }
                Step::Pending => {
                    self.steps.push_front(Step::Pending);
                    return Poll::Pending;
                }
            }));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.eos_with_last && self.steps.is_empty() && self.sleep.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        self.hint
    }
}
