//! The scripted model server: raw HTTP/1.1 over loopback (plain or TLS). Each request is answered by a
//! script of [`Step`]s, so a caller controls every byte, pause, close and reset of the answer, and the
//! server notes each request as it came and when the peer closed the connection. It reads a request's
//! head and its body (by `content-length` or chunked) whole before it answers; the answer is written
//! step by step while the read side is watched, so a peer that leaves stops the script, as a real
//! model server stops generating.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::chunked::{decode, Chunked};

/// Bytes made when their step's turn comes (a send timestamp, say), not when the script is written.
pub type Render = Arc<dyn Fn() -> Vec<u8> + Send + Sync>;

/// Steps made for the `i`th turn of a [`Step::Each`].
pub type Make = Arc<dyn Fn(u64) -> Vec<Step> + Send + Sync>;

/// One step of the server's answer.
#[derive(Clone)]
pub enum Step {
    /// Write these bytes as they are (one write, then flush).
    Raw(Vec<u8>),
    /// Write what this makes, made the moment the step runs.
    Render(Render),
    Sleep(Duration),
    /// Wait until this long after the script began (a paced stream that does not drift with its writes).
    At(Duration),
    /// For each `i` of the range in turn, the steps `make(i)` gives, made when their turn comes: a
    /// stream of a million chunks holds one turn's steps at a time, not a million.
    Each(std::ops::Range<u64>, Make),
    /// Write these bytes one at a time, pausing after each.
    Trickle(Vec<u8>, Duration),
    /// Close the connection at once (FIN), whatever state the response is in.
    Close,
    /// Abort the connection with a TCP reset (SO_LINGER 0), whatever state the response is in.
    Reset,
    /// The script's last step: the connection waits this long for its next request, then closes (FIN),
    /// as a server's keep-alive timer does. A request that has begun to arrive by then is served.
    KeepAliveFor(Duration),
    /// As `KeepAliveFor`, but the idle connection is aborted with a TCP reset instead of closed.
    KeepAliveThenReset(Duration),
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Raw(bytes) => f
                .debug_tuple("Raw")
                .field(&String::from_utf8_lossy(bytes))
                .finish(),
            Step::Render(_) => f.write_str("Render"),
            Step::Sleep(d) => f.debug_tuple("Sleep").field(d).finish(),
            Step::At(d) => f.debug_tuple("At").field(d).finish(),
            Step::Each(range, _) => f.debug_tuple("Each").field(range).finish(),
            Step::Trickle(bytes, d) => f
                .debug_tuple("Trickle")
                .field(&String::from_utf8_lossy(bytes))
                .field(d)
                .finish(),
            Step::Close => f.write_str("Close"),
            Step::Reset => f.write_str("Reset"),
            Step::KeepAliveFor(d) => f.debug_tuple("KeepAliveFor").field(d).finish(),
            Step::KeepAliveThenReset(d) => f.debug_tuple("KeepAliveThenReset").field(d).finish(),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct RecordedRequest {
    /// The head as text (bytes that are not UTF-8 replaced); `raw_head` has them as they came.
    pub head: String,
    pub raw_head: Vec<u8>,
    pub body: Vec<u8>,
    /// The trailer section of a chunked body, as its lines came (each ending in CRLF).
    pub trailers: String,
}

impl RecordedRequest {
    pub fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or_default()
    }

    /// The request line's method (`POST`).
    pub fn method(&self) -> &str {
        self.request_line().split(' ').next().unwrap_or_default()
    }

    /// The request target's path, without its query (`/v1/chat/completions`).
    pub fn path(&self) -> &str {
        let target = self.request_line().split(' ').nth(1).unwrap_or_default();
        target.split('?').next().unwrap_or_default()
    }

