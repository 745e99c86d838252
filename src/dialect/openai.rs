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
use std::fmt;

use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::{Dialect, EventKind, Observations};
use crate::json_scan::FieldScanner;
use crate::sse::SseEvent;

#[derive(Debug, Default)]
pub struct OpenAi;

// Every chunk of every stream is decoded on the proxy's hot path, so nothing here allocates: strings
// are only checked for emptiness and the choices are folded into one flag as they are read.

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    choices: Option<AnyOutput>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    text: Option<NonEmpty>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<NonEmpty>,
    #[serde(default)]
    reasoning_content: Option<NonEmpty>,
    #[serde(default)]
    reasoning: Option<NonEmpty>,
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

/// A JSON string, read only for whether it is empty (escaped strings are not unescaped into a copy).
struct NonEmpty(bool);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = NonEmpty;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<NonEmpty, E> {
                Ok(NonEmpty(!v.is_empty()))
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// The `choices` array, folded into "does any choice carry output" without collecting it.
struct AnyOutput(bool);

impl<'de> Deserialize<'de> for AnyOutput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AnyOutput;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AnyOutput, A::Error> {
                let mut any = false;
                while let Some(choice) = seq.next_element::<Choice>()? {
                    any |= choice.carries_output();
                }
                Ok(AnyOutput(any))
            }
        }
        deserializer.deserialize_seq(V)
    }
}

fn non_empty(s: &Option<NonEmpty>) -> bool {
    s.as_ref().is_some_and(|s| s.0)
}

impl Delta {
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

impl Choice {
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
        let output = chunk.choices.is_some_and(|choices| choices.0);
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
