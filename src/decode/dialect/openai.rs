//! OpenAI-compatible chat and text completions, as served by vLLM, SGLang, TGI's OpenAI routes,
//! llama.cpp's `/v1` routes, Ollama's `/v1` routes and hosted APIs.
//!
//! Output-bearing: a chunk with a choice whose `delta` has non-empty `content`, `refusal`,
//! `reasoning_content` or `reasoning`, or any `tool_calls`/`function_call` entry; for text completions a
//! non-empty `text`. Each such choice is marked by its `index`, so several choices (`n` > 1) are timed
//! as their readers see them. Not output: the role-only first chunk vLLM sends before any token exists,
//! the usage-only final chunk (`"choices":[]`), `[DONE]` (the terminal event, which the decoder reads for
//! every dialect). Usage (`completion_tokens`, `prompt_tokens`, and
//! `completion_tokens_details.reasoning_tokens`) is taken from whichever chunk carries it last (the
//! final chunk with `stream_options.include_usage`, or every chunk with vLLM's continuous usage stats,
//! which are cumulative) and from a non-streaming body's `usage`.
//!
//! Reasoning: `reasoning_content` (vLLM, SGLang, DeepSeek, llama.cpp) and `reasoning` (vLLM's newer
//! name, Ollama's and OpenRouter's); everything else that carries output is answer. Cached prompt tokens:
//! `usage.prompt_tokens_details.cached_tokens` (vLLM with `--enable-prompt-tokens-details`, OpenAI,
//! llama.cpp). The server's timings: vLLM's `metrics` object and llama.cpp's `timings` (`timings`).
//!
//! Reading: the structs below are serde_json's reading of a chunk, and the reference. Every chunk goes
//! first to [`scan`], which reads the same fields in one pass without serde_json or allocation and hands
//! back any chunk it is not sure to read exactly as serde_json does; `differential.rs` holds the two equal.

mod scan;

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::text::Text;
use super::timings::{LlamaTimings, VllmMetrics};
use super::{EventKind, EventOutput, Observations, Wire};
use crate::decode::json::FieldScanner;

#[derive(Debug, Default)]
pub struct OpenAi;

#[derive(Deserialize)]
pub struct Chunk<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    metrics: Option<VllmMetrics>,
    #[serde(default)]
    timings: Option<LlamaTimings>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u32>,
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
    refusal: Option<Cow<'a, str>>,
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
    fn copy_text(&self, text: &mut EventOutput<'_>) {
        for part in [&self.name, &self.arguments] {
            if let Some(s) = part.non_empty() {
                text.push(s);
            }
        }
    }
}

#[derive(Deserialize)]
pub(super) struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

fn non_empty(s: &Option<Cow<'_, str>>) -> bool {
    s.as_deref().is_some_and(|s| !s.is_empty())
}

impl Delta<'_> {
    fn carries_output(&self) -> bool {
        self.carries_answer() || self.carries_reasoning()
    }

    fn carries_reasoning(&self) -> bool {
        non_empty(&self.reasoning_content) || non_empty(&self.reasoning)
    }

    /// A `tool_calls` entry or a `function_call`.
    fn carries_tool_call(&self) -> bool {
        self.tool_calls
            .as_ref()
            .is_some_and(|calls| !calls.is_empty())
            || self.function_call.is_some()
    }

    /// Text, a refusal or a tool call: anything a user of a UI that hides reasoning sees.
    fn carries_answer(&self) -> bool {
        non_empty(&self.content)
            || non_empty(&self.refusal)
            || self
                .tool_calls
                .as_ref()
                .is_some_and(|calls| !calls.is_empty())
            || self.function_call.is_some()
    }
}

