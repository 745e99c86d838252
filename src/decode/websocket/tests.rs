//! The frame reader against the captured sessions (every frame as it crossed the wire, compressed with
//! context takeover, masked from the client), fed at every kind of cut, and against frames built here
//! for what the captures do not show (fragments, a control frame between them, the bounds).

use super::*;

use serde_json::Value;

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

/// What a reader hands on for `bytes` fed in pieces of `cut`.
fn read(bytes: &[u8], cut: usize, inflate: Option<deflate::Direction>) -> Vec<String> {
    let mut reader = FrameReader::new(inflate);
    let mut seen = Vec::new();
    for piece in bytes.chunks(cut) {
        reader.feed(piece, &mut |message| {
            seen.push(match message {
                Message::Text(text) => String::from_utf8_lossy(text).into_owned(),
                Message::Close(code) => format!("close {code:?}"),
                Message::Skipped(skip) => format!("skipped {skip}"),
            })
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
    let big = vec![b'x'; MAX_MESSAGE + 1];
    let mut bytes = frame(0x01, &big[..MAX_MESSAGE / 2], None);
    bytes.extend(frame(0x80, &big[MAX_MESSAGE / 2..], None));
    bytes.extend(frame(0x81, b"{}", None));
    assert_eq!(read(&bytes, 65536, None), ["skipped too_large", "{}"]);
}

#[test]
fn a_compressed_message_over_the_bound_is_skipped_and_the_context_kept() {
    use flate2::{Compress, Compression, FlushCompress};
    let mut compress = Compress::new(Compression::fast(), false);
    let mut deflated = |text: &[u8]| {
        let mut out = Vec::with_capacity(text.len() + 64);
        let _ = compress.compress_vec(text, &mut out, FlushCompress::Sync);
        assert!(out.ends_with(&TAIL_FOR_TESTS));
        out.truncate(out.len() - 4);
        out
    };
    let big = vec![b'a'; MAX_MESSAGE + 10];
    let mut bytes = frame(0xc1, &deflated(&big), None);
    bytes.extend(frame(0xc1, &deflated(b"{\"type\":\"done\"}"), None));
    let direction = deflate::Direction {
        window_bits: 15,
        no_context_takeover: false,
    };
    assert_eq!(
        read(&bytes, 4096, Some(direction)),
        ["skipped too_large", "{\"type\":\"done\"}"]
    );
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
