//! Realtime WebSocket sessions metered as they pass (SPEC §10, docs/metrics.md "Realtime sessions"):
//! scripted upstreams replay the fixtures of `tests/fixtures/realtime/` through tokentap (real vLLM
//! captures, compressed with context takeover; OpenAI GA and beta event sequences, sent fragmented with
//! pings between the fragments); every frame reaches the other side byte-identical, each response's
//! TTFT is within 1 ms of the client's own (its send of the trigger to its receipt of the first delta),
//! and the records say what the metrics say (the real Python clients: `realtime_clients.rs`). A client that vanishes mid-response and an upstream that
//! closes end the response and the session with the outcomes SPEC §10 names.

use crate::support;
use crate::websocket::{
    frame, next_conn, once_no_session_is_open, read_head, read_n, read_to_end, ws_upstream,
};

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::*;
use tokentap::record::metrics::family;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{sleep, timeout, Instant};

pub(crate) const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/realtime");
const BOUND: Duration = Duration::from_secs(5);
/// The longest pause replayed between two frames of a capture (their real pauses, up to this).
const MAX_PAUSE: Duration = Duration::from_millis(25);

/// What a frame is for the client's own timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    Nothing,
    /// The event that triggers a response (the client's send, or its receipt of the server's).
    Trigger,
    /// The first output of a response (the client's receipt).
    First,
}

/// One frame of a replay: who sends it, its bytes, the pause before it.
pub(crate) struct Step {
    from_client: bool,
    bytes: Vec<u8>,
    pause: Duration,
    mark: Mark,
}

/// A session to replay: the client's handshake, the upstream's answer, the frames in order.
pub(crate) struct Script {
    pub(crate) request: String,
    answer: String,
    steps: Vec<Step>,
}

fn hex(raw: &str) -> Vec<u8> {
    (0..raw.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&raw[i..i + 2], 16).expect("hex"))
        .collect()
}

/// A capture (`<name>.handshake.http`, `<name>.frames.jsonl`) as it crossed the wire, its pauses up to
/// [`MAX_PAUSE`]; the triggers and first outputs marked as SPEC §10 says for vLLM.
fn capture(name: &str) -> Script {
    let head = std::fs::read_to_string(format!("{FIXTURES}/{name}.handshake.http")).expect("head");
    let split = head.find("\r\n\r\n").expect("request head") + 4;
    let (request, answer) = head.split_at(split);
    let text = std::fs::read_to_string(format!("{FIXTURES}/{name}.frames.jsonl")).expect("frames");
    let (mut steps, mut last_t, mut waiting) = (Vec::new(), 0.0, false);
    for line in text.lines() {
        let f: Value = serde_json::from_str(line).expect("frame");
        let t = f["t"].as_f64().expect("t");
        let event: Value = (f["payload"].as_str())
            .and_then(|p| serde_json::from_str(p).ok())
            .unwrap_or(Value::Null);
        let from_client = f["dir"] == "c2s";
        let kind = event["type"].as_str().unwrap_or("");
        let mark = match kind {
            "input_audio_buffer.commit" if event["final"] != true && !waiting => {
                waiting = true;
                Mark::Trigger
            }
            "transcription.delta" if waiting && event["delta"] != "" => {
                waiting = false;
                Mark::First
            }
            _ => Mark::Nothing,
        };
        if kind == "transcription.done" {
            waiting = false;
        }
        let pause = Duration::from_secs_f64((t - last_t).max(0.0)).min(MAX_PAUSE);
        last_t = t;
        let bytes = hex(f["raw"].as_str().expect("raw"));
        steps.push(Step {
            from_client,
            bytes,
            pause,
            mark,
        });
    }
    Script {
        request: request.to_owned(),
        answer: answer.to_owned(),
        steps,
    }
}

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

