//! The fast scanner held to serde_json: every OpenAI fixture chunk, hand-written chunks of every shape
//! the decoder reads, and mutations of them (bytes inserted, deleted and replaced, values swapped for
//! other types, odd numbers, escapes, duplicate keys, deep nesting) must be read the same both ways,
//! with and without the text, from empty and from filled observations.

use proptest::prelude::*;

use crate::decode::dialect::both_ways::data_events;
use crate::decode::dialect::BothWays;
use crate::decode::dialect::Observations;
use crate::decode::dialect::Reading;
use crate::record::server::ServerTimings;

const FIXTURES: &[&str] = &[
    include_str!("../../../../tests/fixtures/openai/vllm-0.32-chat-stream.sse"),
    include_str!("../../../../tests/fixtures/openai/guidellm-mock-chat-stream.sse"),
    include_str!("../../../../tests/fixtures/openai/llama-cpp-python-chat-stream.sse"),
    include_str!("../../../../tests/fixtures/vllm/chat-stream.sse"),
    include_str!("../../../../tests/fixtures/vllm/chat-stream-usage.sse"),
    include_str!("../../../../tests/fixtures/vllm/chat-stream-n2-usage.sse"),
    include_str!("../../../../tests/fixtures/vllm/completions-stream-usage.sse"),
    include_str!("../../../../tests/fixtures/llamacpp-python/chat-stream.sse"),
    include_str!("../../../../tests/fixtures/llamacpp-python/completions-stream.sse"),
];

/// Shapes the fixtures lack: reasoning, refusals, tool calls, usage details, the servers' timings,
/// errors, several choices, escapes.
const SHAPES: &[&str] = &[
    r#"{"id":"c","object":"chat.completion.chunk","model":"qwen3","choices":[{"index":0,"delta":{"reasoning_content":"Let me think","content":null},"logprobs":null,"finish_reason":null}]}"#,
    r#"{"choices":[{"index":0,"delta":{"reasoning":"hm","content":""}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"content":null,"refusal":"I can't"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": \"Paris\"}"}},{"index":1,"function":{"name":"f","arguments":{"a":1}}}]}}]}"#,
    r#"{"choices":[{"delta":{"function_call":{"arguments":"{","name":"g"}}}]}"#,
    r#"{"choices":[{"delta":{"function_call":{}}}]}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":20,"total_tokens":24,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":16},"completion_tokens_details":{"reasoning_tokens":3}}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":4},"metrics":{"time_to_first_token_ms":30.0,"generation_time_ms":90.5,"queue_time_ms":2.5,"mean_itl_ms":30.1,"tokens_per_second":33.0}}"#,
    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"timings":{"cache_n":7,"prompt_n":2,"prompt_ms":12.0,"predicted_n":5,"predicted_ms":50.0,"predicted_per_second":100.5}}"#,
    r#"{"error":{"message":"boom","type":"internal","code":500}}"#,
    r#"{"error":null,"choices":[{"index":0,"delta":{"content":"ok"}}],"usage":null}"#,
    r#"{"choices":[{"index":1,"delta":{"content":"a"}},{"index":0,"delta":{"reasoning":"b"}},{"index":2,"text":"c"}]}"#,
    r#"{"model":"m\u00e9\/x","choices":[{"index":0,"delta":{"content":"line\nnext \"q\" \\ \t \u263a \ud83d\ude00"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"content":"a"},"logprobs":{"content":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[]}]}}]}"#,
    r#"{"choices":[{"index":0,"text":" t","logprobs":{"tokens":[" t"],"token_logprobs":[-1.2e-3]}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#,
    "{ \"choices\" : [ { \"index\" : 0 , \"delta\" : { \"content\" : \"sp\" } } ] }",
];

/// What mutations splice in: other types, odd numbers, escapes, duplicate keys, deep nesting.
const SNIPPETS: &[&str] = &[
    "null",
    "true",
    "false",
    "0",
    "-0",
    "01",
    "1.0",
    "1e400",
    "-1",
    "1E2",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "\"\"",
    "\"x\"",
    r#""\ud800""#,
    r#""\udc00x""#,
    r#""\ud83d\ude00""#,
    r#""\u00e9""#,
    r#""\x""#,
    r#""\u12""#,
    "\"a\tb\"",
    "[]",
    "{}",
    "[1,]",
    "{\"a\":1,}",
    r#"{"content":"z"}"#,
    r#"[{"index":0,"delta":{"content":"y"}}]"#,
    "1.",
    "1e",
    "-",
    ".5",
    "[1}",
    r#"{"a":1]"#,
    r#""\udc00""#,
    "\u{feff}",
    "\u{0}",
    "\u{7f}",
    "\u{e9}",
];

