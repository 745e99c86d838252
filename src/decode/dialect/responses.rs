//! OpenAI Responses (`/v1/responses`), as served by OpenAI, vLLM and SGLang: typed SSE events whose JSON
//! `type` says what they are.
//!
//! Output-bearing: every `response.*.delta` event with a non-empty `delta` — output text, refusal,
//! reasoning text and reasoning summaries, function-call and custom-tool arguments, code-interpreter
//! code. Not output: `response.created`/`in_progress`, `output_item.added`/`done`, `content_part.*`,
//! the `*.done` events (they repeat text already streamed), `response.completed`. Usage
//! (`output_tokens`, `input_tokens`, `output_tokens_details.reasoning_tokens`) and the model come from
//! the `response` object of the lifecycle events, the last one seen (normally `response.completed`).
//! `response.failed` and an `error` event end the request as `upstream_error`; `response.incomplete` (a
//! `max_output_tokens` or content-filter stop the server chose, like chat's `finish_reason: "length"`)
//! ends it normally. `response.completed`, `response.incomplete` and `response.failed` are terminal: the
//! client has the whole answer once one has passed.
//!
//! Reasoning: `response.reasoning_text.delta` and `response.reasoning_summary_text.delta` (and any other
//! `response.reasoning*.delta`); every other output delta is answer. Cached prompt tokens:
//! `usage.input_tokens_details.cached_tokens`. The server's timings: vLLM's `metrics` object on the
//! `response` (`--enable-per-request-metrics`).
//!
//! The per-token events (`response.*.delta`) are read by a scanner of their own ([`scan`]) without
//! serde_json; the lifecycle events, and any delta the scanner is not sure to read as serde_json does, are
//! read by serde_json (`differential.rs` holds the two equal).

#[cfg(test)]
mod differential;
mod scan;

use std::borrow::Cow;

use serde::Deserialize;

use super::text::Text;
use super::timings::VllmMetrics;
use super::{EventKind, EventOutput, Observations, Wire};
use crate::decode::json::FieldScanner;

#[derive(Debug, Default)]
pub struct Responses;

/// One event, as serde_json reads it; the scanner fills the same struct (absent fields: the default).
#[derive(Deserialize, Default)]
pub struct Event<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Text<'a>,
    #[serde(borrow, default)]
    response: Option<Response<'a>>,
    /// `response.output_item.added`'s item, whose type says whether a tool call starts.
    #[serde(borrow, default)]
    item: Option<Item<'a>>,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
}

/// The output items and delta events of a call to one of the client's tools: what an agent acts on.
const TOOL_ITEMS: [&str; 2] = ["function_call", "custom_tool_call"];
const TOOL_DELTAS: [&str; 2] = [
    "response.function_call_arguments.delta",
    "response.custom_tool_call_input.delta",
];

#[derive(Deserialize)]
struct Response<'a> {
    #[serde(borrow, default)]
    id: Text<'a>,
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    metrics: Option<VllmMetrics>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    output_tokens_details: Option<OutputDetails>,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OutputDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

fn record_usage(usage: &Usage, obs: &mut Observations) {
    obs.record(usage.output_tokens, usage.input_tokens);
    let details = usage.output_tokens_details.as_ref();
    if let Some(n) = details.and_then(|d| d.reasoning_tokens) {
        obs.reasoning_tokens = Some(n);
    }
    let input = usage.input_tokens_details.as_ref();
    if let Some(n) = input.and_then(|d| d.cached_tokens) {
        obs.cached_input_tokens = Some(n);
    }
}

impl Wire for Responses {
    type Event<'a> = Event<'a>;

    /// A `response.*.delta` event; the others are serde_json's.
    fn scan<'a, R>(data: &'a [u8], then: impl FnOnce(&Event<'a>) -> R) -> Option<R> {
        scan::delta_event(data).map(|event| then(&event))
    }

    fn apply(
        &mut self, event: &Event<'_>, obs: &mut Observations, text: &mut EventOutput<'_>,
    ) -> EventKind {
        if let Some(response) = &event.response {
            obs.response_id(response.id.0.as_deref());
            obs.model(response.model.0.as_deref());
            if let Some(usage) = &response.usage {
                record_usage(usage, obs);
            }
            if let Some(metrics) = &response.metrics {
                obs.server.merge(metrics.timings());
            }
        }
        let kind = event.kind.as_deref().unwrap_or_default();
        if kind.ends_with(".delta") {
            return on_delta(kind, &event.delta, text);
        }
        if matches!(
            kind,
            "response.completed" | "response.incomplete" | "response.failed"
        ) {
            obs.ended = true;
        }
        let item = event.item.as_ref().and_then(|i| i.kind.as_deref());
        if kind == "response.output_item.added" && item.is_some_and(|i| TOOL_ITEMS.contains(&i)) {
            // The call's item names the tool before its arguments stream: not a token, but the call's
            // start.
            text.tool_call();
        }
        match kind {
            "error" | "response.failed" => EventKind::Error,
            _ => EventKind::Other,
        }
    }

    const BODY_FIELDS: &'static [&'static str] = &["id", "model", "usage", "metrics"];

    fn body(&mut self, fields: &FieldScanner, obs: &mut Observations) {
        obs.response_id(fields.string("id").as_deref());
        obs.model(fields.string("model").as_deref());
        if let Some(usage) = fields.value::<Usage>("usage") {
            record_usage(&usage, obs);
        }
        if let Some(metrics) = fields.value::<VllmMetrics>("metrics") {
            obs.server.merge(metrics.timings());
        }
    }
}

