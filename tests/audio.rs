//! Audio over HTTP end to end (docs/metrics.md, `transcriptions` and `speech`): real vLLM 0.32
//! transcription and translation streams (tests/fixtures/audio/README.md) replayed by the scripted
//! upstream read for read, at the instants vLLM wrote them, on tokio's paused clock; OpenAI's
//! transcription and speech events; a body of audio; and the `multipart/form-data` uploads they answer,
//! the openai SDK's own request bytes among them. The client gets the very bytes the server sent, the
//! upstream the very bytes the client sent, and the figures are exactly what the capture implies: the
//! TTFT at the read that carried the first non-empty delta (or the first byte of audio), tokens from
//! usage.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use crate::support;

use support::*;
use tokentap::record::metrics::family;

const BOUNDARY: &str = "cd7d52304fdd33525bc05cca4ffd257a";

macro_rules! audio {
    ($file:literal) => {
        include_bytes!(concat!("fixtures/audio/", $file))
    };
}

/// A vLLM capture: the whole response as sent (`.http`), its body (`.sse`), when each read came
/// (`.reads.json`).
struct Capture {
    name: &'static str,
    http: &'static [u8],
    body: &'static [u8],
    reads: &'static [u8],
    path: &'static str,
    model: &'static str,
    /// Output tokens and their source, input tokens (none without usage).
    tokens: (u64, &'static str),
    input: Option<u64>,
}

/// A capture's three files, by their common name.
macro_rules! files {
    ($stem:literal) => {
        (
            include_bytes!(concat!("fixtures/audio/", $stem, ".http")),
            include_bytes!(concat!("fixtures/audio/", $stem, ".sse")),
            include_bytes!(concat!("fixtures/audio/", $stem, ".reads.json")),
        )
    };
}

type Files = (&'static [u8], &'static [u8], &'static [u8]);

#[rustfmt::skip]
fn captures() -> Vec<Capture> {
    let capture = |name, (http, body, reads): Files, path, model, tokens, input| Capture {
        name, http, body, reads, path, model, tokens, input,
    };
    let (whisper, qwen) = ("tiny-whisper", "tiny-qwen3-asr");
    let (transcribe, translate) = ("/v1/audio/transcriptions", "/v1/audio/translations");
    vec![
        capture("whisper stream", files!("vllm-tiny-whisper-transcription-stream"), transcribe,
            whisper, (8, "chunks"), None),
        capture("whisper stream with usage", files!("vllm-tiny-whisper-transcription-stream-usage"),
            transcribe, whisper, (8, "usage"), Some(104)),
        capture("whisper stream with continuous usage",
            files!("vllm-tiny-whisper-transcription-stream-continuous"), transcribe, whisper,
            (8, "usage"), Some(104)),
        capture("whisper translation with usage", files!("vllm-tiny-whisper-translation-stream-usage"),
            translate, whisper, (8, "usage"), Some(104)),
        // Qwen3-ASR holds text back: 4 chunks with text for 8 tokens. Without usage the count is the
        // chunks'; with it, the usage's.
        capture("qwen3-asr stream", files!("vllm-tiny-qwen3-asr-transcription-stream"), transcribe,
            qwen, (4, "chunks"), None),
        capture("qwen3-asr stream with usage", files!("vllm-tiny-qwen3-asr-transcription-stream-usage"),
            transcribe, qwen, (8, "usage"), Some(34)),
        capture("qwen3-asr stream with continuous usage",
            files!("vllm-tiny-qwen3-asr-transcription-stream-continuous"), transcribe, qwen,
            (8, "usage"), Some(34)),
        capture("qwen3-asr translation with usage", files!("vllm-tiny-qwen3-asr-translation-stream-usage"),
            translate, qwen, (8, "usage"), Some(26)),
    ]
}

/// Each read of the capture: when it came (seconds after the request) and its bytes.
fn reads(capture: &Capture) -> Vec<(f64, &'static [u8])> {
    let reads: Vec<(f64, usize)> = serde_json::from_slice(capture.reads).expect("reads.json");
    let mut rest = capture.http;
    let mut out = Vec::new();
    for (at, n) in reads {
        let (read, tail) = rest.split_at(n);
        out.push((at, read));
        rest = tail;
    }
    assert!(
        rest.is_empty(),
        "{}: the reads are the whole answer",
        capture.name
    );
    out
}

/// The answer as vLLM wrote it: each read at its instant, then the close its `connection: close` said.
fn replay(capture: &Capture) -> Vec<Step> {
    let mut steps: Vec<Step> = reads(capture)
        .into_iter()
        .flat_map(|(at, bytes)| [Step::At(at_ms(at)), Step::Raw(bytes.to_vec())])
        .collect();
    steps.push(Step::Close);
    steps
}

/// A read's instant to the millisecond: tokio's timers (the scripted upstream's `At`) have no finer
/// grain.
fn at_ms(seconds: f64) -> Duration {
    Duration::from_millis((seconds * 1000.0).round() as u64)
}

/// When the read that completed the first event with a non-empty `content` came, and the last read's.
fn first_output_and_end(capture: &Capture) -> (f64, f64, usize) {
    let http = capture.http;
    let text = String::from_utf8_lossy(http);
    let mut outputs = 0;
    let mut first_end = None;
    let mut from = 0;
    while let Some(at) = text[from..].find("\"content\":\"") {
        let at = from + at + "\"content\":\"".len();
        if !text[at..].starts_with('"') {
            outputs += 1;
            let end = at + text[at..].find("\n\n").expect("the event's end") + 2;
            first_end.get_or_insert(end);
        }
        from = at;
    }
    let first_end = first_end.expect("an output");
    let (mut offset, mut first, mut last) = (0, None, 0.0);
    for (at, bytes) in reads(capture) {
        offset += bytes.len();
        let at = at_ms(at).as_secs_f64();
        if offset >= first_end {
            first.get_or_insert(at);
        }
        last = at;
    }
    (first.expect("the read"), last, outputs)
}

/// A transcription upload as vLLM's capture sent it: fields first, then the file.
fn upload(model: &str, file: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in [("model", model), ("stream", "true"), ("language", "en")] {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .as_bytes(),
        );
    }
    body.extend_from_slice(file_part(file).as_slice());
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

fn file_part(file: &[u8]) -> Vec<u8> {
    let mut part = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"audio.wav\"\r\nContent-Type: audio/x-wav\r\n\r\n"
    )
    .into_bytes();
    part.extend_from_slice(file);
    part.extend_from_slice(b"\r\n");
    part
}

fn multipart(proxy: &tokentap::Running, path: &str, body: Vec<u8>) -> http::Request<Full<Bytes>> {
    http::Request::post(format!("http://{}{path}", proxy.proxy_addr()))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(Full::new(Bytes::from(body)))
        .expect("request")
}

fn assert_close(actual: f64, expected: f64, what: &str) {
    assert!(
        (actual - expected).abs() < 1e-6,
        "{what}: got {actual}, expected {expected}"
    );
}

#[tokio::test(start_paused = true)]
async fn vllm_streams_replayed_as_captured_pass_unchanged_and_are_timed_from_their_first_delta() {
    for capture in captures() {
        let steps = replay(&capture);
        let upstream = upstream(move |_| steps.clone()).await;
        let proxy = proxy(&upstream.url(), "").await;
        let sent = upload(capture.model, b"RIFF$\0\0\0WAVEfmt ");
        let got = send(&client(), multipart(&proxy, capture.path, sent.clone())).await;
        let name = capture.name;
        assert_eq!((got.status, &got.end), (200, &Ok(())), "{name}");
        assert_eq!(got.body, capture.body, "{name}: bytes changed");
        assert_eq!(upstream.requests()[0].body, sent, "{name}: upload changed");
        settle(&proxy).await;

        let (first, end, outputs) = first_output_and_end(&capture);
        let m = scrape(&proxy).await;
        let l = [("model", capture.model), ("api", "transcriptions")];
        assert_eq!(m.get(&family::TTFT.count(), &l), 1.0, "{name}");
        assert_close(
            m.get(&family::TTFT.sum(), &l),
            first,
            &format!("{name} TTFT"),
        );
        assert_close(m.get(&family::E2E.sum(), &l), end, &format!("{name} E2E"));
        let gaps = m.get(&family::ITL.count(), &l);
        assert_eq!(gaps, (outputs - 1) as f64, "{name}: a gap between outputs");
        let (tokens, source) = capture.tokens;
        assert_eq!(
            m.get(family::OUTPUT_TOKENS.name, &l),
            tokens as f64,
            "{name}"
        );
        let input = m.get(family::INPUT_TOKENS.name, &l);
        assert_eq!(input, capture.input.unwrap_or(0) as f64, "{name}");
        let counted = [l[0], l[1], ("token_source", source)];
        assert_eq!(m.get(family::TOKEN_SOURCE.name, &counted), 1.0, "{name}");
        let ok = [l[0], l[1], ("status", "200"), ("outcome", "ok")];
        assert_eq!(m.get(family::REQUESTS.name, &ok), 1.0, "{name}");
        assert_eq!(m.get(family::METERING_SKIPPED.name, &[]), 0.0, "{name}");
    }
}

/// An answer whose body is `events`, one every 10 ms after the head.
fn ticked(content_type: &str, events: &[u8]) -> Vec<Step> {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    let mut steps = vec![Step::Raw(head.into_bytes())];
    for event in events
        .split_inclusive(|&b| b == b'\n')
        .filter(|l| l != b"\n")
    {
        steps.extend([Step::Sleep(ms(10)), chunk(event), chunk(b"\n")]);
    }
    steps.push(last_chunk());
    steps
}

/// The body of one of the openai SDK's captured requests, and its `content-type`.
fn sdk_request(http: &'static [u8]) -> (String, &'static [u8]) {
    let at = http
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&http[..at]);
    let content_type = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim())
        })
        .expect("a content type");
    (content_type.to_owned(), &http[at + 4..])
}

