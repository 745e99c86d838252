//! API dialects: which events of a response carry generated output, and where the server reports usage.
//!
//! The proxy picks a dialect from the request path. A dialect sees one decoded event at a time (an SSE
//! event, or one line of an NDJSON stream with an empty event name) or the top-level fields of a
//! non-streaming JSON body, and reports what it learnt into [`Observations`]: usage, the model, and
//! whether the API's terminal event has passed. What an output-bearing event produced goes into
//! [`EventOutput`]: which choices it advanced (OpenAI's `n` > 1) and, when a tokenizer will count the
//! request's output, its text (otherwise nothing is copied). A dialect never sees raw bytes and never
//! decides timing: that is the decoder's and the timeline's job. Adding an API means adding a module here,
//! a line in [`detect`] and its [`Api`] (the label, in `record/api.rs`).

mod anthropic;
#[cfg(test)]
mod both_ways;
mod llamacpp;
mod ollama;
mod openai;
mod responses;
mod scanned;
mod text;
mod tgi;
pub mod timings;

#[doc(hidden)]
pub use scanned::{Reading, Scanned};

use crate::decode::event::FramedEvent;
use crate::decode::json::FieldScanner;
use crate::record::api::Api;
use crate::record::server::ServerTimings;

/// What one event meant for the request's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Carries generated output (text, a refusal, reasoning or a tool-call delta, non-empty): a token
    /// arrival. Whether it is answer or reasoning the dialect says in [`EventOutput`].
    Output,
    /// Framing, metadata, role-only or usage-only chunks, keep-alives, `[DONE]`.
    Other,
    /// The server reported an error inside a successful-looking stream.
    Error,
    /// The event's payload could not be understood; token figures for this stream are unreliable.
    Malformed,
}

/// What the server told us about the request, accumulated over its events.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Observations {
    pub output_tokens: Option<u64>,
    pub input_tokens: Option<u64>,
    /// Reasoning tokens the usage details report (OpenAI `completion_tokens_details.reasoning_tokens`,
    /// Responses `output_tokens_details.reasoning_tokens`). Most servers count them inside the output
    /// tokens; some leave them out, which the token count corrects for.
    pub reasoning_tokens: Option<u64>,
    /// Input tokens the server reports as served from its prefix cache (OpenAI
    /// `prompt_tokens_details.cached_tokens`, Anthropic `cache_read_input_tokens`, llama.cpp
    /// `timings.cache_n`).
    pub cached_input_tokens: Option<u64>,
    /// The server's own timings for the request, where its answer carries them.
    pub server: ServerTimings,
    pub model: Option<String>,
    /// The Responses API's id of this response (`resp_…`), which a later turn may name as its
    /// `previous_response_id`; at most [`MAX_RESPONSE_ID`] bytes.
    pub response_id: Option<String>,
    /// The API's terminal event has passed (`[DONE]`, `response.completed`, `message_stop`, Ollama's
    /// `done: true`, llama.cpp's `stop: true`, TGI's event with `generated_text`): the client has the
    /// whole answer, whether or not it stays for the end of the body.
    pub ended: bool,
}

/// The longest response id kept.
pub const MAX_RESPONSE_ID: usize = 128;

impl Observations {
    /// Keeps the first non-empty response id the response names (Responses API).
    fn response_id(&mut self, id: Option<&str>) {
        if self.response_id.is_none() {
            if let Some(id) = id.filter(|i| !i.is_empty() && i.len() <= MAX_RESPONSE_ID) {
                self.response_id = Some(id.to_owned());
            }
        }
    }

    /// Keeps the first non-empty model name the response names.
    fn model(&mut self, model: Option<&str>) {
        if self.model.is_none() {
            if let Some(model) = model.filter(|m| !m.is_empty()) {
                self.model = Some(model.to_owned());
            }
        }
    }

    /// Takes the server's token counts, each only when it reported one (later reports win: usage is
    /// cumulative in every API that repeats it).
    fn record(&mut self, output_tokens: Option<u64>, input_tokens: Option<u64>) {
        if output_tokens.is_some() {
            self.output_tokens = output_tokens;
        }
        if input_tokens.is_some() {
            self.input_tokens = input_tokens;
        }
    }
}