    /// All values of a header (name compared case-insensitively).
    pub fn header(&self, name: &str) -> Vec<String> {
        self.head
            .lines()
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .filter(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
            .collect()
    }
}

#[derive(Debug, Default)]
pub struct ConnectionLog {
    pub requests: Vec<RecordedRequest>,
    /// When the peer closed this connection while the script was still running or idle.
    pub closed_by_peer_at: Option<Instant>,
    /// When the script finished writing its last step.
    pub script_done_at: Option<Instant>,
}

type Handler = dyn Fn(&RecordedRequest) -> Vec<Step> + Send + Sync;

/// A running scripted server. It serves until the process ends.
pub struct Upstream {
    pub addr: SocketAddr,
    /// Each connection's log, in the order they were accepted (empty when the server forgets).
    pub connections: Arc<Mutex<Vec<Arc<Mutex<ConnectionLog>>>>>,
    pub peer_closed: Arc<Notify>,
    accepted: Arc<AtomicU64>,
    closing: watch::Sender<bool>,
}

impl Upstream {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Connections accepted so far (also when the server forgets what it served).
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    pub fn connection_count(&self) -> usize {
        self.connections.lock().map(|c| c.len()).unwrap_or_default()
    }

    /// Closes every connection that waits for its next request, now and from now on: the server
    /// keeps answering requests that arrive on new connections, and closes each after its answer.
    pub fn close_idle(&self) {
        self.closing.send_replace(true);
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        let conns = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        conns
            .iter()
            .flat_map(|c| c.lock().unwrap_or_else(|e| e.into_inner()).requests.clone())
            .collect()
    }

    pub fn closed_at(&self, connection: usize) -> Option<Instant> {
        let conns = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        conns.get(connection).and_then(|c| {
            c.lock()
                .unwrap_or_else(|e| e.into_inner())
                .closed_by_peer_at
        })
    }

    /// Waits, up to `bound` (virtual time on a paused clock), until the peer has closed connection `i`;
    /// says when it did, or `None` when it did not within the bound.
    pub async fn closed_within(&self, i: usize, bound: Duration) -> Option<Instant> {
        tokio::time::timeout(bound, async {
            loop {
                let notified = self.peer_closed.notified();
                if let Some(at) = self.closed_at(i) {
                    return at;
                }
                notified.await;
            }
        })
        .await
        .ok()
    }
}

/// A scripted server to start: the handler that scripts each answer, and how it serves.
pub struct Scripted {
    handler: Arc<Handler>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    remember: bool,
}

impl Scripted {
    /// A server that answers each request with `handler`'s steps and remembers every request.
    pub fn new(handler: impl Fn(&RecordedRequest) -> Vec<Step> + Send + Sync + 'static) -> Self {
        Scripted {
            handler: Arc::new(handler),
            tls: None,
            remember: true,
        }
    }

    /// Serves TLS with this acceptor.
    pub fn tls(mut self, acceptor: tokio_rustls::TlsAcceptor) -> Self {
        self.tls = Some(acceptor);
        self
    }

    /// Keeps no log of requests or connections (a server that runs for hours: the demo, the soak, the
    /// benchmark); [`Upstream::accepted`] still counts connections.
    pub fn forgetful(mut self) -> Self {
        self.remember = false;
        self
    }

    /// Binds `addr` and serves in the background.
    pub async fn bind(self, addr: SocketAddr) -> io::Result<Upstream> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let connections: Arc<Mutex<Vec<Arc<Mutex<ConnectionLog>>>>> = Arc::default();
        let peer_closed = Arc::new(Notify::new());
        let accepted = Arc::new(AtomicU64::new(0));
        let (closing, closing_rx) = watch::channel(false);
        let server = Server {
            handler: self.handler,
            notify: peer_closed.clone(),
            closing: closing_rx,
        };
        let (conns, count, remember, tls) = (
            connections.clone(),
            accepted.clone(),
            self.remember,
            self.tls,
        );
        tokio::spawn(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    // Out of descriptors, say: wait, as a server does, rather than spin or stop.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                stream.set_nodelay(true).ok();
                count.fetch_add(1, Ordering::Relaxed);
                let log = Arc::new(Mutex::new(ConnectionLog::default()));
                if remember {
                    conns
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(log.clone());
                }
                let (server, tls) = (server.clone(), tls.clone());
                let log = remember.then_some(log);
                tokio::spawn(async move {
                    match tls {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                server.connection(stream, log).await;
                            }
                        }
                        None => server.connection(stream, log).await,
                    }
                });
            }
        });
        Ok(Upstream {
            addr,
            connections,
            peer_closed,
            accepted,
            closing,
        })
    }
}

