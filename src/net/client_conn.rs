//! One client connection as a port sees it, below HTTP: the two downstream timeouts, and the close of a
//! connection whose place was reclaimed. A client must send a complete request head within
//! `client_header_read` (metrics port: `metrics_header_read`) of connecting, or of the first byte of its
//! next request on a kept-alive connection (slowloris); a connection with no request in progress is
//! closed after `client_idle` (`metrics_idle`). While a request is in progress (from its head being
//! read until its response body is done) neither runs, so a long wait for the first token is never cut
//! here.
//!
//! [`TimedIo`] wraps the socket and sees every read and write; what the connection is doing is its
//! [`Activity`] (`activity.rs`): requests in progress, an answer not all written (from its body's end
//! until hyper's flush), a place reclaimed by the connection cap (`places.rs`). A
//! timeout, or a reclaimed place once idle, reads as end of file, so hyper closes the connection as if
//! the client had. [`accept`] takes the next connection off a listener, both ports'.
//!
//! On the metrics port the write side is timed too ([`TimedIo::with_send_timeout`]): a client that asks
//! for a page and does not read it would otherwise hold the page, and its socket, until `metrics_idle`.
//! From the moment a write finds the client's socket full, what hyper has to send must be taken within
//! `timeouts.metrics_send`; else the write fails and hyper closes the connection. Unlike nginx's
//! `send_timeout`, the clock is not reset by each bit of progress, so a client that reads a byte now and
//! then cannot hold an answer either.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

use crate::logging::repeated::RepeatedWarning;
use crate::net::activity::{Activity, Now};
use crate::net::delay::FrameDelay;

/// The HTTP/2 connection preface: its clients are timed by `client_idle` only (h2 has its own
/// flow control and stream limits against slow senders).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How long a reclaimed h2 connection stays open once idle. An h2 stream ends on a task of its own,
/// with its last frame queued for the connection's task to write: the connection's flush can complete
/// just before that frame is written, and a close read at that instant would lose it. The connection's
/// task has been woken to write it, so it is out well within this.
const H2_RECLAIM_GRACE: Duration = Duration::from_millis(250);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Armed {
    None,
    Head,
    Idle,
    /// An idle h2 connection whose place was reclaimed: [`H2_RECLAIM_GRACE`].
    Reclaimed,
}

/// The client's socket, with the header-read and idle timers on its read side.
pub struct TimedIo<T> {
    inner: T,
    activity: Arc<Activity>,
    header_read: Duration,
    idle: Duration,
    armed: Armed,
    h2: bool,
    seen: usize,
    timer: Pin<Box<Sleep>>,
    head_timeouts: Option<IntCounter>,
    /// The response frames waiting for a write, on the proxy port (`delay.rs`).
    frames: Option<Arc<FrameDelay>>,
    send: Option<SendTimer>,
}

/// The write side's deadline: armed when a write finds the socket full, lifted when everything hyper
/// wrote has been flushed.
struct SendTimer {
    limit: Duration,
    armed: bool,
    timer: Pin<Box<Sleep>>,
    timeouts: IntCounter,
}

