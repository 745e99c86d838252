//! The scripted upstream: raw HTTP/1.1 over loopback (plain or TLS), so a test controls every byte, every
//! pause, every close and every reset of the answer, and sees each request as it came and when tokentap
//! closed the connection.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::chunked::{decode, Chunked};

/// One step of the upstream's answer.
#[derive(Clone, Debug)]
pub enum Step {
    /// Write these bytes as they are (one write, then flush).
    Raw(Vec<u8>),
    Sleep(Duration),
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
    /// When the proxy closed this connection while the script was still running or idle.
    pub closed_by_peer_at: Option<Instant>,
    /// When the script finished writing its last step.
    pub script_done_at: Option<Instant>,
}

type Handler = dyn Fn(&RecordedRequest) -> Vec<Step> + Send + Sync;

pub struct Upstream {
    pub addr: SocketAddr,
    pub connections: Arc<Mutex<Vec<Arc<Mutex<ConnectionLog>>>>>,
    pub peer_closed: Arc<Notify>,
}

impl Upstream {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn connection_count(&self) -> usize {
        self.connections.lock().map(|c| c.len()).unwrap_or_default()
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        let conns = self.connections.lock().expect("log");
        conns
            .iter()
            .flat_map(|c| c.lock().expect("log").requests.clone())
            .collect()
    }

    pub fn closed_at(&self, connection: usize) -> Option<Instant> {
        let conns = self.connections.lock().expect("log");
        conns
            .get(connection)
            .and_then(|c| c.lock().expect("log").closed_by_peer_at)
    }

    /// Waits (bounded by 5 s) until tokentap has closed upstream connection `i`; says when it did.
    pub async fn wait_closed(&self, i: usize) -> Instant {
        self.wait_closed_within(i, Duration::from_secs(5)).await
    }

    /// As [`Upstream::wait_closed`], with a bound of its own (on the paused clock it is virtual time).
    pub async fn wait_closed_within(&self, i: usize, bound: Duration) -> Instant {
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
        .expect("tokentap did not close the upstream connection")
    }
}

/// Starts a scripted upstream on 127.0.0.1:0 that answers each request with `handler`'s steps.
pub async fn upstream(
    handler: impl Fn(&RecordedRequest) -> Vec<Step> + Send + Sync + 'static,
) -> Upstream {
    upstream_with(handler, None).await
}

/// As [`upstream`], over TLS when an acceptor is given.
pub async fn upstream_with(
    handler: impl Fn(&RecordedRequest) -> Vec<Step> + Send + Sync + 'static,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let connections: Arc<Mutex<Vec<Arc<Mutex<ConnectionLog>>>>> = Arc::default();
    let peer_closed = Arc::new(Notify::new());
    let handler: Arc<Handler> = Arc::new(handler);
    let (conns, notify) = (connections.clone(), peer_closed.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            stream.set_nodelay(true).ok();
            let log = Arc::new(Mutex::new(ConnectionLog::default()));
            conns.lock().expect("log").push(log.clone());
            let (handler, notify, tls) = (handler.clone(), notify.clone(), tls.clone());
            tokio::spawn(async move {
                match tls {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            serve_connection(stream, handler, log, notify).await;
                        }
                    }
                    None => serve_connection(stream, handler, log, notify).await,
                }
            });
        }
    });
    Upstream {
        addr,
        connections,
        peer_closed,
    }
}

/// A connection the upstream can reset: the TCP socket under it, plain or TLS.
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

async fn serve_connection<S: Socket>(
    stream: S,
    handler: Arc<Handler>,
    log: Arc<Mutex<ConnectionLog>>,
    notify: Arc<Notify>,
) {
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut buf: Vec<u8> = Vec::new();
    let mut idle_close: Option<(Duration, bool)> = None;
    loop {
        if let Some((idle, reset)) = idle_close.take() {
            if buf.is_empty()
                && tokio::time::timeout(idle, fill(&mut rd, &mut buf))
                    .await
                    .is_err()
            {
                if reset {
                    rd.unsplit(wr).tcp().set_zero_linger().ok();
                } else {
                    let _ = wr.shutdown().await;
                }
                return;
            }
        }
        let Some(request) = read_request(&mut rd, &mut buf).await else {
            log.lock()
                .expect("log")
                .closed_by_peer_at
                .get_or_insert_with(Instant::now);
            notify.notify_waiters();
            return;
        };
        log.lock().expect("log").requests.push(request.clone());
        let steps = handler(&request);
        // Run the script while watching the read side: EOF there means the proxy closed the connection.
        let script = async {
            for step in steps {
                match step {
                    Step::Raw(bytes) => {
                        if wr.write_all(&bytes).await.is_err() || wr.flush().await.is_err() {
                            return After::Close;
                        }
                    }
                    Step::Sleep(d) => tokio::time::sleep(d).await,
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
        };
        let mut probe = [0u8; 1];
        let after = tokio::select! {
            after = script => after,
            n = rd.read(&mut probe) => {
                if matches!(n, Ok(0) | Err(_)) {
                    log.lock().expect("log").closed_by_peer_at = Some(Instant::now());
                    notify.notify_waiters();
                }
                After::Close
            }
        };
        log.lock().expect("log").script_done_at = Some(Instant::now());
        match after {
            After::KeepAlive => continue,
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

async fn read_request<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut Vec<u8>,
) -> Option<RecordedRequest> {
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
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
    let mut chunk = [0u8; 65536];
    let n = rd.read(&mut chunk).await.ok()?;
    if n == 0 {
        return None;
    }
    buf.extend_from_slice(&chunk[..n]);
    Some(())
}