impl Delta<'_> {
    /// Content, refusal, reasoning and tool-call names and arguments, as a tokenizer should see them
    /// (reasoning apart, so its tokens can be told).
    fn copy_text(&self, text: &mut EventOutput<'_>) {
        for part in [&self.content, &self.refusal] {
            if let Some(s) = part.as_deref() {
                text.push(s);
            }
        }
        for part in [&self.reasoning_content, &self.reasoning] {
            if let Some(s) = part.as_deref().filter(|s| !s.is_empty()) {
                text.push_reasoning(s);
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

    /// Says which channels the choice's output went to.
    fn mark_channels(&self, output: &mut EventOutput<'_>) {
        if self.delta.as_ref().is_some_and(Delta::carries_reasoning) {
            output.reasoning();
        }
        if self.delta.as_ref().is_some_and(Delta::carries_answer) || non_empty(&self.text) {
            output.answer();
        }
        if self.delta.as_ref().is_some_and(Delta::carries_tool_call) {
            output.tool_call();
        }
    }

    fn copy_text(&self, text: &mut EventOutput<'_>) {
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
    let details = usage.completion_tokens_details.as_ref();
    if let Some(n) = details.and_then(|d| d.reasoning_tokens) {
        obs.reasoning_tokens = Some(n);
    }
    let prompt = usage.prompt_tokens_details.as_ref();
    if let Some(n) = prompt.and_then(|d| d.cached_tokens) {
        obs.cached_input_tokens = Some(n);
    }
}

/// The server's own timings: vLLM's `metrics`, llama.cpp's `timings` (and its cached prompt tokens).
fn record_timings(
    metrics: Option<&VllmMetrics>, timings: Option<&LlamaTimings>, obs: &mut Observations,
) {
    if let Some(metrics) = metrics {
        obs.server.merge(metrics.timings());
    }
    if let Some(timings) = timings {
        obs.server.merge(timings.timings());
        if obs.cached_input_tokens.is_none() {
            obs.cached_input_tokens = timings.cache_n;
        }
    }
}

/// An event that is not valid UTF-8 as a whole (every well-formed one is) goes the `from_slice` way,
/// so serde_json checks the strings it reads and not the ones it skips.
fn parse_chunk(data: &[u8]) -> serde_json::Result<Chunk<'_>> {
    match std::str::from_utf8(data) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(data),
    }
}

/// One chunk in either of the shapes its two readings give: the scanner's (strings borrowed as they stand,
/// escapes decoded only when a tokenizer asks for the text, only the choices with output, nothing
/// allocated) and serde_json's, the reference. They are applied alike, field by field.
// Lives on the stack for one event and is never stored: boxing the larger variant would allocate for
// every chunk of every stream.
#[allow(clippy::large_enum_variant)]
pub enum Read<'a> {
    Scanned(scan::Chunk<'a>),
    Parsed(Chunk<'a>),
}

/// What serde_json reads is a `Parsed` chunk (`by_serde` reads it faster from a `str` where it can).
impl<'de> Deserialize<'de> for Read<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Chunk::deserialize(deserializer).map(Read::Parsed)
    }
}

impl Wire for OpenAi {
    type Event<'a> = Read<'a>;

    fn by_serde(data: &[u8]) -> Option<Read<'_>> {
        parse_chunk(data).ok().map(Read::Parsed)
    }

    /// Every chunk of every stream: read here, or left to serde_json when the scanner is not sure to
    /// read it as serde_json does (`scan`'s rules).
    fn scan<'a, R>(data: &'a [u8], then: impl FnOnce(&Read<'a>) -> R) -> Option<R> {
        // Read in place and applied where it lies: the chunk is large, and moving it out cost more
        // than reading it.
        let mut read = Read::Scanned(scan::Chunk::default());
        let Read::Scanned(chunk) = &mut read else {
            return None;
        };
        scan::scan(std::str::from_utf8(data).ok()?, chunk)?;
        Some(then(&read))
    }

    fn apply(
        &mut self, read: &Read<'_>, obs: &mut Observations, output: &mut EventOutput<'_>,
    ) -> EventKind {
        match read {
            Read::Scanned(chunk) => apply_scanned(chunk, obs, output),
            Read::Parsed(chunk) => apply_parsed(chunk, obs, output),
        }
    }

    const BODY_FIELDS: &'static [&'static str] = &["model", "usage", "metrics", "timings"];

    fn body(&mut self, fields: &FieldScanner, obs: &mut Observations) {
        if let Some(model) = fields.string("model").filter(|m| !m.is_empty()) {
            obs.model = Some(model);
        }
        if let Some(usage) = fields.value::<Usage>("usage") {
            record_usage(&usage, obs);
        }
        let metrics = fields.value::<VllmMetrics>("metrics");
        let timings = fields.value::<LlamaTimings>("timings");
        record_timings(metrics.as_ref(), timings.as_ref(), obs);
    }
}

