//! The interface's packets, read from an `AF_PACKET` socket (Linux; `CAP_NET_RAW`), each with the
//! kernel's receive timestamp (`SO_TIMESTAMPNS`), through `nix` and `socket2`'s safe calls: the crate
//! forbids unsafe code, and libpcap (a C library to build against) is not needed.
//!
//! The socket is a datagram one: the kernel strips the link header, so every interface's packets begin
//! with their IP header. A classic BPF filter attached to it passes only what the capture reads, so the
//! rest never crosses into tokentap: the interface's own packets (a packet socket sees every interface
//! otherwise), IPv4 or IPv6 TCP to or from one of the server's ports, and on a loopback interface each
//! packet once (the kernel shows it leaving and arriving: the leaving copy is dropped, as libpcap does).
//! The same checks run on each packet read, for those that came before the filter was attached.
//!
//! A packet's time is the kernel's receive timestamp on the wall clock, placed on the monotonic clock
//! the meter reads by how long ago it was when read; a read waits at most [`WAIT`], so the capture can
//! sweep and stop while the interface is quiet.

use std::time::Duration;
#[cfg(target_os = "linux")]
use std::time::{SystemTime, UNIX_EPOCH};

use super::Stamp;

/// The longest one read waits for a packet.
pub const WAIT: Duration = Duration::from_millis(100);
/// The largest packet read whole: a loopback interface's 64 KiB, and segments the kernel merged
/// (GRO) or has yet to cut (TSO) up to 256 KiB. A longer one is cut, and its connection loses bytes.
const MAX_PACKET: usize = 256 << 10;
/// A receive timestamp further from the wall clock now than this is not believed (the clock stepped):
/// the packet is placed at its read.
const BELIEVED: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("capture.interface {0:?}: no such interface")]
    NoInterface(String),
    #[error(
        "opening a packet socket (AF_PACKET) failed: {0} (tokentap capture needs CAP_NET_RAW)"
    )]
    Open(String),
    #[error("setting up the packet socket: {0}")]
    Setup(String),
    #[error("packet capture needs Linux (AF_PACKET)")]
    Unsupported,
}

/// An interface's packets, filtered to the server's ports.
pub struct Interface {
    #[cfg(target_os = "linux")]
    fd: std::os::fd::OwnedFd,
    #[cfg(target_os = "linux")]
    index: usize,
    buffer: Vec<u8>,
}

/// The offsets of the kernel's ancillary data in a classic BPF program (`linux/filter.h`).
#[cfg(target_os = "linux")]
mod ancillary {
    pub const BASE: u32 = 0xffff_f000;
    pub const PROTOCOL: u32 = BASE;
    pub const PKTTYPE: u32 = BASE + 4;
    pub const IFINDEX: u32 = BASE + 8;
    pub const HATYPE: u32 = BASE + 28;
    /// `ARPHRD_LOOPBACK`.
    pub const LOOPBACK: u32 = 772;
    /// `PACKET_OUTGOING`.
    pub const OUTGOING: u32 = 4;
}