/// Classifies one event's data with a dialect, for the dialects' unit tests: the kind, what was
/// observed, and the output text handed to a tokenizer.
#[cfg(test)]
fn classify_with(dialect: &mut dyn Dialect, data: &str) -> (EventKind, Observations, String) {
    let (kind, obs, copied, _) = classify_choices(dialect, data);
    (kind, obs, copied)
}

/// The channels an event's output went to, `None` when it carried no output.
#[cfg(test)]
fn channels_of(dialect: &mut dyn Dialect, data: &str) -> Option<Channels> {
    let (mut obs, mut choices) = (Observations::default(), Vec::new());
    let event = FramedEvent::unnamed(data.as_bytes());
    let mut output = EventOutput::new(None, &mut choices);
    let kind = dialect.on_event(&event, &mut obs, &mut output);
    (kind == EventKind::Output).then(|| output.channels())
}

/// Shorthands for [`channels_of`] in the dialects' tests.
#[cfg(test)]
const REASONING: Option<Channels> = Some(Channels {
    reasoning: true,
    answer: false,
    tool_call: false,
});
#[cfg(test)]
const ANSWER: Option<Channels> = Some(Channels {
    reasoning: false,
    answer: true,
    tool_call: false,
});
/// An answer that is part of a tool call.
#[cfg(test)]
const TOOL: Option<Channels> = Some(Channels {
    reasoning: false,
    answer: true,
    tool_call: true,
});

/// Whether the event marked a tool call, whatever its kind, for the dialects' tests.
#[cfg(test)]
fn marks_tool_call(dialect: &mut dyn Dialect, data: &str) -> bool {
    let (mut obs, mut choices) = (Observations::default(), Vec::new());
    let event = FramedEvent::unnamed(data.as_bytes());
    let mut output = EventOutput::new(None, &mut choices);
    dialect.on_event(&event, &mut obs, &mut output);
    output.channels().tool_call
}

/// [`classify_with`], also returning the choices the event advanced.
#[cfg(test)]
fn classify_choices(
    dialect: &mut dyn Dialect,
    data: &str,
) -> (EventKind, Observations, String, Vec<u32>) {
    let (mut obs, mut copied, mut choices) = (Observations::default(), Vec::new(), Vec::new());
    let event = FramedEvent::unnamed(data.as_bytes());
    let mut output = EventOutput::new(Some(&mut copied), &mut choices);
    let kind = dialect.on_event(&event, &mut obs, &mut output);
    let copied: Vec<&str> = copied
        .iter()
        .map(String::as_str)
        .filter(|t| !t.is_empty())
        .collect();
    (kind, obs, copied.join("|"), choices)
}

/// The output text of each choice so far, for a tokenizer to count: entry `2i` is choice `i`'s answer
/// text and entry `2i + 1` its reasoning (choice 0 for APIs with one answer), so at most twice
/// [`MAX_CHOICE`] plus 2 entries. The choices are kept apart because their events interleave: tokenized
/// as one text, one choice's words would run into another's; reasoning is kept apart so its tokens can
/// be told.
pub type ChoiceTexts = Vec<String>;

/// Whether entry `at` of [`ChoiceTexts`] is reasoning.
pub fn is_reasoning_text(at: usize) -> bool {
    at % 2 == 1
}

/// What one event produced, beyond its kind: the generated text, for a tokenizer to count, and the
/// choices it advanced. Without a tokenizer it holds no text buffer and [`EventOutput::push`] does
/// nothing, so no text is ever copied. The choice list is the caller's, cleared before each event and
/// reused, so marking a choice allocates nothing once a stream is under way.
pub struct EventOutput<'a> {
    text: Option<&'a mut ChoiceTexts>,
    choices: &'a mut Vec<u32>,
    /// The choice the next text belongs to: the one marked last (0 until one is).
    current: u32,
    /// The event carried reasoning (thinking) output.
    reasoning: bool,
    /// The event carried answer output (text, refusal, tool call).
    answer: bool,
    /// The event was part of a tool call (see [`EventOutput::tool_call`]).
    tool_call: bool,
}

/// Whether an output-bearing event's output was reasoning, answer or both, and whether the event was
/// part of a tool call (which may be so of an event that is not a token: a tool-use block's start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Channels {
    pub reasoning: bool,
    pub answer: bool,
    pub tool_call: bool,
}