fn post_as(
    proxy: &tokentap::Running, path: &str, (content_type, body): (String, &[u8]),
) -> http::Request<Full<Bytes>> {
    http::Request::post(format!("http://{}{path}", proxy.proxy_addr()))
        .header("content-type", content_type)
        .body(Full::new(Bytes::copy_from_slice(body)))
        .expect("request")
}

#[tokio::test(start_paused = true)]
async fn openai_transcription_and_speech_events_are_timed_and_counted_by_their_usage() {
    let cases = [
        (
            "/v1/audio/transcriptions",
            sdk_request(audio!("openai-sdk-transcription-stream.request.http")),
            &audio!("openai-transcription-stream.sse")[..],
            [("model", "gpt-4o-transcribe"), ("api", "transcriptions")],
            (6, 5, 5.0, 14.0),
        ),
        (
            "/v1/audio/speech",
            sdk_request(audio!("openai-sdk-speech-sse.request.http")),
            &audio!("openai-speech-stream.sse")[..],
            [("model", "gpt-4o-mini-tts"), ("api", "speech")],
            (4, 3, 42.0, 6.0),
        ),
    ];
    for (path, request, events, l, (count, outputs, tokens, input)) in cases {
        let steps = ticked("text/event-stream", events);
        let upstream = upstream(move |_| steps.clone()).await;
        let proxy = proxy(&upstream.url(), "").await;
        let got = send(&client(), post_as(&proxy, path, request.clone())).await;
        assert_eq!(got.body, events, "{path}: bytes changed");
        assert_eq!(
            upstream.requests()[0].body,
            request.1,
            "{path}: request changed"
        );
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        assert_close(m.get(&family::TTFT.sum(), &l), 0.010, path);
        assert_close(m.get(&family::E2E.sum(), &l), 0.010 * count as f64, path);
        assert_eq!(
            m.get(&family::ITL.count(), &l),
            (outputs - 1) as f64,
            "{path}"
        );
        assert_eq!(m.get(family::OUTPUT_TOKENS.name, &l), tokens, "{path}");
        assert_eq!(m.get(family::INPUT_TOKENS.name, &l), input, "{path}");
        let usage = [l[0], l[1], ("token_source", "usage")];
        assert_eq!(m.get(family::TOKEN_SOURCE.name, &usage), 1.0, "{path}");
        // TPOT from usage: (E2E − TTFT) / (N − 1).
        let tpot = 0.010 * (count - 1) as f64 / (tokens - 1.0);
        assert_close(m.get(&family::TPOT.sum(), &l), tpot, path);
    }
}