/// A connection the server can reset: the TCP socket under it, plain or TLS.
trait Socket: AsyncRead + AsyncWrite + Unpin {
    fn tcp(&self) -> &TcpStream;
}

impl Socket for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl Socket for tokio_rustls::server::TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

/// How a script left the connection.
enum After {
    KeepAlive,
    /// Kept alive for this long without a request, then closed (or reset, when `true`).
    KeepAliveFor(Duration, bool),
    Close,
    Reset,
}

#[derive(Clone)]
struct Server {
    handler: Arc<Handler>,
    notify: Arc<Notify>,
    closing: watch::Receiver<bool>,
}

impl Server {
    async fn connection<S: Socket>(mut self, stream: S, log: Option<Arc<Mutex<ConnectionLog>>>) {
        let note = |f: &dyn Fn(&mut ConnectionLog)| {
            if let Some(log) = &log {
                f(&mut log.lock().unwrap_or_else(|e| e.into_inner()));
            }
        };
        let (mut rd, mut wr) = tokio::io::split(stream);
        let mut buf: Vec<u8> = Vec::new();
        let mut idle_close: Option<(Duration, bool)> = None;
        loop {
            let keep_alive = idle_close.take();
            if buf.is_empty() {
                // Idle: wait for the next request, the keep-alive timer, or `close_idle`.
                let (idle, reset) = keep_alive.unwrap_or((Duration::MAX, false));
                let closing = async {
                    // The guard `wait_for` returns is not `Send`: let it go inside. Once the
                    // `Upstream` is dropped no one can close idle connections: wait for ever.
                    if self.closing.wait_for(|closing| *closing).await.is_err() {
                        std::future::pending::<()>().await;
                    }
                };
                // A request that has arrived is served even if the keep-alive ran out meanwhile (this
                // task ran late), as an event loop that handles readable sockets before due timers
                // (asyncio's) does: an idle connection is closed only when nothing was there to read.
                tokio::select! {
                    biased;
                    more = fill(&mut rd, &mut buf) => if more.is_none() {
                        note(&|log| {
                            log.closed_by_peer_at.get_or_insert_with(Instant::now);
                        });
                        self.notify.notify_waiters();
                        return;
                    },
                    () = closing => {
                        let _ = wr.shutdown().await;
                        return;
                    }
                    () = sleep_for(idle) => {
                        if reset {
                            rd.unsplit(wr).tcp().set_zero_linger().ok();
                        } else {
                            let _ = wr.shutdown().await;
                        }
                        return;
                    }
                }
            }
            let Some(request) = read_request(&mut rd, &mut buf).await else {
                note(&|log| {
                    log.closed_by_peer_at.get_or_insert_with(Instant::now);
                });
                self.notify.notify_waiters();
                return;
            };
            let steps = (self.handler)(&request);
            note(&|log| log.requests.push(request.clone()));
            // Run the script while watching the read side: EOF there means the peer closed the connection.
            let script = play(&mut wr, steps);
            let mut probe = [0u8; 1];
            let after = tokio::select! {
                after = script => after,
                n = rd.read(&mut probe) => {
                    if matches!(n, Ok(0) | Err(_)) {
                        note(&|log| log.closed_by_peer_at = Some(Instant::now()));
                        self.notify.notify_waiters();
                    }
                    After::Close
                }
            };
            note(&|log| log.script_done_at = Some(Instant::now()));
            match after {
                After::KeepAlive => {}
                After::KeepAliveFor(idle, reset) => idle_close = Some((idle, reset)),
                After::Close => {
                    let _ = wr.shutdown().await;
                    return;
                }
                After::Reset => {
                    rd.unsplit(wr).tcp().set_zero_linger().ok();
                    return;
                }
            }
        }
    }
}

