//! The fast `response.*.delta` scanner held to serde_json: every Responses fixture event, hand-written
//! events of every shape the dialect reads, and mutations of them (bytes inserted, deleted and replaced,
//! values swapped for other types, escapes, duplicate keys, deep nesting) must be read the same both ways,
//! with and without the text; and every fixture delta must take the fast path.

use crate::decode::dialect::both_ways::{self, data_events};
use crate::decode::dialect::BothWays;

const FIXTURES: &[&str] = &[
    include_str!("../../../../tests/fixtures/responses/responses-stream.sse"),
    include_str!("../../../../tests/fixtures/vllm/responses-stream.sse"),
];

/// Events the fixtures may lack: reasoning text and summaries, refusals, tool arguments, audio, empty
/// and odd deltas, escapes, whitespace, members in another order, the lifecycle events.
const SHAPES: &[&str] = &[
    r#"{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi","sequence_number":4}"#,
    r#"{"type":"response.reasoning_text.delta","item_id":"rs_1","output_index":0,"content_index":0,"delta":"Let me think"}"#,
    r#"{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"Sum"}"#,
    r#"{"type":"response.refusal.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"I can't"}"#,
    r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"{\"city\": \"Pa"}"#,
    r#"{"type":"response.audio.delta","delta":"UklGRg=="}"#,
    r#"{"type":"response.output_text.delta","delta":""}"#,
    r#"{"type":"response.output_text.delta","delta":null}"#,
    r#"{"type":"response.output_text.delta","delta":{"nested":[1,{"a":true}]}}"#,
    r#"{"type":"response.output_text.delta"}"#,
    r#"{"delta":"order","sequence_number":9,"type":"response.output_text.delta"}"#,
    r#"{"type":"response.output_text.delta","delta":"line\nnext \"q\" \\ \u263a \ud83d\ude00"}"#,
    r#"{"type":"response.output_text.d\u0065lta","delta":"escaped type"}"#,
    " { \"type\" : \"response.output_text.delta\" , \"delta\" : \"sp\" } ",
    r#"{"type":"response.created","response":{"id":"r","model":"m","usage":null}}"#,
    r#"{"type":"response.completed","response":{"model":"m","usage":{"input_tokens":3,"output_tokens":5,"output_tokens_details":{"reasoning_tokens":2}}}}"#,
    r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"message","content":[]}}"#,
    r#"{"type":"error","code":"server_error","message":"boom"}"#,
];

/// What mutations splice in beside `both_ways::SNIPPETS`: duplicate and escaped keys of this dialect.
const SNIPPETS: &[&str] = &[
    "\"delta\":\"dup\",",
    "\"type\":\"response.output_text.delta\",",
    "\"d\\u0065lta\":\"escaped key\",",
    "\"response\":null,",
    "\"response\":{\"usage\":{\"output_tokens\":1}},",
];

#[test]
fn every_fixture_delta_takes_the_fast_path_and_every_event_reads_as_serde_json_reads_it() {
    let events = data_events(FIXTURES);
    let deltas = events.iter().filter(|e| e.contains(".delta\"")).count();
    assert!(deltas >= 10, "the fixtures hold deltas: {deltas}");
    // Every delta event, its type spelled with an escape or not; no other event.
    let fast: fn(&str) -> bool =
        |event| event.contains(".delta\"") || event.contains(".d\\u0065lta\"");
    both_ways::fast_exactly_where(READ, &events, fast);
    both_ways::fast_exactly_where(READ, SHAPES, fast);
}

#[test]
fn any_mutation_of_an_event_reads_as_serde_json_reads_it() {
    both_ways::mutations_read_alike(READ, FIXTURES, SHAPES, SNIPPETS);
}

/// The scanner's and serde_json's readings of one event.
const READ: BothWays = crate::decode::dialect::both_ways::<super::Responses>;
