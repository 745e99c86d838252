//! Capture mode's own cost (docs/lab/capture.md): the CPU of one streamed chunk read off its packet (the
//! segment parsed, put in its stream, the chunked coding read, then the proxy's own decoder and meter),
//! and what one connection followed with a request in flight takes (divan's allocation counts: the
//! bytes allocated less those freed are what the connection holds). Run with `cargo bench --bench
//! capture`.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use divan::{black_box, Bencher};
use etherparse::PacketBuilder;
use tokentap::capture::{Capture, Link, Stamp};
use tokentap::config::Config;
use tokentap::record::metrics::Metrics;
use tokentap::tap::exchange::ExchangeContext;

#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    divan::main();
}

/// A content chunk as vLLM sends it (one token), in a chunk of a chunked body.
const CONTENT: &str = r#"data: {"id":"chatcmpl-a86038c5d743ac9b","object":"chat.completion.chunk","created":1796207719,"model":"tiny-llama","choices":[{"index":0,"delta":{"content":" control"},"logprobs":null,"finish_reason":null,"token_ids":null}]}

"#;
const REQUEST: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 70\r\n\r\n{\"model\":\"tiny-llama\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
const HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

fn chunk() -> Vec<u8> {
    format!("{:x}\r\n{CONTENT}\r\n", CONTENT.len()).into_bytes()
}

fn capture() -> Capture {
    let config = Config::from_yaml_str("capture: {ports: [8000]}").expect("config");
    let metrics = Arc::new(Metrics::new(&config).expect("metrics"));
    let context = Arc::new(ExchangeContext::metering_only(&config, metrics));
    Capture::new(&config, context)
}

/// One connection's packets, its sequence numbers kept.
struct Wire {
    client: SocketAddr,
    server: SocketAddr,
    seq: [u32; 2],
}

impl Wire {
    fn new(port: u16) -> Self {
        Wire {
            client: SocketAddr::from(([127, 0, 0, 1], port)),
            server: SocketAddr::from(([127, 0, 0, 1], 8000)),
            seq: [1_000, 9_000],
        }
    }

    fn packet(&mut self, side: usize, syn: bool, payload: &[u8]) -> Vec<u8> {
        let (from, to) = if side == 0 {
            (self.client, self.server)
        } else {
            (self.server, self.client)
        };
        let (SocketAddr::V4(f), SocketAddr::V4(t)) = (from, to) else {
            unreachable!("IPv4 only")
        };
        let mut tcp = PacketBuilder::ipv4(f.ip().octets(), t.ip().octets(), 64).tcp(
            f.port(),
            t.port(),
            self.seq[side],
            65535,
        );
        if syn {
            tcp = tcp.syn();
        }
        if !(syn && side == 0) {
            tcp = tcp.ack(self.seq[1 - side]);
        }
        let mut out = Vec::with_capacity(tcp.size(payload.len()));
        tcp.write(&mut out, payload).expect("a packet");
        self.seq[side] = self.seq[side].wrapping_add(payload.len() as u32 + u32::from(syn));
        out
    }

    /// The handshake, the request and the response's head.
    fn opening(&mut self) -> Vec<Vec<u8>> {
        vec![
            self.packet(0, true, b""),
            self.packet(1, true, b""),
            self.packet(0, false, REQUEST),
            self.packet(1, false, HEAD),
        ]
    }
}

fn stamp(at: tokio::time::Instant) -> Stamp {
    Stamp {
        at,
        wall: SystemTime::now(),
    }
}

/// One packet carrying one streamed chunk, on a connection the capture follows.
#[divan::bench]
fn capture_per_content_chunk(bencher: Bencher) {
    let mut capture = capture();
    let mut wire = Wire::new(40_000);
    let t0 = tokio::time::Instant::now();
    for packet in wire.opening() {
        capture.packet(Link::Ip, &packet, stamp(t0));
    }
    let chunk = chunk();
    let mut at = t0;
    bencher
        .with_inputs(|| {
            at += Duration::from_micros(100);
            (wire.packet(1, false, &chunk), at)
        })
        .bench_local_refs(|(packet, at)| capture.packet(Link::Ip, black_box(packet), stamp(*at)));
}

/// A new connection followed to a request in flight with one chunk read: what it takes (the bytes
/// allocated less those freed), and its CPU. 1,000 connections are open when it is measured.
#[divan::bench]
fn capture_one_connection_in_flight(bencher: Bencher) {
    let mut capture = capture();
    let t0 = tokio::time::Instant::now();
    let chunk = chunk();
    let mut port = 10_000u16;
    let open = |capture: &mut Capture, port: u16| {
        let mut wire = Wire::new(port);
        let mut packets = wire.opening();
        packets.push(wire.packet(1, false, &chunk));
        for packet in packets {
            capture.packet(Link::Ip, &packet, stamp(t0));
        }
    };
    for _ in 0..1_000 {
        port += 1;
        open(&mut capture, port);
    }
    bencher
        .with_inputs(|| {
            port = port.wrapping_add(1).max(10_000);
            port
        })
        .bench_local_values(|port| open(&mut capture, port));
}
