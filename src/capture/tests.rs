//! The capture fed crafted packet sequences: the figures of what it reassembled are the ones the
//! packets' times give, whatever the order, duplicates and overlaps; a connection it cannot follow is
//! counted and not metered, never a wrong figure.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::packet::build::{packet, Flags};
use super::{Capture, Link, Stamp};
use crate::config::Config;
use crate::decode::tokenizer::Tokenizers;
use crate::record::emit::{Emitter, Finished, Sink};
use crate::record::meter::MeterContext;
use crate::record::metrics::{Metrics, Unmetered};
use crate::tap::context::{ExchangeContext, Settings};
use crate::tap::identity::Identify;

/// What a finished request came to, as the tests compare it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub path: String,
    pub model: String,
    pub status: Option<u16>,
    pub outcome: &'static str,
    pub ttft_ms: Option<u128>,
    pub e2e_ms: u128,
    pub gaps_ms: Vec<u128>,
    pub tokens: Option<u64>,
    pub captured: bool,
}

#[derive(Default)]
struct Recorded(Arc<Mutex<Vec<Seen>>>);

impl Sink for Recorded {
    fn emit(&self, f: &Finished<'_>) {
        let ms = |d: Duration| d.as_millis();
        let seen = Seen {
            path: f.who.path.to_owned(),
            model: f.series.model.to_string(),
            status: f.record.status.map(|s| s.as_u16()),
            outcome: f.record.outcome.as_str(),
            ttft_ms: f.record.figures.ttft.map(ms),
            e2e_ms: ms(f.record.figures.e2e),
            gaps_ms: (f.gaps.listed.clone().unwrap_or_default().iter())
                .map(|s| (s * 1000.0).round() as u128)
                .collect(),
            tokens: f.record.output_tokens,
            captured: f.who.captured,
        };
        self.0.lock().unwrap().push(seen);
    }

    fn gaps(&self) -> Option<(bool, usize)> {
        Some((true, 1000))
    }
}

/// A capture of port 8000 whose finished requests are kept.
pub struct Fixture {
    pub capture: Capture,
    pub metrics: Arc<Metrics>,
    seen: Arc<Mutex<Vec<Seen>>>,
    pub t0: Instant,
}

impl Fixture {
    pub fn new(yaml: &str) -> Self {
        let yaml = match yaml.contains("capture:") {
            true => yaml.to_owned(),
            false => format!("capture: {{ports: [8000]}}\n{yaml}"),
        };
        let config = Config::from_yaml_str(&yaml).unwrap();
        let metrics = Arc::new(Metrics::new(&config).unwrap());
        let recorded = Recorded::default();
        let seen = recorded.0.clone();
        let meter = MeterContext {
            metrics: metrics.clone(),
            slo: config.slo.clone(),
            conversations: None,
            emitter: Emitter::new(metrics.clone(), None).with(recorded),
        };
        let settings = Settings {
            meter,
            identify: Identify::new(None),
        };
        let tokenizers = Arc::new(Tokenizers::default());
        let governor = crate::govern::Governor::new(&config.budgets, &config.conversations);
        let context = Arc::new(ExchangeContext::new(
            settings,
            config.metering.clone(),
            tokenizers,
            governor,
        ));
        Fixture {
            capture: Capture::new(&config, context),
            metrics,
            seen,
            t0: Instant::now(),
        }
    }

    /// Feeds `packet` as captured `ms` after t0.
    pub fn feed(&mut self, ms: u64, packet: &[u8]) {
        let stamp = Stamp {
            at: self.t0 + Duration::from_millis(ms),
            wall: SystemTime::UNIX_EPOCH
                + Duration::from_secs(1_800_000_000)
                + Duration::from_millis(ms),
        };
        self.capture.packet(Link::Ip, packet, stamp);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn unmetered(&self, why: Unmetered) -> u64 {
        self.metrics.capture.unmetered_count(why)
    }

    pub fn in_flight(&self) -> i64 {
        self.metrics.in_flight(crate::record::api::Api::Chat).get()
    }
}

/// One TCP connection's packets, each side's sequence numbers kept.
pub struct Wire {
    client: SocketAddr,
    server: SocketAddr,
    seq: [u32; 2],
}

impl Wire {
    pub fn new(client_port: u16) -> Self {
        Wire {
            client: SocketAddr::from(([127, 0, 0, 1], client_port)),
            server: SocketAddr::from(([127, 0, 0, 1], 8000)),
            seq: [1_000, 4_000_000_000],
        }
    }