/// Raw audio: a head, then `pieces` of audio after the given pauses.
fn audio_answer(content_type: &str, pieces: &[(u64, usize)]) -> (Vec<Step>, Vec<u8>) {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    let (mut steps, mut body) = (vec![Step::Raw(head.into_bytes())], Vec::new());
    for (i, &(pause, len)) in pieces.iter().enumerate() {
        let piece: Vec<u8> = (0..len).map(|b| (b * 7 + i) as u8).collect();
        steps.extend([Step::Sleep(ms(pause)), chunk(&piece)]);
        body.extend_from_slice(&piece);
    }
    steps.push(last_chunk());
    (steps, body)
}

#[tokio::test(start_paused = true)]
async fn speech_as_raw_audio_has_its_ttft_at_the_first_byte_and_no_token_figures() {
    let records = temp_file("audio-speech-records");
    // A time-to-first-audio ceiling of 20 ms, which the first byte at 30 ms misses.
    let yaml = format!(
        "slo: {{ttft: 20ms}}\nrequest_log: {{path: {}}}\n",
        records.display()
    );
    for content_type in [
        "audio/mpeg",
        "audio/wav",
        "audio/pcm",
        "application/octet-stream",
    ] {
        let (steps, audio) = audio_answer(content_type, &[(30, 1), (20, 4096), (20, 9000)]);
        let upstream = upstream(move |_| steps.clone()).await;
        let proxy = proxy(&upstream.url(), &yaml).await;
        let request = r#"{"model":"tts-1","input":"Hello.","voice":"alloy"}"#;
        let got = send(&client(), post(&proxy, "/v1/audio/speech", request)).await;
        assert_eq!(got.body, audio, "{content_type}: bytes changed");
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        let l = [("model", "tts-1"), ("api", "speech")];
        assert_close(m.get(&family::TTFT.sum(), &l), 0.030, content_type);
        assert_eq!(m.get(&family::TTFT.count(), &l), 1.0, "{content_type}");
        assert_close(m.get(&family::E2E.sum(), &l), 0.070, content_type);
        // Bytes of audio are not tokens: no gaps between them, no TPOT, no count.
        for name in [
            family::ITL.count(),
            family::TPOT.count(),
            family::MAX_GAP.count(),
        ] {
            assert_eq!(m.get(&name, &l), 0.0, "{content_type}: {name}");
        }
        assert!(!m.has(family::OUTPUT_TOKENS.name, &l), "{content_type}");
        assert!(!m.has(family::TOKEN_SOURCE.name, &l), "{content_type}");
        let ok = [l[0], l[1], ("status", "200"), ("outcome", "ok")];
        assert_eq!(m.get(family::REQUESTS.name, &ok), 1.0, "{content_type}");
        let missed = [l[0], l[1], ("slo", "ttft")];
        assert_eq!(
            m.get(family::SLO_VIOLATIONS.name, &missed),
            1.0,
            "{content_type}"
        );
        assert_eq!(m.get(family::GOODPUT.name, &l), 0.0, "{content_type}");
    }
    let path = records;
    let records = read_json_records(&path, 4);
    let options = tokentap::report::Options {
        files: vec![path.to_string_lossy().into_owned()],
        compare: Vec::new(),
        by: Some(tokentap::report::query::By::Api),
        window: Default::default(),
        format: tokentap::report::Format::Json,
        slo: None,
        strict: true,
        progress: false,
        slowest: 0,
        slowest_by: tokentap::report::slowest::SlowBy::TTFT,
    };
    let (mut out, mut warn) = (Vec::new(), Vec::new());
    tokentap::report::run(&options, &mut out, &mut warn).expect("report");
    let doc: serde_json::Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(doc["groups"]["speech"]["request_count"], 4, "{doc}");
    assert_eq!(doc["groups"]["speech"]["good_request_count"], 0, "{doc}");
    // Judged again from the records (`--slo`), as the proxy judged the requests.
    let slo = tokentap::Config::from_yaml_str("upstream: http://127.0.0.1:9\nslo: {ttft: 20ms}\n")
        .expect("config")
        .slo;
    let options = tokentap::report::Options {
        slo: Some(slo),
        ..options
    };
    let (mut out, mut warn) = (Vec::new(), Vec::new());
    tokentap::report::run(&options, &mut out, &mut warn).expect("report");
    let doc: serde_json::Value = serde_json::from_slice(&out).expect("json");
    let attainment = &doc["groups"]["speech"]["attainment"][0];
    assert_eq!(
        (&attainment["ceiling"], &attainment["missed"]),
        (&"ttft".into(), &4.into()),
        "{doc}"
    );
    for record in &records {
        assert_eq!(record["api"], "speech");
        assert_close(record["ttft_s"].as_f64().unwrap_or(-1.0), 0.030, "ttft_s");
        assert!(record["output_tokens"].is_null(), "{record}");
        assert!(record["token_source"].is_null(), "{record}");
        assert_eq!(
            record["slo_missed"],
            serde_json::json!(["ttft"]),
            "{record}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_json_transcription_counts_like_any_json_body() {
    let capture = Capture {
        name: "whisper json",
        http: audio!("vllm-tiny-whisper-transcription-json.http"),
        body: audio!("vllm-tiny-whisper-transcription-json.body"),
        reads: audio!("vllm-tiny-whisper-transcription-json.reads.json"),
        path: "/v1/audio/transcriptions",
        model: "tiny-whisper",
        tokens: (0, ""),
        input: None,
    };
    let steps = replay(&capture);
    let upstream = upstream(move |_| steps.clone()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(
        &client(),
        multipart(&proxy, capture.path, upload("tiny-whisper", b"RIFF")),
    )
    .await;
    assert_eq!(got.body, capture.body);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let l = [("model", "tiny-whisper"), ("api", "transcriptions")];
    assert_eq!(m.get(&family::E2E.count(), &l), 1.0);
    assert_eq!(
        m.get(&family::TTFT.count(), &l),
        0.0,
        "a JSON body has no TTFT"
    );
    // `{"type":"duration","seconds":1}` is no token count.
    assert!(!m.has(family::TOKEN_SOURCE.name, &l));
}

/// The whisper stream with usage, as the answer to every upload.
fn whisper_answer() -> Vec<Step> {
    replay(&captures().swap_remove(1))
}

#[tokio::test(start_paused = true)]
async fn the_sdks_upload_reaches_the_upstream_unchanged_and_names_the_model_held_or_streamed() {
    let request = sdk_request(audio!("openai-sdk-transcription-stream.request.http"));
    for held in [true, false] {
        let upstream = upstream(|_| whisper_answer()).await;
        let yaml = format!("limits:\n{}", hold_line(held));
        let proxy = proxy(&upstream.url(), &yaml).await;
        let path = "/v1/audio/transcriptions";
        let got = send(&client(), post_as(&proxy, path, request.clone())).await;
        assert_eq!(got.status, 200);
        assert_eq!(upstream.requests()[0].body, request.1, "held {held}");
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        // The request's model wins over the one the answer names (tiny-whisper).
        let l = [("model", "gpt-4o-transcribe"), ("api", "transcriptions")];
        assert_eq!(m.get(&family::TTFT.count(), &l), 1.0, "held {held}");
    }
}

#[tokio::test(start_paused = true)]
async fn fields_after_the_file_are_read_within_the_bound_and_past_it_the_answer_names_the_model() {
    let file = vec![b'\r'; 100 << 10];
    let mut body = file_part(&file);
    body.extend_from_slice(
        format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nlate-model\r\n--{BOUNDARY}--\r\n")
            .as_bytes(),
    );
    for (bound, label) in [(1 << 20, "late-model"), (4096, "tiny-whisper")] {
        let upstream = upstream(|_| whisper_answer()).await;
        let yaml = format!("metering: {{model_scan_bytes: {bound}}}\n");
        let proxy = proxy(&upstream.url(), &yaml).await;
        let got = send(
            &client(),
            multipart(&proxy, "/v1/audio/transcriptions", body.clone()),
        )
        .await;
        assert_eq!(got.status, 200);
        assert_eq!(upstream.requests()[0].body, body, "bound {bound}");
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        let l = [("model", label), ("api", "transcriptions")];
        assert_eq!(m.get(&family::TTFT.count(), &l), 1.0, "bound {bound}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_malformed_multipart_body_passes_unchanged_and_counts_under_the_answers_model() {
    let bodies: [&[u8]; 3] = [
        b"no delimiter here at all",
        b"--cd7d52304fdd33525bc05cca4ffd257a\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nunterminated",
        b"--cd7d52304fdd33525bc05cca4ffd257aXX\r\n\xff\xfe\r\n\r\n--",
    ];
    for body in bodies {
        let upstream = upstream(|_| whisper_answer()).await;
        let proxy = proxy(&upstream.url(), "").await;
        let sent = body.to_vec();
        let got = send(
            &client(),
            multipart(&proxy, "/v1/audio/transcriptions", sent.clone()),
        )
        .await;
        assert_eq!(got.status, 200);
        assert_eq!(upstream.requests()[0].body, sent);
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        let l = [("model", "tiny-whisper"), ("api", "transcriptions")];
        assert_eq!(m.get(&family::TTFT.count(), &l), 1.0, "{body:?}");
    }
}

/// 48 MiB of audio, streamed in 64 KiB frames (held bytes are capped at `limits.hold_request_body_bytes`,
/// the form reader's at a delimiter's length: `decode/form.rs` measures it), fields first: it passes
/// whole, and its model is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_upload_streams_through_with_its_model_read() {
    const FRAME: usize = 64 << 10;
    const FRAMES: usize = 48 * 16;
    let upstream = Scripted::new(|_| whisper_answer())
        .forgetful()
        .bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind");
    let proxy = proxy(&upstream.url(), "limits: {max_request_body_bytes: 64MiB}\n").await;
    let mut head = upload("huge-model", b"");
    let tail = format!("\r\n--{BOUNDARY}--\r\n");
    head.truncate(head.len() - tail.len());
    // A declared length: the scripted upstream reads a chunked body again from its start at each read.
    let length = head.len() + FRAME * FRAMES + tail.len();
    let (feed, body) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        let audio = Bytes::from(vec![0x55u8; FRAME]);
        let frames = std::iter::once(Bytes::from(head))
            .chain(std::iter::repeat_n(audio, FRAMES))
            .chain(std::iter::once(Bytes::from(tail)));
        for frame in frames {
            if feed.send(frame).await.is_err() {
                return;
            }
        }
    });
    let request = http::Request::post(format!(
        "http://{}/v1/audio/transcriptions",
        proxy.proxy_addr()
    ))
    .header(
        "content-type",
        format!("multipart/form-data; boundary={BOUNDARY}"),
    )
    .header("content-length", length)
    .body(Fed(body))
    .expect("request");
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let response = tokio::time::timeout(Duration::from_secs(60), client.request(request))
        .await
        .expect("in time")
        .expect("response");
    assert_eq!(response.status(), 200);
    let answer = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(&answer[..], captures()[1].body);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let l = [("model", "huge-model"), ("api", "transcriptions")];
    assert_eq!(m.get(&family::TTFT.count(), &l), 1.0);
}
