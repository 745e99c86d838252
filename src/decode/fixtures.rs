//! Every dialect's fixture stream (tests/fixtures/<dialect>/, each with a README saying where its wire
//! format comes from) fed to the decoder whole, cut in two at every byte, and one byte at a time: the
//! output-bearing events, the usage, the model and the output text must be the same however the network
//! cuts the stream.

use crate::config::Metering;
use crate::decode::dialect::{detect, EventOutput};
use crate::decode::event::FramedEvent;
use crate::decode::ndjson::NdjsonFramer;
use crate::decode::response::{Format, ResponseDecoder};
use crate::decode::sse::SseFramer;
use crate::decode::tokenizer::TextCount;

struct Case {
    file: &'static str,
    bytes: &'static [u8],
    path: &'static str,
    format: Format,
    outputs: u32,
    /// From usage; `None` when the stream has none (its N is then counted later, from the events).
    output_tokens: Option<u64>,
    input_tokens: Option<u64>,
    model: Option<&'static str>,
    /// The output text handed to the tokenizer, choice by choice, joined with `|`.
    text: &'static str,
}

macro_rules! fixture {
    ($file:literal) => {
        (
            $file,
            include_bytes!(concat!("../../tests/fixtures/", $file)),
        )
    };
}

fn cases() -> Vec<Case> {
    let case = |(file, bytes): (&'static str, &'static [u8]),
                path,
                format,
                outputs,
                n,
                input,
                model,
                text| Case {
        file,
        bytes,
        path,
        format,
        outputs,
        output_tokens: n,
        input_tokens: input,
        model,
        text,
    };
    vec![
        case(fixture!("responses/responses-stream.sse"), "/v1/responses", Format::Sse, 6, Some(6), Some(9),
            Some("gpt-4.1-2025-04-14"), "Hello! How can I help?"),
        case(fixture!("anthropic/messages-stream.sse"), "/v1/messages", Format::Sse, 7, Some(42), Some(600),
            Some("claude-sonnet-4-5-20250929"),
            "The user wants the weather in San Francisco. I should call get_weather.Okay, let's check the weather for San Francisco, CA:{\"location\": \"San Francisco, CA\"}"),
        case(fixture!("tgi/generate-stream.sse"), "/generate_stream", Format::Sse, 6, Some(6), Some(7), None,
            "Deep learning is a subset"),
        case(fixture!("ollama/chat-stream.ndjson"), "/api/chat", Format::Ndjson, 6, Some(9), Some(26),
            Some("llama3.2"), "The sky is blue because of Rayleigh scattering."),
        case(fixture!("ollama/generate-stream.ndjson"), "/api/generate", Format::Ndjson, 5, Some(6), Some(12),
            Some("qwen3:0.6b"), "Hmm.Why is the sky blue?"),
        case(fixture!("llamacpp/completion-stream.sse"), "/completion", Format::Sse, 5, Some(5), Some(8),
            Some("gemma-3-1b-it-Q4_K_M.gguf"), " the quick brown fox jumps"),
        // Real vLLM 0.32 streams (tests/fixtures/vllm/README.md), one per API it serves.
        case(fixture!("vllm/chat-stream.sse"), "/v1/chat/completions", Format::Sse, 6, None, None,
            Some("tiny-llama"), " AS> AS> AS>"),
        case(fixture!("vllm/chat-stream-usage.sse"), "/v1/chat/completions", Format::Sse, 6, Some(6),
            Some(30), Some("tiny-llama"), " AS> AS> AS>"),
        case(fixture!("vllm/chat-stream-n2-usage.sse"), "/v1/chat/completions", Format::Sse, 11,
            Some(12), Some(30), Some("tiny-llama"),
            " Combined grant itTheariant ob|\u{fffd}thip contexcept fee"),
        case(fixture!("vllm/completions-stream-usage.sse"), "/v1/completions", Format::Sse, 6, Some(6),
            Some(17), Some("tiny-llama"), "ARRA.ARRA.ARRA."),
        case(fixture!("vllm/responses-stream.sse"), "/v1/responses", Format::Sse, 6, Some(6), Some(30),
            Some("tiny-llama"), " AS> AS> AS>"),
        // Real llama-cpp-python 0.3.36 streams (tests/fixtures/llamacpp-python/README.md): no usage.
        case(fixture!("llamacpp-python/chat-stream.sse"), "/v1/chat/completions", Format::Sse, 6,
            None, None, Some("tiny-llama"), "less respectDITIONS Exhibit documentsRE"),
        case(fixture!("llamacpp-python/completions-stream.sse"), "/v1/completions", Format::Sse, 6,
            None, None, Some("tiny-llama"), "readreadreadwideread document"),
        case(fixture!("vllm/messages-stream.sse"), "/v1/messages", Format::Sse, 6, Some(6), Some(30),
            Some("tiny-llama"), " AS> AS> AS>"),
        // Real vLLM 0.32 audio streams and OpenAI's written ones (tests/fixtures/audio/README.md).
        case(fixture!("audio/vllm-tiny-whisper-transcription-stream-usage.sse"), "/v1/audio/transcriptions",
            Format::Sse, 8, Some(8), Some(104), Some("tiny-whisper"),
            "GRAM distributionerm<|27.94|>oll<|18.82|>tail<|13.68|>"),
        case(fixture!("audio/vllm-tiny-qwen3-asr-transcription-stream-continuous.sse"),
            "/v1/audio/transcriptions", Format::Sse, 4, Some(8), Some(34), Some("tiny-qwen3-asr"),
            " prot prot prot prot"),
        case(fixture!("audio/vllm-tiny-qwen3-asr-translation-stream-usage.sse"), "/v1/audio/translations",
            Format::Sse, 8, Some(8), Some(26), Some("tiny-qwen3-asr"), "ari\nari\nari\nari\n"),
        case(fixture!("audio/openai-transcription-stream.sse"), "/v1/audio/transcriptions", Format::Sse,
            5, Some(5), Some(14), None, "The quick brown fox."),
        case(fixture!("audio/openai-speech-stream.sse"), "/v1/audio/speech", Format::Sse, 3, Some(42),
            Some(6), None, ""),
    ]
}