/// Choices beyond this index share the last slot: a client's `n` must not grow per-stream state.
pub const MAX_CHOICE: u32 = 63;

impl<'a> EventOutput<'a> {
    pub fn new(text: Option<&'a mut ChoiceTexts>, choices: &'a mut Vec<u32>) -> Self {
        EventOutput {
            text,
            choices,
            current: 0,
            reasoning: false,
            answer: false,
            tool_call: false,
        }
    }

    /// The event carried reasoning output (OpenAI `reasoning_content`/`reasoning`, Responses reasoning
    /// deltas, Anthropic `thinking_delta`, Ollama `thinking`).
    pub fn reasoning(&mut self) {
        self.reasoning = true;
    }

    /// The event carried answer output: anything that is not reasoning. An output event a dialect
    /// marks as neither is answer (APIs without a reasoning channel).
    pub fn answer(&mut self) {
        self.answer = true;
    }

    /// The event starts or continues a tool call: OpenAI chat's `tool_calls`/`function_call` deltas,
    /// Responses' function-call and custom-tool items and their argument deltas, Anthropic's `tool_use`
    /// blocks and their `input_json_delta`, Ollama's `tool_calls`. The first such event is when an agent
    /// learns it has something to do (`t_tool`). A block's or item's start names the tool without being
    /// a token, so it may mark a tool call on an event that is not output.
    pub fn tool_call(&mut self) {
        self.tool_call = true;
    }

    /// Whether a tokenizer wants the text: without one, [`EventOutput::push`] does nothing, so a
    /// dialect need not decode the text it would push.
    pub fn wants_text(&self) -> bool {
        self.text.is_some()
    }

    /// What the event's output was: answer unless it was marked reasoning only.
    pub fn channels(&self) -> Channels {
        Channels {
            reasoning: self.reasoning,
            answer: self.answer || !self.reasoning,
            tool_call: self.tool_call,
        }
    }

    /// Appends generated answer text (content, refusal or tool-call arguments) to the text of the
    /// choice marked last.
    pub fn push(&mut self, text: &str) {
        self.push_at(2 * self.current as usize, text);
    }

    /// Appends reasoning text to the choice marked last, and marks the event as reasoning.
    pub fn push_reasoning(&mut self, text: &str) {
        self.reasoning = true;
        self.push_at(2 * self.current as usize + 1, text);
    }

    fn push_at(&mut self, at: usize, text: &str) {
        if let Some(texts) = self.text.as_mut() {
            if texts.len() <= at {
                texts.resize_with(at + 1, String::new);
            }
            if let Some(choice) = texts.get_mut(at) {
                choice.push_str(text);
            }
        }
    }

    /// The event carried output for choice `index` (APIs with one answer per response never call it:
    /// their output is choice 0). Marked once per choice and event, whatever the event repeats; the
    /// text pushed next is that choice's.
    pub fn choice(&mut self, index: u32) {
        let index = index.min(MAX_CHOICE);
        self.current = index;
        if !self.choices.contains(&index) {
            self.choices.push(index);
        }
    }
}

pub trait Dialect: Send {
    /// Classifies one event of a streaming response, records any usage, model or end it carries, and
    /// reports what an output-bearing event produced into `output`.
    fn on_event(
        &mut self,
        event: &FramedEvent<'_>,
        obs: &mut Observations,
        output: &mut EventOutput<'_>,
    ) -> EventKind;
    /// The top-level fields of a non-streaming JSON body this dialect reads.
    fn body_fields(&self) -> &'static [&'static str];
    /// Reads usage and model from a non-streaming body's top-level fields.
    fn on_body(&mut self, fields: &FieldScanner, obs: &mut Observations);
}

