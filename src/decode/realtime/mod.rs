//! What a realtime session's text message means for metering (SPEC §10), in both protocols: vLLM's
//! `/v1/realtime` (streaming transcription) and OpenAI's Realtime API, GA and beta event names. One
//! message in, one [`Event`] out; the session's state (which response an event belongs to) is the
//! tap's (`tap/realtime.rs`).
//!
//! A message is read as it arrives, in whatever pieces its frames and their inflation cut it into, by a
//! [`MessageReader`] (`fields.rs`) that keeps only the few fields read here and passes over the rest
//! (an audio delta's megabyte of base64 is read, never kept); [`meaning`] says what those fields mean.
//! An unknown field is passed over, an unknown `type` is [`Event::Other`], a message that is not a JSON
//! object with a `type` is `None`.

mod fields;
#[cfg(test)]
mod wire;

use std::borrow::Cow;

pub use fields::{Fields, MessageReader, UsageFields};

/// Which protocol's event a message is, where only one has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Vllm,
    OpenAi,
}

/// What a message means for metering.
#[derive(Debug, PartialEq)]
pub enum Event<'a> {
    /// The session's model, named by the client (`session.update`) or the server (`session.created`,
    /// `session.updated`); `protocol` when the event's shape says which.
    Session {
        model: Option<Cow<'a, str>>,
        protocol: Option<Protocol>,
    },
    /// The client asks for output: OpenAI `response.create`.
    Create,
    /// The client commits its audio: vLLM's trigger (not with `final`, SPEC §10); in OpenAI's
    /// protocol only the server's `committed` that follows can be.
    Commit {
        last: bool,
    },
    /// The server committed the audio itself (OpenAI `input_audio_buffer.committed`).
    Committed,
    /// A response begun (OpenAI `response.created`).
    Created {
        response: Option<Cow<'a, str>>,
    },
    /// An output-bearing event: `response` its id (OpenAI), `empty` when it carried no text (a vLLM
    /// delta may be empty: it is not output), `tool` when it is a function call's arguments.
    Output {
        response: Option<Cow<'a, str>>,
        empty: bool,
        tool: bool,
    },
    /// The response ended: vLLM `transcription.done`, OpenAI `response.done`.
    Done {
        response: Option<Cow<'a, str>>,
        status: Option<Cow<'a, str>>,
        usage: Usage,
    },
    /// An error event; `ends_response` when it ends vLLM's generation (`processing_error`, or a commit
    /// refused: `model_not_validated`).
    Error {
        ends_response: bool,
    },
    Other,
}

/// A done event's usage: the totals, and audio and text apart where the server says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: Option<u64>,
    pub output: Option<u64>,
    pub input_text: Option<u64>,
    pub input_audio: Option<u64>,
    pub cached_input: Option<u64>,
    pub output_text: Option<u64>,
    pub output_audio: Option<u64>,
}

/// The output-bearing server events (SPEC §10): GA names, then beta's, then vLLM's; and the function
/// call arguments, a tool call's output.
pub(crate) const OUTPUT: [&str; 7] = [
    "response.output_text.delta",
    "response.output_audio.delta",
    "response.output_audio_transcript.delta",
    "response.text.delta",
    "response.audio.delta",
    "response.audio_transcript.delta",
    "transcription.delta",
];
pub(crate) const TOOL_OUTPUT: [&str; 2] = [
    "response.function_call_arguments.delta",
    "response.mcp_call_arguments.delta",
];

/// What a message sent by the client (`from_client`) or the server means, from its `fields`; `None`
/// when it has no `type`.
pub fn meaning(from_client: bool, fields: &Fields) -> Option<Event<'_>> {
    fn text(v: &Option<String>) -> Option<Cow<'_, str>> {
        v.as_deref().map(Cow::Borrowed)
    }
    let kind = fields.kind.as_deref()?;
    let event = match (from_client, kind) {
        (true, "session.update") => Event::Session {
            protocol: None,
            model: text(&fields.model).or(fields.session.as_ref().and_then(text)),
        },
        (true, "response.create") => Event::Create,
        (true, "input_audio_buffer.commit") => Event::Commit {
            last: fields.last == Some(true),
        },
        (true, _) => Event::Other,
        (false, "session.created" | "session.updated") => match &fields.session {
            Some(model) => Event::Session {
                model: text(model),
                protocol: Some(Protocol::OpenAi),
            },
            None => Event::Session {
                model: None,
                protocol: fields.id.then_some(Protocol::Vllm),
            },
        },
        (false, "input_audio_buffer.committed") => Event::Committed,
        (false, "response.created") => Event::Created {
            response: fields.response.as_ref().and_then(|r| text(&r.id)),
        },
        (false, "response.done" | "transcription.done") => {
            let response = fields.response.as_ref();
            let usage = (response.and_then(|r| r.usage.as_ref()))
                .or(fields.usage.as_ref())
                .map(Usage::of)
                .unwrap_or_default();
            Event::Done {
                response: response.and_then(|r| text(&r.id)),
                status: response.and_then(|r| text(&r.status)),
                usage,
            }
        }
        (false, "error") => Event::Error {
            ends_response: matches!(
                fields.code.as_deref(),
                Some("processing_error" | "model_not_validated")
            ),
        },
        (false, kind) if OUTPUT.contains(&kind) || TOOL_OUTPUT.contains(&kind) => Event::Output {
            response: text(&fields.response_id),
            empty: fields.delta_empty.unwrap_or(true),
            tool: TOOL_OUTPUT.contains(&kind),
        },
        (false, _) => Event::Other,
    };
    Some(event)
}

impl Usage {
    fn of(usage: &UsageFields) -> Usage {
        let [input, output] = usage.details;
        Usage {
            input: usage.input_tokens.or(usage.prompt_tokens),
            output: usage.output_tokens.or(usage.completion_tokens),
            input_text: input.and_then(|d| d.text_tokens),
            input_audio: input.and_then(|d| d.audio_tokens),
            cached_input: input.and_then(|d| d.cached_tokens),
            output_text: output.and_then(|d| d.text_tokens),
            output_audio: output.and_then(|d| d.audio_tokens),
        }
    }
}

#[cfg(test)]
mod tests;
