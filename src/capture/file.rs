//! A capture file read through the same capture as the interface's packets (`tokentap capture --read
//! FILE`, and the tests' recorded traffic): pcap, as `tcpdump -w` and `tshark -F pcap` write it, read by
//! the pure-Rust `pcap-file`, no libpcap. The file's timestamps are the packets' times: the first
//! packet is placed at the instant the reading began, every later one as far after it as the file says,
//! so the figures are the file's whatever the speed of the reading.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use pcap_file::pcap::PcapReader;
use pcap_file::DataLink;
use tokio::time::Instant;

use super::{Capture, Link, Stamp};

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {error}")]
    Open { path: String, error: std::io::Error },
    #[error(
        "{path}: not a pcap capture file (write one with tcpdump -w, or tshark -F pcap): {error}"
    )]
    Format {
        path: String,
        error: pcap_file::PcapError,
    },
    #[error("{path}: packets of link type {link:?} are not read (Ethernet, Linux cooked and raw IP are)")]
    Link { path: String, link: DataLink },
    #[error("{path}: packet {packet}: {error}")]
    Packet {
        path: String,
        packet: u64,
        error: pcap_file::PcapError,
    },
}

/// Reads every packet of the file at `path` into `capture`, then ends what is left open at the last
/// packet's time; how many packets were read.
pub fn read_file(path: &Path, capture: &mut Capture) -> Result<u64, FileError> {
    let shown = path.display().to_string();
    let file = File::open(path).map_err(|error| FileError::Open {
        path: shown.clone(),
        error,
    })?;
    let mut reader = PcapReader::new(BufReader::new(file)).map_err(|error| FileError::Format {
        path: shown.clone(),
        error,
    })?;
    let link = match reader.header().datalink {
        DataLink::ETHERNET => Link::Ethernet,
        DataLink::LINUX_SLL => Link::LinuxSll,
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Link::Ip,
        other => {
            return Err(FileError::Link {
                path: shown,
                link: other,
            })
        }
    };
    let began = Instant::now();
    let mut first: Option<Duration> = None;
    let mut last = began;
    let mut packets = 0;
    while let Some(packet) = reader.next_packet() {
        let packet = packet.map_err(|error| FileError::Packet {
            path: shown.clone(),
            packet: packets + 1,
            error,
        })?;
        packets += 1;
        let since = packet
            .timestamp
            .saturating_sub(*first.get_or_insert(packet.timestamp));
        // A file whose clock stepped back keeps its packets' order: time does not run backwards.
        let at = (began + since).max(last);
        last = at;
        let stamp = Stamp {
            at,
            wall: UNIX_EPOCH + packet.timestamp,
        };
        capture.packet(link, &packet.data, stamp);
    }
    capture.finish(last);
    Ok(packets)
}