    fn flags(&self, side: usize) -> Flags {
        Flags {
            ack: Some(self.seq[1 - side]),
            ..Flags::default()
        }
    }

    /// The handshake: SYN, SYN-ACK, ACK.
    pub fn open(&mut self) -> Vec<Vec<u8>> {
        let syn = packet(
            self.client,
            self.server,
            self.seq[0],
            Flags {
                syn: true,
                ..Flags::default()
            },
            b"",
        );
        let syn_ack = packet(
            self.server,
            self.client,
            self.seq[1],
            Flags {
                syn: true,
                ack: Some(self.seq[0] + 1),
                ..Flags::default()
            },
            b"",
        );
        self.seq[0] += 1;
        self.seq[1] = self.seq[1].wrapping_add(1);
        let ack = packet(self.client, self.server, self.seq[0], self.flags(0), b"");
        vec![syn, syn_ack, ack]
    }

    fn send(&mut self, side: usize, bytes: &[u8], extra: Flags) -> Vec<u8> {
        let (from, to) = match side {
            0 => (self.client, self.server),
            _ => (self.server, self.client),
        };
        let flags = Flags {
            fin: extra.fin,
            rst: extra.rst,
            ..self.flags(side)
        };
        let p = packet(from, to, self.seq[side], flags, bytes);
        self.seq[side] = self.seq[side].wrapping_add(bytes.len() as u32 + u32::from(extra.fin));
        p
    }

    pub fn client(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.send(0, bytes, Flags::default())
    }

    pub fn server(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.send(1, bytes, Flags::default())
    }

    /// A packet from `side` (0: client) at sequence number `seq`, with the ACK it would carry now.
    pub fn at(&self, side: usize, seq: u32, bytes: &[u8]) -> Vec<u8> {
        let (from, to) = match side {
            0 => (self.client, self.server),
            _ => (self.server, self.client),
        };
        packet(from, to, seq, self.flags(side), bytes)
    }

    pub fn next_seq(&self, side: usize) -> u32 {
        self.seq[side]
    }

    /// The client acknowledges everything the server sent.
    pub fn client_ack(&mut self) -> Vec<u8> {
        self.send(0, b"", Flags::default())
    }

    pub fn fin(&mut self, side: usize) -> Vec<u8> {
        self.send(
            side,
            b"",
            Flags {
                fin: true,
                ..Flags::default()
            },
        )
    }