impl Interface {
    /// Opens a packet socket on `name` for TCP to or from `ports`, with a receive buffer of
    /// `socket_buffer` bytes.
    #[cfg(target_os = "linux")]
    pub fn open(name: &str, ports: &[u16], socket_buffer: usize) -> Result<Self, SocketError> {
        use nix::sys::socket::{
            setsockopt, socket, sockopt, AddressFamily, SockFlag, SockProtocol, SockType,
        };
        use nix::sys::time::TimeVal;
        let index = nix::net::if_::if_nametoindex(name)
            .map_err(|_| SocketError::NoInterface(name.to_owned()))?;
        let fd = socket(
            AddressFamily::Packet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::EthAll,
        )
        .map_err(|e| SocketError::Open(e.to_string()))?;
        let setup = |what: &str, e: nix::Error| SocketError::Setup(format!("{what}: {e}"));
        let socket = socket2::Socket::from(fd);
        socket
            .attach_filter(&filter(index, ports))
            .map_err(|e| SocketError::Setup(format!("the packet filter: {e}")))?;
        let fd = std::os::fd::OwnedFd::from(socket);
        setsockopt(&fd, sockopt::ReceiveTimestampns, &true)
            .map_err(|e| setup("SO_TIMESTAMPNS", e))?;
        let wait = TimeVal::new(0, WAIT.as_micros() as i64);
        setsockopt(&fd, sockopt::ReceiveTimeout, &wait).map_err(|e| setup("SO_RCVTIMEO", e))?;
        // Beyond net.core.rmem_max only with CAP_NET_ADMIN: else as much as the system allows.
        if setsockopt(&fd, sockopt::RcvBufForce, &socket_buffer).is_err() {
            setsockopt(&fd, sockopt::RcvBuf, &socket_buffer).map_err(|e| setup("SO_RCVBUF", e))?;
        }
        Ok(Interface {
            fd,
            index: index as usize,
            buffer: vec![0; MAX_PACKET],
        })
    }

    #[cfg(not(target_os = "linux"))]
    pub fn open(_: &str, _: &[u16], _: usize) -> Result<Self, SocketError> {
        Err(SocketError::Unsupported)
    }

