//! Text to speech: `/v1/audio/speech`. Its output is audio ([`Carries::Audio`]), in one of two shapes.
//!
//! By default the answer is the audio itself (`audio/mpeg`, `audio/wav`, `audio/pcm`, …: any 2xx body
//! that is neither an event stream nor JSON): the decoder marks its first byte as the first output, so
//! the TTFT is the time to first audio; there are no events after it to time gaps between, and no
//! tokens to count (a byte of audio is not a token), so such a request has a TTFT and an E2E and no
//! token figures. With `stream_format: "sse"` (OpenAI) the answer is SSE: `speech.audio.delta` with a
//! non-empty `audio` (base64) is output, `speech.audio.done` ends the stream and carries the usage
//! (`output_tokens`, `input_tokens`). A delta is a piece of audio of any length, not a token: the
//! token count is the usage's, or none. An `error` field, or an event of type `error`, ends the
//! request as `upstream_error`.
//!
//! The events are few and large (base64 audio): serde_json reads every one, borrowing the audio
//! without copying it, and nothing is handed to a tokenizer.

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::text::Text;
use super::{Carries, EventKind, EventOutput, Observations, Wire};
use crate::decode::json::FieldScanner;

#[derive(Debug, Default)]
pub struct Speech;

#[derive(Deserialize)]
pub struct Event<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Text<'a>,
    #[serde(borrow, default)]
    audio: Text<'a>,
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens: Option<u64>,
}

impl Wire for Speech {
    type Event<'a> = Event<'a>;

    const CARRIES: Carries = Carries::Audio;

    fn apply(
        &mut self, event: &Event<'_>, obs: &mut Observations, output: &mut EventOutput<'_>,
    ) -> EventKind {
        obs.model(event.model.0.as_deref());
        if let Some(usage) = &event.usage {
            obs.record(usage.output_tokens, usage.input_tokens);
        }
        match event.kind.0.as_deref().unwrap_or_default() {
            _ if event.error.is_some() => EventKind::Error,
            "error" => EventKind::Error,
            "speech.audio.delta" if event.audio.non_empty().is_some() => {
                output.answer();
                EventKind::Output
            }
            "speech.audio.done" => {
                obs.ended = true;
                EventKind::Other
            }
            _ => EventKind::Other,
        }
    }

    const BODY_FIELDS: &'static [&'static str] = &["model", "usage"];

    fn body(&mut self, fields: &FieldScanner, obs: &mut Observations) {
        obs.model(fields.string("model").as_deref());
        if let Some(usage) = fields.value::<Usage>("usage") {
            obs.record(usage.output_tokens, usage.input_tokens);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::dialect::{channels_of, classify_with, ANSWER};

    fn classify(data: &str) -> (EventKind, Observations, String) {
        classify_with(&mut Speech, data)
    }

    #[test]
    fn audio_deltas_are_output_without_text_and_done_ends_with_usage() {
        let delta = r#"{"type":"speech.audio.delta","audio":"AAAA"}"#;
        let (kind, obs, text) = classify(delta);
        assert_eq!(
            (kind, text.as_str()),
            (EventKind::Output, ""),
            "audio is not text"
        );
        assert!(!obs.ended);
        assert_eq!(channels_of(&mut Speech, delta), ANSWER);
        let empty = r#"{"type":"speech.audio.delta","audio":""}"#;
        assert_eq!(classify(empty).0, EventKind::Other);
        let done = r#"{"type":"speech.audio.done","usage":{"input_tokens":6,"output_tokens":42,"total_tokens":48}}"#;
        let (kind, obs, _) = classify(done);
        assert_eq!(kind, EventKind::Other);
        assert!(obs.ended);
        assert_eq!((obs.output_tokens, obs.input_tokens), (Some(42), Some(6)));
    }

    #[test]
    fn errors_are_errors() {
        assert_eq!(
            classify(r#"{"type":"error","error":{"message":"x"}}"#).0,
            EventKind::Error
        );
        assert_eq!(classify(r#"{"error":{"message":"x"}}"#).0, EventKind::Error);
        assert_eq!(classify("{oops").0, EventKind::Malformed);
    }
}