    pub fn rst(&mut self, side: usize) -> Vec<u8> {
        self.send(
            side,
            b"",
            Flags {
                rst: true,
                ..Flags::default()
            },
        )
    }
}

pub const REQUEST: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 42\r\n\r\n{\"model\":\"m1\",\"stream\":true,\"messages\":[]}";

/// One SSE event, as one chunk of a chunked body.
pub fn chunk(event: &str) -> Vec<u8> {
    let data = format!("data: {event}\n\n");
    format!("{:x}\r\n{data}\r\n", data.len()).into_bytes()
}

pub const HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

/// The response's pieces: the head, a role-only chunk, three tokens, the usage, `[DONE]`, the end.
pub fn response() -> Vec<Vec<u8>> {
    let delta = |text: &str| {
        format!(r#"{{"model":"m1","choices":[{{"index":0,"delta":{{"content":"{text}"}}}}]}}"#)
    };
    vec![
        HEAD.to_vec(),
        chunk(
            r#"{"model":"m1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        ),
        chunk(&delta("a")),
        chunk(&delta("b")),
        chunk(&delta("c")),
        chunk(
            r#"{"model":"m1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}"#,
        ),
        chunk("[DONE]"),
        b"0\r\n\r\n".to_vec(),
    ]
}

/// The times (ms after t0) the response's pieces are sent at: head 20, role 30, tokens 100, 150, 200,
/// usage 210, `[DONE]` 220, end 230.
pub const TIMES: [u64; 8] = [20, 30, 100, 150, 200, 210, 220, 230];

/// What the in-order exchange comes to.
pub fn expected() -> Seen {
    Seen {
        path: "/v1/chat/completions".into(),
        model: "m1".into(),
        status: Some(200),
        outcome: "ok",
        ttft_ms: Some(100),
        e2e_ms: 230,
        gaps_ms: vec![50, 50],
        tokens: Some(3),
        captured: true,
    }
}

/// The packets of one whole exchange on a new connection, with the times they are captured at.
pub fn exchange(wire: &mut Wire) -> Vec<(u64, Vec<u8>)> {
    let mut packets: Vec<(u64, Vec<u8>)> = wire.open().into_iter().map(|p| (0, p)).collect();
    packets.push((0, wire.client(REQUEST)));
    for (piece, ms) in response().iter().zip(TIMES) {
        packets.push((ms, wire.server(piece)));
        packets.push((ms, wire.client_ack()));
    }
    packets
}

#[test]
fn an_exchange_in_order_has_the_figures_its_packets_times_give() {
    let mut f = Fixture::new("");
    for (ms, p) in exchange(&mut Wire::new(40_000)) {
        f.feed(ms, &p);
    }
    assert_eq!(f.seen(), vec![expected()]);
    assert_eq!(f.in_flight(), 0);
}

/// The response's packets built in order, then fed as `order` says: (index into the response's
/// pieces, the time it is captured at); the client's packets (handshake, request) first.
fn fed_as(order: &[(usize, u64)]) -> Fixture {
    let mut f = Fixture::new("");
    let mut wire = Wire::new(40_001);
    for p in wire.open() {
        f.feed(0, &p);
    }
    f.feed(0, &wire.client(REQUEST));
    let pieces: Vec<Vec<u8>> = response().iter().map(|piece| wire.server(piece)).collect();
    for (i, ms) in order {
        f.feed(*ms, &pieces[*i]);
    }
    f
}

fn in_order() -> Vec<(usize, u64)> {
    TIMES.iter().copied().enumerate().collect()
}

#[test]
fn a_segment_that_came_early_is_read_when_the_one_before_it_comes() {
    // The second token's packet (150 ms) is captured before the first's, which comes at 160 ms: a
    // reader of the socket had neither until 160 ms.
    let mut order = in_order();
    order.swap(2, 3);
    order[2].1 = 150;
    order[3].1 = 160;
    let f = fed_as(&order);
    let seen = Seen {
        ttft_ms: Some(160),
        gaps_ms: vec![0, 40],
        ..expected()
    };
    assert_eq!(f.seen(), vec![seen]);
    assert_eq!(
        f.metrics
            .capture
            .placed_count(crate::record::metrics::Placed::OutOfOrder),
        1
    );
}

#[test]
fn duplicated_segments_change_nothing() {
    let mut order = in_order();
    // Each token retransmitted a while later, and the head twice at once.
    order.insert(1, (0, 20));
    order.insert(4, (2, 120));
    order.insert(6, (3, 170));
    order.push((4, 300));
    let f = fed_as(&order);
    assert_eq!(f.seen(), vec![expected()]);
    assert_eq!(
        f.metrics
            .capture
            .placed_count(crate::record::metrics::Placed::Duplicate),
        4
    );
}

#[test]
fn an_overlapping_retransmission_hands_on_only_its_new_bytes() {
    let mut f = Fixture::new("");
    let mut wire = Wire::new(40_002);
    for p in wire.open() {
        f.feed(0, &p);
    }
    f.feed(0, &wire.client(REQUEST));
    let pieces = response();
    // The head and the role chunk, then a segment holding the role chunk again and the first token.
    f.feed(20, &wire.server(&pieces[0]));
    let role_at = wire.next_seq(1);
    f.feed(30, &wire.server(&pieces[1]));
    let mut both = pieces[1].clone();
    both.extend_from_slice(&pieces[2]);
    f.feed(100, &wire.at(1, role_at, &both));
    let _ = wire.server(&pieces[2]);
    for (piece, ms) in pieces.iter().zip(TIMES).skip(3) {
        f.feed(ms, &wire.server(piece));
    }
    assert_eq!(f.seen(), vec![expected()]);
    assert_eq!(
        f.metrics
            .capture
            .placed_count(crate::record::metrics::Placed::Overlap),
        1
    );
}

#[test]
fn a_segment_the_capture_lost_leaves_the_connection_unmetered_never_a_wrong_figure() {
    let mut f = Fixture::new("");
    let mut wire = Wire::new(40_003);
    for p in wire.open() {
        f.feed(0, &p);
    }
    f.feed(0, &wire.client(REQUEST));
    let pieces = response();
    for (i, (piece, ms)) in pieces.iter().zip(TIMES).enumerate() {
        let p = wire.server(piece);
        // The second token's packet never reaches the capture; the client acknowledges it all the same.
        if i != 3 {
            f.feed(ms, &p);
        }
        f.feed(ms, &wire.client_ack());
    }
    // A later packet, past the reorder wait, finds the hole still there.
    f.feed(1_000, &wire.client_ack());
    assert_eq!(f.seen(), vec![]);
    assert_eq!(f.unmetered(Unmetered::LostSegment), 1);
    assert_eq!(f.in_flight(), 0);
    assert_eq!(f.capture.buffered(), 0);
}

#[test]
fn a_kept_alive_connection_that_lost_bytes_is_metered_again_from_its_next_request() {
    let mut f = Fixture::new("");
    let mut wire = Wire::new(40_013);
    for p in wire.open() {
        f.feed(0, &p);
    }
    f.feed(0, &wire.client(REQUEST));
    for (i, (piece, ms)) in response().iter().zip(TIMES).enumerate() {
        let p = wire.server(piece);
        if i != 3 {
            f.feed(ms, &p);
        }
        f.feed(ms, &wire.client_ack());
    }
    let later = 1_000;
    f.feed(later, &wire.client(REQUEST));
    for (piece, ms) in response().iter().zip(TIMES) {
        f.feed(later + ms, &wire.server(piece));
    }
    assert_eq!(f.seen(), vec![expected()]);
    assert_eq!(f.unmetered(Unmetered::LostSegment), 1);
}

#[test]
fn a_connection_met_mid_stream_is_metered_from_its_next_request_on() {
    let mut f = Fixture::new("");
    let mut wire = Wire::new(40_004);
    // No handshake: the capture began while a response was streaming.
    let pieces = response();
    for (piece, ms) in pieces.iter().zip(TIMES).skip(3) {
        f.feed(ms, &wire.server(piece));
    }
    // The next request on the same connection, 1 s later.
    let later = 1_000;
    f.feed(later, &wire.client(REQUEST));
    for (piece, ms) in pieces.iter().zip(TIMES) {
        f.feed(later + ms, &wire.server(piece));
    }
    assert_eq!(f.seen(), vec![expected()]);
    assert_eq!(f.unmetered(Unmetered::MidStream), 1);
}

#[test]
fn requests_kept_alive_and_pipelined_on_one_connection_are_each_metered() {
    let mut f = Fixture::new("");
    let mut wire = Wire::new(40_005);
    for p in wire.open() {
        f.feed(0, &p);
    }
    // Two requests in one segment (pipelined), then both answers back to back.
    let mut two = REQUEST.to_vec();
    two.extend_from_slice(REQUEST);
    f.feed(0, &wire.client(&two));
    for (piece, ms) in response().iter().zip(TIMES) {
        f.feed(ms, &wire.server(piece));
    }
    for (piece, ms) in response().iter().zip(TIMES) {
        f.feed(300 + ms, &wire.server(piece));
    }
    let second = Seen {
        ttft_ms: Some(400),
        e2e_ms: 530,
        ..expected()
    };
    assert_eq!(f.seen(), vec![expected(), second]);
}

#[test]
fn a_json_answer_with_a_length_is_one_request_with_its_usage() {
    let mut f = Fixture::new("");
    let mut wire = Wire::new(40_006);
    for p in wire.open() {
        f.feed(0, &p);
    }
    f.feed(0, &wire.client(REQUEST));
    let body = br#"{"model":"m1","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#;
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    f.feed(40, &wire.server(head.as_bytes()));
    f.feed(50, &wire.server(&body[..30]));
    f.feed(60, &wire.server(&body[30..]));
    let seen = f.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (
            seen[0].outcome,
            seen[0].e2e_ms,
            seen[0].tokens,
            seen[0].ttft_ms
        ),
        ("ok", 60, Some(2), None)
    );
}

#[test]
fn the_client_going_away_mid_stream_is_a_cancelled_request() {
    let mut f = Fixture::new("");
    let mut wire = Wire::new(40_007);
    for p in wire.open() {
        f.feed(0, &p);
    }
    f.feed(0, &wire.client(REQUEST));
    for (piece, ms) in response().iter().zip(TIMES).take(4) {
        f.feed(ms, &wire.server(piece));
    }
    f.feed(170, &wire.rst(0));
    let seen = f.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].outcome, seen[0].e2e_ms, seen[0].ttft_ms),
        ("cancelled", 170, Some(100))
    );
    assert_eq!(f.capture.connections(), 0);
}

