//! The fast `content_block_delta` scanner held to serde_json: every Anthropic fixture event, hand-written
//! deltas of every shape the dialect reads, and mutations of them (bytes inserted, deleted and replaced,
//! values swapped for other types, escapes, duplicate keys, deep nesting) must be read the same both ways,
//! with and without the text; and every fixture delta must take the fast path.

use crate::decode::dialect::both_ways::{self, data_events};
use crate::decode::dialect::BothWays;

const FIXTURES: &[&str] = &[
    include_str!("../../../../tests/fixtures/anthropic/messages-stream.sse"),
    include_str!("../../../../tests/fixtures/vllm/messages-stream.sse"),
];

/// Deltas the fixtures may lack: thinking, tool input, compaction, signatures, citations, escapes,
/// whitespace, members in another order, nulls.
const SHAPES: &[&str] = &[
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me think"}}"#,
    r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Pa"}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"Summary"}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":null}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM"}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"type":"char_location","cited_text":"x","document_index":0}}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"line\nnext \"q\" \\ \t \u263a \ud83d\ude00"}}"#,
    r#"{"index":0,"delta":{"text":"order","type":"text_delta"},"type":"content_block_delta"}"#,
    r#"{"type":"content_block_delta","index":0,"delta":null}"#,
    r#"{"type":"content_block_delta","index":0}"#,
    r#"{"type":"content_block_delta","delta":{"text":"","thinking":"","partial_json":"","content":""}}"#,
    r#"{"type":"content_block_delta","delta":{"text":{"nested":[1,2,{"a":null}]},"thinking":true}}"#,
    " { \"type\" : \"content_block_delta\" , \"delta\" : { \"text\" : \"sp\" } } ",
    r#"{"type":"content_block_d\u0065lta","delta":{"text":"escaped type"}}"#,
    r#"{"type":"message_start","message":{"model":"claude","usage":{"input_tokens":3,"output_tokens":1}}}"#,
    r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#,
    r#"{"type":"ping"}"#,
    r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
];

/// What mutations splice in beside `both_ways::SNIPPETS`: duplicate and escaped keys of this dialect.
const SNIPPETS: &[&str] = &[
    "\"delta\":{\"text\":\"dup\"},",
    "\"type\":\"content_block_delta\",",
    "\"t\\u0065xt\":\"escaped key\",",
    "\"message\":null,",
    "\"usage\":{\"output_tokens\":1},",
];

#[test]
fn every_fixture_delta_takes_the_fast_path_and_every_event_reads_as_serde_json_reads_it() {
    let events = data_events(FIXTURES);
    let deltas = events
        .iter()
        .filter(|e| e.contains("\"content_block_delta\""))
        .count();
    assert!(deltas >= 10, "the fixtures hold deltas: {deltas}");
    // Every delta, its type spelled with an escape or not; no other event.
    let fast: fn(&str) -> bool = |event| event.contains("\"content_block_d");
    both_ways::fast_exactly_where(READ, &events, fast);
    both_ways::fast_exactly_where(READ, SHAPES, fast);
}

#[test]
fn any_mutation_of_an_event_reads_as_serde_json_reads_it() {
    both_ways::mutations_read_alike(READ, FIXTURES, SHAPES, SNIPPETS);
}

/// The scanner's and serde_json's readings of one event.
const READ: BothWays = crate::decode::dialect::both_ways::<super::Anthropic>;
