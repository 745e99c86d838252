//! API dialects: which events of a response carry generated output, and where the server reports usage.
//!
//! The proxy picks a dialect from the request path. A dialect sees one decoded event at a time (an SSE
//! event, or one line of an NDJSON stream with an empty event name) or the top-level fields of a
//! non-streaming JSON body, and reports what it learnt into [`Observations`]. When a tokenizer will count
//! the request's output, it also copies each event's output text into [`OutputText`]; otherwise that is a
//! no-op and nothing is copied. It never sees raw bytes and never decides timing: that is the meter's and
//! the timeline's job. Adding an API means adding a module here and a line in [`detect`].

mod anthropic;
mod llamacpp;
mod ollama;
mod openai;
mod responses;
mod text;
mod tgi;

#[cfg(test)]
mod fixtures;

use crate::json_scan::FieldScanner;
use crate::sse::SseEvent;

/// The `api` label: a closed set, so clients cannot vary it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// OpenAI chat completions (`…/chat/completions`).
    Chat,
    /// OpenAI text completions (`…/completions`).
    Completions,
    /// OpenAI Responses (`…/v1/responses`).
    Responses,
    /// Anthropic Messages (`…/v1/messages`).
    Messages,
    /// TGI's native `/generate_stream` and `/generate`.
    Generate,
    /// Ollama's native `/api/generate` and `/api/chat`.
    Ollama,
    /// llama.cpp server's native `/completion`.
    LlamaCpp,
    Other,
}

impl Api {
    pub const ALL: [Api; 8] = [
        Api::Chat,
        Api::Completions,
        Api::Responses,
        Api::Messages,
        Api::Generate,
        Api::Ollama,
        Api::LlamaCpp,
        Api::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Completions => "completions",
            Api::Responses => "responses",
            Api::Messages => "messages",
            Api::Generate => "generate",
            Api::Ollama => "ollama",
            Api::LlamaCpp => "llamacpp",
            Api::Other => "other",
        }
    }
}

/// What one event meant for the request's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Carries generated output (text, reasoning or a tool-call delta, non-empty): a token arrival.
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
    pub model: Option<String>,
}

impl Observations {
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
    let (mut obs, mut copied) = (Observations::default(), String::new());
    let event = SseEvent {
        event: b"",
        data: data.as_bytes(),
    };
    let kind = dialect.on_event(&event, &mut obs, &mut OutputText::new(Some(&mut copied)));
    (kind, obs, copied)
}

/// Where a dialect copies the generated text of an event, for a tokenizer to count. Without a
/// tokenizer it holds no buffer and [`OutputText::push`] does nothing, so no text is ever copied.
pub struct OutputText<'a>(Option<&'a mut String>);

impl<'a> OutputText<'a> {
    pub fn new(buffer: Option<&'a mut String>) -> Self {
        OutputText(buffer)
    }

    /// Appends generated text (content, reasoning or tool-call arguments).
    pub fn push(&mut self, text: &str) {
        if let Some(buffer) = self.0.as_mut() {
            buffer.push_str(text);
        }
    }
}

pub trait Dialect: Send {
    /// Classifies one event of a streaming response, records any usage or model it carries, and
    /// copies its generated text into `text`.
    fn on_event(
        &mut self,
        event: &SseEvent<'_>,
        obs: &mut Observations,
        text: &mut OutputText<'_>,
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
        (Api::Messages, Box::new(anthropic::Anthropic))
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
    fn every_api_label_is_distinct() {
        let labels: std::collections::HashSet<_> = Api::ALL.iter().map(|a| a.as_str()).collect();
        assert_eq!(labels.len(), Api::ALL.len());
    }
}
