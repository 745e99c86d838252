//! Anthropic Messages (`/v1/messages`), as served by Anthropic, Anthropic-compatible gateways and vLLM:
//! named SSE events whose JSON `type` repeats the event name.
//!
//! Output-bearing: a `content_block_delta` whose delta is non-empty `text` (`text_delta`), `thinking`
//! (`thinking_delta`) or `partial_json` (`input_json_delta`, a tool call's input). Not output:
//! `message_start`, `content_block_start`/`stop`, `message_delta`, `message_stop`, `ping`, and
//! `signature_delta`/`citations_delta` (no generated text). Input tokens come from `message_start`'s
//! usage (`input_tokens` plus the cache-creation and cache-read tokens, i.e. the whole prompt); output
//! tokens from the cumulative usage in `message_delta` (the placeholder `output_tokens` of
//! `message_start` is ignored). An `error` event, anywhere in the stream, means `upstream_error`.

use std::borrow::Cow;

use serde::Deserialize;

use super::text::Text;
use super::{Dialect, EventKind, Observations, OutputText};
use crate::json_scan::FieldScanner;
use crate::sse::SseEvent;

#[derive(Debug, Default)]
pub struct Anthropic;

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    text: Text<'a>,
    #[serde(borrow, default)]
    thinking: Text<'a>,
    #[serde(borrow, default)]
    partial_json: Text<'a>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

impl Usage {
    fn record_input(&self, obs: &mut Observations) {
        if let Some(n) = self.input_tokens {
            let cached = [
                self.cache_creation_input_tokens,
                self.cache_read_input_tokens,
            ];
            obs.input_tokens = Some(cached.into_iter().flatten().fold(n, u64::saturating_add));
        }
    }
}

impl Dialect for Anthropic {
    fn on_event(
        &mut self,
        event: &SseEvent<'_>,
        obs: &mut Observations,
        text: &mut OutputText<'_>,
    ) -> EventKind {
        let Ok(event) = serde_json::from_slice::<Event<'_>>(event.data) else {
            return EventKind::Malformed;
        };
        match event.kind.as_deref().unwrap_or_default() {
            "error" => EventKind::Error,
            "message_start" => {
                if let Some(message) = &event.message {
                    obs.model(message.model.0.as_deref());
                    if let Some(usage) = &message.usage {
                        usage.record_input(obs);
                    }
                }
                EventKind::Other
            }
            "message_delta" => {
                if let Some(usage) = &event.usage {
                    usage.record_input(obs);
                    obs.record(usage.output_tokens, None);
                }
                EventKind::Other
            }
            "content_block_delta" => {
                let Some(delta) = &event.delta else {
                    return EventKind::Other;
                };
                let parts = [&delta.text, &delta.thinking, &delta.partial_json];
                let mut output = EventKind::Other;
                for part in parts.into_iter().filter_map(Text::non_empty) {
                    text.push(part);
                    output = EventKind::Output;
                }
                output
            }
            _ => EventKind::Other,
        }
    }

    fn body_fields(&self) -> &'static [&'static str] {
        &["model", "usage"]
    }

    fn on_body(&mut self, fields: &FieldScanner, obs: &mut Observations) {
        obs.model(fields.string("model").as_deref());
        if let Some(usage) = fields
            .raw("usage")
            .and_then(|raw| serde_json::from_slice::<Usage>(raw).ok())
        {
            usage.record_input(obs);
            obs.record(usage.output_tokens, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(data: &str) -> (EventKind, Observations, String) {
        crate::dialect::classify_with(&mut Anthropic, data)
    }

    #[test]
    fn text_thinking_and_tool_input_deltas_are_output() {
        let cases = [
            (r#"{"type":"text_delta","text":"Hi"}"#, "Hi"),
            (r#"{"type":"thinking_delta","thinking":"hmm"}"#, "hmm"),
            (
                r#"{"type":"input_json_delta","partial_json":"{\"city\":"}"#,
                "{\"city\":",
            ),
        ];
        for (delta, want) in cases {
            let data = format!(r#"{{"type":"content_block_delta","index":0,"delta":{delta}}}"#);
            let (kind, _, copied) = classify(&data);
            assert_eq!(
                (kind, copied.as_str()),
                (EventKind::Output, want),
                "{delta}"
            );
        }
        for delta in [
            r#"{"type":"input_json_delta","partial_json":""}"#,
            r#"{"type":"signature_delta","signature":"EqQBCgIYAhIM"}"#,
        ] {
            let data = format!(r#"{{"type":"content_block_delta","index":0,"delta":{delta}}}"#);
            assert_eq!(classify(&data).0, EventKind::Other, "{delta}");
        }
    }

    #[test]
    fn message_start_gives_model_and_whole_prompt_and_message_delta_the_output_count() {
        let start = r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-x","stop_reason":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":3,"cache_read_input_tokens":100,"output_tokens":1}}}"#;
        let (kind, obs, _) = classify(start);
        assert_eq!(kind, EventKind::Other);
        assert_eq!(obs.model.as_deref(), Some("claude-x"));
        assert_eq!((obs.input_tokens, obs.output_tokens), (Some(128), None));
        let delta = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#;
        let (kind, obs, _) = classify(delta);
        assert_eq!((kind, obs.output_tokens), (EventKind::Other, Some(15)));
    }

    #[test]
    fn ping_stop_events_are_not_output_and_error_is_an_error() {
        for data in [
            r#"{"type": "ping"}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_stop"}"#,
        ] {
            assert_eq!(classify(data).0, EventKind::Other, "{data}");
        }
        let error =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(classify(error).0, EventKind::Error);
        assert_eq!(classify("not json").0, EventKind::Malformed);
    }
}
