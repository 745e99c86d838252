//! The frame reader against the captured sessions (every frame as it crossed the wire, compressed with
//! context takeover, masked from the client), fed at every kind of cut, and against frames built here
//! for what the captures do not show (fragments, a control frame between them, the bounds).

use super::*;

use serde_json::Value;

use crate::config::BudgetLimits;
use crate::govern::{Client, Pool, Rate};
use std::sync::Arc;

/// What a reader may spend: `memory` bytes of `session_meters`, `work` bytes a second of `inflate`.
fn allowance(memory: u64, work: u64) -> Allowance {
    let pool = Arc::new(Pool::new(
        Budget::SessionMeters,
        BudgetLimits {
            cap: memory,
            per_client: memory,
        },
    ));
    let rate = Arc::new(Rate::new(
        Budget::Inflate,
        BudgetLimits {
            cap: work,
            per_client: work,
        },
    ));
    let client = Client::Address([10, 0, 0, 1].into());
    Allowance {
        memory: Lease::on(&pool, client.clone()),
        work: RateUse::new(rate, client),
    }
}

/// Enough for any test here.
fn plenty() -> Allowance {
    allowance(1 << 30, 1 << 40)
}

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/realtime");

/// A capture's frames of one direction: their bytes in order, the messages they carry, the close
/// codes; and the `101`'s extensions.
fn capture(name: &str, dir: &str) -> (Vec<u8>, Vec<String>, Vec<Option<u16>>, Option<Deflate>) {
    let path = format!("{FIXTURES}/{name}.frames.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (mut bytes, mut texts, mut closes) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines() {
        let frame: Value = serde_json::from_str(line).expect("a frame");
        if frame["dir"] != dir {
            continue;
        }
        let raw = frame["raw"].as_str().expect("raw");
        bytes.extend(
            (0..raw.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&raw[i..i + 2], 16).expect("hex")),
        );
        match frame["opcode"].as_str() {
            Some("text") if frame["message_end"] == true => {
                texts.push(frame["payload"].as_str().expect("payload").to_owned())
            }
            Some("close") => closes.push(frame["code"].as_u64().map(|c| c as u16)),
            _ => {}
        }
    }
    let head = std::fs::read_to_string(format!("{FIXTURES}/{name}.handshake.http")).expect("head");
    let extensions = (head.lines())
        .skip_while(|l| !l.starts_with("HTTP/1.1"))
        .filter_map(|l| l.split_once(':'))
        .filter(|(name, _)| name.eq_ignore_ascii_case("sec-websocket-extensions"))
        .map(|(_, value)| value.trim().to_owned())
        .collect::<Vec<_>>();
    (
        bytes,
        texts,
        closes,
        Deflate::agreed(extensions.iter().map(String::as_str)),
    )
}

/// What a reader hands on for `bytes` fed in pieces of `cut`: each text message joined here (the
/// reader hands it on in pieces), each close, each skip.
fn read(bytes: &[u8], cut: usize, inflate: Option<deflate::Direction>) -> Vec<String> {
    read_with(bytes, cut, inflate, plenty())
}

fn read_with(
    bytes: &[u8], cut: usize, inflate: Option<deflate::Direction>, allowance: Allowance,
) -> Vec<String> {
    let mut reader = FrameReader::new(inflate, allowance);
    let mut seen = Vec::new();
    let mut text: Option<Vec<u8>> = None;
    for piece in bytes.chunks(cut) {
        reader.feed(piece, &mut |message| match message {
            Message::TextStart => text = Some(Vec::new()),
            Message::Text(piece) => {
                assert!(piece.len() <= 4 << 10, "handed on a piece at a time");
                text.as_mut().expect("begun").extend_from_slice(piece);
            }
            Message::TextEnd => {
                seen.push(String::from_utf8_lossy(&text.take().expect("begun")).into_owned())
            }
            Message::Close(code) => seen.push(format!("close {code:?}")),
            Message::Skipped(skip) => seen.push(format!("skipped {skip}")),
            Message::Unmetered(budget, spent) => {
                seen.push(format!("unmetered {} {}", budget.as_str(), spent.as_str()))
            }
        });
    }
    seen
}

#[test]
fn every_captured_message_is_read_whole_at_every_cut_both_ways() {
    for name in [
        "vllm-tiny-qwen3-asr-session",
        "vllm-tiny-qwen3-asr-session-nodeflate",
        "vllm-tiny-qwen3-asr-session-idle-pings",
        "vllm-tiny-qwen3-asr-server-shutdown",
        "browser-style-ga-text",
        "sdk-ga-text",
    ] {
        for (dir, client) in [("c2s", true), ("s2c", false)] {
            let (bytes, texts, closes, deflate) = capture(name, dir);
            let inflate = deflate.map(|d| if client { d.client } else { d.server });
            let mut expected = texts.clone();
            expected.extend(closes.iter().map(|code| format!("close {code:?}")));
            for cut in [1, 2, 3, 5, 13, 64, 1000, 4096, usize::MAX] {
                let mut seen = read(&bytes, cut.min(bytes.len().max(1)), inflate);
                // Closes come last in every capture; the messages keep their order.
                seen.sort_by_key(|s| s.starts_with("close"));
                assert_eq!(seen, expected, "{name} {dir} cut {cut}");
            }
        }
    }
}

