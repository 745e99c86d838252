//! The decoder on a streaming response of every API dialect (the SSE or NDJSON framer + that dialect's
//! event decoder), any bytes: it never panics and gives the same figures however the stream is cut.
//! Input: 1 byte choosing the API and the event bound, 1 byte of split seed, then the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentap::config::Metering;
use tokentap::decode::dialect::detect;
use tokentap::decode::response::{Format, ResponseDecoder};
use tokentap::decode::tokenizer::TextCount;
use tokentap_fuzz::frames;

#[derive(Debug, PartialEq)]
struct Figures {
    outputs: u32,
    output_tokens: Option<u64>,
    input_tokens: Option<u64>,
    model: Option<String>,
    skipped: Option<&'static str>,
    error_event: bool,
}

/// Every streaming dialect, with the framing its server uses.
const STREAMS: [(&str, Format); 7] = [
    ("/v1/chat/completions", Format::Sse),
    ("/v1/completions", Format::Sse),
    ("/v1/responses", Format::Sse),
    ("/v1/messages", Format::Sse),
    ("/generate_stream", Format::Sse),
    ("/completion", Format::Sse),
    ("/api/chat", Format::Ndjson),
];

fn decode(path: &str, format: Format, max_event_bytes: usize, frames: &[&[u8]]) -> Figures {
    let (_, dialect) = detect(path);
    let Some(dialect) = dialect else {
        panic!("{path} has no dialect");
    };
    let limits = Metering {
        max_event_bytes,
        model_scan_bytes: 4096,
    };
    let mut decoder = ResponseDecoder::new(dialect, format, &limits, TextCount::Off);
    let mut marks = Vec::new();
    frames.iter().for_each(|f| decoder.feed(f, &mut marks));
    decoder.finish(true, &mut marks);
    let outputs = u32::try_from(marks.len()).unwrap_or(u32::MAX);
    let obs = decoder.observations();
    Figures {
        outputs,
        output_tokens: obs.output_tokens,
        input_tokens: obs.input_tokens,
        model: obs.model.clone(),
        skipped: decoder.skipped().map(|r| r.as_str()),
        error_event: decoder.saw_error_event(),
    }
}

fuzz_target!(|data: &[u8]| {
    let [mode, seed, stream @ ..] = data else {
        return;
    };
    let (path, format) = STREAMS[usize::from(mode % 7)];
    let max = 16 + usize::from(mode / 7) * 16;
    let whole = decode(path, format, max, &[stream]);
    assert_eq!(decode(path, format, max, &frames(stream, *seed)), whole);
});
