//! Anthropic Messages (`/v1/messages`), as served by Anthropic, Anthropic-compatible gateways and vLLM:
//! named SSE events whose JSON `type` repeats the event name.
//!
//! Output-bearing: a `content_block_delta` whose delta is non-empty `text` (`text_delta`), `thinking`
//! (`thinking_delta`), `partial_json` (`input_json_delta`, a tool call's input) or `content`
//! (`compaction_delta`: the summary the model wrote when the server compacted the context, which the
//! client receives like any other text). Not output: `message_start`, `content_block_start`/`stop`,
//! `message_delta`, `message_stop`, `ping`, and `signature_delta`/`citations_delta` (no generated text).
//! `message_stop` is terminal: the client has the whole answer once it has passed.
//!
//! Usage is cumulative in every event that carries it, so each field keeps the last value reported:
//! `message_start` gives the first figures and `message_delta` the final ones (with server tools such
//! as web search, the input grows during the request: 2,037 tokens at the start can be 15,665 at the
//! end). Input tokens are the whole prompt: `input_tokens` plus the cache-creation and cache-read
//! tokens. The placeholder `output_tokens` of `message_start` is ignored. When the server compacted the
//! context, `usage.iterations` lists each sampling pass (the compaction, then the message); tokentap
//! then counts the sums over the passes, which is the work the server did (and what is billed) for the
//! request. An `error` event, anywhere in the stream, means `upstream_error`.
//!
//! Reasoning: `thinking_delta`; every other output delta (text, tool input, compaction summary) is
//! answer. Cached prompt tokens: `cache_read_input_tokens` (the last cumulative value; summed over the
//! passes when `iterations` lists them). Anthropic reports no timings of its own.
//!
//! The per-token event, `content_block_delta`, is read by a scanner of its own ([`scan`]) without
//! serde_json; every other event, and any delta the scanner is not sure to read as serde_json does, is
//! read by serde_json (`differential.rs` holds the two equal).

#[cfg(test)]
mod differential;
mod scan;

use std::borrow::Cow;

use serde::Deserialize;

use super::text::Text;
use super::{EventKind, EventOutput, Observations, Wire};
use crate::decode::json::FieldScanner;

/// The last cumulative value of each input field, summed when any changes.
#[derive(Debug, Default)]
pub struct Anthropic {
    input: Option<u64>,
    cache_creation: Option<u64>,
    cache_read: Option<u64>,
}

/// One event, as serde_json reads it; the scanner fills the same struct (absent fields: the default).
#[derive(Deserialize, Default)]
pub struct Event<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    /// `content_block_start`'s block, whose type says whether a call of the client's tools starts.
    #[serde(borrow, default)]
    content_block: Option<Block<'a>>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize, Default)]
struct Delta<'a> {
    #[serde(borrow, default)]
    text: Text<'a>,
    #[serde(borrow, default)]
    thinking: Text<'a>,
    #[serde(borrow, default)]
    partial_json: Text<'a>,
    #[serde(borrow, default)]
    content: Text<'a>,
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
    #[serde(default)]
    iterations: Option<Vec<Usage>>,
}

impl Usage {
    /// The whole prompt of one pass.
    fn prompt(&self) -> u64 {
        [
            self.input_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        ]
        .into_iter()
        .flatten()
        .fold(0, u64::saturating_add)
    }
}