fn apply_parsed(
    chunk: &Chunk<'_>, obs: &mut Observations, output: &mut EventOutput<'_>,
) -> EventKind {
    obs.model(chunk.model.as_deref());
    if let Some(usage) = &chunk.usage {
        record_usage(usage, obs);
    }
    if chunk.metrics.is_some() || chunk.timings.is_some() {
        record_timings(chunk.metrics.as_ref(), chunk.timings.as_ref(), obs);
    }
    if chunk.error.is_some() {
        return EventKind::Error;
    }
    let choices = chunk.choices.as_deref().unwrap_or_default();
    let mut kind = EventKind::Other;
    for choice in choices.iter().filter(|c| c.carries_output()) {
        output.choice(choice.index.unwrap_or(0));
        choice.mark_channels(output);
        choice.copy_text(output);
        kind = EventKind::Output;
    }
    kind
}

/// [`apply_parsed`] for a scanned chunk: the same fields in the same order.
fn apply_scanned(
    chunk: &scan::Chunk<'_>, obs: &mut Observations, output: &mut EventOutput<'_>,
) -> EventKind {
    if obs.model.is_none() {
        if let Some(model) = &chunk.model {
            obs.model(Some(&model.value()));
        }
    }
    if let Some(usage) = &chunk.usage {
        record_usage(usage, obs);
    }
    if chunk.metrics.is_some() || chunk.timings.is_some() {
        record_timings(chunk.metrics.as_ref(), chunk.timings.as_ref(), obs);
    }
    if chunk.error {
        return EventKind::Error;
    }
    let mut kind = EventKind::Other;
    for choice in chunk.outputs() {
        output.choice(choice.index.unwrap_or(0));
        let delta = choice.delta.as_ref();
        if delta.is_some_and(scan::Delta::carries_reasoning) {
            output.reasoning();
        }
        if delta.is_some_and(scan::Delta::carries_answer)
            || choice.text.is_some_and(|t| !t.is_empty())
        {
            output.answer();
        }
        if delta.is_some_and(scan::Delta::carries_tool_call) {
            output.tool_call();
        }
        if output.wants_text() {
            copy_scanned_text(choice, output);
        }
        kind = EventKind::Output;
    }
    kind
}

/// [`Choice::copy_text`] for a scanned choice: the same parts in the same order.
fn copy_scanned_text(choice: &scan::Choice<'_>, output: &mut EventOutput<'_>) {
    if let Some(delta) = &choice.delta {
        for part in [delta.content, delta.refusal].into_iter().flatten() {
            output.push(&part.value());
        }
        let reasoning = [delta.reasoning_content, delta.reasoning]
            .into_iter()
            .flatten();
        for part in reasoning.filter(|s| !s.is_empty()) {
            output.push_reasoning(&part.value());
        }
        if let Some(calls) = &delta.tool_calls {
            scan::each_call_text(calls, &mut |part| output.push(&part.value()));
        }
        if let Some(function) = delta.function_call {
            scan::each_function_text(function, &mut |part| output.push(&part.value()));
        }
    }
    if let Some(text) = choice.text {
        output.push(&text.value());
    }
}

