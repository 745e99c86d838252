//! Hugging Face TGI's native routes: `/generate_stream` (SSE, one `data:` event per generated token, no
//! `[DONE]`) and `/generate` (one JSON body). TGI's OpenAI routes go through the OpenAI dialect.
//!
//! Output-bearing: every event with a `token` — one per token the server generated, special tokens
//! (the final `</s>`) included, so the output-bearing events count exactly what the server counts; a
//! special token's text is not copied for a tokenizer. Output tokens come from
//! `details.generated_tokens` on the last event (and `details.input_length`, when the server sends it,
//! gives the input tokens); a non-streaming body's `details` likewise when the request asked for
//! details. An event with an `error` field means `upstream_error`. TGI names no model in its answers.
//! The last event is the one with a non-null `generated_text`: terminal, the client has the whole
//! answer once it has passed.
//!
//! The per-token events are read by a scanner of their own ([`scan`]) without serde_json; the last
//! event, and any the scanner is not sure to read as serde_json does, are read by serde_json
//! (`differential.rs` holds the two equal).

#[cfg(test)]
mod differential;
mod scan;

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::text::Text;
use super::{EventKind, EventOutput, Observations, Wire};
use crate::decode::json::FieldScanner;

#[derive(Debug, Default)]
pub struct Tgi;

/// One event, as serde_json reads it; the scanner fills the same struct (absent fields: the default).
#[derive(Deserialize, Default)]
pub struct Event<'a> {
    #[serde(borrow, default)]
    token: Option<Token<'a>>,
    #[serde(borrow, default)]
    generated_text: Text<'a>,
    #[serde(default)]
    details: Option<Details>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Token<'a> {
    #[serde(borrow, default)]
    text: Text<'a>,
    #[serde(default)]
    special: Option<bool>,
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    generated_tokens: Option<u64>,
    #[serde(default)]
    input_length: Option<u64>,
}

impl Details {
    fn record(&self, obs: &mut Observations) {
        obs.record(self.generated_tokens, self.input_length);
    }
}

impl Wire for Tgi {
    type Event<'a> = Event<'a>;

    fn scan<'a, R>(data: &'a [u8], then: impl FnOnce(&Event<'a>) -> R) -> Option<R> {
        scan::token_event(data).map(|event| then(&event))
    }

    /// A token is output-bearing whatever its text; only a plain token's text is copied for a tokenizer.
    fn apply(
        &mut self, event: &Event<'_>, obs: &mut Observations, out: &mut EventOutput<'_>,
    ) -> EventKind {
        if let Some(details) = &event.details {
            details.record(obs);
        }
        if event.generated_text.0.is_some() {
            obs.ended = true;
        }
        if event.error.is_some() {
            return EventKind::Error;
        }
        let Some(token) = &event.token else {
            return EventKind::Other;
        };
        if let Some(s) = token
            .text
            .non_empty()
            .filter(|_| token.special != Some(true))
        {
            out.push(s);
        }
        EventKind::Output
    }

    const BODY_FIELDS: &'static [&'static str] = &["details"];

    fn body(&mut self, fields: &FieldScanner, obs: &mut Observations) {
        if let Some(details) = fields.value::<Details>("details") {
            details.record(obs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(data: &str) -> (EventKind, Observations, String) {
        crate::decode::dialect::classify_with(&mut Tgi, data)
    }

    #[test]
    fn every_token_event_is_output_special_ones_too_but_only_plain_text_is_copied() {
        let plain = r#"{"index":1,"token":{"id":2323,"text":" Deep","logprob":-0.5,"special":false},"generated_text":null,"details":null}"#;
        let (kind, _, text) = classify(plain);
        assert_eq!((kind, text.as_str()), (EventKind::Output, " Deep"));
        let last = r#"{"index":3,"token":{"id":2,"text":"</s>","logprob":-0.1,"special":true},"generated_text":"Deep learning","details":{"finish_reason":"eos_token","generated_tokens":3,"seed":null,"input_length":7}}"#;
        let (kind, obs, text) = classify(last);
        assert_eq!((kind, text.as_str()), (EventKind::Output, ""));
        assert_eq!((obs.output_tokens, obs.input_tokens), (Some(3), Some(7)));
    }

    #[test]
    fn error_event_is_an_error_and_garbage_is_malformed() {
        let error = r#"{"error":"Request failed during generation: Server error: CUDA out of memory","error_type":"generation"}"#;
        assert_eq!(classify(error).0, EventKind::Error);
        assert_eq!(classify("{").0, EventKind::Malformed);
    }

    #[test]
    fn non_streaming_details_give_the_token_count() {
        let body = br#"{"generated_text":"Deep learning is","details":{"finish_reason":"length","generated_tokens":4,"seed":null,"prefill":[],"tokens":[]}}"#;
        let mut fields = FieldScanner::new(Tgi::BODY_FIELDS, 4096, usize::MAX);
        fields.feed(body);
        let mut obs = Observations::default();
        Tgi.body(&fields, &mut obs);
        assert_eq!(obs.output_tokens, Some(4));
    }
}