impl Anthropic {
    /// Takes a usage object; `with_output`: its `output_tokens` is a real count (not `message_start`'s
    /// placeholder).
    fn usage(&mut self, usage: &Usage, with_output: bool, obs: &mut Observations) {
        if let Some(passes) = usage.iterations.as_deref().filter(|p| !p.is_empty()) {
            let sum = |f: fn(&Usage) -> u64| passes.iter().map(f).fold(0, u64::saturating_add);
            let output = with_output.then(|| sum(|p| p.output_tokens.unwrap_or(0)));
            obs.record(output, Some(sum(Usage::prompt)));
            if passes.iter().any(|p| p.cache_read_input_tokens.is_some()) {
                obs.cached_input_tokens = Some(sum(|p| p.cache_read_input_tokens.unwrap_or(0)));
            }
            return;
        }
        let fields = [
            (&mut self.input, usage.input_tokens),
            (&mut self.cache_creation, usage.cache_creation_input_tokens),
            (&mut self.cache_read, usage.cache_read_input_tokens),
        ];
        for (kept, reported) in fields {
            if reported.is_some() {
                *kept = reported;
            }
        }
        let input = self.input.map(|n| {
            [self.cache_creation, self.cache_read]
                .into_iter()
                .flatten()
                .fold(n, u64::saturating_add)
        });
        obs.record(usage.output_tokens.filter(|_| with_output), input);
        if self.cache_read.is_some() {
            obs.cached_input_tokens = self.cache_read;
        }
    }
}

impl Wire for Anthropic {
    type Event<'a> = Event<'a>;

    /// A `content_block_delta`; the others are serde_json's.
    fn scan<'a, R>(data: &'a [u8], then: impl FnOnce(&Event<'a>) -> R) -> Option<R> {
        scan::content_block_delta(data).map(|event| then(&event))
    }

    fn apply(
        &mut self, event: &Event<'_>, obs: &mut Observations, text: &mut EventOutput<'_>,
    ) -> EventKind {
        match event.kind.as_deref().unwrap_or_default() {
            "content_block_delta" => event
                .delta
                .as_ref()
                .map_or(EventKind::Other, |delta| on_delta(delta, text)),
            "error" => EventKind::Error,
            "message_start" => {
                if let Some(message) = &event.message {
                    obs.model(message.model.0.as_deref());
                    if let Some(usage) = &message.usage {
                        self.usage(usage, false, obs);
                    }
                }
                EventKind::Other
            }
            "message_delta" => {
                if let Some(usage) = &event.usage {
                    self.usage(usage, true, obs);
                }
                EventKind::Other
            }
            "message_stop" => {
                obs.ended = true;
                EventKind::Other
            }
            "content_block_start" => {
                // A `tool_use` block (one of the client's tools, not a `server_tool_use` the server runs
                // itself) names the tool before its input streams: not a token, but the call's start.
                let block = event.content_block.as_ref().and_then(|b| b.kind.as_deref());
                if block == Some("tool_use") {
                    text.tool_call();
                }
                EventKind::Other
            }
            _ => EventKind::Other,
        }
    }

    const BODY_FIELDS: &'static [&'static str] = &["model", "usage"];

    fn body(&mut self, fields: &FieldScanner, obs: &mut Observations) {
        obs.model(fields.string("model").as_deref());
        if let Some(usage) = fields.value::<Usage>("usage") {
            self.usage(&usage, true, obs);
        }
    }
}