#[cfg(test)]
mod differential;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::dialect::Dialect;
    use crate::decode::event::FramedEvent;

    fn classify(data: &str) -> (EventKind, Observations) {
        let (kind, obs, _) = crate::decode::dialect::classify_with(&mut OpenAi, data);
        (kind, obs)
    }

    fn text_of(data: &str) -> String {
        crate::decode::dialect::classify_with(&mut OpenAi, data).2
    }

    fn choices_of(data: &str) -> Vec<u32> {
        crate::decode::dialect::classify_choices(&mut OpenAi, data).3
    }

    fn channels(data: &str) -> Option<crate::decode::dialect::Channels> {
        crate::decode::dialect::channels_of(&mut OpenAi, data)
    }

    #[test]
    fn reasoning_fields_are_reasoning_and_everything_else_is_answer() {
        use crate::decode::dialect::{Channels, ANSWER, REASONING, TOOL};
        let reasoning =
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hm","content":null}}]}"#;
        assert_eq!(channels(reasoning), REASONING);
        assert_eq!(
            channels(r#"{"choices":[{"delta":{"reasoning":"hm"}}]}"#),
            REASONING
        );
        for answer in [
            r#"{"choices":[{"delta":{"content":"a","reasoning_content":""}}]}"#,
            r#"{"choices":[{"delta":{"refusal":"no"}}]}"#,
            r#"{"choices":[{"text":"t","index":0}]}"#,
        ] {
            assert_eq!(channels(answer), ANSWER, "{answer}");
        }
        // A tool call (vLLM's first one names the function with empty arguments) is answer, and a call.
        for call in [
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"chatcmpl-tool-1","type":"function","index":0,"function":{"name":"get_weather","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"function_call":{"arguments":"{"}}}]}"#,
        ] {
            assert_eq!(channels(call), TOOL, "{call}");
        }
        let both = r#"{"choices":[{"delta":{"reasoning_content":"r","content":"c"}}]}"#;
        let both_channels = Channels {
            reasoning: true,
            answer: true,
            tool_call: false,
        };
        assert_eq!(channels(both), Some(both_channels));
        assert_eq!(
            channels(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#),
            None
        );
    }

    #[test]
    fn cached_prompt_tokens_and_vllm_per_request_metrics_are_read_from_the_last_chunk() {
        let last = r#"{"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":16}},"metrics":{"time_to_first_token_ms":30.0,"generation_time_ms":90.5,"queue_time_ms":2.5,"mean_itl_ms":30.1,"tokens_per_second":33.0}}"#;
        let (kind, obs) = classify(last);
        assert_eq!(kind, EventKind::Other);
        assert_eq!(obs.cached_input_tokens, Some(16));
        let ms = |n: f64| Some(std::time::Duration::from_secs_f64(n / 1e3));
        assert_eq!(obs.server.queue, ms(2.5));
        assert_eq!(obs.server.prefill, ms(30.0));
        assert_eq!(obs.server.ttft, ms(32.5));
        assert_eq!(obs.server.generation, ms(90.5));
        let (_, plain) = classify(r#"{"choices":[],"usage":{"prompt_tokens":20}}"#);
        assert_eq!(
            (plain.cached_input_tokens, plain.server.is_empty()),
            (None, true)
        );
    }

    #[test]
    fn llama_cpp_timings_on_its_openai_route_give_prefill_and_cached_prompt() {
        let last = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"timings":{"cache_n":7,"prompt_n":2,"prompt_ms":12.0,"predicted_n":5,"predicted_ms":50.0}}"#;
        let (_, obs) = classify(last);
        assert_eq!(obs.cached_input_tokens, Some(7));
        let ms = |n: u64| Some(std::time::Duration::from_millis(n));
        assert_eq!((obs.server.ttft, obs.server.prefill), (ms(12), ms(12)));
        assert_eq!((obs.server.queue, obs.server.generation), (None, ms(50)));
    }

    #[test]
    fn a_json_body_gives_its_cached_tokens_and_server_metrics() {
        let mut obs = Observations::default();
        let mut scanner = FieldScanner::new(OpenAi::BODY_FIELDS, 4096, 4096);
        scanner.feed(br#"{"model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}},"metrics":{"queue_time_ms":1.0,"time_to_first_token_ms":3.0}}"#);
        OpenAi.body(&scanner, &mut obs);
        assert_eq!(obs.cached_input_tokens, Some(8));
        assert_eq!(obs.server.ttft, Some(std::time::Duration::from_millis(4)));
    }

    #[test]
    fn a_refusal_is_output_and_its_text_is_counted() {
        let chunk = r#"{"choices":[{"index":0,"delta":{"content":null,"refusal":"I can't"}}]}"#;
        assert_eq!(classify(chunk).0, EventKind::Output);
        assert_eq!(text_of(chunk), "I can't");
        let empty = r#"{"choices":[{"index":0,"delta":{"role":"assistant","refusal":""}}]}"#;
        assert_eq!(classify(empty).0, EventKind::Other);
    }

    #[test]
    fn each_choice_with_output_is_marked_by_its_index() {
        assert_eq!(
            choices_of(r#"{"choices":[{"index":1,"delta":{"content":"a"}}]}"#),
            vec![1]
        );
        // Two choices in one chunk, one of them only a finish: only the one with output is marked.
        let both = r#"{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{},"finish_reason":"stop"}]}"#;
        assert_eq!(choices_of(both), vec![0]);
        let both = r#"{"choices":[{"index":2,"text":"x"},{"index":0,"text":"y"}]}"#;
        assert_eq!(choices_of(both), vec![2, 0]);
        // No index: the only answer, choice 0. A huge index cannot grow the per-stream state.
        assert_eq!(choices_of(r#"{"choices":[{"text":"x"}]}"#), vec![0]);
        let huge = r#"{"choices":[{"index":4000000000,"text":"x"}]}"#;
        assert_eq!(choices_of(huge), vec![crate::decode::dialect::MAX_CHOICE]);
    }

    #[test]
    fn reasoning_tokens_reported_apart_are_read_from_the_usage_details() {
        let usage = r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"completion_tokens_details":{"reasoning_tokens":340}}}"#;
        let (_, obs) = classify(usage);
        assert_eq!(
            (obs.output_tokens, obs.reasoning_tokens),
            (Some(2), Some(340))
        );
    }

    #[test]
    fn output_text_is_content_reasoning_and_tool_call_arguments() {
        assert_eq!(
            text_of(r#"{"choices":[{"delta":{"content":"a\nb"}}]}"#),
            "a\nb"
        );
        assert_eq!(
            text_of(r#"{"choices":[{"delta":{"reasoning_content":"r","content":"c"}}]}"#),
            "c|r",
            "answer and reasoning are kept apart"
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
    fn bytes_that_are_not_utf8_are_read_as_serde_json_reads_them() {
        // In a field the decoder skips, serde_json never checks the bytes: still a token.
        let mut skipped = br#"{"id":"x"#.to_vec();
        skipped.push(0xff);
        skipped.extend_from_slice(br#"","choices":[{"index":0,"delta":{"content":"a"}}]}"#);
        // In the text the decoder reads, they are malformed.
        let mut read = br#"{"choices":[{"index":0,"delta":{"content":"a"#.to_vec();
        read.push(0xff);
        read.extend_from_slice(br#""}}]}"#);
        let kind = |data: &[u8]| {
            let (mut obs, mut choices) = (Observations::default(), Vec::new());
            let mut output = EventOutput::new(None, &mut choices);
            OpenAi.on_event(&FramedEvent::unnamed(data), &mut obs, &mut output)
        };
        assert_eq!(kind(&skipped), EventKind::Output);
        assert_eq!(kind(&read), EventKind::Malformed);
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
