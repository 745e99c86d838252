//! API dialects: which events of a response carry generated output, and where the server reports usage.
//!
//! The proxy picks a dialect from the request path. A dialect sees one decoded event at a time (an SSE
//! event of a streaming response) or the top-level fields of a non-streaming JSON body, and reports what
//! it learnt into [`Observations`]. It never sees raw bytes and never decides timing: that is the
//! meter's and the timeline's job. Adding an API means adding a module here and a line in [`detect`].

mod openai;

use crate::json_scan::FieldScanner;
use crate::sse::SseEvent;

/// The `api` label: a closed set, so clients cannot vary it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    Chat,
    Completions,
    Other,
}

impl Api {
    pub const ALL: [Api; 3] = [Api::Chat, Api::Completions, Api::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Completions => "completions",
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

pub trait Dialect: Send {
    /// Classifies one SSE event of a streaming response and records any usage or model it carries.
    fn on_event(&mut self, event: &SseEvent<'_>, obs: &mut Observations) -> EventKind;
    /// The top-level fields of a non-streaming JSON body this dialect reads.
    fn body_fields(&self) -> &'static [&'static str];
    /// Reads usage and model from a non-streaming body's top-level fields.
    fn on_body(&mut self, fields: &FieldScanner, obs: &mut Observations);
}

/// Picks the dialect for a request path (query excluded). Unknown paths get `Api::Other` and no dialect:
/// they are forwarded and counted, but no token figures are guessed for them.
pub fn detect(path: &str) -> (Api, Option<Box<dyn Dialect>>) {
    let path = path.trim_end_matches('/');
    if path.ends_with("/chat/completions") {
        (Api::Chat, Some(Box::new(openai::OpenAi)))
    } else if path.ends_with("/completions") {
        (Api::Completions, Some(Box::new(openai::OpenAi)))
    } else {
        (Api::Other, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_openai_paths_with_and_without_prefix() {
        assert_eq!(detect("/v1/chat/completions").0, Api::Chat);
        assert_eq!(detect("/openai/v1/chat/completions/").0, Api::Chat);
        assert_eq!(detect("/v1/completions").0, Api::Completions);
        assert_eq!(detect("/v1/models").0, Api::Other);
        assert!(detect("/v1/embeddings").1.is_none());
    }
}
