//! One captured packet read down to its TCP segment (`etherparse`, without copying): the link layer
//! the packet came with (Ethernet from a capture file of an Ethernet or loopback interface, Linux
//! cooked from one of `any`, none from the packet socket, which hands the network layer), IPv4 or
//! IPv6, then TCP. Anything else, a fragment, or a packet cut short is not a segment: a segment's bytes
//! that never arrive whole leave a hole its connection's reassembly will see.

use std::net::{IpAddr, SocketAddr};

use etherparse::{NetSlice, SlicedPacket, TransportSlice};

/// What a packet's bytes begin with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// An Ethernet header (pcap's `LINKTYPE_ETHERNET`, which loopback captures use too).
    Ethernet,
    /// Linux's cooked header (`LINKTYPE_LINUX_SLL`, captures of the `any` interface).
    LinuxSll,
    /// The IP header itself (`LINKTYPE_RAW`, and the packet socket's datagrams).
    Ip,
}

/// A TCP segment, borrowed from its packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment<'a> {
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub seq: u32,
    /// The acknowledgement number, when the ACK flag is set.
    pub ack: Option<u32>,
    pub syn: bool,
    pub fin: bool,
    pub rst: bool,
    pub payload: &'a [u8],
}

/// The TCP segment `data` carries, if it carries one whole.
pub fn segment(link: Link, data: &[u8]) -> Option<Segment<'_>> {
    let sliced = match link {
        Link::Ethernet => SlicedPacket::from_ethernet(data),
        Link::LinuxSll => SlicedPacket::from_linux_sll(data),
        Link::Ip => SlicedPacket::from_ip(data),
    }
    .ok()?;
    let (source, destination) = match sliced.net? {
        NetSlice::Ipv4(v4) if !v4.is_payload_fragmented() => {
            let header = v4.header();
            (
                header.source_addr().into(),
                header.destination_addr().into(),
            )
        }
        NetSlice::Ipv6(v6) if !v6.is_payload_fragmented() => {
            let header = v6.header();
            let pair: (IpAddr, IpAddr) = (
                header.source_addr().into(),
                header.destination_addr().into(),
            );
            pair
        }
        _ => return None,
    };
    let TransportSlice::Tcp(tcp) = sliced.transport? else {
        return None;
    };
    Some(Segment {
        from: SocketAddr::new(source, tcp.source_port()),
        to: SocketAddr::new(destination, tcp.destination_port()),
        seq: tcp.sequence_number(),
        ack: tcp.ack().then(|| tcp.acknowledgment_number()),
        syn: tcp.syn(),
        fin: tcp.fin(),
        rst: tcp.rst(),
        payload: tcp.payload(),
    })
}

/// Packets made for the tests: an IPv4 (or IPv6) TCP segment, with or without an Ethernet header.
#[cfg(test)]
pub mod build {
    use std::net::SocketAddr;

    use etherparse::PacketBuilder;

    /// The flags of a segment built by [`packet`].
    #[derive(Debug, Clone, Copy, Default)]
    pub struct Flags {
        pub syn: bool,
        pub fin: bool,
        pub rst: bool,
        pub ack: Option<u32>,
    }

    /// An IP packet (no link header) carrying one TCP segment.
    pub fn packet(
        from: SocketAddr, to: SocketAddr, seq: u32, flags: Flags, payload: &[u8],
    ) -> Vec<u8> {
        let builder = match (from, to) {
            (SocketAddr::V4(f), SocketAddr::V4(t)) => {
                PacketBuilder::ipv4(f.ip().octets(), t.ip().octets(), 64)
            }
            (SocketAddr::V6(f), SocketAddr::V6(t)) => {
                PacketBuilder::ipv6(f.ip().octets(), t.ip().octets(), 64)
            }
            _ => panic!("one family"),
        };
        let mut tcp = builder.tcp(from.port(), to.port(), seq, 65535);
        if flags.syn {
            tcp = tcp.syn();
        }
        if flags.fin {
            tcp = tcp.fin();
        }
        if flags.rst {
            tcp = tcp.rst();
        }
        if let Some(ack) = flags.ack {
            tcp = tcp.ack(ack);
        }
        let mut out = Vec::with_capacity(tcp.size(payload.len()));
        tcp.write(&mut out, payload).unwrap();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::build::{packet, Flags};
    use super::*;

    #[test]
    fn a_segment_is_read_from_ipv4_and_ipv6_with_and_without_an_ethernet_header() {
        let (c, s): (SocketAddr, SocketAddr) = (
            "127.0.0.1:40000".parse().unwrap(),
            "127.0.0.1:8000".parse().unwrap(),
        );
        let flags = Flags {
            ack: Some(7),
            ..Flags::default()
        };
        let ip = packet(c, s, 1000, flags, b"GET / HTTP/1.1\r\n\r\n");
        let read = segment(Link::Ip, &ip).unwrap();
        assert_eq!(
            (read.from, read.to, read.seq, read.ack),
            (c, s, 1000, Some(7))
        );
        assert_eq!(read.payload, b"GET / HTTP/1.1\r\n\r\n");
        let mut ethernet = vec![0u8; 12];
        ethernet.extend_from_slice(&[0x08, 0x00]);
        ethernet.extend_from_slice(&ip);
        // Padding after the IP packet (Ethernet's minimum frame) is not payload.
        ethernet.extend_from_slice(&[0; 8]);
        assert_eq!(segment(Link::Ethernet, &ethernet), Some(read));
        let (c6, s6): (SocketAddr, SocketAddr) = (
            "[::1]:40000".parse().unwrap(),
            "[::1]:8000".parse().unwrap(),
        );
        let v6 = packet(
            c6,
            s6,
            5,
            Flags {
                syn: true,
                ..Flags::default()
            },
            b"",
        );
        let read = segment(Link::Ip, &v6).unwrap();
        assert!(read.syn && read.ack.is_none() && read.payload.is_empty());
        assert_eq!(read.to, s6);
    }

    #[test]
    fn a_packet_cut_short_or_not_tcp_is_no_segment() {
        let (c, s): (SocketAddr, SocketAddr) =
            ("10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap());
        let ip = packet(c, s, 1, Flags::default(), &[b'x'; 100]);
        assert!(segment(Link::Ip, &ip[..ip.len() - 1]).is_none());
        assert!(segment(Link::Ip, b"").is_none());
        assert!(segment(Link::Ip, &[0x45; 30]).is_none());
    }
}