/// Members mutations add to an object after one of its values: duplicate keys, fields in the wrong
/// place, odd values of the read fields.
const MEMBERS: &[&str] = &[
    r#","model":"dup""#,
    r#","choices":[]"#,
    r#","usage":{"completion_tokens":9}"#,
    r#","content":"dup""#,
    r#","index":3"#,
    r#","text":"dup""#,
    r#","function":null"#,
    r#","name":"n""#,
    r#","error":{}"#,
    r#","metrics":{"queue_time_ms":1e400}"#,
    r#","timings":{"prompt_ms":-0}"#,
    r#","mod\u0065l":"esc""#,
];

fn seeds() -> Vec<String> {
    let events = data_events(FIXTURES).into_iter();
    events
        .filter(|data| data.contains("\"choices\""))
        .chain(SHAPES.iter().copied())
        .map(str::to_owned)
        .collect()
}

/// Observations a stream may already hold when the event comes.
fn befores() -> [Observations; 2] {
    let filled = Observations {
        output_tokens: Some(1),
        input_tokens: Some(2),
        reasoning_tokens: Some(3),
        cached_input_tokens: Some(4),
        server: ServerTimings::default(),
        model: Some("earlier".to_owned()),
        response_id: None,
        ended: false,
    };
    [Observations::default(), filled]
}

/// Reads `data` both ways in every setting; returns how many settings the fast path read itself.
fn agree(data: &[u8]) -> usize {
    let mut fast_reads = 0;
    for before in befores() {
        for with_text in [false, true] {
            let (fast, serde): (Option<Reading>, Option<Reading>) = READ(data, &before, with_text);
            if let Some(fast) = fast {
                assert_eq!(
                    Some(&fast),
                    serde.as_ref(),
                    "{:?} (text: {with_text})",
                    String::from_utf8_lossy(data)
                );
                fast_reads += 1;
            }
        }
    }
    fast_reads
}

#[test]
fn every_fixture_chunk_and_shape_is_read_on_the_fast_path_as_serde_json_reads_it() {
    let seeds = seeds();
    assert!(seeds.len() > 100, "{}", seeds.len());
    for seed in &seeds {
        assert_eq!(agree(seed.as_bytes()), 4, "left to serde_json: {seed}");
    }
}

