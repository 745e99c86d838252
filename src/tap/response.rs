//! The response body on its way to the client: every frame is timestamped and lent to the exchange's decoder,
//! then returned unchanged. The exchange is finished exactly once, at the first of: the last frame, an
//! upstream error (passed on, so the client's stream breaks too), the body being dropped unfinished
//! (the client went away, which also drops the upstream response and so stops the model server), or a
//! cut: the upstream sent nothing for `timeouts.idle`, or a shutdown's grace period ran out. A cut is
//! passed on as an error, so the client's stream breaks instead of ending as if it were complete, and
//! the upstream body is dropped with this one, closing its connection.
//!
//! The instant a data frame's bytes reached tokentap is kept until the next one ([`ReadAt`]), so the
//! client's side can tell how long tokentap held it (`net/delay.rs`) without reading the clock again: the
//! upstream socket's receive timestamp where the body knows it ([`Arrived`]), else the instant the frame
//! came off the upstream connection.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use tokio::time::Instant;

use super::IdleTimer;
use crate::record::outcome::End;
use crate::tap::exchange::ExchangeGuard;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why tokentap broke off a response stream itself.
#[derive(Debug, thiserror::Error)]
pub enum StreamCut {
    #[error("tokentap: the upstream sent nothing for {0:?} (timeouts.idle)")]
    Idle(Duration),
    #[error("tokentap: shutting down, and the grace period is over")]
    Shutdown,
}

pin_project! {
    pub struct ResponseTap<B> {
        #[pin]
        inner: B,
        exchange: ExchangeGuard,
        idle: IdleTimer,
        shutdown_cut: Pin<Box<dyn Future<Output = ()> + Send>>,
        cut: bool,
        read_at: Option<Instant>,
    }
}

/// A response body that can say when the bytes of the data frame it last returned reached tokentap ([`ReadAt::read_at`]).
pub trait ReadAt {
    /// The instant the bytes of the last data frame `poll_frame` returned reached tokentap (see the
    /// module's documentation); `None` for a body tokentap made itself, or before its first data frame.
    fn read_at(&self) -> Option<Instant>;
}

/// A body that can say how long ago the bytes of the data frame it last returned reached tokentap's socket
/// (the upstream connection's receive timestamp, `proxy/upstream/arrival.rs`).
pub trait Arrived {
    /// `None` when it cannot tell: the frame's clock then starts when it came off the upstream connection.
    fn waited(&self) -> Option<Duration> {
        None
    }
}

impl<B> ReadAt for ResponseTap<B> {
    fn read_at(&self) -> Option<Instant> {
        self.read_at
    }
}

impl<L: ReadAt, R: ReadAt> ReadAt for Either<L, R> {
    fn read_at(&self) -> Option<Instant> {
        match self {
            Either::Left(body) => body.read_at(),
            Either::Right(body) => body.read_at(),
        }
    }
}

/// tokentap's own answers (a refusal, an error page): nothing came from the upstream.
impl ReadAt for Full<Bytes> {
    fn read_at(&self) -> Option<Instant> {
        None
    }
}

impl<B> ResponseTap<B> {
    /// `shutdown_cut` completes when a shutdown's grace period is over.
    pub fn new(
        inner: B, exchange: ExchangeGuard, idle: Duration,
        shutdown_cut: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        ResponseTap {
            inner,
            exchange,
            idle: IdleTimer::new(idle),
            shutdown_cut: Box::pin(shutdown_cut),
            cut: false,
            read_at: None,
        }
    }
}

