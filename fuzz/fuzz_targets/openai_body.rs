//! The decoder on a non-streaming OpenAI response body (JSON field scan + OpenAI dialect decoder), any
//! bytes: it never panics and reads the same model and usage however the body is cut into frames.
//! Input: 1 byte of scan bound, 1 byte of split seed, then the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentap::config::Metering;
use tokentap::decode::dialect::{detect, Observations};
use tokentap::decode::response::{Format, ResponseDecoder};
use tokentap::decode::tokenizer::TextCount;
use tokentap_fuzz::frames;

fn decode(max_event_bytes: usize, frames: &[&[u8]]) -> (u32, Observations) {
    let (_, dialect) = detect("/v1/chat/completions");
    let Some(dialect) = dialect else {
        panic!("chat has no dialect");
    };
    let limits = Metering {
        max_event_bytes,
        model_scan_bytes: 4096,
    };
    let mut decoder = ResponseDecoder::new(dialect, Format::Json, &limits, TextCount::Off);
    let mut marks = Vec::new();
    frames.iter().for_each(|f| decoder.feed(f, &mut marks));
    decoder.finish(true, &mut marks);
    let outputs = u32::try_from(marks.len()).unwrap_or(u32::MAX);
    assert_eq!(decoder.skipped(), None, "a JSON body is never skipped");
    (outputs, decoder.observations().clone())
}

fuzz_target!(|data: &[u8]| {
    let [bound, seed, body @ ..] = data else {
        return;
    };
    let max = 1 + usize::from(*bound) * 64;
    let whole = decode(max, &[body]);
    assert_eq!(whole.0, 0, "a JSON body has no output events");
    assert_eq!(decode(max, &frames(body, *seed)), whole);
});
