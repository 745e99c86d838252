//! When the upstream's bytes reached tokentap: the kernel's receive timestamp of each upstream read.
//!
//! tokentap's own delay per frame (`tokentap_forwarding_delay_seconds`, `net/delay.rs`) should start when
//! the frame's bytes arrived, not when tokentap got round to reading them: the wait in the socket while
//! tokentap's worker wakes up, or while it was busy with other connections, is delay tokentap adds. On
//! Linux the upstream socket is asked for the kernel's receive timestamp (`SO_TIMESTAMPNS`), and each read
//! is a `recvmsg` that brings it alongside the bytes. [`Arrival`] keeps the last read's, and the response
//! body hands it to the tap (`body.rs`). Where the option cannot be set (another OS, or a kernel that
//! refuses it) reads are plain reads and the delay starts at the read, as before.
//!
//! `recvmsg` through `nix` needs initialised memory, and hyper offers its read buffer uninitialised (the
//! crate forbids the unsafe code that would write into it directly). Zeroing what hyper offers before
//! each read would cost more than the read (8 KiB, and most reads find nothing), and would make the
//! buffer's untouched pages resident. So a read lands in a buffer each worker thread keeps ([`SCRATCH`]),
//! initialised once, and only the bytes that came are copied on: a few hundred for a token's event.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// A receive timestamp further back than this is not believed (the wall clock was stepped): the delay
/// then starts at the read.
const BELIEVED: Duration = Duration::from_secs(60);

/// The kernel's receive timestamp of the last upstream read that brought bytes, as nanoseconds of the
/// wall clock since the Unix epoch; 0 when there is none.
#[derive(Debug, Default)]
pub struct Arrival(AtomicU64);

impl Arrival {
    fn set(&self, stamp: Option<Duration>) {
        let nanos = stamp.map_or(0, |s| u64::try_from(s.as_nanos()).unwrap_or(0));
        self.0.store(nanos, Ordering::Relaxed);
    }