/// The output of a `response.*.delta` event.
fn on_delta(kind: &str, delta: &Text<'_>, text: &mut EventOutput<'_>) -> EventKind {
    match delta.non_empty() {
        Some(delta) => {
            if kind.starts_with("response.reasoning") {
                text.push_reasoning(delta);
            } else {
                text.answer();
                if TOOL_DELTAS.contains(&kind) {
                    text.tool_call();
                }
                if kind != "response.audio.delta" {
                    text.push(delta); // audio deltas are base64 bytes, not text
                }
            }
            EventKind::Output
        }
        None => EventKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(data: &str) -> (EventKind, Observations, String) {
        crate::decode::dialect::classify_with(&mut Responses, data)
    }

    #[test]
    fn reasoning_deltas_are_reasoning_and_text_refusal_or_arguments_are_answer() {
        use crate::decode::dialect::{channels_of, ANSWER, REASONING, TOOL};
        let delta = |kind: &str| format!(r#"{{"type":"{kind}","output_index":0,"delta":"ab"}}"#);
        for kind in [
            "response.reasoning_text.delta",
            "response.reasoning_summary_text.delta",
        ] {
            assert_eq!(
                channels_of(&mut Responses, &delta(kind)),
                REASONING,
                "{kind}"
            );
        }
        for kind in ["response.output_text.delta", "response.refusal.delta"] {
            assert_eq!(channels_of(&mut Responses, &delta(kind)), ANSWER, "{kind}");
        }
        for kind in [
            "response.function_call_arguments.delta",
            "response.custom_tool_call_input.delta",
        ] {
            assert_eq!(channels_of(&mut Responses, &delta(kind)), TOOL, "{kind}");
        }
    }

    #[test]
    fn a_function_call_item_starts_a_tool_call_before_its_arguments() {
        use crate::decode::dialect::marks_tool_call;
        let added = |item: &str| {
            format!(
                r#"{{"type":"response.output_item.added","output_index":1,"item":{{"type":"{item}","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":""}}}}"#
            )
        };
        assert!(marks_tool_call(&mut Responses, &added("function_call")));
        assert!(marks_tool_call(&mut Responses, &added("custom_tool_call")));
        assert!(!marks_tool_call(&mut Responses, &added("message")));
        assert!(!marks_tool_call(&mut Responses, &added("reasoning")));
        let (kind, _, _) = classify(&added("function_call"));
        assert_eq!(kind, EventKind::Other, "the item is not a token");
    }

    #[test]
    fn completed_gives_cached_input_tokens_and_vllm_metrics() {
        let completed = r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":8},"output_tokens":7},"metrics":{"queue_time_ms":4.0,"time_to_first_token_ms":6.0,"generation_time_ms":50.0}}}"#;
        let (_, obs, _) = classify(completed);
        assert_eq!(obs.cached_input_tokens, Some(8));
        let ms = |n: u64| Some(std::time::Duration::from_millis(n));
        assert_eq!((obs.server.queue, obs.server.ttft), (ms(4), ms(10)));
    }

    #[test]
    fn text_reasoning_and_argument_deltas_are_output() {
        for kind in [
            "response.output_text.delta",
            "response.reasoning_text.delta",
            "response.reasoning_summary_text.delta",
            "response.function_call_arguments.delta",
            "response.refusal.delta",
        ] {
            let data = format!(
                r#"{{"type":"{kind}","item_id":"x","output_index":0,"delta":"ab","sequence_number":4}}"#
            );
            let (got, _, text) = classify(&data);
            assert_eq!((got, text.as_str()), (EventKind::Output, "ab"), "{kind}");
        }
        let empty = r#"{"type":"response.output_text.delta","delta":""}"#;
        assert_eq!(classify(empty).0, EventKind::Other);
    }

    #[test]
    fn lifecycle_and_done_events_are_not_output_and_completed_carries_usage() {
        let created = r#"{"type":"response.created","sequence_number":0,"response":{"id":"r","model":"gpt-x","status":"in_progress","output":[],"usage":null}}"#;
        let (kind, obs, _) = classify(created);
        assert_eq!(
            (kind, obs.model.as_deref()),
            (EventKind::Other, Some("gpt-x"))
        );
        let done = r#"{"type":"response.output_text.done","text":"whole text"}"#;
        assert_eq!(classify(done).0, EventKind::Other);
        let completed = r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":2},"total_tokens":19}}}"#;
        let (kind, obs, _) = classify(completed);
        assert_eq!(kind, EventKind::Other);
        assert_eq!((obs.input_tokens, obs.output_tokens), (Some(12), Some(7)));
    }

    #[test]
    fn failed_and_error_events_are_errors_but_incomplete_is_not() {
        let failed = r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"x"}}}"#;
        assert_eq!(classify(failed).0, EventKind::Error);
        let error = r#"{"type":"error","code":"ERR","message":"boom","param":null}"#;
        assert_eq!(classify(error).0, EventKind::Error);
        let incomplete = r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":3,"output_tokens":16}}}"#;
        let (kind, obs, _) = classify(incomplete);
        assert_eq!((kind, obs.output_tokens), (EventKind::Other, Some(16)));
        assert_eq!(classify("{oops").0, EventKind::Malformed);
    }
}