    /// The next packet (its IP header first) and when it was captured; `None` after [`WAIT`] without
    /// one, or for a packet that is not the capture's.
    #[cfg(target_os = "linux")]
    pub fn read(&mut self) -> std::io::Result<Option<(&[u8], Stamp)>> {
        use std::io::IoSliceMut;

        use nix::errno::Errno;
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
        use std::os::fd::AsRawFd;

        let mut control = nix::cmsg_space!(nix::sys::time::TimeSpec);
        let mut iov = [IoSliceMut::new(&mut self.buffer)];
        let message = match recvmsg::<SockaddrStorage>(
            self.fd.as_raw_fd(),
            &mut iov,
            Some(&mut control),
            MsgFlags::empty(),
        ) {
            Ok(message) => message,
            Err(Errno::EAGAIN | Errno::EINTR) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let read = message.bytes;
        let link = message.address.as_ref().and_then(|a| a.as_link_addr());
        let ours = link.is_some_and(|l| {
            let leaving_loopback = u32::from(l.hatype()) == ancillary::LOOPBACK
                && u32::from(l.pkttype()) == ancillary::OUTGOING;
            l.ifindex() == self.index && !leaving_loopback
        });
        let stamp = message.cmsgs().ok().and_then(|mut messages| {
            messages.find_map(|m| match m {
                ControlMessageOwned::ScmTimestampns(ts) => Some(Duration::from(ts)),
                _ => None,
            })
        });
        if !ours || message.flags.contains(MsgFlags::MSG_TRUNC) && read >= self.buffer.len() {
            return Ok(None);
        }
        Ok(Some((
            &self.buffer[..read.min(self.buffer.len())],
            stamp_of(stamp),
        )))
    }

    #[cfg(not(target_os = "linux"))]
    pub fn read(&mut self) -> std::io::Result<Option<(&[u8], Stamp)>> {
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }
}

/// The stamp of a packet the kernel received at `received` (since the Unix epoch, on the wall clock):
/// on the monotonic clock as long before now as the wall clock says, or now when there is no stamp or
/// it cannot be believed.
#[cfg(target_os = "linux")]
fn stamp_of(received: Option<Duration>) -> Stamp {
    let (now, wall_now) = (tokio::time::Instant::now(), SystemTime::now());
    let received = received.map(|r| UNIX_EPOCH + r);
    match received
        .and_then(|r| wall_now.duration_since(r).ok())
        .filter(|ago| *ago < BELIEVED)
    {
        Some(ago) => Stamp {
            at: now.checked_sub(ago).unwrap_or(now),
            wall: wall_now - ago,
        },
        None => Stamp {
            at: now,
            wall: wall_now,
        },
    }
}

/// The classic BPF program (see the module's documentation): the interface `index`, not a loopback
/// packet leaving, IPv4 or IPv6 TCP with `ports` as its source or destination port.
#[cfg(target_os = "linux")]
fn filter(index: u32, ports: &[u16]) -> Vec<socket2::SockFilter> {
    use ancillary::*;
    use socket2::SockFilter;
    const LD_W_ABS: u16 = 0x20;
    const LD_H_ABS: u16 = 0x28;
    const LD_B_ABS: u16 = 0x30;
    const LD_H_IND: u16 = 0x48;
    const LDX_B_MSH: u16 = 0xb1;
    const JEQ_K: u16 = 0x15;
    const JSET_K: u16 = 0x45;
    const RET_K: u16 = 0x06;
    // Each port is compared twice (source, destination) in each family; the jumps forward to the
    // accept and drop at the end are counted back from there.
    let n = ports.len();
    let mut program: Vec<(u16, Jump, Jump, u32)> = Vec::new();
    #[derive(Clone, Copy)]
    enum Jump {
        Next,
        To(usize),
        Accept,
        Drop,
    }
    use Jump::{Accept, Drop, Next, To};
    program.push((LD_W_ABS, Next, Next, IFINDEX));
    program.push((JEQ_K, Next, Drop, index));
    program.push((LD_W_ABS, Next, Next, HATYPE));
    program.push((JEQ_K, Next, To(6), LOOPBACK));
    program.push((LD_W_ABS, Next, Next, PKTTYPE));
    program.push((JEQ_K, Drop, Next, OUTGOING));
    // 6:
    program.push((LD_W_ABS, Next, Next, PROTOCOL));
    let v6 = 10 + 5 + 2 * n + 1;
    program.push((JEQ_K, To(9), Next, 0x0800));
    program.push((JEQ_K, To(v6), Drop, 0x86dd));
    // 9: IPv4: TCP, not a later fragment, then the ports at the header's length.
    program.push((LD_B_ABS, Next, Next, 9));
    program.push((JEQ_K, Next, Drop, 6));
    program.push((LD_H_ABS, Next, Next, 6));
    program.push((JSET_K, Drop, Next, 0x1fff));
    program.push((LDX_B_MSH, Next, Next, 0));
    program.push((LD_H_IND, Next, Next, 0));
    for port in ports {
        program.push((JEQ_K, Accept, Next, u32::from(*port)));
    }
    program.push((LD_H_IND, Next, Next, 2));
    for (i, port) in ports.iter().enumerate() {
        let last = if i + 1 == n { Drop } else { Next };
        program.push((JEQ_K, Accept, last, u32::from(*port)));
    }
    debug_assert_eq!(program.len(), v6);
    // IPv6: TCP right after the fixed header (extension headers are not followed).
    program.push((LD_B_ABS, Next, Next, 6));
    program.push((JEQ_K, Next, Drop, 6));
    program.push((LD_H_ABS, Next, Next, 40));
    for port in ports {
        program.push((JEQ_K, Accept, Next, u32::from(*port)));
    }
    program.push((LD_H_ABS, Next, Next, 42));
    for (i, port) in ports.iter().enumerate() {
        let last = if i + 1 == n { Drop } else { Next };
        program.push((JEQ_K, Accept, last, u32::from(*port)));
    }
    let accept = program.len();
    let drop = accept + 1;
    let mut out: Vec<SockFilter> = program
        .iter()
        .enumerate()
        .map(|(at, &(code, t, f, k))| {
            let offset = |jump: Jump| -> u8 {
                let to = match jump {
                    Next => at + 1,
                    To(to) => to,
                    Accept => accept,
                    Drop => drop,
                };
                u8::try_from(to - at - 1).unwrap_or(u8::MAX)
            };
            SockFilter::new(code, offset(t), offset(f), k)
        })
        .collect();
    out.push(SockFilter::new(RET_K, 0, 0, MAX_PACKET as u32));
    out.push(SockFilter::new(RET_K, 0, 0, 0));
    out
}