/// An OpenAI event sequence (`openai-*.jsonl`) as frames: the client's masked, whole; the server's
/// cut into three fragments, a ping between the first two, when longer than 60 bytes; a pause of
/// `pause` before each server event; then the client's close (1000) and the server's echo.
pub(crate) fn sequence(name: &str, pause: Duration) -> Script {
    let text = std::fs::read_to_string(format!("{FIXTURES}/{name}.jsonl")).expect("events");
    let mut steps = Vec::new();
    for line in text.lines() {
        let e: Value = serde_json::from_str(line).expect("event");
        let from_client = e["dir"] == "c2s";
        let payload = serde_json::to_vec(&e["event"]).expect("json");
        let mark = match e["note"].as_str().unwrap_or("") {
            note if note.starts_with("t_trigger") => Mark::Trigger,
            note if note.starts_with("t_first") => Mark::First,
            _ => Mark::Nothing,
        };
        let bytes = match (from_client, payload.len()) {
            (true, _) => frame(0x81, &payload, Some([0x37, 0xfa, 0x21, 0x3d])),
            (false, 0..=60) => frame(0x81, &payload, None),
            (false, n) => {
                let (a, b) = (n / 3, 2 * n / 3);
                let mut bytes = frame(0x01, &payload[..a], None);
                bytes.extend(frame(0x89, b"tick", None));
                bytes.extend(frame(0x00, &payload[a..b], None));
                bytes.extend(frame(0x80, &payload[b..], None));
                bytes
            }
        };
        steps.push(Step {
            from_client,
            bytes,
            pause: if from_client { Duration::ZERO } else { pause },
            mark,
        });
    }
    // The client closes with 1000, the server echoes it.
    for (from_client, mask) in [(true, Some([1, 2, 3, 4])), (false, None)] {
        steps.push(Step {
            from_client,
            bytes: frame(0x88, &[0x03, 0xe8], mask),
            pause: Duration::ZERO,
            mark: Mark::Nothing,
        });
    }
    let request = format!(
        "GET /v1/realtime?model=gpt-realtime HTTP/1.1\r\nHost: tokentap\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\
         Authorization: Bearer sk-test\r\n\r\n"
    );
    let answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        crate::websocket::accept_for(KEY)
    );
    Script {
        request,
        answer,
        steps,
    }
}

/// The client's own times: each response's trigger and first output, as it sent and received them.
#[derive(Debug, Default)]
pub(crate) struct ClientTimes {
    triggers: Vec<Instant>,
    firsts: Vec<Instant>,
}

impl ClientTimes {
    /// The client's TTFT of each response that had a first output.
    fn ttfts(&self) -> Vec<f64> {
        (self.triggers.iter().zip(&self.firsts))
            .map(|(t, f)| f.duration_since(*t).as_secs_f64())
            .collect()
    }
}

/// Replays `script` through `proxy` up to step `stop` (all when `None`), each frame checked
/// byte-identical on the other side; the client and the upstream are handed back, open.
pub(crate) async fn replay(
    proxy: SocketAddr, rx: &mut mpsc::UnboundedReceiver<(String, TcpStream)>, script: &Script,
    stop: Option<usize>,
) -> (TcpStream, TcpStream, ClientTimes) {
    let mut client = TcpStream::connect(proxy).await.expect("connect");
    // Each frame leaves when written (no Nagle wait for the last one's ACK): the client's clock is
    // the wire's.
    client.set_nodelay(true).expect("nodelay");
    client
        .write_all(script.request.as_bytes())
        .await
        .expect("handshake");
    let (_, mut upstream) = next_conn(rx).await;
    upstream.set_nodelay(true).expect("nodelay");
    upstream
        .write_all(script.answer.as_bytes())
        .await
        .expect("101");
    let head = timeout(BOUND, read_head(&mut client))
        .await
        .expect("101 in time")
        .expect("head");
    assert_eq!(head, script.answer, "the 101 unchanged");
    let mut times = ClientTimes::default();
    let steps = &script.steps[..stop.unwrap_or(script.steps.len())];
    for (i, step) in steps.iter().enumerate() {
        sleep(step.pause).await;
        let (from, to) = match step.from_client {
            true => (&mut client, &mut upstream),
            false => (&mut upstream, &mut client),
        };
        let sent = Instant::now();
        from.write_all(&step.bytes).await.expect("send");
        let got = read_n(to, step.bytes.len()).await;
        let received = Instant::now();
        assert!(got == step.bytes, "frame {i} changed on its way");
        match (step.mark, step.from_client) {
            (Mark::Trigger, true) => times.triggers.push(sent),
            (Mark::Trigger, false) => times.triggers.push(received),
            (Mark::First, _) => times.firsts.push(received),
            (Mark::Nothing, _) => {}
        }
    }
    (client, upstream, times)
}