async fn play<W: AsyncWrite + Unpin>(wr: &mut W, steps: Vec<Step>) -> After {
    let began = Instant::now();
    let mut steps = std::collections::VecDeque::from(steps);
    while let Some(step) = steps.pop_front() {
        match step {
            Step::Each(mut range, make) => {
                if let Some(i) = range.next() {
                    steps.push_front(Step::Each(range, make.clone()));
                    for step in make(i).into_iter().rev() {
                        steps.push_front(step);
                    }
                }
            }
            Step::Raw(bytes) => {
                if wr.write_all(&bytes).await.is_err() || wr.flush().await.is_err() {
                    return After::Close;
                }
            }
            Step::Render(render) => {
                if wr.write_all(&render()).await.is_err() || wr.flush().await.is_err() {
                    return After::Close;
                }
            }
            Step::Sleep(d) => tokio::time::sleep(d).await,
            Step::At(offset) => tokio::time::sleep_until(began + offset).await,
            Step::Trickle(bytes, pause) => {
                for b in bytes {
                    if wr.write_all(&[b]).await.is_err() || wr.flush().await.is_err() {
                        return After::Close;
                    }
                    tokio::time::sleep(pause).await;
                }
            }
            Step::Close => return After::Close,
            Step::Reset => return After::Reset,
            Step::KeepAliveFor(idle) => return After::KeepAliveFor(idle, false),
            Step::KeepAliveThenReset(idle) => return After::KeepAliveFor(idle, true),
        }
    }
    After::KeepAlive
}