#[test]
fn what_serde_json_rejects_the_fast_path_never_reads() {
    let content = |value: &str| format!(r#"{{"choices":[{{"delta":{{"content":{value}}}}}]}}"#);
    let skipped = |value: &str| format!(r#"{{"x":{value},"choices":[]}}"#);
    let mut malformed: Vec<String> = [
        "1e400",
        "01",
        "-0",
        "1.0",
        r#""\ud800""#,
        r#""\udc00""#,
        r#""\ud800\u0041""#,
        r#""\x""#,
        "\"a\tb\"",
        "[1,]",
        "{}",
        "tru",
    ]
    .iter()
    .map(|v| content(v))
    .collect();
    malformed.extend(
        [
            "[1}",
            r#"{"a":1]"#,
            "1.",
            "1e",
            "1e+",
            "-",
            ".5",
            "+1",
            "01",
            "-01",
            r#""\u12g4""#,
            "nul",
            "[,1]",
            "{,}",
            r#"{"a"}"#,
            r#"{"a":}"#,
            "{1:2}",
            r#""open"#,
            "[1 2]",
            r#"{"a":1 "b":2}"#,
            "\"\u{1f}\"",
        ]
        .iter()
        .map(|v| skipped(v)),
    );
    malformed.extend(
        [
            r#"{"model":"a","model":"b","choices":[]}"#,
            r#"{"choices":[{"index":0,"index":1,"text":"x"}]}"#,
            r#"{"choices":[{"index":-1,"text":"x"}]}"#,
            r#"{"choices":[{"index":4294967296,"text":"x"}]}"#,
            r#"{"choices":[null]}"#,
            r#"{"choices":[],"usage":{"completion_tokens":1.0}}"#,
            r#"{"choices":[],"usage":{"completion_tokens":18446744073709551616}}"#,
            r#"{"choices":[],"metrics":{"queue_time_ms":1e400}}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":1e400}}]}}]}"#,
            r#"{"choices":[]} x"#,
            r#"{"choices":[],}"#,
            "{\"id\":\"\u{1}\",\"choices\":[]}",
        ]
        .iter()
        .map(|s| (*s).to_owned()),
    );
    for event in &malformed {
        let (fast, serde) = READ(event.as_bytes(), &Observations::default(), true);
        assert_eq!(fast, None, "{event}");
        let kind = serde.map(|r| r.kind);
        assert_eq!(
            kind,
            Some(crate::decode::dialect::EventKind::Malformed),
            "{event}"
        );
    }
}

#[test]
fn nesting_serde_json_skips_at_any_depth_is_left_to_it_past_the_scanners_bound() {
    let deep = |n: usize| {
        let value = format!("{}{}", "[".repeat(n), "]".repeat(n));
        format!(r#"{{"x":{value},"choices":[{{"delta":{{"content":"a"}}}}]}}"#)
    };
    let (fast, serde) = READ(deep(128).as_bytes(), &Observations::default(), false);
    assert_eq!(fast, serde);
    let (fast, serde) = READ(deep(5000).as_bytes(), &Observations::default(), false);
    assert_eq!(fast, None);
    let kind = serde.map(|r| r.kind);
    assert_eq!(kind, Some(crate::decode::dialect::EventKind::Output));
}

#[derive(Debug, Clone)]
enum Mutation {
    Insert(usize, u8),
    Delete(usize, usize),
    Replace(usize, u8),
    /// A snippet spliced in at a position, over `len` bytes.
    Splice(usize, usize, usize),
    /// A snippet in place of the value after a colon.
    Value(usize, usize),
    /// A member added after the value after a colon.
    Member(usize, usize),
    /// A piece of the event copied elsewhere (a duplicate key, an unbalanced bracket).
    Copy(usize, usize, usize),
    Nest(usize, usize),
}

const BYTES: &[u8] = b"\"\\{}[],:0123456789-+.eEnultrfas \t\n\r\x00\x1f\x7f\xff\xc3\xa9";

fn mutation() -> impl Strategy<Value = Mutation> {
    let byte = prop::sample::select(BYTES);
    prop_oneof![
        1 => (any::<usize>(), byte.clone()).prop_map(|(at, b)| Mutation::Insert(at, b)),
        1 => (any::<usize>(), 1..8usize).prop_map(|(at, n)| Mutation::Delete(at, n)),
        1 => (any::<usize>(), byte).prop_map(|(at, b)| Mutation::Replace(at, b)),
        2 => (any::<usize>(), 0..4usize, 0..SNIPPETS.len())
            .prop_map(|(at, n, s)| Mutation::Splice(at, n, s)),
        5 => (any::<usize>(), 0..SNIPPETS.len()).prop_map(|(at, s)| Mutation::Value(at, s)),
        3 => (any::<usize>(), 0..MEMBERS.len()).prop_map(|(at, s)| Mutation::Member(at, s)),
        2 => (any::<usize>(), 1..40usize, any::<usize>())
            .prop_map(|(from, n, to)| Mutation::Copy(from, n, to)),
        1 => (any::<usize>(), 100..200usize)
            .prop_map(|(at, depth)| Mutation::Nest(at, depth)),
    ]
}

/// The length of the JSON value `text` starts with, as serde_json reads it.
fn value_end(text: &[u8]) -> Option<usize> {
    let mut values =
        serde_json::Deserializer::from_slice(text).into_iter::<serde::de::IgnoredAny>();
    values.next()?.ok()?;
    Some(values.byte_offset())
}

fn apply(event: &mut Vec<u8>, mutation: &Mutation) {
    let len = event.len().max(1);
    match *mutation {
        Mutation::Insert(at, b) => event.insert(at % (event.len() + 1), b),
        Mutation::Delete(at, n) => {
            let at = at % len;
            let end = (at + n).min(event.len());
            event.drain(at.min(end)..end);
        }
        Mutation::Replace(at, b) => {
            if let Some(slot) = event.get_mut(at % len) {
                *slot = b;
            }
        }
        Mutation::Splice(at, n, s) => {
            let at = at % (event.len() + 1);
            let end = (at + n).min(event.len());
            event.splice(at..end, SNIPPETS[s].bytes());
        }
        Mutation::Value(at, s) | Mutation::Member(at, s) => {
            let colons: Vec<usize> = (0..event.len()).filter(|&i| event[i] == b':').collect();
            let Some(&colon) = colons.get(at % colons.len().max(1)) else {
                return;
            };
            let Some(len) = value_end(&event[colon + 1..]) else {
                return;
            };
            let (start, end) = (colon + 1, colon + 1 + len);
            match mutation {
                Mutation::Value(..) => drop(event.splice(start..end, SNIPPETS[s].bytes())),
                _ => drop(event.splice(end..end, MEMBERS[s].bytes())),
            }
        }
        Mutation::Copy(from, n, to) => {
            let from = from % len;
            let end = (from + n).min(event.len());
            let piece: Vec<u8> = event[from.min(end)..end].to_vec();
            let to = to % (event.len() + 1);
            event.splice(to..to, piece);
        }
        Mutation::Nest(at, depth) => {
            let colons: Vec<usize> = (0..event.len()).filter(|&i| event[i] == b':').collect();
            if let Some(&colon) = colons.get(at % colons.len().max(1)) {
                let value = format!("{}{},", "[".repeat(depth), "]".repeat(depth));
                event.splice(colon + 1..colon + 1, value.bytes());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8000, ..ProptestConfig::default() })]

    #[test]
    fn mutated_chunks_are_read_by_the_fast_path_as_serde_json_reads_them_or_left_to_it(
        seed in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 1..3),
    ) {
        let seeds = seeds();
        let mut event = seeds[seed.index(seeds.len())].clone().into_bytes();
        for m in &mutations {
            apply(&mut event, m);
        }
        agree(&event);
    }
}

/// The scanner's and serde_json's readings of one event.
const READ: BothWays = crate::decode::dialect::both_ways::<super::OpenAi>;