/// Picks the dialect for a request path (query excluded); any prefix before the API's own path is
/// allowed (`/openai/v1/chat/completions`). Unknown paths get `Api::Other` and no dialect: they are
/// forwarded and counted, but no token figures are guessed for them.
pub fn detect(path: &str) -> (Api, Option<Box<dyn Dialect>>) {
    let path = path.trim_end_matches('/');
    let (api, dialect): (Api, Box<dyn Dialect>) = if path.ends_with("/chat/completions") {
        (Api::Chat, Box::new(openai::OpenAi))
    } else if path.ends_with("/completions") {
        (Api::Completions, Box::new(openai::OpenAi))
    } else if path.ends_with("/v1/responses") {
        (Api::Responses, Box::new(responses::Responses))
    } else if path.ends_with("/v1/messages") {
        (Api::Messages, Box::<anthropic::Anthropic>::default())
    } else if path.ends_with("/api/generate") || path.ends_with("/api/chat") {
        (Api::Ollama, Box::new(ollama::Ollama))
    } else if path.ends_with("/generate_stream") || path.ends_with("/generate") {
        (Api::Generate, Box::new(tgi::Tgi))
    } else if path.ends_with("/completion") {
        (Api::LlamaCpp, Box::new(llamacpp::LlamaCpp))
    } else {
        return (Api::Other, None);
    };
    (api, Some(dialect))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_every_dialect_with_and_without_prefix() {
        let cases = [
            ("/v1/chat/completions", Api::Chat),
            ("/openai/v1/chat/completions/", Api::Chat),
            ("/v1/completions", Api::Completions),
            ("/v1/responses", Api::Responses),
            ("/gw/v1/responses", Api::Responses),
            ("/v1/messages", Api::Messages),
            ("/anthropic/v1/messages/", Api::Messages),
            ("/generate_stream", Api::Generate),
            ("/generate", Api::Generate),
            ("/api/generate", Api::Ollama),
            ("/api/chat", Api::Ollama),
            ("/completion", Api::LlamaCpp),
            ("/v1/models", Api::Other),
            ("/v1/responses/resp_123", Api::Other),
            ("/v1/messages/count_tokens", Api::Other),
            ("/api/tags", Api::Other),
            ("/", Api::Other),
        ];
        for (path, api) in cases {
            let (got, dialect) = detect(path);
            assert_eq!(got, api, "{path}");
            assert_eq!(dialect.is_some(), api != Api::Other, "{path}");
        }
    }

    #[test]
    fn each_api_says_when_its_terminal_event_has_passed() {
        let cases = [
            (
                "/v1/responses",
                r#"{"type":"response.completed","response":{"status":"completed"}}"#,
                true,
            ),
            (
                "/v1/responses",
                r#"{"type":"response.incomplete","response":{"status":"incomplete"}}"#,
                true,
            ),
            (
                "/v1/responses",
                r#"{"type":"response.failed","response":{"status":"failed"}}"#,
                true,
            ),
            (
                "/v1/responses",
                r#"{"type":"response.output_text.done","text":"a"}"#,
                false,
            ),
            ("/v1/messages", r#"{"type":"message_stop"}"#, true),
            (
                "/v1/messages",
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
                false,
            ),
            (
                "/api/chat",
                r#"{"model":"m","message":{"role":"assistant","content":""},"done":true,"eval_count":3}"#,
                true,
            ),
            (
                "/api/generate",
                r#"{"model":"m","response":"a","done":false}"#,
                false,
            ),
            (
                "/completion",
                r#"{"content":"","stop":true,"timings":{"predicted_n":3}}"#,
                true,
            ),
            ("/completion", r#"{"content":"a","stop":false}"#, false),
            (
                "/generate_stream",
                r#"{"token":{"id":2,"text":"</s>","special":true},"generated_text":"a b","details":null}"#,
                true,
            ),
            (
                "/generate_stream",
                r#"{"token":{"id":5,"text":"a","special":false},"generated_text":null,"details":null}"#,
                false,
            ),
            (
                "/v1/chat/completions",
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
                false,
            ),
        ];
        for (path, data, terminal) in cases {
            let (_, dialect) = detect(path);
            let mut dialect = dialect.unwrap_or_else(|| panic!("{path}"));
            let (_, obs, _) = classify_with(dialect.as_mut(), data);
            assert_eq!(obs.ended, terminal, "{path}: {data}");
        }
    }

    #[test]
    fn every_api_label_is_distinct() {
        let labels: std::collections::HashSet<_> = Api::ALL.iter().map(|a| a.as_str()).collect();
        assert_eq!(labels.len(), Api::ALL.len());
    }
}
