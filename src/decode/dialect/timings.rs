//! The server's own timings, where a response carries them, read into [`ServerTimings`]
//! (docs/metrics.md says what each server's figure spans).
//!
//! - vLLM's per-request `metrics` object (`--enable-per-request-metrics`; on the final usage chunk of a
//!   stream, which needs `stream_options.include_usage`, and on a non-streaming body; only for `n` = 1):
//!   `queue_time_ms` (queued → scheduled in the engine), `time_to_first_token_ms` (scheduled → first
//!   token: the prefill, despite its name), `generation_time_ms` (first → last token). The server's TTFT
//!   is queue + prefill: from the engine queueing the request to its first token, so vLLM's HTTP server,
//!   tokenizing and detokenizing are outside it.
//! - llama.cpp's `timings` (native `/completion` and its OpenAI routes): `prompt_ms` (prompt processing)
//!   and `predicted_ms` (generation). llama.cpp reports no queue time, so its TTFT is the prompt
//!   processing alone; waiting for a free slot is outside it.
//! - Ollama's durations (nanoseconds, on the `done` line): `load_duration` + `prompt_eval_duration` is its
//!   TTFT (loading the model, then the prompt), `eval_duration` its generation; no queue time.
//! - TGI's `x-queue-time` response header (milliseconds; only on non-streaming answers, whose headers
//!   come after the generation): its queue time.

use std::time::Duration;

use serde::Deserialize;

use crate::record::server::ServerTimings;

/// A duration from a count of milliseconds; `None` for a negative or non-finite value.
pub fn from_millis(ms: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(ms / 1e3).ok()
}

/// vLLM's per-request `metrics` object.
#[derive(Deserialize)]
pub struct VllmMetrics {
    #[serde(default)]
    queue_time_ms: Option<f64>,
    #[serde(default)]
    time_to_first_token_ms: Option<f64>,
    #[serde(default)]
    generation_time_ms: Option<f64>,
}

impl VllmMetrics {
    pub fn timings(&self) -> ServerTimings {
        let queue = self.queue_time_ms.and_then(from_millis);
        let prefill = self.time_to_first_token_ms.and_then(from_millis);
        ServerTimings {
            queue,
            ttft: queue.zip(prefill).map(|(q, p)| q + p),
            prefill,
            generation: self.generation_time_ms.and_then(from_millis),
        }
    }
}

/// llama.cpp's `timings` object.
#[derive(Deserialize)]
pub struct LlamaTimings {
    #[serde(default)]
    pub prompt_n: Option<u64>,
    #[serde(default)]
    pub predicted_n: Option<u64>,
    #[serde(default)]
    pub cache_n: Option<u64>,
    #[serde(default)]
    prompt_ms: Option<f64>,
    #[serde(default)]
    predicted_ms: Option<f64>,
}

impl LlamaTimings {
    pub fn timings(&self) -> ServerTimings {
        let prefill = self.prompt_ms.and_then(from_millis);
        ServerTimings {
            queue: None,
            ttft: prefill,
            prefill,
            generation: self.predicted_ms.and_then(from_millis),
        }
    }

    /// Prompt tokens served from the cache: `cache_n`, else (servers before it existed) the prompt
    /// tokens of the request (`tokens_evaluated`) minus those processed (`prompt_n`).
    pub fn cached(&self, evaluated: Option<u64>) -> Option<u64> {
        let derived = evaluated
            .zip(self.prompt_n)
            .map(|(all, processed)| all.saturating_sub(processed));
        self.cache_n.or(derived)
    }
}

/// Ollama's durations, in nanoseconds.
#[derive(Deserialize, Default)]
pub struct OllamaDurations {
    #[serde(default)]
    pub load_duration: Option<u64>,
    #[serde(default)]
    pub prompt_eval_duration: Option<u64>,
    #[serde(default)]
    pub eval_duration: Option<u64>,
}

impl OllamaDurations {
    pub fn timings(&self) -> ServerTimings {
        let prefill = self.prompt_eval_duration.map(Duration::from_nanos);
        let load = self.load_duration.map(Duration::from_nanos);
        ServerTimings {
            queue: None,
            ttft: prefill.map(|p| p + load.unwrap_or_default()),
            prefill,
            generation: self.eval_duration.map(Duration::from_nanos),
        }
    }
}

/// TGI's timing headers: `x-queue-time`, in milliseconds.
pub fn tgi_headers(headers: &http::HeaderMap) -> ServerTimings {
    let millis = |name: &str| {
        let value = headers.get(name)?.to_str().ok()?;
        from_millis(value.trim().parse::<f64>().ok()?)
    };
    ServerTimings {
        queue: millis("x-queue-time"),
        ..ServerTimings::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    #[test]
    fn vllm_ttft_is_its_queue_time_plus_its_scheduled_to_first_token_time() {
        let m: VllmMetrics = serde_json::from_str(
            r#"{"time_to_first_token_ms":30.0,"generation_time_ms":200.0,"queue_time_ms":12.0,"mean_itl_ms":4.1}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let t = m.timings();
        assert_eq!((t.queue, t.prefill, t.ttft), (ms(12), ms(30), ms(42)));
        assert_eq!(t.generation, ms(200));
        let negative: VllmMetrics =
            serde_json::from_str(r#"{"queue_time_ms":-1.0}"#).unwrap_or_else(|e| panic!("{e}"));
        assert!(negative.timings().is_empty());
    }

    #[test]
    fn llama_cpp_cached_prompt_is_cache_n_else_the_prompt_not_processed() {
        let t: LlamaTimings = serde_json::from_str(r#"{"prompt_n":3,"prompt_ms":21.5}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.cached(Some(8)), Some(5));
        assert_eq!(t.cached(None), None);
        let t: LlamaTimings =
            serde_json::from_str(r#"{"cache_n":6,"prompt_n":3}"#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.cached(Some(8)), Some(6));
    }

    #[test]
    fn ollama_ttft_is_load_plus_prompt_evaluation() {
        let d: OllamaDurations = serde_json::from_str(
            r#"{"load_duration":5000000,"prompt_eval_duration":20000000,"eval_duration":300000000}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let t = d.timings();
        assert_eq!((t.queue, t.ttft, t.prefill), (None, ms(25), ms(20)));
        assert_eq!(t.generation, ms(300));
    }

    #[test]
    fn tgi_queue_time_comes_from_its_header_in_milliseconds() {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-queue-time", http::HeaderValue::from_static("17"));
        assert_eq!(tgi_headers(&headers).queue, ms(17));
        headers.insert("x-queue-time", http::HeaderValue::from_static("soon"));
        assert!(tgi_headers(&headers).is_empty());
    }
}
