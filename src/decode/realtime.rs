//! What a realtime session's text message means for metering (SPEC §10), in both protocols: vLLM's
//! `/v1/realtime` (streaming transcription) and OpenAI's Realtime API, GA and beta event names. One
//! message in, one [`Event`] out; the session's state (which response an event belongs to) is the
//! tap's (`tap/realtime.rs`).
//!
//! Read with serde_json into borrowed fields (an audio delta's base64 is borrowed, not copied); an
//! unknown field is passed over, an unknown `type` is [`Event::Other`], a message that is not a JSON
//! object with a `type` is `None`.

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::Deserialize;

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

#[derive(Deserialize)]
struct Wire<'a> {
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
struct SessionWire<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ResponseWire<'a> {
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

/// The output-bearing server events (SPEC §10): GA names, then beta's, then vLLM's; and the function
/// call arguments, a tool call's output.
const OUTPUT: [&str; 7] = [
    "response.output_text.delta",
    "response.output_audio.delta",
    "response.output_audio_transcript.delta",
    "response.text.delta",
    "response.audio.delta",
    "response.audio_transcript.delta",
    "transcription.delta",
];
const TOOL_OUTPUT: [&str; 2] = [
    "response.function_call_arguments.delta",
    "response.mcp_call_arguments.delta",
];

/// What the message `text`, sent by the client (`from_client`) or the server, means.
pub fn read(from_client: bool, text: &[u8]) -> Option<Event<'_>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn server(text: &str) -> Option<Event<'_>> {
        read(false, text.as_bytes())
    }

    #[test]
    fn vllms_events_are_read() {
        let created =
            r#"{"type":"session.created","id":"sess-888aee0ee5405235","created":1796619707}"#;
        assert_eq!(
            server(created),
            Some(Event::Session {
                model: None,
                protocol: Some(Protocol::Vllm)
            })
        );
        let update = br#"{"type": "session.update", "model": "tiny-qwen3-asr"}"#;
        assert_eq!(
            read(true, update),
            Some(Event::Session {
                model: Some("tiny-qwen3-asr".into()),
                protocol: None
            })
        );
        let commit = br#"{"type": "input_audio_buffer.commit", "final": true}"#;
        assert_eq!(read(true, commit), Some(Event::Commit { last: true }));
        let delta = r#"{"type":"transcription.delta","delta":"ari"}"#;
        assert_eq!(
            server(delta),
            Some(Event::Output {
                response: None,
                empty: false,
                tool: false
            })
        );
        let done = r#"{"type":"transcription.done","text":"x","usage":{"prompt_tokens":26,"total_tokens":90,"completion_tokens":64,"prompt_tokens_details":null,"completion_tokens_details":null}}"#;
        let Some(Event::Done { usage, .. }) = server(done) else {
            panic!("done");
        };
        assert_eq!((usage.input, usage.output), (Some(26), Some(64)));
        let refused =
            r#"{"type":"error","error":"Model not validated.","code":"model_not_validated"}"#;
        assert_eq!(
            server(refused),
            Some(Event::Error {
                ends_response: true
            })
        );
        let bad_audio = r#"{"type":"error","error":"x","code":"invalid_audio"}"#;
        assert_eq!(
            server(bad_audio),
            Some(Event::Error {
                ends_response: false
            })
        );
        assert_eq!(read(false, b"not json"), None);
    }

    #[test]
    fn openais_ga_and_beta_events_are_read() {
        let update = br#"{"type": "session.update", "session": {"type": "realtime", "model": "gpt-realtime"}}"#;
        assert!(
            matches!(read(true, update), Some(Event::Session { model: Some(m), .. }) if m == "gpt-realtime")
        );
        for kind in OUTPUT {
            let text = format!(r#"{{"type":"{kind}","response_id":"resp_1","delta":"AAAA"}}"#);
            assert!(
                matches!(server(&text), Some(Event::Output { response: Some(r), empty: false, tool: false }) if r == "resp_1"),
                "{kind}"
            );
        }
        let done = r#"{"type":"response.done","response":{"id":"resp_1","status":"cancelled","usage":{"total_tokens":158,"input_tokens":118,"output_tokens":40,"input_token_details":{"text_tokens":118,"audio_tokens":0,"cached_tokens":64},"output_token_details":{"text_tokens":9,"audio_tokens":31}}}}"#;
        let Some(Event::Done {
            response,
            status,
            usage,
        }) = server(done)
        else {
            panic!("done");
        };
        assert_eq!(
            (response.as_deref(), status.as_deref()),
            (Some("resp_1"), Some("cancelled"))
        );
        assert_eq!(
            usage,
            Usage {
                input: Some(118),
                output: Some(40),
                input_text: Some(118),
                input_audio: Some(0),
                cached_input: Some(64),
                output_text: Some(9),
                output_audio: Some(31),
            }
        );
        let args =
            r#"{"type":"response.function_call_arguments.delta","response_id":"r","delta":"{"}"#;
        assert!(matches!(
            server(args),
            Some(Event::Output { tool: true, .. })
        ));
        assert_eq!(
            read(true, br#"{"type":"response.create"}"#),
            Some(Event::Create)
        );
        assert_eq!(
            server(r#"{"type":"input_audio_buffer.committed","item_id":"i"}"#),
            Some(Event::Committed)
        );
    }
}
