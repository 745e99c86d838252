//! The fast line scanner held to serde_json: every line of the Ollama fixtures, hand-written lines of
//! every shape the dialect reads, and mutations of them (bytes inserted, deleted and replaced, values
//! swapped for other types, escapes, duplicate keys, deep nesting) must be read the same both ways, with
//! and without the text, from empty and from filled observations; and every fixture line but the `done`
//! one must take the fast path.

use crate::decode::dialect::both_ways::{self, data_events};
use crate::decode::dialect::BothWays;
use crate::decode::dialect::{EventKind, Observations};

const FIXTURES: &[&str] = &[
    include_str!("../../../../tests/fixtures/ollama/chat-stream.ndjson"),
    include_str!("../../../../tests/fixtures/ollama/generate-stream.ndjson"),
];

/// Lines the fixtures may lack: thinking on chat, empty, null and escaped text, other members, members in
/// another order or missing, whitespace, the done line, tool calls, an error, a message that is not an
/// object, a number or boolean where text is read, a `done` that is not a boolean, duplicate fields.
const SHAPES: &[&str] = &[
    r#"{"model":"m","created_at":"t","message":{"role":"assistant","content":"","thinking":"hm"},"done":false}"#,
    r#"{"model":"m","created_at":"t","response":"","thinking":"so","done":false}"#,
    r#"{"model":"m","message":{"role":"assistant","content":"line\nnext \"q\" \\ \u263a \ud83d\ude00","images":null},"done":false}"#,
    r#"{"model":"m","message":{"role":"assistant","content":null},"done":null}"#,
    r#"{"model":null,"response":"x"}"#,
    r#"{"done":false,"response":"order","model":"m"}"#,
    r#" { "model" : "m" , "message" : { "content" : " spaced" } , "done" : false } "#,
    r#"{"model":"m","created_at":"t","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":4883583458,"load_duration":1334875,"prompt_eval_count":26,"prompt_eval_duration":342546000,"eval_count":9,"eval_duration":4535599000}"#,
    r#"{"model":"m","response":"","done":false,"eval_count":3}"#,
    r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},"done":false}"#,
    r#"{"error":"model runner has unexpectedly stopped"}"#,
    r#"{"model":"m","message":null,"done":false}"#,
    r#"{"model":"m","message":[1,2],"done":false}"#,
    r#"{"model":"m","message":"text","done":false}"#,
    r#"{"model":"m","response":1,"done":false}"#,
    r#"{"model":"m","response":true,"done":false}"#,
    r#"{"model":1,"response":"a"}"#,
    r#"{"model":"m","message":{"content":2},"done":false}"#,
    r#"{"model":"m","response":"a","done":"no"}"#,
    r#"{"model":"m","response":"a","done":0}"#,
    r#"{"model":"m","message":{"content":"a"},"message":{"content":"b"},"done":false}"#,
    r#"{"model":"m","message":{"content":"a","content":"b"},"done":false}"#,
    r#"{}"#,
];

/// What mutations splice in beside `both_ways::SNIPPETS`: duplicate and escaped keys of this dialect.
const SNIPPETS: &[&str] = &[
    "\"response\":\"dup\",",
    "\"message\":{\"content\":\"dup\"},",
    "\"content\":\"dup\",",
    "\"m\\u006fdel\":\"escaped key\",",
    "\"done\":true,",
    "\"eval_count\":1,",
    "\"tool_calls\":[],",
    "\"error\":\"boom\",",
];

#[test]
fn every_fixture_line_but_the_done_one_takes_the_fast_path_and_every_line_reads_as_serde_json_reads_it(
) {
    let lines = data_events(FIXTURES);
    assert!(
        lines.len() >= 12,
        "the fixtures hold lines: {}",
        lines.len()
    );
    let fast: fn(&str) -> bool = |line| line.contains("\"done\":false");
    both_ways::fast_exactly_where(READ, &lines, fast);
    for line in SHAPES {
        both_ways::same_both_ways(READ, line.as_bytes());
    }
}

#[test]
fn from_filled_observations_a_token_line_keeps_the_model_and_counts_it_found() {
    let before = Observations {
        model: Some("earlier".to_owned()),
        output_tokens: Some(3),
        ..Observations::default()
    };
    for line in [SHAPES[0], SHAPES[2], SHAPES[5]] {
        let (Some(fast), serde) = READ(line.as_bytes(), &before, true) else {
            panic!("not on the fast path: {line}");
        };
        assert_eq!(fast.kind, EventKind::Output, "{line}");
        assert_eq!(fast.obs.output_tokens, Some(3), "{line}");
        assert_eq!(Some(fast), serde, "{line}");
    }
}

#[test]
fn any_mutation_of_a_line_reads_as_serde_json_reads_it() {
    both_ways::mutations_read_alike(READ, FIXTURES, SHAPES, SNIPPETS);
}

/// The scanner's and serde_json's readings of one event.
const READ: BothWays = crate::decode::dialect::both_ways::<super::Ollama>;