/// The records of `path` once `n` are written (the handshakes' included): the responses' and the
/// sessions'.
pub(crate) fn records(path: &Path, n: usize) -> (Vec<Value>, Vec<Value>) {
    let all = read_json_records(path, n);
    let sessions = all
        .iter()
        .filter(|r| r["record"] == "session")
        .cloned()
        .collect();
    let responses = all
        .into_iter()
        .filter(|r| r["api"] == "realtime" && r["record"] != "session");
    (responses.collect(), sessions)
}

/// Each client TTFT within `within` seconds of tokentap's, which it can only exceed (tokentap reads
/// the trigger after the client sent it and the delta before the client has it; 50 µs allowed for the
/// clocks' reads); the differences.
pub(crate) fn assert_ttfts_agree(client: &[f64], records: &[Value], within: f64) -> Vec<f64> {
    let ours: Vec<f64> = (records.iter())
        .filter_map(|r| r["ttft_s"].as_f64())
        .collect();
    assert_eq!(ours.len(), client.len(), "{records:?}");
    let differences: Vec<f64> = client.iter().zip(&ours).map(|(c, o)| c - o).collect();
    for (difference, (theirs, ours)) in differences.iter().zip(client.iter().zip(&ours)) {
        assert!(
            (-0.000_05..within).contains(difference),
            "client TTFT {theirs} s, tokentap's {ours} s"
        );
    }
    differences
}

pub(crate) fn with_records(name: &str) -> (std::path::PathBuf, String) {
    let path = temp_file(name);
    let yaml = format!("request_log: {{path: {}}}\n", path.display());
    (path, yaml)
}

/// Replays `scripts` (one session each) through a fresh tokentap writing records, until each
/// response's TTFT agrees with the client's own within 1 ms, at most three times: on a busy machine a
/// thread descheduled between the client's clock and tokentap's adds milliseconds that are neither's
/// (each retry is said). The proxy, its metrics once no session is open, the responses' and the
/// sessions' records (`n` lines in all).
async fn metered(
    name: &str, scripts: &[Script], n: usize,
) -> (tokentap::Running, Metrics, Vec<Value>, Vec<Value>) {
    let mut attempt = 1;
    loop {
        let (upstream_addr, mut rx) = ws_upstream().await;
        let (path, yaml) = with_records(&format!("{name}-{attempt}"));
        let proxy = proxy(&format!("http://{upstream_addr}"), &yaml).await;
        let mut client_ttfts = Vec::new();
        for script in scripts {
            let (client, upstream, times) = replay(proxy.proxy_addr(), &mut rx, script, None).await;
            drop((client, upstream));
            client_ttfts.extend(times.ttfts());
            once_no_session_is_open(&proxy).await;
        }
        let metrics = once_no_session_is_open(&proxy).await;
        let (responses, sessions) = records(&path, n);
        let ours = responses.iter().filter_map(|r| r["ttft_s"].as_f64());
        let differences: Vec<f64> = client_ttfts.iter().zip(ours).map(|(c, o)| c - o).collect();
        eprintln!("{name}: attempt {attempt}: client − tokentap TTFT {differences:?} s");
        if attempt == 3 || differences.iter().all(|d| (-0.000_05..0.001).contains(d)) {
            assert_ttfts_agree(&client_ttfts, &responses, 0.001);
            return (proxy, metrics, responses, sessions);
        }
        attempt += 1;
    }
}

