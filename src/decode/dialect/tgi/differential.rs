//! The fast token-event scanner held to serde_json: every TGI fixture event, hand-written events of every
//! shape the dialect reads, and mutations of them (bytes inserted, deleted and replaced, values swapped
//! for other types, escapes, duplicate keys, deep nesting) must be read the same both ways, with and
//! without the text; and every fixture event but the last (the one with `generated_text`) must take the
//! fast path.

use crate::decode::dialect::both_ways::{self, data_events};
use crate::decode::dialect::BothWays;

const FIXTURES: &[&str] = &[include_str!(
    "../../../../tests/fixtures/tgi/generate-stream.sse"
)];

/// Events the fixture may lack: special tokens, empty, null and escaped text, `top_tokens`, members in
/// another order or missing, whitespace, the last event, an error, a token that is not an object.
const SHAPES: &[&str] = &[
    r#"{"index":1,"token":{"id":1,"text":"Hi","logprob":-0.1,"special":false},"generated_text":null,"details":null}"#,
    r#"{"index":2,"token":{"id":0,"text":"<pad>","logprob":0.0,"special":true},"generated_text":null,"details":null}"#,
    r#"{"index":3,"token":{"id":3,"text":"","logprob":-1.0,"special":false},"generated_text":null,"details":null}"#,
    r#"{"index":3,"token":{"id":3,"text":null,"special":null}}"#,
    r#"{"index":3,"token":{"id":3}}"#,
    r#"{"token":{"special":false,"text":"order","id":9},"index":4}"#,
    r#"{"index":5,"token":{"id":5,"text":"line\nnext \"q\" \\ \u263a \ud83d\ude00","logprob":-0.2,"special":false},"generated_text":null,"details":null}"#,
    r#"{"index":6,"token":{"id":6,"text":" top","logprob":-0.3,"special":false},"top_tokens":[{"id":6,"text":" top","logprob":-0.3,"special":false}],"generated_text":null,"details":null}"#,
    r#" { "index" : 7 , "token" : { "id" : 7 , "text" : " spaced" , "special" : false } } "#,
    r#"{"index":8,"token":{"id":2,"text":"</s>","logprob":-0.06,"special":true},"generated_text":"Hi there","details":{"finish_reason":"eos_token","generated_tokens":8,"seed":null,"input_length":4}}"#,
    r#"{"index":8,"token":{"id":2,"text":"</s>","special":true},"generated_text":"","details":null}"#,
    r#"{"index":8,"token":{"id":2,"text":"x"},"generated_text":null,"details":{"generated_tokens":3}}"#,
    r#"{"error":"Request failed during generation: out of memory","error_type":"generation"}"#,
    r#"{"index":1,"token":null,"generated_text":null}"#,
    r#"{"index":1,"token":[1,2],"generated_text":null}"#,
    r#"{"index":1,"token":{"text":1}}"#,
    r#"{"index":1,"token":{"text":true,"special":false}}"#,
    r#"{"index":1,"token":{"text":"a","special":"no"}}"#,
    r#"{"index":1,"token":{"text":"a","special":1}}"#,
    r#"{"index":1,"generated_text":null}"#,
    r#"{}"#,
];

/// What mutations splice in beside `both_ways::SNIPPETS`: duplicate and escaped keys of this dialect.
const SNIPPETS: &[&str] = &[
    "\"token\":{\"text\":\"dup\"},",
    "\"special\":true,",
    "\"sp\\u0065cial\":true,",
    "\"t\\u0065xt\":\"escaped key\",",
    "\"generated_text\":\"done\",",
    "\"details\":{\"generated_tokens\":1},",
    "\"error\":\"boom\",",
];

#[test]
fn every_fixture_token_takes_the_fast_path_and_every_event_reads_as_serde_json_reads_it() {
    let events = data_events(FIXTURES);
    let tokens = events.iter().filter(|e| e.contains("\"token\"")).count();
    assert!(tokens >= 5, "the fixture holds token events: {tokens}");
    // Every token event but the last (its `generated_text` and `details` are not null).
    let fast: fn(&str) -> bool =
        |event| event.contains("\"token\":{") && !event.contains("\"generated_text\":\"");
    both_ways::fast_exactly_where(READ, &events, fast);
    for event in SHAPES {
        both_ways::same_both_ways(READ, event.as_bytes());
    }
}

#[test]
fn a_plain_token_is_copied_a_special_one_counted_but_not_copied() {
    for (event, copied) in [(SHAPES[0], vec!["Hi"]), (SHAPES[1], vec![])] {
        let (Some(fast), serde) = READ(event.as_bytes(), &Default::default(), true) else {
            panic!("not on the fast path: {event}");
        };
        assert_eq!(fast.kind, crate::decode::dialect::EventKind::Output);
        let texts: Vec<&str> = fast.texts.iter().map(|t| t.as_str()).collect();
        assert_eq!(texts, copied, "{event}");
        assert_eq!(Some(fast), serde);
    }
}

#[test]
fn any_mutation_of_an_event_reads_as_serde_json_reads_it() {
    both_ways::mutations_read_alike(READ, FIXTURES, SHAPES, SNIPPETS);
}

/// The scanner's and serde_json's readings of one event.
const READ: BothWays = crate::decode::dialect::both_ways::<super::Tgi>;
