//! Property tests of the synchronous readers on the data path: the SSE framer, the JSON field scanner and
//! the decoder (framer + OpenAI dialect). The network cuts a body into frames anywhere; whatever the cut,
//! each of them must decode the same events, keep the same fields and give the same figures as when it
//! is fed the whole body at once. Inputs mix well-formed OpenAI streams with the hostile cases: invalid
//! JSON, non-UTF-8, NUL bytes, lone CR line endings, BOMs, events over the bound, plain garbage.

use crate::support;

use proptest::prelude::*;
use support::streams::{cut, piece, splits, stream};
use tokentap::config::Metering;
use tokentap::decode::dialect::detect;
use tokentap::decode::json::FieldScanner;
use tokentap::decode::response::{Format, ResponseDecoder};
use tokentap::decode::sse::SseFramer;
use tokentap::decode::tokenizer::TextCount;

type Events = Vec<(Vec<u8>, Vec<u8>)>;

/// Events up to (and whether there was) an overflow, feeding `frames` in order.
fn frame_all(max: usize, frames: &[&[u8]]) -> (Events, bool, usize) {
    let mut framer = SseFramer::new(max);
    let mut events = Vec::new();
    let mut most_held = 0;
    for frame in frames {
        let fed = framer.feed(frame, |e| events.push((e.event.to_vec(), e.data.to_vec())));
        most_held = most_held.max(framer.buffered_bytes());
        if fed.is_err() {
            return (events, true, most_held);
        }
    }
    (events, false, most_held)
}

/// Everything the decoder reports about one body: per-frame output counts summed, and what it learnt.
#[derive(Debug, PartialEq)]
struct Figures {
    outputs: u32,
    output_tokens: Option<u64>,
    input_tokens: Option<u64>,
    model: Option<String>,
    skipped: Option<&'static str>,
    error_event: bool,
}

fn decode(path: &str, streaming: bool, max_event_bytes: usize, frames: &[&[u8]]) -> Figures {
    let (_, dialect) = detect(path);
    let limits = Metering {
        max_event_bytes,
        model_scan_bytes: 4096,
    };
    let format = if streaming { Format::Sse } else { Format::Json };
    let mut decoder = ResponseDecoder::new(
        dialect.expect("an OpenAI path"),
        format,
        &limits,
        TextCount::Off,
    );
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sse_framer_gives_the_same_events_for_any_split(
        data in stream(24), points in splits(), max in 16usize..2048,
    ) {
        let whole = frame_all(max, &[&data]);
        let (events, overflow, most_held) = frame_all(max, &cut(&data, &points));
        prop_assert_eq!(&events, &whole.0);
        prop_assert_eq!(overflow, whole.1);
        prop_assert!(most_held <= max, "held {} bytes over a bound of {}", most_held, max);
    }

    #[test]
    fn sse_framer_gives_the_same_events_for_any_bytes_and_split(
        data in prop::collection::vec(any::<u8>(), 0..512), points in splits(), max in 1usize..256,
    ) {
        let whole = frame_all(max, &[&data]);
        let split = frame_all(max, &cut(&data, &points));
        prop_assert_eq!(&split.0, &whole.0);
        prop_assert_eq!(split.1, whole.1);
        prop_assert!(split.2 <= max);
    }

    #[test]
    fn sse_framer_byte_at_a_time_matches_whole(data in stream(24)) {
        let bytes: Vec<&[u8]> = data.chunks(1).collect();
        let (events, overflow, _) = frame_all(1 << 16, &bytes);
        let whole = frame_all(1 << 16, &[&data]);
        prop_assert_eq!((events, overflow), (whole.0, whole.1));
    }

    #[test]
    fn meter_gives_the_same_figures_for_any_split_of_a_stream(
        data in stream(24), points in splits(), max in 64usize..1024,
        chat in any::<bool>(),
    ) {
        let path = if chat { "/v1/chat/completions" } else { "/v1/completions" };
        let frames = cut(&data, &points);
        prop_assert_eq!(decode(path, true, max, &frames), decode(path, true, max, &[&data]));
    }

    #[test]
    fn meter_gives_the_same_figures_for_any_split_of_a_json_body(
        prefix in "[ \t\r\n]{0,3}",
        model in "[\\PC]{0,12}",
        usage in (0u64..100_000, 0u64..100_000),
        filler in prop::collection::vec(piece(), 0..4),
        points in splits(),
        max in 64usize..4096,
    ) {
        let filler: Vec<String> = filler.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect();
        let body = format!(
            "{prefix}{{\"id\":\"x\",\"choices\":[{{\"message\":{{\"content\":{}}}}}],\"model\":{},\"usage\":{{\"prompt_tokens\":{},\"completion_tokens\":{}}}}}",
            serde_json::to_string(&filler.concat()).expect("json"),
            serde_json::to_string(&model).expect("json"),
            usage.0,
            usage.1,
        );
        let frames = cut(body.as_bytes(), &points);
        let whole = decode("/v1/chat/completions", false, max, &[body.as_bytes()]);
        prop_assert_eq!(decode("/v1/chat/completions", false, max, &frames), whole);
    }

    #[test]
    fn field_scanner_keeps_the_same_fields_for_any_bytes_and_split(
        data in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            stream(24),
            "\\{\"model\":\"[a-z\\\\\"]{0,6}\",\"usage\":\\{\"a\":[0-9]{1,3}\\}\\}".prop_map(String::into_bytes),
        ],
        points in splits(),
        max_value in 1usize..64,
        max_scan in 1usize..512,
    ) {
        const WANTED: &[&str] = &["model", "usage"];
        let scan = |frames: &[&[u8]]| {
            let mut s = FieldScanner::new(WANTED, max_value, max_scan);
            frames.iter().for_each(|f| s.feed(f));
            (
                s.raw("model").map(<[u8]>::to_vec),
                s.raw("usage").map(<[u8]>::to_vec),
                s.string("model"),
                s.is_done(),
            )
        };
        prop_assert_eq!(scan(&cut(&data, &points)), scan(&[&data]));
    }
}

#[test]
fn meter_counts_tokens_and_keeps_the_skip_reason_whatever_else_the_frame_holds() {
    // The split-invariance property above found these: a frame holding a token event and then a malformed
    // one used to report no output at all, while the same bytes cut between the two events reported one;
    // and an event over the bound later in the same frame used to overwrite the skip reason.
    let token = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n".as_slice();
    let bad = b"data: {not json\n\n".as_slice();
    let whole = [token, bad].concat();
    let path = "/v1/chat/completions";
    let one_frame = decode(path, true, 1024, &[&whole]);
    assert_eq!(one_frame, decode(path, true, 1024, &[token, bad]));
    assert_eq!(one_frame.outputs, 1);
    assert_eq!(one_frame.skipped, Some("malformed_event"));
    let huge = format!("data: {}\n\n", "x".repeat(2048));
    let whole = [token, huge.as_bytes()].concat();
    assert_eq!(decode(path, true, 1024, &[&whole]).outputs, 1);
    // And the reason is the first thing that went wrong, not the last one seen in the frame.
    let whole = [bad, huge.as_bytes()].concat();
    assert_eq!(
        decode(path, true, 1024, &[&whole]).skipped,
        Some("malformed_event")
    );
}