impl<B> Body for ResponseTap<B>
where
    B: Body<Data = Bytes> + Arrived,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>, cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        if *this.cut {
            return Poll::Ready(None);
        }
        if let Poll::Ready(polled) = this.inner.as_mut().poll_frame(cx) {
            let now = Instant::now();
            this.idle.restart(now);
            match &polled {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        let waited = this.inner.waited().unwrap_or_default();
                        *this.read_at = Some(now.checked_sub(waited).unwrap_or(now));
                        if let Some(exchange) = this.exchange.get_mut() {
                            exchange.on_data(data, now);
                        }
                    }
                    if this.inner.is_end_stream() {
                        this.exchange.finish(End::Complete);
                    }
                }
                Some(Err(_)) => this.exchange.finish(End::UpstreamBroke),
                None => this.exchange.finish(End::Complete),
            }
            return Poll::Ready(polled.map(|r| r.map_err(Into::into)));
        }
        let cut = if this.shutdown_cut.as_mut().poll(cx).is_ready() {
            StreamCut::Shutdown
        } else {
            ready!(this.idle.poll_expired(cx));
            StreamCut::Idle(this.idle.limit())
        };
        tracing::warn!(reason = %cut, "response stream cut");
        *this.cut = true;
        this.exchange.finish(End::Cut);
        Poll::Ready(Some(Err(cut.into())))
    }

    fn is_end_stream(&self) -> bool {
        self.cut || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::future::{pending, poll_fn};
    use std::sync::Arc;

    use http::{HeaderMap, HeaderValue, Method, StatusCode};
    use http_body_util::BodyExt;

    use super::*;
    use crate::config::Config;
    use crate::decode::dialect::detect;
    use crate::record::metrics::Metrics;
    use crate::tap::exchange::{Exchange, ExchangeContext};
    use crate::tap::mock::{data, MockBody, Step};
    use crate::tap::RequestSeen;

    const CHUNK: &str =
        "data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
    const IDLE: Duration = Duration::from_secs(10);

    /// An exchange of a streamed chat completion whose 200 head has arrived, and its metrics.
    fn exchange() -> (ExchangeGuard, Arc<Metrics>) {
        let config = Config::default();
        let metrics = match Metrics::new(&config) {
            Ok(metrics) => Arc::new(metrics),
            Err(e) => panic!("metrics: {e}"),
        };
        let context = Arc::new(ExchangeContext::metering_only(&config, metrics.clone()));
        let (api, dialect) = detect("/v1/chat/completions");
        let mut exchange = Exchange::begin(
            context,
            api,
            dialect,
            Method::POST,
            "/v1/chat/completions".to_owned(),
            Instant::now(),
            Arc::new(RequestSeen::default()),
        );
        let sse = HeaderValue::from_static("text/event-stream");
        exchange.on_response(StatusCode::OK, Some(&sse));
        (ExchangeGuard::new(exchange), metrics)
    }

    fn tap(body: MockBody) -> (ResponseTap<MockBody>, Arc<Metrics>) {
        tap_with_cut(body, pending())
    }

    fn tap_with_cut(
        body: MockBody, cut: impl Future<Output = ()> + Send + 'static,
    ) -> (ResponseTap<MockBody>, Arc<Metrics>) {
        let (guard, metrics) = exchange();
        (ResponseTap::new(body, guard, IDLE, cut), metrics)
    }

    /// Each outcome recorded so far in `tokentap_requests_total`, with its count.
    fn recorded(metrics: &Metrics) -> Vec<String> {
        let page = metrics.encode();
        let page = String::from_utf8_lossy(&page);
        page.lines()
            .filter(|l| l.starts_with("tokentap_requests_total{"))
            .filter_map(|l| {
                let outcome = l.split("outcome=\"").nth(1)?.split('"').next()?;
                let count = l.rsplit(' ').next()?;
                Some(format!("{outcome} {count}"))
            })
            .collect()
    }

    /// `tokentap_requests_in_flight`, summed over its labels.
    fn in_flight(metrics: &Metrics) -> f64 {
        let page = metrics.encode();
        let page = String::from_utf8_lossy(&page);
        page.lines()
            .filter(|l| l.starts_with("tokentap_requests_in_flight"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    async fn next(body: &mut ResponseTap<MockBody>) -> Option<Result<Frame<Bytes>, BoxError>> {
        body.frame().await
    }

    #[tokio::test(start_paused = true)]
    async fn frames_pass_through_as_the_very_same_bytes() {
        let sent = Bytes::from_static(CHUNK.as_bytes());
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let body = MockBody::new([Step::Data(sent.clone()), Step::Trailers(trailers.clone())]);
        let (mut body, _) = tap(body);
        let frame = match next(&mut body).await {
            Some(Ok(frame)) => frame,
            other => panic!("expected a data frame, got {other:?}"),
        };
        let got = frame.into_data().unwrap_or_default();
        assert_eq!(got, sent);
        assert_eq!(got.as_ptr(), sent.as_ptr(), "the same buffer, not a copy");
        let frame = match next(&mut body).await {
            Some(Ok(frame)) => frame,
            other => panic!("expected trailers, got {other:?}"),
        };
        assert_eq!(frame.into_trailers().ok(), Some(trailers));
    }

    #[tokio::test(start_paused = true)]
    async fn is_end_stream_and_size_hint_are_those_of_the_inner_body() {
        let body = MockBody::new([data(CHUNK)]).with_size_hint(SizeHint::with_exact(77));
        let (mut body, _) = tap(body);
        assert_eq!(body.size_hint().exact(), Some(77));
        assert!(!body.is_end_stream());
        assert!(next(&mut body).await.is_some());
        assert!(body.is_end_stream());
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_data_frame_finishes_the_exchange_once() {
        let (mut body, metrics) = tap(MockBody::new([data(CHUNK), data(CHUNK)]));
        assert!(next(&mut body).await.is_some());
        assert_eq!(in_flight(&metrics), 1.0, "not finished before the end");
        assert!(next(&mut body).await.is_some());
        assert_eq!(in_flight(&metrics), 0.0);
        assert_eq!(recorded(&metrics), ["ok 1"]);
        assert!(next(&mut body).await.is_none());
        drop(body);
        assert_eq!(recorded(&metrics), ["ok 1"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_ending_with_none_finishes_at_the_none_once() {
        let (mut body, metrics) = tap(MockBody::new([data(CHUNK)]).ending_with_none());
        assert!(next(&mut body).await.is_some());
        assert_eq!(recorded(&metrics), Vec::<String>::new());
        assert!(next(&mut body).await.is_none());
        assert_eq!(recorded(&metrics), ["ok 1"]);
        drop(body);
        assert_eq!(recorded(&metrics), ["ok 1"]);
    }

    #[tokio::test(start_paused = true)]
    async fn trailers_at_the_end_finish_the_exchange_once() {
        let body = MockBody::new([data(CHUNK), Step::Trailers(HeaderMap::new())]);
        let (mut body, metrics) = tap(body);
        assert!(next(&mut body).await.is_some());
        assert_eq!(recorded(&metrics), Vec::<String>::new());
        assert!(next(&mut body).await.is_some());
        assert_eq!(recorded(&metrics), ["ok 1"]);
        drop(body);
        assert_eq!(recorded(&metrics), ["ok 1"]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_upstream_error_is_passed_on_and_recorded_once() {
        let (mut body, metrics) = tap(MockBody::new([data(CHUNK), Step::Error, data(CHUNK)]));
        assert!(next(&mut body).await.is_some());
        assert!(matches!(next(&mut body).await, Some(Err(_))));
        assert_eq!(recorded(&metrics), ["upstream_error 1"]);
        assert_eq!(in_flight(&metrics), 0.0);
        drop(body);
        assert_eq!(recorded(&metrics), ["upstream_error 1"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_frames_clock_starts_when_its_bytes_reached_the_socket_where_the_body_knows_it() {
        let (mut body, _) = tap(MockBody::new([data(CHUNK)]).arrived(Duration::from_micros(70)));
        assert!(next(&mut body).await.is_some());
        assert_eq!(
            body.read_at(),
            Some(Instant::now() - Duration::from_micros(70))
        );

        let (mut body, _) = tap(MockBody::new([data(CHUNK)]));
        assert_eq!(body.read_at(), None, "no data frame yet");
        assert!(next(&mut body).await.is_some());
        assert_eq!(
            body.read_at(),
            Some(Instant::now()),
            "else when it came off the connection"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_body_unfinished_records_a_cancelled_request() {
        let (mut body, metrics) = tap(MockBody::new([data(CHUNK), Step::Pending]));
        assert!(next(&mut body).await.is_some());
        assert_eq!(in_flight(&metrics), 1.0);
        drop(body);
        assert_eq!(recorded(&metrics), ["cancelled 1"]);
        assert_eq!(in_flight(&metrics), 0.0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_cut_fires_exactly_timeouts_idle_after_the_last_frame() {
        let start = Instant::now();
        let long = Step::Sleep(Duration::from_secs(6));
        let (mut body, metrics) = tap(MockBody::new([long, data(CHUNK), Step::Pending]));
        assert!(next(&mut body).await.is_some());
        assert_eq!(Instant::now() - start, Duration::from_secs(6));
        let cut = next(&mut body).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(16));
        let err = match cut {
            Some(Err(err)) => err,
            other => panic!("expected the idle cut, got {other:?}"),
        };
        assert!(matches!(err.downcast_ref::<StreamCut>(), Some(StreamCut::Idle(d)) if *d == IDLE));
        assert_eq!(recorded(&metrics), ["timeout 1"]);
        assert!(body.is_end_stream());
        assert!(next(&mut body).await.is_none(), "nothing after the cut");
        drop(body);
        assert_eq!(recorded(&metrics), ["timeout 1"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_just_within_the_idle_limit_is_not_cut() {
        let within = Step::Sleep(IDLE - Duration::from_millis(1));
        let (mut body, metrics) = tap(MockBody::new([within, data(CHUNK)]));
        assert!(matches!(next(&mut body).await, Some(Ok(_))));
        assert_eq!(recorded(&metrics), ["ok 1"]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_shutdown_cut_breaks_the_stream_when_the_grace_period_ends() {
        let start = Instant::now();
        let grace = tokio::time::sleep(Duration::from_secs(3));
        let (mut body, metrics) = tap_with_cut(MockBody::new([Step::Pending]), grace);
        let cut = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(3));
        let err = match cut {
            Some(Err(err)) => err,
            other => panic!("expected the shutdown cut, got {other:?}"),
        };
        assert!(matches!(
            err.downcast_ref::<StreamCut>(),
            Some(StreamCut::Shutdown)
        ));
        assert_eq!(recorded(&metrics), ["timeout 1"]);
    }
}