    /// How long ago the last read's bytes reached the socket, by the wall clock now; `None` when the read
    /// brought no timestamp, or one that cannot be right (in the future, or more than a minute old).
    pub fn waited(&self) -> Option<Duration> {
        let nanos = self.0.load(Ordering::Relaxed);
        if nanos == 0 {
            return None;
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
        let waited = now.checked_sub(Duration::from_nanos(nanos))?;
        (waited < BELIEVED).then_some(waited)
    }
}

/// Keeps the kernel's receive timestamps on while the upstream is in use. The kernel stamps packets
/// only while some socket wants it, and turns stamping on a moment after the first one asks: so without
/// a socket that always wants it, the first packets of a fresh connection after a lull with none open
/// would come unstamped. An unbound UDP socket that asks, and receives nothing.
pub(super) struct Keeper(#[allow(dead_code)] Option<Kept>);

#[cfg(target_os = "linux")]
type Kept = std::os::fd::OwnedFd;
#[cfg(not(target_os = "linux"))]
type Kept = ();

impl Keeper {
    #[cfg(target_os = "linux")]
    pub(super) fn new() -> Self {
        use nix::sys::socket::{setsockopt, socket, sockopt::ReceiveTimestampns};
        use nix::sys::socket::{AddressFamily, SockFlag, SockType};
        let kept = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .and_then(|fd| setsockopt(&fd, ReceiveTimestampns, &true).map(|()| fd));
        Keeper(kept.ok())
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn new() -> Self {
        Keeper(None)
    }
}

/// The most one read takes: what the thread's buffer holds.
const SCRATCH_BYTES: usize = 64 * 1024;

thread_local! {
    /// Where each read lands before its bytes are copied into hyper's buffer (see the module's
    /// documentation); one per thread that polls upstream connections.
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH_BYTES].into_boxed_slice());
}

/// A TCP connection whose reads note the kernel's receive timestamp in an [`Arrival`]: tokentap's
/// upstream connections (and the benchmark's clients, which measure the wire with it).
pub struct Stamped {
    tcp: TcpStream,
    arrival: Arc<Arrival>,
    /// Whether the socket gives receive timestamps; when not, reads are plain reads.
    stamping: bool,
}

impl Stamped {
    pub fn new(tcp: TcpStream, arrival: Arc<Arrival>) -> Self {
        let stamping = enable(&tcp);
        Stamped {
            tcp,
            arrival,
            stamping,
        }
    }
}

#[cfg(target_os = "linux")]
fn enable(tcp: &TcpStream) -> bool {
    use nix::sys::socket::{setsockopt, sockopt::ReceiveTimestampns};
    match setsockopt(tcp, ReceiveTimestampns, &true) {
        Ok(()) => true,
        Err(error) => {
            tracing::debug!(%error, "no receive timestamps on the upstream socket: its delay starts at the read");
            false
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn enable(_: &TcpStream) -> bool {
    false
}

/// One `recvmsg` into `dst`: the bytes read, and the receive timestamp that came with them.
#[cfg(target_os = "linux")]
fn receive(tcp: &TcpStream, dst: &mut [u8]) -> io::Result<(usize, Option<Duration>)> {
    use std::io::IoSliceMut;
    use std::os::fd::AsRawFd;

    use nix::sys::socket::{cmsg_space, recvmsg, ControlMessageOwned, MsgFlags};
    use nix::sys::time::TimeSpec;

    /// Room for one control message holding a `timespec`, aligned as control messages must be.
    #[repr(C, align(8))]
    struct Control([u8; 64]);
    const _: () = assert!(cmsg_space::<TimeSpec>() <= 64);

    let mut control = Control([0; 64]);
    let mut iov = [IoSliceMut::new(dst)];
    let message = recvmsg::<()>(
        tcp.as_raw_fd(),
        &mut iov,
        Some(&mut control.0),
        MsgFlags::empty(),
    )?;
    let stamp = message.cmsgs().ok().and_then(|mut messages| {
        messages.find_map(|m| match m {
            ControlMessageOwned::ScmTimestampns(ts) => Some(Duration::from(ts)),
            _ => None,
        })
    });
    Ok((message.bytes, stamp))
}

#[cfg(not(target_os = "linux"))]
fn receive(_: &TcpStream, _: &mut [u8]) -> io::Result<(usize, Option<Duration>)> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

impl AsyncRead for Stamped {
    fn poll_read(
        self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.stamping {
            return Pin::new(&mut this.tcp).poll_read(cx, buf);
        }
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            std::task::ready!(this.tcp.poll_read_ready(cx))?;
            let tcp = &this.tcp;
            let mut short = None;
            let received = SCRATCH.with_borrow_mut(|scratch| {
                let room = buf.remaining().min(scratch.len());
                let into = &mut scratch[..room];
                // A read that brings bytes but less than it had room for found the socket empty: it is
                // told to tokio as the `WouldBlock` the next read would meet, so the socket is marked not
                // ready at once instead of by another system call (hyper reads once more after every
                // frame). tokio clears only the readiness it saw before this read: bytes that came since
                // have raised an event of their own, which wakes the connection.
                let read = tcp.try_io(Interest::READABLE, || {
                    let (read, stamp) = receive(tcp, into)?;
                    if read > 0 && read < room {
                        short = Some((read, stamp));
                        return Err(io::Error::from(io::ErrorKind::WouldBlock));
                    }
                    Ok((read, stamp))
                });
                let (read, stamp) = match (read, short) {
                    (Err(_), Some(short)) => short,
                    (read, _) => read?,
                };
                buf.put_slice(&into[..read]);
                Ok::<_, io::Error>((read, stamp))
            });
            match received {
                Ok((read, stamp)) => {
                    if read > 0 {
                        this.arrival.set(stamp);
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(
        self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_from_the_future_or_from_long_ago_is_not_believed() {
        let arrival = Arrival::default();
        assert_eq!(arrival.waited(), None);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        arrival.set(Some(now - Duration::from_millis(5)));
        let waited = arrival.waited().unwrap_or_default();
        assert!(
            waited >= Duration::from_millis(5) && waited < BELIEVED,
            "{waited:?}"
        );
        arrival.set(Some(now + Duration::from_secs(5)));
        assert_eq!(arrival.waited(), None);
        arrival.set(Some(now - Duration::from_secs(3600)));
        assert_eq!(arrival.waited(), None);
        arrival.set(None);
        assert_eq!(arrival.waited(), None);
    }

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let near = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (far, _) = listener.accept().await.unwrap();
        (near, far)
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_read_notes_when_its_bytes_reached_the_socket_not_when_they_were_read() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (near, mut far) = pair().await;
        let arrival = Arc::<Arrival>::default();
        let mut near = Stamped::new(near, arrival.clone());
        assert!(near.stamping);
        // The kernel turns receive timestamps on a moment after the first socket asks for them (a
        // deferred work item, later on a busy machine): reads until one brings a stamp, then the test.
        let mut got = [0; 64];
        for _ in 0..1000 {
            far.write_all(b":\n").await.unwrap();
            near.read_exact(&mut got[..2]).await.unwrap();
            if arrival.waited().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        far.write_all(b"data: {}\n\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        let n = near.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"data: {}\n\n");
        let waited = arrival.waited().unwrap_or_default();
        assert!(
            waited >= Duration::from_millis(30) && waited < Duration::from_secs(10),
            "{waited:?}"
        );
    }

    #[tokio::test]
    async fn every_byte_comes_through_in_order_whatever_the_reads_bring() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (near, mut far) = pair().await;
        let mut near = Stamped::new(near, Arc::default());
        let sent: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let writer = {
            let sent = sent.clone();
            tokio::spawn(async move {
                far.write_all(&sent[..200]).await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
                far.write_all(&sent[200..]).await?;
                far.shutdown().await
            })
        };
        // Less room than the bytes waiting: the rest stays in the socket for the next read.
        let mut got = Vec::new();
        let mut small = [0; 7];
        while got.len() < 1000 {
            let n = near.read(&mut small).await.unwrap();
            got.extend_from_slice(&small[..n]);
        }
        near.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap().unwrap();
        assert!(got == sent, "{} bytes of {}", got.len(), sent.len());
    }

    /// Bursts of small writes racing the reads on another thread, each burst followed by silence until
    /// it has all been read: a read that lost a readiness event would wait for bytes already in the
    /// socket, and the burst would never be read (nothing more comes to raise another event). The writer
    /// sleeps on a condition variable until the reader says it has all, so neither side spins a core
    /// away from the other; a lost event waits for good, so the minute allowed a round is a bound for a
    /// hang, thousands of times what a round takes on a machine at load 10.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_bytes_are_left_waiting_when_writes_race_the_reads() {
        use std::sync::{Condvar, Mutex};
        use tokio::io::AsyncReadExt;
        const ROUNDS: usize = 2_000;
        const HANG: Duration = Duration::from_secs(60);
        let (near, far) = pair().await;
        let mut near = Stamped::new(near, Arc::default());
        let received = Arc::new((Mutex::new(0usize), Condvar::new()));
        let mut far = far.into_std().unwrap();
        far.set_nonblocking(false).unwrap();
        let seen = received.clone();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let mut sent = 0;
            for round in 0..ROUNDS {
                for i in 0..1 + round % 4 {
                    far.write_all(&[7; 37])?;
                    sent += 37;
                    let until = std::time::Instant::now() + Duration::from_micros((i * 3) as u64);
                    while std::time::Instant::now() < until {
                        std::hint::spin_loop();
                    }
                }
                let (count, read) = &*seen;
                let count = count.lock().unwrap();
                let (count, waited) = read.wait_timeout_while(count, HANG, |n| *n < sent).unwrap();
                if waited.timed_out() {
                    return Err(io::Error::other(format!(
                        "round {round}: {sent} bytes sent, {} read after {HANG:?}",
                        *count
                    )));
                }
            }
            far.shutdown(std::net::Shutdown::Write)
        });
        // The writer's end closes when it returns, so this loop ends whatever happened.
        let mut buf = [0; 4096];
        let read = loop {
            match near.read(&mut buf).await {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    let (count, read) = &*received;
                    *count.lock().unwrap() += n;
                    read.notify_one();
                }
                Err(e) => break Err(e),
            }
        };
        let wrote = writer.join().unwrap();
        assert!(wrote.is_ok(), "{wrote:?}");
        assert!(read.is_ok(), "{read:?}");
    }
}
