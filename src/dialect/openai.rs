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

use super::{Dialect, EventKind, Observations};
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
    #[serde(default)]
    tool_calls: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    function_call: Option<IgnoredAny>,
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

impl Choice<'_> {
    fn carries_output(&self) -> bool {
        self.delta.as_ref().is_some_and(Delta::carries_output) || non_empty(&self.text)
    }
}

fn record_usage(usage: &Usage, obs: &mut Observations) {
    if let Some(n) = usage.completion_tokens {
        obs.output_tokens = Some(n);
    }
    if let Some(n) = usage.prompt_tokens {
        obs.input_tokens = Some(n);
    }
}

impl Dialect for OpenAi {
    fn on_event(&mut self, event: &SseEvent<'_>, obs: &mut Observations) -> EventKind {
        let data = event.data.trim_ascii();
        if data == b"[DONE]" || data.is_empty() {
            return EventKind::Other;
        }
        let Ok(chunk) = serde_json::from_slice::<Chunk<'_>>(data) else {
            return EventKind::Malformed;
        };
        if obs.model.is_none() {
            if let Some(model) = chunk.model.as_deref().filter(|m| !m.is_empty()) {
                obs.model = Some(model.to_owned());
            }
        }
        if let Some(usage) = &chunk.usage {
            record_usage(usage, obs);
        }
        if chunk.error.is_some() {
            return EventKind::Error;
        }
        let output = chunk
            .choices
            .as_ref()
            .is_some_and(|choices| choices.iter().any(Choice::carries_output));
        if output {
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
        let mut obs = Observations::default();
        let kind = OpenAi.on_event(
            &SseEvent {
                event: b"",
                data: data.as_bytes(),
            },
            &mut obs,
        );
        (kind, obs)
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
