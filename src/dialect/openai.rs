//! OpenAI-compatible chat and text completions, as served by vLLM, SGLang, TGI's OpenAI routes,
//! llama.cpp's `/v1` routes, Ollama's `/v1` routes and hosted APIs.
//!
//! Output-bearing: a chunk with a choice whose `delta` has non-empty `content`, `reasoning_content` or
//! `reasoning`, or any `tool_calls`/`function_call` entry; for text completions a non-empty `text`.
//! Not output: the role-only first chunk vLLM sends before any token exists, the usage-only final chunk
//! (`"choices":[]`), `[DONE]`. Usage (`completion_tokens`, `prompt_tokens`) is taken from whichever chunk
//! carries it last (the final chunk with `stream_options.include_usage`, or every chunk with vLLM's
//! continuous usage stats, which are cumulative) and from a non-streaming body's `usage`.

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::text::Text;
use super::{Dialect, EventKind, Observations, OutputText};
use crate::json_scan::FieldScanner;
use crate::sse::SseEvent;

#[derive(Debug, Default)]
pub struct OpenAi;

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
    #[serde(borrow, default)]
    function_call: Option<Function<'a>>,
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
    #[serde(borrow, default)]
    arguments: Text<'a>,
}

impl Function<'_> {
    fn copy_text(&self, text: &mut OutputText<'_>) {
        for part in [&self.name, &self.arguments] {
            if let Some(s) = part.non_empty() {
                text.push(s);
            }
        }
    }
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

fn non_empty(s: &Option<Cow<'_, str>>) -> bool {
    s.as_deref().is_some_and(|s| !s.is_empty())
}

impl Delta<'_> {
    fn carries_output(&self) -> bool {
        non_empty(&self.content)
            || non_empty(&self.reasoning_content)
            || non_empty(&self.reasoning)
            || self
                .tool_calls
                .as_ref()
                .is_some_and(|calls| !calls.is_empty())
            || self.function_call.is_some()
    }
}

impl Delta<'_> {
    /// Content, reasoning and tool-call names and arguments, as a tokenizer should see them.
    fn copy_text(&self, text: &mut OutputText<'_>) {
        for part in [&self.content, &self.reasoning_content, &self.reasoning] {
            if let Some(s) = part.as_deref() {
                text.push(s);
            }
        }
        let calls = self.tool_calls.iter().flatten();
        for function in calls.filter_map(|c| c.function.as_ref()) {
            function.copy_text(text);
        }
        if let Some(function) = &self.function_call {
            function.copy_text(text);
        }
    }
}

impl Choice<'_> {
    fn carries_output(&self) -> bool {
        self.delta.as_ref().is_some_and(Delta::carries_output) || non_empty(&self.text)
    }

    fn copy_text(&self, text: &mut OutputText<'_>) {
        if let Some(delta) = &self.delta {
            delta.copy_text(text);
        }
        if let Some(s) = self.text.as_deref() {
            text.push(s);
        }
    }
}

fn record_usage(usage: &Usage, obs: &mut Observations) {
    obs.record(usage.completion_tokens, usage.prompt_tokens);
}

impl Dialect for OpenAi {
    fn on_event(
        &mut self,
        event: &SseEvent<'_>,
        obs: &mut Observations,
        text: &mut OutputText<'_>,
    ) -> EventKind {
        let data = event.data.trim_ascii();
        if data == b"[DONE]" || data.is_empty() {
            return EventKind::Other;
        }
        let Ok(chunk) = serde_json::from_slice::<Chunk<'_>>(data) else {
            return EventKind::Malformed;
        };
        obs.model(chunk.model.as_deref());
        if let Some(usage) = &chunk.usage {
            record_usage(usage, obs);
        }
        if chunk.error.is_some() {
            return EventKind::Error;
        }
        let choices = chunk.choices.as_deref().unwrap_or_default();
        if choices.iter().any(Choice::carries_output) {
            choices.iter().for_each(|choice| choice.copy_text(text));
            EventKind::Output
        } else {
            EventKind::Other
        }
    }

    fn body_fields(&self) -> &'static [&'static str] {
        &["model", "usage"]
    }

    fn on_body(&mut self, fields: &FieldScanner, obs: &mut Observations) {
        if let Some(model) = fields.string("model").filter(|m| !m.is_empty()) {
            obs.model = Some(model);
        }
        if let Some(usage) = fields
            .raw("usage")
            .and_then(|raw| serde_json::from_slice::<Usage>(raw).ok())
        {
            record_usage(&usage, obs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(data: &str) -> (EventKind, Observations) {
        let (kind, obs, _) = crate::dialect::classify_with(&mut OpenAi, data);
        (kind, obs)
    }

    fn text_of(data: &str) -> String {
        let mut copied = String::new();
        let event = SseEvent {
            event: b"",
            data: data.as_bytes(),
        };
        let text = &mut OutputText::new(Some(&mut copied));
        OpenAi.on_event(&event, &mut Observations::default(), text);
        copied
    }

    #[test]
    fn output_text_is_content_reasoning_and_tool_call_arguments() {
        assert_eq!(
            text_of(r#"{"choices":[{"delta":{"content":"a\nb"}}]}"#),
            "a\nb"
        );
        assert_eq!(
            text_of(r#"{"choices":[{"delta":{"reasoning_content":"r","content":"c"}}]}"#),
            "cr"
        );
        assert_eq!(
            text_of(
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"x","function":{"name":"f","arguments":"{\"a\""}}]}}]}"#
            ),
            "f{\"a\""
        );
        assert_eq!(text_of(r#"{"choices":[{"text":"t","index":0}]}"#), "t");
    }

    #[test]
    fn role_only_first_chunk_is_not_output() {
        let (kind, obs) = classify(
            r#"{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        );
        assert_eq!(kind, EventKind::Other);
        assert_eq!(obs.model.as_deref(), Some("m"));
        assert_eq!(
            classify(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#).0,
            EventKind::Other
        );
    }

    #[test]
    fn content_reasoning_and_tool_call_deltas_are_output() {
        assert_eq!(
            classify(r#"{"choices":[{"delta":{"content":"hi"}}]}"#).0,
            EventKind::Output
        );
        assert_eq!(
            classify(r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#).0,
            EventKind::Output
        );
        assert_eq!(
            classify(r#"{"choices":[{"delta":{"reasoning":"hm","content":null}}]}"#).0,
            EventKind::Output
        );
        assert_eq!(
            classify(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}"#).0,
            EventKind::Output
        );
        assert_eq!(
            classify(r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#).0,
            EventKind::Other
        );
        assert_eq!(
            classify(r#"{"choices":[{"text":"x","index":0}]}"#).0,
            EventKind::Output
        );
        assert_eq!(
            classify(r#"{"choices":[{"text":"","index":0}]}"#).0,
            EventKind::Other
        );
    }

    #[test]
    fn usage_only_chunk_and_done_are_not_output_but_usage_is_taken() {
        let (kind, obs) =
            classify(r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":16}}"#);
        assert_eq!(kind, EventKind::Other);
        assert_eq!((obs.input_tokens, obs.output_tokens), (Some(7), Some(16)));
        assert_eq!(classify("[DONE]").0, EventKind::Other);
    }

    #[test]
    fn error_object_in_stream_is_an_error_and_garbage_is_malformed() {
        assert_eq!(
            classify(r#"{"error":{"message":"boom","code":500}}"#).0,
            EventKind::Error
        );
        assert_eq!(classify("{not json").0, EventKind::Malformed);
    }
}