/// Sleeps `d`; forever when no clock reaches that far (`Duration::MAX`).
async fn sleep_for(d: Duration) {
    match Instant::now().checked_add(d) {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

async fn read_request<R: AsyncRead + Unpin>(
    rd: &mut R, buf: &mut Vec<u8>,
) -> Option<RecordedRequest> {
    let head_end = loop {
        if let Some(pos) = memchr::memmem::find(buf, b"\r\n\r\n") {
            break pos + 4;
        }
        fill(rd, buf).await?;
    };
    let raw_head: Vec<u8> = buf.drain(..head_end).collect();
    let request = RecordedRequest {
        head: String::from_utf8_lossy(&raw_head).into_owned(),
        raw_head,
        ..RecordedRequest::default()
    };
    let chunked = request
        .header("transfer-encoding")
        .iter()
        .any(|v| v.eq_ignore_ascii_case("chunked"));
    if chunked {
        loop {
            match decode(buf) {
                Chunked::Incomplete => fill(rd, buf).await?,
                Chunked::Malformed => return None,
                Chunked::Done {
                    body,
                    trailers,
                    used,
                } => {
                    buf.drain(..used);
                    return Some(RecordedRequest {
                        body,
                        trailers,
                        ..request
                    });
                }
            }
        }
    }
    let length: usize = request
        .header("content-length")
        .first()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < length {
        fill(rd, buf).await?;
    }
    Some(RecordedRequest {
        body: buf.drain(..length).collect(),
        ..request
    })
}

/// Reads what has arrived onto `buf`; None at EOF or on an error.
async fn fill<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 16384];
    let n = rd.read(&mut chunk).await.ok()?;
    if n == 0 {
        return None;
    }
    buf.extend_from_slice(&chunk[..n]);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    async fn exchange(stream: &mut TcpStream, request: &[u8], answer_len: usize) -> Vec<u8> {
        stream.write_all(request).await.expect("write");
        let mut got = Vec::new();
        while got.len() < answer_len {
            let mut more = [0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut more))
                .await
                .expect("an answer within 5 s")
                .expect("read");
            assert!(n > 0, "closed after {got:?}");
            got.extend_from_slice(&more[..n]);
        }
        got
    }

    /// A whole answer (the words of a script are `answers`, which use this file: not imported here).
    fn ok() -> Vec<Step> {
        vec![Step::Raw(
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
        )]
    }

    #[tokio::test]
    async fn a_dropped_server_keeps_its_connections_alive() {
        let server = Scripted::new(|_| ok())
            .forgetful()
            .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind");
        let addr = server.addr;
        drop(server);
        let answer_len = match &ok()[0] {
            Step::Raw(bytes) => bytes.len(),
            _ => unreachable!(),
        };
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        for _ in 0..2 {
            let got = exchange(
                &mut stream,
                b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n",
                answer_len,
            )
            .await;
            assert!(got.starts_with(b"HTTP/1.1 200 OK"));
        }
    }

    #[tokio::test]
    async fn close_idle_closes_a_waiting_connection_and_serves_new_ones() {
        let server = Scripted::new(|_| ok())
            .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind");
        let answer_len = match &ok()[0] {
            Step::Raw(bytes) => bytes.len(),
            _ => unreachable!(),
        };
        let mut stream = TcpStream::connect(server.addr).await.expect("connect");
        exchange(
            &mut stream,
            b"POST /v1/x HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}",
            answer_len,
        )
        .await;
        server.close_idle();
        let mut rest = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
        assert!(matches!(read, Ok(Ok(0))), "{read:?}");
        assert_eq!(server.requests()[0].body, b"{}");
        assert_eq!(server.requests()[0].path(), "/v1/x");
        assert_eq!(server.accepted(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn each_plays_its_turns_in_order_between_the_steps_around_it_and_stops_at_a_close() {
        let turn: Make = Arc::new(|i| {
            vec![
                Step::At(ms(10 * (i + 1))),
                Step::Raw(format!("{i},").into_bytes()),
            ]
        });
        let steps = vec![
            Step::Raw(b"<".to_vec()),
            Step::Each(0..3, turn.clone()),
            Step::Each(5..5, turn.clone()),
            Step::Raw(b">".to_vec()),
        ];
        let mut out: Vec<u8> = Vec::new();
        let began = Instant::now();
        assert!(matches!(play(&mut out, steps).await, After::KeepAlive));
        assert_eq!(out, b"<0,1,2,>");
        assert_eq!(began.elapsed(), ms(30));
        // A turn that closes ends the script there; the turns after it are never made.
        let made = Arc::new(AtomicU64::new(0));
        let counted = made.clone();
        let closing: Make = Arc::new(move |i| {
            counted.fetch_add(1, Ordering::Relaxed);
            match i {
                1 => vec![Step::Close],
                _ => vec![Step::Raw(b"x".to_vec())],
            }
        });
        let mut out: Vec<u8> = Vec::new();
        let after = play(&mut out, vec![Step::Each(0..1_000_000_000, closing)]).await;
        assert!(matches!(after, After::Close));
        assert_eq!(
            (out.as_slice(), made.load(Ordering::Relaxed)),
            (&b"x"[..], 2)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn at_paces_from_the_start_of_the_script() {
        let steps = vec![
            Step::Sleep(ms(30)),
            Step::At(ms(30)),
            Step::Raw(b"a".to_vec()),
            Step::At(ms(50)),
            Step::Render(Arc::new(|| b"b".to_vec())),
        ];
        let mut out: Vec<u8> = Vec::new();
        let began = Instant::now();
        assert!(matches!(play(&mut out, steps).await, After::KeepAlive));
        assert_eq!(
            began.elapsed(),
            ms(50),
            "At(30 ms) after 30 ms waits no more"
        );
        assert_eq!(out, b"ab");
    }
}