/// The output a `content_block_delta`'s delta carries.
fn on_delta(delta: &Delta<'_>, text: &mut EventOutput<'_>) -> EventKind {
    let mut output = EventKind::Other;
    if let Some(thinking) = delta.thinking.non_empty() {
        text.push_reasoning(thinking);
        output = EventKind::Output;
    }
    let answer = [&delta.text, &delta.partial_json, &delta.content];
    for part in answer.into_iter().filter_map(Text::non_empty) {
        text.answer();
        text.push(part);
        output = EventKind::Output;
    }
    output
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::dialect::Dialect;
    use crate::decode::event::FramedEvent;

    fn classify(data: &str) -> (EventKind, Observations, String) {
        crate::decode::dialect::classify_with(&mut Anthropic::default(), data)
    }

    fn channels(data: &str) -> Option<crate::decode::dialect::Channels> {
        crate::decode::dialect::channels_of(&mut Anthropic::default(), data)
    }

    #[test]
    fn thinking_is_reasoning_and_text_or_tool_input_is_answer() {
        use crate::decode::dialect::{ANSWER, REASONING};
        let thinking = r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}"#;
        assert_eq!(channels(thinking), REASONING);
        let text =
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}"#;
        assert_eq!(channels(text), ANSWER);
        let tool = r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}"#;
        assert_eq!(channels(tool), ANSWER);
        let signature = r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}"#;
        assert_eq!(channels(signature), None);
    }

    #[test]
    fn a_tool_use_block_starts_a_tool_call_and_a_server_tool_does_not() {
        use crate::decode::dialect::marks_tool_call;
        let start = |block: &str| {
            format!(
                r#"{{"type":"content_block_start","index":1,"content_block":{{"type":"{block}","id":"toolu_01","name":"get_weather","input":{{}}}}}}"#
            )
        };
        assert!(marks_tool_call(
            &mut Anthropic::default(),
            &start("tool_use")
        ));
        for other in ["server_tool_use", "text", "thinking"] {
            assert!(
                !marks_tool_call(&mut Anthropic::default(), &start(other)),
                "{other}"
            );
        }
        let (kind, _, _) = classify(&start("tool_use"));
        assert_eq!(kind, EventKind::Other, "the block's start is not a token");
    }

    #[test]
    fn cache_read_tokens_are_the_cached_prompt() {
        let mut dialect = Anthropic::default();
        let start = r#"{"type":"message_start","message":{"model":"claude","usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":2048,"output_tokens":1}}}"#;
        let (_, obs, _) = crate::decode::dialect::classify_with(&mut dialect, start);
        assert_eq!(obs.cached_input_tokens, Some(2048));
        assert_eq!(obs.input_tokens, Some(2058));
        let (_, none, _) = classify(
            r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}"#,
        );
        assert_eq!(none.cached_input_tokens, None);
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

    /// Feeds events in order to one dialect, as a stream would.
    fn stream(events: &[&str]) -> Observations {
        let mut dialect = Anthropic::default();
        let mut obs = Observations::default();
        for data in events {
            let (mut text, mut choices) = (Vec::new(), Vec::new());
            let event = FramedEvent::unnamed(data.as_bytes());
            let mut output = EventOutput::new(Some(&mut text), &mut choices);
            dialect.on_event(&event, &mut obs, &mut output);
        }
        obs
    }

    #[test]
    fn usage_is_the_last_cumulative_value_of_each_field() {
        // A server tool (web search) grows the input during the request; the final message_delta
        // repeats the cumulative figures.
        let obs = stream(&[
            r#"{"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":2037,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":15665,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":510,"server_tool_use":{"web_search_requests":1}}}"#,
        ]);
        assert_eq!(
            (obs.input_tokens, obs.output_tokens),
            (Some(15665), Some(510))
        );
        // A message_delta that repeats only some fields keeps the others from message_start.
        let obs = stream(&[
            r#"{"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":10,"cache_read_input_tokens":90,"output_tokens":1}}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":12,"output_tokens":40}}"#,
        ]);
        assert_eq!((obs.input_tokens, obs.output_tokens), (Some(102), Some(40)));
    }

    #[test]
    fn compaction_text_is_output_and_iterations_are_summed() {
        let compaction = r#"{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"Summary of the talk so far"}}"#;
        let (kind, _, text) = classify(compaction);
        assert_eq!(
            (kind, text.as_str()),
            (EventKind::Output, "Summary of the talk so far")
        );
        let null = r#"{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":null}}"#;
        assert_eq!(classify(null).0, EventKind::Other);
        let obs = stream(&[
            r#"{"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":180000,"output_tokens":1}}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":23000,"output_tokens":1000,"iterations":[{"type":"compaction","input_tokens":180000,"output_tokens":3500,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},{"type":"message","input_tokens":23000,"output_tokens":1000,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}]}}"#,
        ]);
        assert_eq!(
            (obs.input_tokens, obs.output_tokens),
            (Some(203000), Some(4500))
        );
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