#[tokio::test]
async fn a_real_vllm_transcription_session_compressed_is_metered_from_the_commit_to_done() {
    let scripts = [capture("vllm-tiny-qwen3-asr-session")];
    let (_proxy, metrics, responses, sessions) = metered("realtime-vllm", &scripts, 3).await;

    let model = ("model", "tiny-qwen3-asr");
    let realtime = [model, ("api", "realtime")];
    let ok = [
        model,
        ("api", "realtime"),
        ("status", "200"),
        ("outcome", "ok"),
    ];
    assert_eq!(
        metrics.get(family::REQUESTS.name, &ok),
        1.0,
        "{}",
        metrics.text
    );
    assert_eq!(metrics.get(family::OUTPUT_TOKENS.name, &realtime), 64.0);
    assert_eq!(metrics.get(family::INPUT_TOKENS.name, &realtime), 26.0);
    assert_eq!(metrics.get(&family::TTFT.count(), &realtime), 1.0);
    assert_eq!(metrics.get(&family::ITL.count(), &realtime), 63.0);
    let ttft_sum = metrics.get(&family::TTFT.sum(), &realtime);
    assert!((ttft_sum - responses[0]["ttft_s"].as_f64().unwrap_or(-1.0)).abs() < 1e-9);
    let sessions_ok = [model, ("api", "realtime"), ("outcome", "ok")];
    assert_eq!(metrics.get(family::SESSIONS.name, &sessions_ok), 1.0);
    assert_eq!(
        metrics.get(&family::SESSION_RESPONSES.sum(), &realtime),
        1.0
    );
    assert_eq!(
        metrics.get(&family::SESSION_DURATION.count(), &realtime),
        1.0
    );

    let response = &responses[0];
    assert_eq!(response["api"], "realtime");
    assert_eq!(response["output_tokens"], 64);
    assert_eq!(response["output_tokens_source"], "usage");
    assert_eq!(response["session_response"], 1);
    let session = &sessions[0];
    assert_eq!(response["session"], session["id"]);
    assert_eq!(session["model"], "tiny-qwen3-asr");
    assert_eq!(session["outcome"], "ok");
    assert_eq!(
        (
            session["close_client"].as_u64(),
            session["close_upstream"].as_u64()
        ),
        (Some(1000), Some(1000))
    );
    assert_eq!(
        (
            session["responses"].as_u64(),
            session["output_tokens"].as_u64()
        ),
        (Some(1), Some(64))
    );
}