#[test]
fn the_server_closing_mid_stream_is_an_upstream_error_and_after_done_the_client_closing_is_ok() {
    let mut f = Fixture::new("");
    let mut wire = Wire::new(40_008);
    for p in wire.open() {
        f.feed(0, &p);
    }
    f.feed(0, &wire.client(REQUEST));
    for (piece, ms) in response().iter().zip(TIMES).take(4) {
        f.feed(ms, &wire.server(piece));
    }
    f.feed(170, &wire.fin(1));
    assert_eq!(f.seen()[0].outcome, "upstream_error");
    // A client that closes after `[DONE]` had the whole answer (the openai SDK's sync stream).
    let mut wire = Wire::new(40_009);
    for p in wire.open() {
        f.feed(1_000, &p);
    }
    f.feed(1_000, &wire.client(REQUEST));
    for (piece, ms) in response().iter().zip(TIMES).take(7) {
        f.feed(1_000 + ms, &wire.server(piece));
    }
    f.feed(1_225, &wire.fin(0));
    let seen = &f.seen()[1];
    assert_eq!((seen.outcome, seen.e2e_ms), ("ok", 220));
}

#[test]
fn bytes_that_are_not_http_leave_the_connection_unmetered() {
    let mut f = Fixture::new("");
    let mut wire = Wire::new(40_010);
    for p in wire.open() {
        f.feed(0, &p);
    }
    f.feed(
        0,
        &wire.client(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"),
    );
    f.feed(10, &wire.server(b"\x16\x03\x03\x00\x7a"));
    assert_eq!(f.seen(), vec![]);
    assert_eq!(f.unmetered(Unmetered::NotHttp), 1);
}

#[test]
fn segments_held_past_the_connections_bound_leave_it_unmetered() {
    let mut f = Fixture::new("capture: {ports: [8000], max_connection_bytes: 2KiB}");
    let mut wire = Wire::new(40_011);
    for p in wire.open() {
        f.feed(0, &p);
    }
    f.feed(0, &wire.client(REQUEST));
    f.feed(20, &wire.server(HEAD));
    // A hole, then 3 KiB of segments ahead of it.
    let ahead = wire.next_seq(1).wrapping_add(100);
    for i in 0..3u32 {
        f.feed(30, &wire.at(1, ahead.wrapping_add(i * 1024), &[b'x'; 1024]));
    }
    assert_eq!(f.unmetered(Unmetered::Buffer), 1);
    assert_eq!(f.capture.buffered(), 0);
    assert_eq!(f.in_flight(), 0);
}

#[test]
fn a_quiet_connection_is_forgotten_and_its_request_ends_as_a_timeout() {
    let mut f = Fixture::new("capture: {ports: [8000], connection_idle: 5s}");
    let mut wire = Wire::new(40_012);
    for p in wire.open() {
        f.feed(0, &p);
    }
    f.feed(0, &wire.client(REQUEST));
    f.feed(20, &wire.server(HEAD));
    let later = f.t0 + Duration::from_secs(6);
    f.capture.sweep(later);
    let seen = f.seen();
    assert_eq!(
        (seen.len(), seen[0].outcome, seen[0].e2e_ms),
        (1, "timeout", 6_000)
    );
    assert_eq!(f.capture.connections(), 0);
}
