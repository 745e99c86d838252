//! llama.cpp server's native completion route, `/completion` (its `/v1/…` routes are OpenAI's): SSE
//! `data:` events with a `content` string, the last one with `"stop": true`, no `[DONE]`; or one JSON
//! body without streaming.
//!
//! Output-bearing: an event with non-empty `content`. Not output: the final `stop: true` event when its
//! content is empty. That event is terminal: the client has the whole answer once it has passed. Output tokens come from `timings.predicted_n` (else `tokens_predicted`), the last
//! value seen. Input tokens come from `tokens_evaluated`, the whole prompt (`timings.prompt_n` counts
//! only the prompt tokens not served from the cache, so it is the fallback). An event with an `error`
//! object means `upstream_error`.
//!
//! No reasoning channel: this route streams the raw text (llama.cpp separates reasoning only on its
//! chat route, as `reasoning_content`), so all output is answer. Cached prompt tokens: `timings.cache_n`,
//! else `tokens_evaluated − timings.prompt_n` (older servers; `tokens_cached` is not it: it counts the
//! whole context, generated tokens included). The server's timings: `timings.prompt_ms` (its TTFT and
//! prefill) and `timings.predicted_ms`.
//!
//! The per-token events are read by a scanner of their own ([`scan`]) without serde_json; the last event
//! (it carries `timings`), and any the scanner is not sure to read as serde_json does, are read by
//! serde_json (`differential.rs` holds the two equal).

#[cfg(test)]
mod differential;
mod scan;

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::text::Text;
use super::timings::LlamaTimings as Timings;
use super::{EventKind, EventOutput, Observations, Wire};
use crate::decode::json::FieldScanner;

#[derive(Debug, Default)]
pub struct LlamaCpp;

/// One event, as serde_json reads it; the scanner fills the same struct (absent fields: the default).
#[derive(Deserialize, Default)]
pub struct Chunk<'a> {
    #[serde(borrow, default)]
    content: Text<'a>,
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(default)]
    stop: Option<bool>,
    #[serde(default)]
    tokens_predicted: Option<u64>,
    #[serde(default)]
    tokens_evaluated: Option<u64>,
    #[serde(default)]
    timings: Option<Timings>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

fn record(
    timings: Option<&Timings>, predicted: Option<u64>, evaluated: Option<u64>,
    obs: &mut Observations,
) {
    obs.record(
        timings.and_then(|t| t.predicted_n).or(predicted),
        evaluated.or(timings.and_then(|t| t.prompt_n)),
    );
    if let Some(timings) = timings {
        obs.server.merge(timings.timings());
        if let Some(cached) = timings.cached(evaluated.or(obs.input_tokens)) {
            obs.cached_input_tokens = Some(cached);
        }
    }
}

impl Wire for LlamaCpp {
    type Event<'a> = Chunk<'a>;

    fn scan<'a, R>(data: &'a [u8], then: impl FnOnce(&Chunk<'a>) -> R) -> Option<R> {
        scan::chunk(data).map(|event| then(&event))
    }

    /// What one event says, read by the scanner or by serde_json.
    fn apply(
        &mut self, chunk: &Chunk<'_>, obs: &mut Observations, text: &mut EventOutput<'_>,
    ) -> EventKind {
        obs.model(chunk.model.0.as_deref());
        let (predicted, evaluated) = (chunk.tokens_predicted, chunk.tokens_evaluated);
        record(chunk.timings.as_ref(), predicted, evaluated, obs);
        if chunk.stop == Some(true) {
            obs.ended = true;
        }
        if chunk.error.is_some() {
            return EventKind::Error;
        }
        match chunk.content.non_empty() {
            Some(content) => {
                text.push(content);
                EventKind::Output
            }
            None => EventKind::Other,
        }
    }

    const BODY_FIELDS: &'static [&'static str] =
        &["model", "timings", "tokens_predicted", "tokens_evaluated"];

    fn body(&mut self, fields: &FieldScanner, obs: &mut Observations) {
        obs.model(fields.string("model").as_deref());
        let timings: Option<Timings> = fields.value("timings");
        let (predicted, evaluated) = (
            fields.value("tokens_predicted"),
            fields.value("tokens_evaluated"),
        );
        record(timings.as_ref(), predicted, evaluated, obs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(data: &str) -> (EventKind, Observations, String) {
        crate::decode::dialect::classify_with(&mut LlamaCpp, data)
    }

    #[test]
    fn content_is_output_and_the_stop_event_carries_the_counts() {
        let token = r#"{"index":0,"content":" the","tokens":[279],"stop":false,"id_slot":0,"tokens_predicted":1,"tokens_evaluated":5}"#;
        let (kind, obs, text) = classify(token);
        assert_eq!((kind, text.as_str()), (EventKind::Output, " the"));
        assert_eq!((obs.output_tokens, obs.input_tokens), (Some(1), Some(5)));
        let stop = r#"{"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"model":"qwen2.5-0.5b","tokens_predicted":16,"tokens_evaluated":5,"stop_type":"limit","tokens_cached":20,"timings":{"prompt_n":2,"prompt_ms":10.1,"predicted_n":16,"predicted_ms":160.2}}"#;
        let (kind, obs, _) = classify(stop);
        assert_eq!(kind, EventKind::Other);
        assert_eq!((obs.output_tokens, obs.input_tokens), (Some(16), Some(5)));
        assert_eq!(obs.model.as_deref(), Some("qwen2.5-0.5b"));
        // 5 prompt tokens, 2 processed: 3 came from the cache.
        assert_eq!(obs.cached_input_tokens, Some(3));
        let ms = |n: f64| Some(std::time::Duration::from_secs_f64(n / 1e3));
        assert_eq!((obs.server.ttft, obs.server.prefill), (ms(10.1), ms(10.1)));
        assert_eq!((obs.server.queue, obs.server.generation), (None, ms(160.2)));
    }

    #[test]
    fn cache_n_when_reported_is_the_cached_prompt() {
        let stop = r#"{"content":"","stop":true,"tokens_predicted":4,"tokens_evaluated":50,"timings":{"cache_n":48,"prompt_n":2,"prompt_ms":3.0,"predicted_n":4,"predicted_ms":40.0}}"#;
        assert_eq!(classify(stop).1.cached_input_tokens, Some(48));
        let no_timings =
            r#"{"content":"x","stop":false,"tokens_predicted":1,"tokens_evaluated":50}"#;
        assert_eq!(classify(no_timings).1.cached_input_tokens, None);
    }

    #[test]
    fn error_object_is_an_error() {
        let error = r#"{"error":{"code":500,"message":"slot unavailable","type":"server_error"}}"#;
        assert_eq!(classify(error).0, EventKind::Error);
    }
}