/// (output-bearing events, output tokens, input tokens, model) after feeding `pieces`.
fn decode(case: &Case, pieces: &[&[u8]]) -> (u32, Option<u64>, Option<u64>, Option<String>) {
    let limits = Metering {
        max_event_bytes: 64 << 10,
        model_scan_bytes: 1 << 20,
    };
    let (_, dialect) = detect(case.path);
    let dialect = dialect.unwrap_or_else(|| panic!("{}: no dialect", case.path));
    let mut decoder = ResponseDecoder::new(dialect, case.format, &limits, TextCount::Off);
    let mut marks = Vec::new();
    pieces.iter().for_each(|p| decoder.feed(p, &mut marks));
    decoder.finish(true, &mut marks);
    let outputs = u32::try_from(marks.len()).unwrap_or(u32::MAX);
    assert_eq!(decoder.skipped(), None, "{}", case.file);
    assert!(!decoder.saw_error_event(), "{}", case.file);
    assert!(
        decoder.ended(),
        "{}: the terminal event was not seen",
        case.file
    );
    let obs = decoder.observations();
    (
        outputs,
        obs.output_tokens,
        obs.input_tokens,
        obs.model.clone(),
    )
}

#[test]
fn every_fixture_gives_the_same_figures_however_it_is_cut() {
    for case in cases() {
        let expected = (
            case.outputs,
            case.output_tokens,
            case.input_tokens,
            case.model.map(str::to_owned),
        );
        assert_eq!(
            decode(&case, &[case.bytes]),
            expected,
            "{} whole",
            case.file
        );
        for at in 0..=case.bytes.len() {
            let (a, b) = case.bytes.split_at(at);
            assert_eq!(
                decode(&case, &[a, b]),
                expected,
                "{} cut at {at}",
                case.file
            );
        }
        let bytes: Vec<&[u8]> = case.bytes.chunks(1).collect();
        assert_eq!(
            decode(&case, &bytes),
            expected,
            "{} byte at a time",
            case.file
        );
    }
}

#[test]
fn every_fixture_hands_its_output_text_to_the_tokenizer_buffer() {
    for case in cases() {
        let (_, dialect) = detect(case.path);
        let mut dialect = dialect.unwrap_or_else(|| panic!("{}: no dialect", case.path));
        let (mut obs, mut text, mut choices) = (Default::default(), Vec::new(), Vec::new());
        let mut on_event = |event: FramedEvent<'_>| {
            let mut output = EventOutput::new(Some(&mut text), &mut choices);
            dialect.on_event(&event, &mut obs, &mut output);
        };
        let fed = match case.format {
            Format::Ndjson => NdjsonFramer::new(1 << 20)
                .feed(case.bytes, |line| on_event(FramedEvent::unnamed(line))),
            _ => SseFramer::new(1 << 20).feed(case.bytes, on_event),
        };
        assert_eq!(fed, Ok(()), "{}", case.file);
        // Each choice's reasoning, then its answer (kept apart in the buffer), choices joined by `|`.
        let choices: Vec<String> = text
            .chunks(2)
            .map(|texts| texts.iter().rev().map(String::as_str).collect())
            .collect();
        assert_eq!(choices.join("|"), case.text, "{}", case.file);
    }
}

#[test]
fn tgi_and_llamacpp_json_bodies_give_their_counts() {
    let limits = Metering {
        max_event_bytes: 64 << 10,
        model_scan_bytes: 1 << 20,
    };
    let body = include_bytes!("../../tests/fixtures/tgi/generate.json");
    let (_, dialect) = detect("/generate");
    let mut decoder =
        ResponseDecoder::new(dialect.expect("tgi"), Format::Json, &limits, TextCount::Off);
    let mut marks = Vec::new();
    decoder.feed(body, &mut marks);
    decoder.finish(true, &mut marks);
    assert!(marks.is_empty());
    assert_eq!(decoder.observations().output_tokens, Some(8));
}
