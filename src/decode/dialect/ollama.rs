//! Ollama's native API: `/api/generate` and `/api/chat`, streamed as NDJSON (one JSON object a line,
//! `application/x-ndjson`), or one JSON body with `"stream": false`.
//!
//! Output-bearing: a line with non-empty `response` (generate) or `message.content` (chat), non-empty
//! `thinking` / `message.thinking` (reasoning models), or any `message.tool_calls` entry. Not output: the
//! final `done: true` line when its text is empty. That line is terminal: the client has the whole
//! answer once it has passed. Output tokens come from `eval_count`, input tokens
//! from `prompt_eval_count`, both on the `done: true` line (or the non-streaming body). A line with an
//! `error` field means `upstream_error`. Tool-call arguments arrive as JSON objects, not text, so a
//! tokenizer sees only the names of the called tools.
//!
//! Reasoning: `thinking` / `message.thinking`; text and tool calls are answer. The server's timings: the
//! `done` line's `load_duration`, `prompt_eval_duration` and `eval_duration` (nanoseconds). Ollama
//! reports no cached prompt tokens (its `prompt_eval_count` counts only the prompt it evaluated).
//!
//! The per-token lines are read by a scanner of their own ([`scan`]) without serde_json; the `done` line,
//! a line with tool calls or an error, and any the scanner is not sure to read as serde_json does, are
//! read by serde_json (`differential.rs` holds the two equal).

#[cfg(test)]
mod differential;
mod scan;

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::text::Text;
use super::timings::OllamaDurations;
use super::{EventKind, EventOutput, Observations, Wire};
use crate::decode::json::FieldScanner;

#[derive(Debug, Default)]
pub struct Ollama;

/// One line, as serde_json reads it; the scanner fills the same struct (absent fields: the default).
#[derive(Deserialize, Default)]
pub struct Line<'a> {
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(borrow, default)]
    response: Text<'a>,
    #[serde(borrow, default)]
    thinking: Text<'a>,
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
    #[serde(default)]
    done: Option<bool>,
    #[serde(default)]
    eval_count: Option<u64>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    error: Option<IgnoredAny>,
    #[serde(default)]
    load_duration: Option<u64>,
    #[serde(default)]
    prompt_eval_duration: Option<u64>,
    #[serde(default)]
    eval_duration: Option<u64>,
}

#[derive(Deserialize, Default)]
struct Message<'a> {
    #[serde(borrow, default)]
    content: Text<'a>,
    #[serde(borrow, default)]
    thinking: Text<'a>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow, default)]
    function: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow, default)]
    name: Text<'a>,
}

impl Wire for Ollama {
    type Event<'a> = Line<'a>;

    fn scan<'a, R>(data: &'a [u8], then: impl FnOnce(&Line<'a>) -> R) -> Option<R> {
        scan::line(data).map(|event| then(&event))
    }

    /// What one line means, the same whichever reading made it.
    fn apply(
        &mut self, line: &Line<'_>, obs: &mut Observations, text: &mut EventOutput<'_>,
    ) -> EventKind {
        obs.model(line.model.0.as_deref());
        obs.record(line.eval_count, line.prompt_eval_count);
        if line.done == Some(true) {
            obs.ended = true;
            let durations = OllamaDurations {
                load_duration: line.load_duration,
                prompt_eval_duration: line.prompt_eval_duration,
                eval_duration: line.eval_duration,
            };
            obs.server.merge(durations.timings());
        }
        if line.error.is_some() {
            return EventKind::Error;
        }
        let message = line.message.as_ref();
        let mut kind = EventKind::Other;
        let reasoning = [Some(&line.thinking), message.map(|m| &m.thinking)];
        for part in reasoning.into_iter().flatten().filter_map(Text::non_empty) {
            text.push_reasoning(part);
            kind = EventKind::Output;
        }
        let answer = [Some(&line.response), message.map(|m| &m.content)];
        for part in answer.into_iter().flatten().filter_map(Text::non_empty) {
            text.answer();
            text.push(part);
            kind = EventKind::Output;
        }
        let calls = message
            .and_then(|m| m.tool_calls.as_deref())
            .unwrap_or_default();
        if !calls.is_empty() {
            text.answer();
            text.tool_call();
            let names = calls.iter().filter_map(|c| c.function.as_ref());
            names
                .filter_map(|f| f.name.non_empty())
                .for_each(|n| text.push(n));
            kind = EventKind::Output;
        }
        kind
    }