impl SendTimer {
    /// `polled` is the socket's answer to a write; a write still blocked at the deadline fails.
    fn check<R>(
        &mut self, cx: &mut Context<'_>, polled: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        if !polled.is_pending() {
            return polled;
        }
        if !self.armed {
            self.armed = true;
            self.timer.as_mut().reset(Instant::now() + self.limit);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.timeouts.inc();
                tracing::debug!("closing a metrics-port connection that did not take its answer");
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client did not take its answer within timeouts.metrics_send",
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T> TimedIo<T> {
    /// The socket.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// When the timer now armed fires: from [`TimedIo::new`] until the first request head is read, the
    /// deadline for that head.
    pub fn deadline(&self) -> Instant {
        self.timer.deadline()
    }

    pub fn new(inner: T, activity: Arc<Activity>, header_read: Duration, idle: Duration) -> Self {
        TimedIo {
            inner,
            activity,
            header_read,
            idle,
            armed: Armed::Head,
            h2: false,
            seen: 0,
            timer: Box::pin(tokio::time::sleep_until(Instant::now() + header_read)),
            head_timeouts: None,
            send: None,
            frames: None,
        }
    }

    /// Observes the delay of the response frames in `frames` at each write that takes all it is offered.
    pub fn timing_frames(mut self, frames: Arc<FrameDelay>) -> Self {
        self.frames = Some(frames);
        self
    }

    /// The instant a write begins, read only where frames are timed (the proxy port).
    fn begin(&self) -> Option<Instant> {
        self.frames.is_some().then(Instant::now)
    }

    /// After a write that began at `began` (see [`TimedIo::begin`]): a write that took all of the
    /// `offered` bytes carried every frame handed over before it.
    fn wrote(
        &self, polled: &Poll<io::Result<usize>>, offered: impl FnOnce() -> usize,
        began: Option<Instant>,
    ) {
        if let (Some(frames), Poll::Ready(Ok(n)), Some(began)) = (&self.frames, polled, began) {
            if *n == offered() {
                frames.written(began);
            }
        }
    }

    /// Fails a write still blocked `limit` after the client's socket first filled (metrics port), and
    /// counts it into `timeouts`.
    pub fn with_send_timeout(mut self, limit: Duration, timeouts: IntCounter) -> Self {
        self.send = Some(SendTimer {
            limit,
            armed: false,
            timer: Box::pin(tokio::time::sleep_until(Instant::now() + limit)),
            timeouts,
        });
        self
    }

    /// Counts each close for a request head not complete within `header_read` into `counter`.
    pub fn counting_head_timeouts(mut self, counter: IntCounter) -> Self {
        self.head_timeouts = Some(counter);
        self
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let now = this.activity.watch(cx.waker());
        // An answer waiting in the socket is bounded by the send timeout where there is one; elsewhere
        // the idle timer bounds it, as it always has.
        let busy = match now {
            Now::Busy => true,
            Now::Unsent => this.send.is_some(),
            Now::Idle | Now::Reclaimed => false,
        };
        if busy {
            this.armed = Armed::None;
        }
        if let Poll::Ready(result) = polled {
            let read = &buf.filled()[before..];
            if this.seen < H2_PREFACE.len() {
                let n = read.len().min(H2_PREFACE.len() - this.seen);
                let expected = &H2_PREFACE[this.seen..this.seen + n];
                this.h2 = (this.seen == 0 || this.h2) && read[..n] == *expected;
                this.seen += n;
                // Only a complete preface lifts the head deadline set at connect.
                if this.h2 && this.seen == H2_PREFACE.len() && this.armed == Armed::Head {
                    this.armed = Armed::None;
                }
            }
            if !read.is_empty() && !busy && !this.h2 && this.armed != Armed::Head {
                this.armed = Armed::Head;
                let deadline = Instant::now() + this.header_read;
                this.timer.as_mut().reset(deadline);
            }
            return Poll::Ready(result);
        }
        if busy {
            return Poll::Pending;
        }
        if now == Now::Reclaimed {
            if !this.h2 {
                tracing::debug!("closing an idle client connection whose place was reclaimed");
                return Poll::Ready(Ok(()));
            }
            if this.armed != Armed::Reclaimed {
                this.armed = Armed::Reclaimed;
                this.timer.as_mut().reset(Instant::now() + H2_RECLAIM_GRACE);
            }
        }
        if this.armed == Armed::None {
            this.armed = Armed::Idle;
            this.timer.as_mut().reset(Instant::now() + this.idle);
        }
        match this.timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                tracing::debug!(waiting_for = ?this.armed, "closing a client connection that timed out");
                if let (Armed::Head, Some(counter)) = (this.armed, &this.head_timeouts) {
                    counter.inc();
                }
                this.armed = Armed::None;
                Poll::Ready(Ok(()))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let began = this.begin();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.wrote(&polled, || buf.len(), began);
        match &mut this.send {
            Some(send) => send.check(cx, polled),
            None => polled,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        if matches!(polled, Poll::Ready(Ok(()))) {
            // hyper flushes once everything it had is written: the answers so far are out.
            this.activity.sent(this.send.is_some());
        }
        match &mut this.send {
            // hyper flushes once it has written all it had: the answer has been taken.
            Some(send) if matches!(polled, Poll::Ready(Ok(()))) => {
                send.armed = false;
                polled
            }
            Some(send) => send.check(cx, polled),
            None => polled,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let began = this.begin();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.wrote(&polled, || bufs.iter().map(|b| b.len()).sum(), began);
        match &mut this.send {
            Some(send) => send.check(cx, polled),
            None => polled,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Which HTTP a client connection speaks, as far as its first bytes already tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Speaks {
    Http1,
    /// It sent h2's whole connection preface.
    H2,
    /// Nothing yet, only part of h2's preface, or the socket failed: hyper-util's auto server reads
    /// the first bytes and decides.
    Undecided,
}

/// What `stream` speaks, from the bytes it has already received, read with `MSG_PEEK` so that they stay
/// in the socket. hyper-util's auto server reads the first 24 bytes itself to tell h2's preface from
/// HTTP/1.1 and hands them back to hyper alone: hyper's first read then returns those 24 bytes, and the
/// second, for the rest of the head, grows the connection's read buffer from 8 to 16 KiB, for the
/// connection's life. Told the version beforehand, hyper's first read takes the whole head into 8 KiB.
/// Waits for the first bytes until `deadline` (the head's), and never for more of a split preface.
pub async fn sniff(stream: &TcpStream, deadline: Instant) -> Speaks {
    let mut first = [0u8; H2_PREFACE.len()];
    let peeked = tokio::time::timeout_at(deadline, stream.peek(&mut first)).await;
    match peeked {
        Ok(Ok(n)) if n > 0 => {
            let n = n.min(first.len());
            if first[..n] != H2_PREFACE[..n] {
                Speaks::Http1
            } else if n == H2_PREFACE.len() {
                Speaks::H2
            } else {
                Speaks::Undecided
            }
        }
        _ => Speaks::Undecided,
    }
}

/// Accepts the next connection. `failures` is the listener's own: out of file descriptors and the
/// like, the loop backs off 50 ms instead of spinning, and says so at most once per 10 s.
pub async fn accept(
    listener: &TcpListener, what: &'static str, failures: &mut RepeatedWarning,
) -> tokio::net::TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                return stream;
            }
            Err(err) => {
                if let Some(failed) = failures.occurred(tokio::time::Instant::now()) {
                    tracing::warn!(%err, listener = what, failed, "accepting connections fails (count since the last such line); retrying every 50ms");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body::{Body, Frame};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    const HEAD_READ: Duration = Duration::from_secs(2);
    const IDLE: Duration = Duration::from_secs(10);

    fn timed() -> (TimedIo<DuplexStream>, DuplexStream, Arc<Activity>) {
        let (server, client) = tokio::io::duplex(1 << 16);
        let activity = Arc::new(Activity::default());
        let io = TimedIo::new(server, activity.clone(), HEAD_READ, IDLE);
        (io, client, activity)
    }

    /// Reads until end of file (a timeout), returning what was read and when it ended.
    async fn read_to_timeout(io: &mut TimedIo<DuplexStream>) -> (Vec<u8>, Instant) {
        let mut all = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => return (all, Instant::now()),
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// A connected pair of TCP sockets on 127.0.0.1: (the server's end, the client's end).
    async fn tcp_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let client = TcpStream::connect(addr).await.expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        (server, client)
    }

    #[tokio::test]
    async fn sniffing_names_the_version_from_the_first_bytes_and_leaves_them_to_be_read() {
        let deadline = || Instant::now() + HEAD_READ;
        let cases: [(&[u8], Speaks); 4] = [
            (b"POST /v1/chat/completions HTTP/1.1\r\n", Speaks::Http1),
            // One byte that cannot start h2's preface is enough.
            (b"G", Speaks::Http1),
            (H2_PREFACE, Speaks::H2),
            // Part of the preface: the auto server reads on and decides.
            (&H2_PREFACE[..5], Speaks::Undecided),
        ];
        for (sent, speaks) in cases {
            let (mut server, mut client) = tcp_pair().await;
            client.write_all(sent).await.expect("write");
            assert_eq!(sniff(&server, deadline()).await, speaks, "{sent:?}");
            let mut read = vec![0u8; sent.len()];
            server.read_exact(&mut read).await.expect("read");
            assert_eq!(read, sent, "the sniffed bytes are still there to read");
        }
        let (server, client) = tcp_pair().await;
        drop(client);
        assert_eq!(sniff(&server, deadline()).await, Speaks::Undecided, "EOF");
    }

    #[tokio::test(start_paused = true)]
    async fn sniffing_a_silent_connection_gives_up_at_the_head_deadline() {
        let (server, _client) = tcp_pair().await;
        let start = Instant::now();
        assert_eq!(sniff(&server, start + HEAD_READ).await, Speaks::Undecided);
        assert_eq!(Instant::now() - start, HEAD_READ);
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_gets_the_head_deadline_from_connect() {
        let start = Instant::now();
        let (mut io, _client, _) = timed();
        let (_, ended) = read_to_timeout(&mut io).await;
        assert_eq!(ended - start, HEAD_READ);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_not_taken_within_the_send_timeout_fails_at_exactly_that_time() {
        const SEND: Duration = Duration::from_secs(60);
        let counter = IntCounter::new("send_timeouts", "test").expect("counter");
        let (server, mut client) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let mut io = TimedIo::new(server, activity, HEAD_READ, IDLE)
            .with_send_timeout(SEND, counter.clone());
        // An answer the client takes, slowly but whole, within the limit: no timeout, and the clock is
        // lifted by the flush that follows it.
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 1024];
            for piece in got.chunks_mut(64) {
                tokio::time::sleep(Duration::from_secs(1)).await;
                client.read_exact(piece).await.expect("read");
            }
            client
        });
        io.write_all(&[7u8; 1024]).await.expect("taken in 16 s");
        io.flush().await.expect("flushed");
        let _client = reader.await.expect("reader");
        // The next answer is never read: its write fails SEND after the socket filled.
        let start = Instant::now();
        let failed = io.write_all(&[7u8; 1024]).await.expect_err("never taken");
        assert_eq!(failed.kind(), io::ErrorKind::TimedOut);
        assert_eq!(Instant::now() - start, SEND);
        assert_eq!(counter.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_head_deadline_is_counted_as_a_head_timeout() {
        let counter = IntCounter::new("head_timeouts", "test").expect("counter");
        let (io, _client, _) = timed();
        let mut io = io.counting_head_timeouts(counter.clone());
        read_to_timeout(&mut io).await;
        assert_eq!(counter.get(), 1, "a silent connection");
        let (io, mut client, _) = timed();
        let mut io = io.counting_head_timeouts(counter.clone());
        client.write_all(H2_PREFACE).await.unwrap_or_default();
        read_to_timeout(&mut io).await;
        assert_eq!(
            counter.get(),
            1,
            "an idle h2 connection is not a head timeout"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_partial_h2_preface_does_not_lift_the_head_deadline() {
        let start = Instant::now();
        let (mut io, mut client, _) = timed();
        client.write_all(&H2_PREFACE[..5]).await.unwrap_or_default();
        let (read, ended) = read_to_timeout(&mut io).await;
        assert_eq!((read.len(), ended - start), (5, HEAD_READ));
    }

    #[tokio::test(start_paused = true)]
    async fn an_h2_connection_is_timed_by_idle_only() {
        let start = Instant::now();
        let (mut io, mut client, _) = timed();
        client.write_all(H2_PREFACE).await.unwrap_or_default();
        let (read, ended) = read_to_timeout(&mut io).await;
        assert_eq!((read.len(), ended - start), (H2_PREFACE.len(), IDLE));
    }

    #[tokio::test(start_paused = true)]
    async fn no_timer_runs_while_a_request_is_in_progress_and_idle_starts_when_it_ends() {
        let (mut io, mut client, activity) = timed();
        client
            .write_all(b"GET / HTTP/1.1\r\n\r\n")
            .await
            .unwrap_or_default();
        let in_progress = activity.begin();
        let ender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(100)).await;
            drop(in_progress);
            Instant::now()
        });
        let (read, ended) = read_to_timeout(&mut io).await;
        let request_ended = ender.await.unwrap_or_else(|_| Instant::now());
        assert_eq!(read.len(), 18);
        assert_eq!(
            ended - request_ended,
            IDLE,
            "idle counted from the request's end"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reclaimed_idle_connection_reads_as_closed_at_once() {
        let start = Instant::now();
        let (mut io, _client, activity) = timed();
        let reclaimer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            activity.reclaim()
        });
        let (read, ended) = read_to_timeout(&mut io).await;
        assert!(reclaimer.await.unwrap_or(false));
        assert_eq!((read.len(), ended - start), (0, Duration::from_millis(300)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reclaimed_idle_h2_connection_closes_after_a_short_grace() {
        let (mut io, mut client, activity) = timed();
        client.write_all(H2_PREFACE).await.unwrap_or_default();
        let reclaimed = Instant::now() + Duration::from_secs(3);
        let reclaimer = tokio::spawn(async move {
            tokio::time::sleep_until(reclaimed).await;
            activity.reclaim()
        });
        let (read, ended) = read_to_timeout(&mut io).await;
        assert!(reclaimer.await.unwrap_or(false));
        assert_eq!(
            (read.len(), ended - reclaimed),
            (H2_PREFACE.len(), H2_RECLAIM_GRACE)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_whose_answer_is_not_all_written_is_not_reclaimed_until_it_is() {
        let counter = IntCounter::new("send_timeouts", "test").expect("counter");
        let (server, mut client) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let mut io = TimedIo::new(server, activity.clone(), HEAD_READ, IDLE)
            .with_send_timeout(Duration::from_secs(60), counter);
        // The request ends with its answer still to be written, which then fills the socket.
        drop(activity.begin());
        let written = io.write(&[7u8; 128]).await.unwrap_or_default();
        let rest = [7u8; 128];
        let blocked =
            tokio::time::timeout(Duration::from_secs(1), io.write(&rest[written..])).await;
        assert!(blocked.is_err(), "the socket is full");
        assert!(!activity.reclaim());
        // Taken 5 s later, whole: the flush makes it idle, and now it may go, at once.
        let reader = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let mut got = vec![0u8; 128];
            client.read_exact(&mut got).await.expect("read");
            client
        });
        io.write_all(&rest[written..]).await.expect("taken");
        assert!(!activity.reclaim(), "written, not yet flushed");
        io.flush().await.expect("flushed");
        let _client = reader.await.expect("reader");
        assert!(activity.reclaim());
        let start = Instant::now();
        let (read, ended) = read_to_timeout(&mut io).await;
        assert_eq!((read.len(), ended - start), (0, Duration::ZERO));
    }

    /// Data frames that came off the upstream at `at`.
    struct Upstream {
        frames: Vec<Bytes>,
        at: Instant,
    }

    impl Body for Upstream {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: Pin<&mut Self>, _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            let this = self.get_mut();
            Poll::Ready((!this.frames.is_empty()).then(|| Ok(Frame::data(this.frames.remove(0)))))
        }
    }

    impl crate::tap::ReadAt for Upstream {
        fn read_at(&self) -> Option<Instant> {
            Some(self.at)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_is_observed_at_the_write_that_took_all_it_was_offered_from_its_upstream_instant(
    ) {
        use crate::net::delay::{Forwarding, FrameDelay};
        use http_body_util::BodyExt;

        let histogram = prometheus::Histogram::with_opts(prometheus::HistogramOpts::new("h", "h"));
        let Ok(histogram) = histogram else {
            panic!("a histogram");
        };
        let frames = FrameDelay::new(histogram.clone());
        let (server, mut client) = tokio::io::duplex(8);
        let mut io = TimedIo::new(server, Arc::new(Activity::default()), HEAD_READ, IDLE)
            .timing_frames(frames.clone());
        let at = Instant::now();
        let two = vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")];
        let mut body = Forwarding::new(Upstream { frames: two, at }, frames);
        while body.frame().await.is_some() {}
        tokio::time::sleep(Duration::from_millis(3)).await;
        // Only 8 of the 12 bytes fit: the frames wait for the write that takes the rest.
        let wrote = io.write(b"hello world!").await.unwrap_or_default();
        assert_eq!((wrote, histogram.get_sample_count()), (8, 0));
        tokio::time::sleep(Duration::from_millis(2)).await;
        let mut read = [0u8; 8];
        client.read_exact(&mut read).await.unwrap_or_default();
        let wrote = io.write(b"d!!!").await.unwrap_or_default();
        assert_eq!((wrote, histogram.get_sample_count()), (4, 2));
        assert!((histogram.get_sample_sum() - 2.0 * 0.005).abs() < 1e-9);
        // A write with no frame waiting observes nothing.
        client.read_exact(&mut read[..4]).await.unwrap_or_default();
        io.write_all(b"more").await.unwrap_or_default();
        assert_eq!(histogram.get_sample_count(), 2);
    }
}
