//! API dialects: which events of a response carry generated output, and where the server reports usage.
//!
//! The proxy picks a dialect from the request path. A dialect sees one decoded event at a time (an SSE
//! event, or one line of an NDJSON stream with an empty event name) or the top-level fields of a
//! non-streaming JSON body, and reports what it learnt into [`Observations`]: usage, the model, and
//! whether the API's terminal event has passed. What an output-bearing event produced goes into
//! [`EventOutput`]: which choices it advanced (OpenAI's `n` > 1) and, when a tokenizer will count the
//! request's output, its text (otherwise nothing is copied). A dialect never sees raw bytes and never
//! decides timing: that is the decoder's and the timeline's job.
//!
//! Each dialect is a [`Wire`] (`wire.rs`): its event's serde struct read by serde_json, the reference,
//! and one `apply` that says what an event means; a scanner of its own is optional. [`DIALECTS`] is the
//! one list of them: the paths each serves, its [`Api`], the dialect.
//!
//! Adding an API (docs/architecture.md, "Adding a dialect") needs its module here (`<api>.rs`: the
//! event's serde struct and its `Wire`: `by_serde`, `apply`, the body's fields), a row in [`DIALECTS`],
//! its [`Api`] (the label, in `record/api.rs`), and a fixture stream in `tests/fixtures/<api>/` with its
//! case in `decode/fixtures.rs` (a test fails until every row has one). Optional, for speed only: a
//! scanner (`<api>/scan.rs`, on `decode/json/cursor.rs`) as `Wire::scan`, and `<api>/differential.rs`,
//! which holds it to serde_json's reading.

mod anthropic;
#[cfg(test)]
mod both_ways;
mod llamacpp;
mod ollama;
mod openai;
mod output;
mod responses;
mod speech;
mod text;
mod tgi;
pub mod timings;
mod transcriptions;
mod wire;

pub use output::{is_reasoning_text, Channels, ChoiceTexts, EventOutput, MAX_CHOICE};
pub use wire::Wire;
#[doc(hidden)]
pub use wire::{both_ways, fuzz, BothWays, Reading};

use anthropic::Anthropic;
use llamacpp::LlamaCpp;
use ollama::Ollama;
use openai::OpenAi;
use responses::Responses;
use speech::Speech;
use tgi::Tgi;
use transcriptions::Transcriptions;

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
    dialect: &mut dyn Dialect, data: &str,
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

/// What an API's output events carry, which says what may be counted of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carries {
    /// Tokens: each output event carried at least one, and without usage they are counted (a
    /// tokenizer, or one an event). A 2xx body that is not an event stream is one JSON body.
    Tokens,
    /// Audio: an output event is a piece of audio of any length, so only the server's usage counts
    /// tokens. A 2xx body that is neither an event stream nor JSON is the audio itself, whose first
    /// byte is the first output.
    Audio,
}

/// What the response decoder holds: a dialect as one object. Every dialect is a [`Wire`], and this
/// follows from it.
pub trait Dialect: Send {
    /// Classifies one event of a streaming response, records any usage, model or end it carries, and
    /// reports what an output-bearing event produced into `output`.
    fn on_event(
        &mut self, event: &FramedEvent<'_>, obs: &mut Observations, output: &mut EventOutput<'_>,
    ) -> EventKind;
    /// The top-level fields of a non-streaming JSON body this dialect reads.
    fn body_fields(&self) -> &'static [&'static str];
    /// Reads usage and model from a non-streaming body's top-level fields.
    fn on_body(&mut self, fields: &FieldScanner, obs: &mut Observations);
    /// What its output events carry.
    fn carries(&self) -> Carries;
}

/// One row of [`DIALECTS`]: the paths a dialect serves, the API they are, and the dialect.
#[doc(hidden)]
pub struct Row {
    /// What a request path (query excluded, trailing slashes taken off) ends with.
    pub paths: &'static [&'static str],
    pub api: Api,
    new: fn() -> Box<dyn Dialect>,
    /// The dialect's two readings of one event, for the differential tests and the fuzz target.
    pub both_ways: BothWays,
}

const fn row<W: Wire>(paths: &'static [&'static str], api: Api) -> Row {
    Row {
        paths,
        api,
        new: || Box::<W>::default(),
        both_ways: both_ways::<W>,
    }
}

/// Every dialect, by the paths it serves; the first row whose path ends the request's path wins (so
/// `/chat/completions` before `/completions`, Ollama's `/api/generate` before TGI's `/generate`). Any
/// prefix before the API's own path is allowed (`/openai/v1/chat/completions`).
#[doc(hidden)]
pub const DIALECTS: [Row; 9] = [
    row::<OpenAi>(&["/chat/completions"], Api::Chat),
    row::<OpenAi>(&["/completions"], Api::Completions),
    row::<Responses>(&["/v1/responses"], Api::Responses),
    row::<Anthropic>(&["/v1/messages"], Api::Messages),
    row::<Ollama>(&["/api/generate", "/api/chat"], Api::Ollama),
    row::<Tgi>(&["/generate_stream", "/generate"], Api::Generate),
    row::<LlamaCpp>(&["/completion"], Api::LlamaCpp),
    row::<Transcriptions>(
        &["/v1/audio/transcriptions", "/v1/audio/translations"],
        Api::Transcriptions,
    ),
    row::<Speech>(&["/v1/audio/speech"], Api::Speech),
];

/// Picks the dialect for a request path (query excluded) from [`DIALECTS`]. Unknown paths get
/// `Api::Other` and no dialect: they are forwarded and counted, but no token figures are guessed for
/// them.
pub fn detect(path: &str) -> (Api, Option<Box<dyn Dialect>>) {
    let path = path.trim_end_matches('/');
    let serves = |row: &&Row| row.paths.iter().any(|p| path.ends_with(p));
    match DIALECTS.iter().find(serves) {
        Some(row) => (row.api, Some((row.new)())),
        None => (Api::Other, None),
    }
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
            ("/v1/audio/transcriptions", Api::Transcriptions),
            ("/openai/v1/audio/translations/", Api::Transcriptions),
            ("/v1/audio/speech", Api::Speech),
            ("/v1/audio/voices", Api::Other),
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
