//! The fast `/completion` event scanner held to serde_json: every llama.cpp fixture event, hand-written
//! events of every shape the dialect reads, and mutations of them (bytes inserted, deleted and replaced,
//! values swapped for other types, escapes, duplicate keys, deep nesting) must be read the same both ways,
//! with and without the text, from empty and from filled observations; and every fixture event but the
//! last (the one with `timings`) must take the fast path.

use crate::decode::dialect::both_ways::{self, data_events};
use crate::decode::dialect::BothWays;
use crate::decode::dialect::{EventKind, Observations};

const FIXTURES: &[&str] = &[include_str!(
    "../../../../tests/fixtures/llamacpp/completion-stream.sse"
)];

/// Events the fixture may lack: a model on a token event, `probs`, empty, null and escaped content, the
/// stop event without `timings`, null and missing counts, members in another order, whitespace, the last
/// event, an error, a float or a negative count, a `stop` that is not a boolean.
const SHAPES: &[&str] = &[
    r#"{"index":0,"content":"Hi","tokens":[1],"stop":false,"id_slot":0,"tokens_predicted":1,"tokens_evaluated":4}"#,
    r#"{"index":0,"content":" there","model":"qwen2.5-0.5b","stop":false,"tokens_predicted":2,"tokens_evaluated":4}"#,
    r#"{"content":" p","probs":[{"id":5,"prob":0.5,"tok_str":" p"}],"stop":false}"#,
    r#"{"index":0,"content":"","stop":false}"#,
    r#"{"index":0,"content":null,"stop":null,"tokens_predicted":null,"tokens_evaluated":null}"#,
    r#"{"index":0,"content":"line\nnext \"q\" \\ \u263a \ud83d\ude00","stop":false}"#,
    r#"{"tokens_evaluated":4,"tokens_predicted":3,"stop":false,"content":"order"}"#,
    r#" { "content" : " spaced" , "stop" : false } "#,
    r#"{"index":0,"content":"","stop":true,"model":"m","tokens_predicted":16,"tokens_evaluated":5,"stop_type":"eos"}"#,
    r#"{"index":0,"content":"","stop":true,"tokens_predicted":16,"tokens_evaluated":5,"timings":{"prompt_n":2,"prompt_ms":10.1,"predicted_n":16,"predicted_ms":160.2,"cache_n":3}}"#,
    r#"{"error":{"code":500,"message":"boom","type":"server_error"}}"#,
    r#"{"content":"a","error":null}"#,
    r#"{"content":"a","tokens_predicted":1.0}"#,
    r#"{"content":"a","tokens_predicted":-1}"#,
    r#"{"content":"a","tokens_predicted":18446744073709551616}"#,
    r#"{"content":"a","stop":"no"}"#,
    r#"{"content":"a","stop":0}"#,
    r#"{"content":7}"#,
    r#"{"content":true,"model":["m"]}"#,
    r#"{}"#,
];

/// What mutations splice in beside `both_ways::SNIPPETS`: duplicate and escaped keys of this dialect.
const SNIPPETS: &[&str] = &[
    "\"content\":\"dup\",",
    "\"stop\":true,",
    "\"st\\u006fp\":true,",
    "\"c\\u006fntent\":\"escaped key\",",
    "\"tokens_predicted\":9,",
    "\"model\":\"m\",",
    "\"timings\":{\"predicted_n\":3},",
    "\"error\":{\"message\":\"boom\"},",
];

#[test]
fn every_fixture_token_takes_the_fast_path_and_every_event_reads_as_serde_json_reads_it() {
    let events = data_events(FIXTURES);
    assert!(
        events.len() >= 5,
        "the fixture holds events: {}",
        events.len()
    );
    // Every event but the last (it carries `timings`).
    let fast: fn(&str) -> bool = |event| !event.contains("\"timings\"");
    both_ways::fast_exactly_where(READ, &events, fast);
    for event in SHAPES {
        both_ways::same_both_ways(READ, event.as_bytes());
    }
}

#[test]
fn the_fast_path_keeps_what_earlier_events_left_and_adds_what_this_one_says() {
    let before = Observations {
        output_tokens: Some(1),
        input_tokens: Some(4),
        ..Observations::default()
    };
    for event in [SHAPES[1], SHAPES[3], SHAPES[4], SHAPES[8]] {
        let (fast, serde) = READ(event.as_bytes(), &before, true);
        let fast = fast.unwrap_or_else(|| panic!("not on the fast path: {event}"));
        assert_eq!(Some(&fast), serde.as_ref(), "{event}");
    }
    let (fast, _) = READ(SHAPES[1].as_bytes(), &before, true);
    let fast = fast.unwrap_or_else(|| panic!("not on the fast path"));
    assert_eq!(fast.kind, EventKind::Output);
    assert_eq!(
        (fast.obs.output_tokens, fast.obs.input_tokens),
        (Some(2), Some(4))
    );
    assert_eq!(fast.obs.model.as_deref(), Some("qwen2.5-0.5b"));
    let (stop, _) = READ(SHAPES[8].as_bytes(), &before, true);
    let stop = stop.unwrap_or_else(|| panic!("not on the fast path"));
    assert_eq!((stop.kind, stop.obs.ended), (EventKind::Other, true));
}

#[test]
fn any_mutation_of_an_event_reads_as_serde_json_reads_it() {
    both_ways::mutations_read_alike(READ, FIXTURES, SHAPES, SNIPPETS);
}

/// The scanner's and serde_json's readings of one event.
const READ: BothWays = crate::decode::dialect::both_ways::<super::LlamaCpp>;
