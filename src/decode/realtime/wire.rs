//! The reference reading of a realtime message: serde_json into the fields the meter needs. The
//! streaming reader (`fields.rs`) is held to it by the tests (`tests.rs`).

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::{Event, Protocol, Usage, OUTPUT, TOOL_OUTPUT};

#[derive(Deserialize)]
pub(super) struct Wire<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    delta: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    response_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    session: Option<SessionWire<'a>>,
    #[serde(borrow, default)]
    response: Option<ResponseWire<'a>>,
    #[serde(default)]
    usage: Option<UsageWire>,
    #[serde(rename = "final", default)]
    last: Option<bool>,
    #[serde(borrow, default)]
    code: Option<Cow<'a, str>>,
    /// vLLM's session id (`session.created`): its shape says vLLM.
    #[serde(default)]
    id: Option<IgnoredAny>,
}

#[derive(Deserialize)]
pub(super) struct SessionWire<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
pub(super) struct ResponseWire<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    status: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<UsageWire>,
}

/// Both protocols' usage: vLLM's `prompt_tokens`/`completion_tokens`, OpenAI's `input_tokens`/
/// `output_tokens` with their details.
#[derive(Deserialize, Default)]
struct UsageWire {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    input_token_details: Option<Details>,
    output_token_details: Option<Details>,
}

#[derive(Deserialize, Default)]
struct Details {
    text_tokens: Option<u64>,
    audio_tokens: Option<u64>,
    cached_tokens: Option<u64>,
}

impl UsageWire {
    fn usage(&self) -> Usage {
        let (input, output) = (
            self.input_token_details.as_ref(),
            self.output_token_details.as_ref(),
        );
        Usage {
            input: self.input_tokens.or(self.prompt_tokens),
            output: self.output_tokens.or(self.completion_tokens),
            input_text: input.and_then(|d| d.text_tokens),
            input_audio: input.and_then(|d| d.audio_tokens),
            cached_input: input.and_then(|d| d.cached_tokens),
            output_text: output.and_then(|d| d.text_tokens),
            output_audio: output.and_then(|d| d.audio_tokens),
        }
    }
}

/// What the message `text`, sent by the client (`from_client`) or the server, means.
///
/// A struct of serde's derive also reads from an array (its fields in order); a message's objects are
/// objects, so an array where one is read is refused first, as the streaming reader refuses it.
pub(super) fn read(from_client: bool, text: &[u8]) -> Option<Event<'_>> {
    let value: serde_json::Value = serde_json::from_slice(text).ok()?;
    let objects = |v: Option<&serde_json::Value>| v.is_none_or(|v| v.is_null() || v.is_object());
    let usage_ok = |usage: Option<&serde_json::Value>| {
        objects(usage)
            && objects(usage.and_then(|u| u.get("input_token_details")))
            && objects(usage.and_then(|u| u.get("output_token_details")))
    };
    let response = value.get("response");
    if !value.is_object()
        || !objects(value.get("session"))
        || !objects(response)
        || !usage_ok(value.get("usage"))
        || !usage_ok(response.and_then(|r| r.get("usage")))
    {
        return None;
    }
    let wire: Wire<'_> = serde_json::from_slice(text).ok()?;
    let kind = wire.kind.as_ref();
    let event = match (from_client, kind) {
        (true, "session.update") => Event::Session {
            protocol: None,
            model: wire.model.or(wire.session.and_then(|s| s.model)),
        },
        (true, "response.create") => Event::Create,
        (true, "input_audio_buffer.commit") => Event::Commit {
            last: wire.last == Some(true),
        },
        (true, _) => Event::Other,
        (false, "session.created" | "session.updated") => match wire.session {
            Some(session) => Event::Session {
                model: session.model,
                protocol: Some(Protocol::OpenAi),
            },
            None => Event::Session {
                model: None,
                protocol: wire.id.map(|_| Protocol::Vllm),
            },
        },
        (false, "input_audio_buffer.committed") => Event::Committed,
        (false, "response.created") => Event::Created {
            response: wire.response.and_then(|r| r.id),
        },
        (false, "response.done" | "transcription.done") => {
            let response = wire.response;
            let usage = (response.as_ref().and_then(|r| r.usage.as_ref()))
                .or(wire.usage.as_ref())
                .map(UsageWire::usage)
                .unwrap_or_default();
            let (response, status) = match response {
                Some(r) => (r.id, r.status),
                None => (None, None),
            };
            Event::Done {
                response,
                status,
                usage,
            }
        }
        (false, "error") => Event::Error {
            ends_response: matches!(
                wire.code.as_deref(),
                Some("processing_error" | "model_not_validated")
            ),
        },
        (false, kind) if OUTPUT.contains(&kind) || TOOL_OUTPUT.contains(&kind) => Event::Output {
            response: wire.response_id,
            empty: wire.delta.as_deref().is_none_or(str::is_empty),
            tool: TOOL_OUTPUT.contains(&kind),
        },
        (false, _) => Event::Other,
    };
    Some(event)
}
