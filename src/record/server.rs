//! What the upstream server says about its own handling of a request, where it reports it (vLLM's
//! per-request metrics, llama.cpp's `timings`, Ollama's durations, TGI's timing headers), kept beside
//! tokentap's own figures so the part of a TTFT outside the server can be shown (docs/metrics.md).

use std::time::Duration;

/// The server's own timings for one request; every field `None` when the server reports nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerTimings {
    /// Waiting before the server scheduled the request (vLLM's queue time, TGI's queue time).
    pub queue: Option<Duration>,
    /// The server's own time to first token, from the request's arrival at the server.
    pub ttft: Option<Duration>,
    /// Prompt processing (prefill): llama.cpp `prompt_ms`, Ollama `prompt_eval_duration`.
    pub prefill: Option<Duration>,
    /// Token generation (decode): llama.cpp `predicted_ms`, Ollama `eval_duration`.
    pub generation: Option<Duration>,
}

impl ServerTimings {
    pub fn is_empty(&self) -> bool {
        *self == ServerTimings::default()
    }
}