/// A frame: `first` byte (FIN, RSV, opcode), `payload`, masked with `mask` when given.
fn frame(first: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut f = vec![first];
    let bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n @ 0..=125 => f.push(bit | n as u8),
        n @ 126..=0xffff => {
            f.push(bit | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(bit | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(key) => {
            f.extend_from_slice(&key);
            f.extend(payload.iter().zip(key.iter().cycle()).map(|(b, k)| b ^ k));
        }
        None => f.extend_from_slice(payload),
    }
    f
}

#[test]
fn fragments_are_joined_around_a_ping_and_binary_messages_passed_over() {
    let key = Some([9, 8, 7, 6]);
    let mut bytes = frame(0x01, b"{\"type\":", key);
    bytes.extend(frame(0x89, b"ping", key));
    bytes.extend(frame(0x00, b"\"response.", key));
    bytes.extend(frame(0x80, b"create\"}", key));
    bytes.extend(frame(0x82, &[0, 1, 2], key));
    bytes.extend(frame(0x88, &[0x03, 0xe8], key));
    for cut in [1, 2, 7, 100] {
        assert_eq!(
            read(&bytes, cut, None),
            ["{\"type\":\"response.create\"}", "close Some(1000)"],
            "cut {cut}"
        );
    }
}

#[test]
fn a_message_over_the_bound_is_skipped_and_the_next_read() {
    let half = (MAX_MESSAGE / 2) as usize;
    let big = vec![b'x'; 2 * half + 1];
    let mut bytes = frame(0x01, &big[..half], None);
    bytes.extend(frame(0x80, &big[half..], None));
    bytes.extend(frame(0x81, b"{}", None));
    assert_eq!(read(&bytes, 65536, None), ["skipped too_large", "{}"]);
}

/// A compressor of one direction with context takeover: each message deflated with the tail cut.
fn compressor() -> impl FnMut(&[u8]) -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress};
    let mut compress = Compress::new(Compression::best(), false);
    move |text: &[u8]| {
        let mut out = Vec::with_capacity(text.len() / 100 + 1024);
        loop {
            let before = compress.total_in();
            let _ = compress.compress_vec(text, &mut out, FlushCompress::Sync);
            if compress.total_in() - before == text.len() as u64 && out.ends_with(&TAIL_FOR_TESTS) {
                break;
            }
            out.reserve(out.len() + 1024);
        }
        out.truncate(out.len() - 4);
        out
    }
}

const TAKEOVER: deflate::Direction = deflate::Direction {
    window_bits: 15,
    no_context_takeover: false,
};

#[test]
fn a_compressed_message_over_the_inflation_bound_stops_the_direction() {
    let mut deflated = compressor();
    let big = vec![b'a'; MAX_INFLATED as usize + 10];
    let mut bytes = frame(0xc1, &deflated(&big), None);
    bytes.extend(frame(0xc1, &deflated(b"{\"type\":\"done\"}"), None));
    assert_eq!(read(&bytes, 4096, Some(TAKEOVER)), ["skipped inflate"]);
}

#[test]
fn a_compressed_message_is_handed_on_in_pieces_and_none_is_kept() {
    let mut deflated = compressor();
    let delta = "QUFB".repeat(1 << 18);
    let text = format!(r#"{{"type":"response.output_audio.delta","delta":"{delta}"}}"#);
    let mut bytes = frame(0xc1, &deflated(text.as_bytes()), None);
    bytes.extend(frame(0xc1, &deflated(b"{}"), None));
    assert_eq!(read(&bytes, 1000, Some(TAKEOVER)), [text.as_str(), "{}"]);
    assert!(
        std::mem::size_of::<FrameReader>() < 512,
        "no message is held"
    );
}

#[test]
fn a_deflate_bomb_is_read_only_as_far_as_its_clients_work_share_pays() {
    let mut deflated = compressor();
    // About 1 KiB that inflates to 1 MiB, then a small message.
    let bomb = deflated(&vec![b'a'; 1 << 20]);
    assert!(bomb.len() < 2 << 10, "{}", bomb.len());
    let mut bytes = frame(0xc2, &bomb, None);
    bytes.extend(frame(0xc1, &deflated(b"{}"), None));
    // 256 KiB a second: a quarter second's worth (64 KiB) may be inflated at once.
    let seen = read_with(&bytes, 4096, Some(TAKEOVER), allowance(1 << 20, 256 << 10));
    assert_eq!(seen, ["unmetered inflate share"]);
}

#[test]
fn an_inflater_whose_memory_is_refused_stops_the_direction_and_holds_nothing() {
    let mut deflated = compressor();
    let mut bytes = frame(0x81, b"{\"plain\":1}", None);
    bytes.extend(frame(0xc1, &deflated(b"{}"), None));
    bytes.extend(frame(0x81, b"{}", None));
    let seen = read_with(
        &bytes,
        7,
        Some(TAKEOVER),
        allowance(INFLATER_BYTES - 1, 1 << 30),
    );
    assert_eq!(seen, ["{\"plain\":1}", "unmetered session_meters share"]);
}

const TAIL_FOR_TESTS: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

#[test]
fn a_broken_frame_or_undecodable_data_stops_the_direction_once() {
    let mut bytes = frame(0x80, b"orphan continuation", None);
    bytes.extend(frame(0x81, b"{}", None));
    assert_eq!(read(&bytes, 3, None), ["skipped malformed"]);
    let compressed_without_agreement = frame(0xc1, b"\x01\x02", None);
    assert_eq!(
        read(&compressed_without_agreement, 1, None),
        ["skipped malformed"]
    );
    let direction = deflate::Direction {
        window_bits: 15,
        no_context_takeover: true,
    };
    let garbage = frame(0xc1, &[0xff; 40], None);
    assert_eq!(read(&garbage, 1, Some(direction)), ["skipped inflate"]);
    let mut long_ping = vec![0x89, 126, 0, 200];
    long_ping.extend([0; 200]);
    assert_eq!(read(&long_ping, 7, None), ["skipped malformed"]);
}
