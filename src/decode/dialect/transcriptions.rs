//! Speech to text: `/v1/audio/transcriptions` and `/v1/audio/translations`, in the two shapes servers
//! stream them.
//!
//! vLLM sends `transcription.chunk` (`translation.chunk`) objects shaped like chat chunks without the
//! role chunk: output-bearing is a choice whose `delta.content` is non-empty (the last chunk may carry
//! an empty one with its `finish_reason`); usage (`completion_tokens`, `prompt_tokens`) comes in a
//! usage-only chunk (`"choices":[]`) with `stream_include_usage`, or running in every chunk with
//! `stream_continuous_usage_stats`; the stream ends with `[DONE]`, which the decoder reads for every
//! dialect. OpenAI sends typed events: `transcript.text.delta` with a non-empty `delta` is output,
//! `transcript.text.done` ends the stream and carries the usage (`output_tokens`, `input_tokens`).
//! `transcript.text.segment` (diarizing models: a whole segment at once, after its deltas) is not output.
//! An `error` field, or an event of type `error`, ends the request as `upstream_error`.
//!
//! A non-streamed transcription is one JSON body: its `model` and `usage` are read, and usage in
//! tokens is taken; vLLM's and OpenAI's `{"type":"duration","seconds":…}` usage has no tokens, so such a
//! request has no token count, like any JSON body without usage.
//!
//! Audio events are few (one per text delta, tens a second at most), so serde_json reads every one:
//! no scanner.

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::text::Text;
use super::{EventKind, EventOutput, Observations, Wire};
use crate::decode::json::FieldScanner;

#[derive(Debug, Default)]
pub struct Transcriptions;

/// One event in either shape: vLLM's chunk (`choices`) or OpenAI's typed event (`type`, `delta`).
#[derive(Deserialize)]
pub struct Event<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Text<'a>,
    /// OpenAI's `transcript.text.delta` text (in vLLM's chunks `delta` is inside each choice).
    #[serde(borrow, default)]
    delta: Text<'a>,
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Text<'a>,
}

/// vLLM's names (`completion_tokens`, `prompt_tokens`) or OpenAI's (`output_tokens`, `input_tokens`);
/// a `duration` usage has neither.
#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens: Option<u64>,
}

fn record_usage(usage: &Usage, obs: &mut Observations) {
    obs.record(
        usage.completion_tokens.or(usage.output_tokens),
        usage.prompt_tokens.or(usage.input_tokens),
    );
}

impl Wire for Transcriptions {
    type Event<'a> = Event<'a>;

    fn apply(
        &mut self, event: &Event<'_>, obs: &mut Observations, output: &mut EventOutput<'_>,
    ) -> EventKind {
        obs.model(event.model.0.as_deref());
        if let Some(usage) = &event.usage {
            record_usage(usage, obs);
        }
        let kind = event.kind.0.as_deref().unwrap_or_default();
        if event.error.is_some() || kind == "error" {
            return EventKind::Error;
        }
        match kind {
            "transcript.text.delta" => {
                return match event.delta.non_empty() {
                    Some(text) => {
                        output.answer();
                        output.push(text);
                        EventKind::Output
                    }
                    None => EventKind::Other,
                };
            }
            "transcript.text.done" => obs.ended = true,
            _ => {}
        }
        let mut carried = EventKind::Other;
        let choices = event.choices.iter().flatten();
        for choice in choices {
            let content = choice.delta.as_ref().and_then(|d| d.content.non_empty());
            if let Some(text) = content {
                output.choice(choice.index.unwrap_or(0));
                output.answer();
                output.push(text);
                carried = EventKind::Output;
            }
        }
        carried
    }

    const BODY_FIELDS: &'static [&'static str] = &["model", "usage"];

    fn body(&mut self, fields: &FieldScanner, obs: &mut Observations) {
        obs.model(fields.string("model").as_deref());
        if let Some(usage) = fields.value::<Usage>("usage") {
            record_usage(&usage, obs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::dialect::{channels_of, classify_with, ANSWER};

    fn classify(data: &str) -> (EventKind, Observations, String) {
        classify_with(&mut Transcriptions, data)
    }

    #[test]
    fn vllm_chunks_with_content_are_output_and_the_usage_chunk_is_not() {
        let chunk = r#"{"id":"transcribe-1","object":"transcription.chunk","created":1,"model":"tiny-whisper","choices":[{"delta":{"content":"GRAM"}}]}"#;
        let (kind, obs, text) = classify(chunk);
        assert_eq!((kind, text.as_str()), (EventKind::Output, "GRAM"));
        assert_eq!(obs.model.as_deref(), Some("tiny-whisper"));
        assert_eq!(channels_of(&mut Transcriptions, chunk), ANSWER);
        let last = r#"{"object":"transcription.chunk","choices":[{"delta":{"content":""},"finish_reason":"length","stop_reason":null}]}"#;
        assert_eq!(classify(last).0, EventKind::Other);
        let usage = r#"{"object":"transcription.chunk","choices":[],"usage":{"prompt_tokens":104,"total_tokens":112,"completion_tokens":8}}"#;
        let (kind, obs, _) = classify(usage);
        assert_eq!(kind, EventKind::Other);
        assert_eq!((obs.output_tokens, obs.input_tokens), (Some(8), Some(104)));
    }

    #[test]
    fn openai_deltas_are_output_and_done_ends_with_usage() {
        let delta = r#"{"type":"transcript.text.delta","delta":" quick","logprobs":null}"#;
        let (kind, obs, text) = classify(delta);
        assert_eq!(
            (kind, text.as_str(), obs.ended),
            (EventKind::Output, " quick", false)
        );
        let empty = r#"{"type":"transcript.text.delta","delta":""}"#;
        assert_eq!(classify(empty).0, EventKind::Other);
        let done = r#"{"type":"transcript.text.done","text":"The quick brown fox.","usage":{"type":"tokens","input_tokens":14,"output_tokens":5,"total_tokens":19,"input_token_details":{"text_tokens":0,"audio_tokens":14}}}"#;
        let (kind, obs, text) = classify(done);
        assert_eq!(
            (kind, text.as_str()),
            (EventKind::Other, ""),
            "done repeats the text"
        );
        assert!(obs.ended);
        assert_eq!((obs.output_tokens, obs.input_tokens), (Some(5), Some(14)));
        let segment = r#"{"type":"transcript.text.segment","text":"Hello","speaker":"A","start":0.0,"end":0.5}"#;
        assert_eq!(classify(segment).0, EventKind::Other);
    }

    #[test]
    fn errors_are_errors_and_duration_usage_has_no_tokens() {
        let vllm = r#"{"error":{"message":"boom","type":"InternalServerError","code":500}}"#;
        assert_eq!(classify(vllm).0, EventKind::Error);
        let openai = r#"{"type":"error","error":{"message":"boom"}}"#;
        assert_eq!(classify(openai).0, EventKind::Error);
        let mut fields = FieldScanner::new(Transcriptions::BODY_FIELDS, 4096, 1 << 20);
        fields.feed(br#"{"text":"ari","usage":{"type":"duration","seconds":1}}"#);
        let mut obs = Observations::default();
        Transcriptions.body(&fields, &mut obs);
        assert_eq!((obs.output_tokens, obs.input_tokens), (None, None));
        assert_eq!(classify("{oops").0, EventKind::Malformed);
    }
}