#[tokio::test]
async fn a_second_utterance_in_the_same_vllm_session_is_a_second_response() {
    // The long capture: deltas begin while the audio still flows, before the final commit; then a
    // second commit, utterance and done in the same session.
    let scripts = [capture("vllm-tiny-qwen3-asr-session-long")];
    let (_proxy, metrics, responses, sessions) = metered("realtime-vllm-long", &scripts, 4).await;
    let tokens: Vec<_> = (responses.iter())
        .map(|r| {
            (
                r["session_response"].as_u64(),
                r["output_tokens"].as_u64(),
                r["input_tokens"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        tokens,
        [
            (Some(1), Some(128), Some(78)),
            (Some(2), Some(64), Some(26))
        ]
    );
    assert_eq!(sessions[0]["responses"], 2);
    let realtime = [("api", "realtime")];
    assert_eq!(metrics.get(family::OUTPUT_TOKENS.name, &realtime), 192.0);
    assert_eq!(
        metrics.get(&family::SESSION_RESPONSES.sum(), &realtime),
        2.0
    );
}

#[tokio::test]
async fn openai_ga_responses_sent_fragmented_with_pings_are_metered_from_response_create() {
    let names = [
        "openai-ga-text",
        "openai-ga-audio",
        "openai-beta-text",
        "openai-beta-audio",
    ];
    let scripts = names.map(|name| sequence(name, Duration::from_millis(3)));
    let (_proxy, metrics, responses, sessions) = metered("realtime-ga", &scripts, 12).await;
    // The beta sequences' server names its model in session.created, over the handshake's.
    let realtime = [("api", "realtime")];
    let ok = [realtime[0], ("outcome", "ok")];
    assert_eq!(
        metrics.get(family::REQUESTS.name, &ok),
        4.0,
        "{}",
        metrics.text
    );
    // Usage: 7 (text), 40 (audio: 9 text + 31 audio), 4 and 40 in beta's two.
    let outputs: Vec<_> = responses
        .iter()
        .map(|r| r["output_tokens"].as_u64())
        .collect();
    assert_eq!(outputs, [Some(7), Some(40), Some(4), Some(40)]);
    assert_eq!(metrics.get(family::OUTPUT_TOKENS.name, &realtime), 91.0);
    assert_eq!(responses[1]["output_audio_tokens"], 31);
    assert_eq!(responses[1]["output_text_tokens"], 9);
    // Each session closed with 1000 both ways: ok.
    assert_eq!(sessions.len(), 4);
    for session in &sessions {
        assert_eq!(
            (
                session["outcome"].as_str(),
                session["close_upstream"].as_u64()
            ),
            (Some("ok"), Some(1000))
        );
    }
    assert_eq!(
        metrics.get(&family::SESSION_RESPONSES.sum(), &realtime),
        4.0
    );
}

#[tokio::test]
async fn server_vad_responses_run_from_the_servers_commit_and_a_barge_in_is_cancelled() {
    // The client's trigger is its receipt of the server's `committed`, after tokentap saw it.
    let scripts = ["openai-ga-server-vad", "openai-ga-barge-in"]
        .map(|name| sequence(name, Duration::from_millis(2)));
    let (_proxy, metrics, responses, _) = metered("realtime-vad", &scripts, 6).await;
    let outcomes: Vec<_> = responses.iter().map(|r| r["outcome"].as_str()).collect();
    assert_eq!(outcomes, [Some("ok"), Some("ok"), Some("cancelled")]);
    let realtime = [("api", "realtime")];
    let cancelled = [realtime[0], ("outcome", "cancelled")];
    assert_eq!(
        metrics.get(family::REQUESTS.name, &cancelled),
        1.0,
        "{}",
        metrics.text
    );
    // The input transcription's own usage is not a response's.
    let sessions = [realtime[0], ("outcome", "ok")];
    assert_eq!(metrics.get(family::SESSIONS.name, &sessions), 2.0);
    assert_eq!(
        metrics.get(&family::SESSION_RESPONSES.sum(), &realtime),
        3.0
    );
}

#[tokio::test]
async fn a_client_that_vanishes_mid_response_cancels_it_and_an_upstream_that_closes_fails_it() {
    let (upstream_addr, mut rx) = ws_upstream().await;
    let proxy = proxy(&format!("http://{upstream_addr}"), "").await;
    let realtime = [("api", "realtime")];

    // The client goes (TCP, no close frame) after the third audio delta.
    let script = sequence("openai-ga-audio", Duration::from_millis(1));
    let third = (script.steps.iter().enumerate())
        .filter(|(_, s)| !s.from_client && s.mark == Mark::Nothing)
        .map(|(i, _)| i)
        .nth(8)
        .expect("a step mid-response");
    let (client, mut upstream, _) = replay(proxy.proxy_addr(), &mut rx, &script, Some(third)).await;
    drop(client);
    // The upstream sees the client's end passed on, and ends its own.
    let _ = read_to_end(&mut upstream).await;
    drop(upstream);
    let metrics = once_no_session_is_open(&proxy).await;
    let cancelled = [realtime[0], ("outcome", "cancelled")];
    assert_eq!(
        metrics.get(family::REQUESTS.name, &cancelled),
        1.0,
        "{}",
        metrics.text
    );
    assert_eq!(metrics.get(family::SESSIONS.name, &cancelled), 1.0);

    // vLLM shut down mid-utterance: its 1012 close, no done: the response failed, the session ended
    // with a close frame (ok).
    let script = capture("vllm-tiny-qwen3-asr-server-shutdown");
    let (client, upstream, _) = replay(proxy.proxy_addr(), &mut rx, &script, None).await;
    drop((client, upstream));
    let metrics = once_no_session_is_open(&proxy).await;
    let failed = [realtime[0], ("outcome", "upstream_error")];
    assert_eq!(
        metrics.get(family::REQUESTS.name, &failed),
        1.0,
        "{}",
        metrics.text
    );
    assert_eq!(
        metrics.get(family::SESSIONS.name, &[realtime[0], ("outcome", "ok")]),
        1.0
    );

    // An upstream that drops its connection mid-response, without a close frame.
    let script = capture("vllm-tiny-qwen3-asr-session");
    let first = (script.steps.iter().position(|s| s.mark == Mark::First)).expect("a first delta");
    let (mut client, upstream, _) =
        replay(proxy.proxy_addr(), &mut rx, &script, Some(first + 3)).await;
    drop(upstream);
    let _ = read_to_end(&mut client).await;
    drop(client);
    let metrics = once_no_session_is_open(&proxy).await;
    assert_eq!(
        metrics.get(family::REQUESTS.name, &failed),
        2.0,
        "{}",
        metrics.text
    );
    assert_eq!(metrics.get(family::SESSIONS.name, &failed), 1.0);
}