    const BODY_FIELDS: &'static [&'static str] = &[
        "model",
        "eval_count",
        "prompt_eval_count",
        "load_duration",
        "prompt_eval_duration",
        "eval_duration",
    ];

    fn body(&mut self, fields: &FieldScanner, obs: &mut Observations) {
        obs.model(fields.string("model").as_deref());
        obs.record(
            fields.value("eval_count"),
            fields.value("prompt_eval_count"),
        );
        let durations = OllamaDurations {
            load_duration: fields.value("load_duration"),
            prompt_eval_duration: fields.value("prompt_eval_duration"),
            eval_duration: fields.value("eval_duration"),
        };
        obs.server.merge(durations.timings());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(data: &str) -> (EventKind, Observations, String) {
        crate::decode::dialect::classify_with(&mut Ollama, data)
    }

    #[test]
    fn generate_and_chat_text_thinking_and_tool_calls_are_output() {
        let cases = [
            (
                r#"{"model":"llama3.2","created_at":"t","response":"The","done":false}"#,
                "The",
            ),
            (
                r#"{"model":"m","message":{"role":"assistant","content":" sky"},"done":false}"#,
                " sky",
            ),
            (
                r#"{"model":"m","message":{"role":"assistant","content":"","thinking":"hm"},"done":false}"#,
                "hm",
            ),
            (
                r#"{"model":"m","response":"","thinking":"so","done":false}"#,
                "so",
            ),
            (
                r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},"done":false}"#,
                "get_weather",
            ),
        ];
        for (line, want) in cases {
            let (kind, obs, text) = classify(line);
            assert_eq!((kind, text.as_str()), (EventKind::Output, want), "{line}");
            assert!(obs.model.is_some());
        }
    }

    #[test]
    fn done_line_with_empty_text_is_not_output_but_carries_the_counts() {
        let done = r#"{"model":"llama3.2","created_at":"t","response":"","done":true,"done_reason":"stop","context":[1,2,3],"total_duration":10706818083,"load_duration":6338219291,"prompt_eval_count":26,"prompt_eval_duration":130079000,"eval_count":259,"eval_duration":4232710000}"#;
        let (kind, obs, _) = classify(done);
        assert_eq!(kind, EventKind::Other);
        assert_eq!((obs.input_tokens, obs.output_tokens), (Some(26), Some(259)));
        let ns = |n: u64| Some(std::time::Duration::from_nanos(n));
        assert_eq!(obs.server.ttft, ns(6_338_219_291 + 130_079_000));
        assert_eq!(obs.server.prefill, ns(130_079_000));
        assert_eq!(obs.server.generation, ns(4_232_710_000));
        assert_eq!((obs.server.queue, obs.cached_input_tokens), (None, None));
    }

    #[test]
    fn thinking_is_reasoning_and_text_or_tool_calls_are_answer() {
        use crate::decode::dialect::{channels_of, ANSWER, REASONING, TOOL};
        let thinking = r#"{"model":"m","message":{"role":"assistant","content":"","thinking":"hm"},"done":false}"#;
        assert_eq!(channels_of(&mut Ollama, thinking), REASONING);
        let generate = r#"{"model":"m","response":"","thinking":"so","done":false}"#;
        assert_eq!(channels_of(&mut Ollama, generate), REASONING);
        let text = r#"{"model":"m","response":"The","done":false}"#;
        assert_eq!(channels_of(&mut Ollama, text), ANSWER);
        let tool = r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]},"done":false}"#;
        assert_eq!(channels_of(&mut Ollama, tool), TOOL);
    }

    #[test]
    fn error_line_is_an_error() {
        assert_eq!(
            classify(r#"{"error":"model runner has unexpectedly stopped"}"#).0,
            EventKind::Error
        );
        assert_eq!(classify("[1").0, EventKind::Malformed);
    }
}
