//! The families that say what is inside a TTFT (docs/metrics.md, "Inside the TTFT"): the reasoning a
//! user waited through, the prompt tokens the server's prefix cache served, and the server's own
//! timings beside tokentap's.
//!
//! The time to first answer is resolved with the request's other token families (nearly every stream
//! has one). The rest are resolved only when a request has the figure, once per request: a deployment
//! whose server reports no timings and whose model does not reason exports none of these series.

use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

use super::bound::Boundaries;
use super::{purge, Series, MODEL_API};
use crate::record::server::{Outside, ServerTimings};

pub struct Inside {
    pub(super) time_to_first_answer: HistogramVec,
    reasoning_time: HistogramVec,
    reasoning_tokens: IntCounterVec,
    cached_input_tokens: IntCounterVec,
    server_queue: HistogramVec,
    server_ttft: HistogramVec,
    server_prefill: HistogramVec,
    server_generation: HistogramVec,
    outside: HistogramVec,
    outside_clamped: IntCounterVec,
}

/// Histogram families of [`Inside`] per (model, api) pair, with their boundaries, for the series bound.
pub fn histograms(b: &Boundaries) -> [&[f64]; 7] {
    [
        &b.time_to_first_answer,
        &b.ttft, // reasoning time
        &b.ttft, // server queue time
        &b.ttft, // server TTFT
        &b.ttft, // server prefill
        &b.generation,
        &b.ttft, // outside the server
    ]
}

/// Counter families of [`Inside`] per (model, api) pair.
pub const COUNTERS: usize = 3;

impl Inside {
    pub fn register(registry: &Registry, b: &Boundaries) -> Result<Self, prometheus::Error> {
        let histogram = |name: &str, help: &str, buckets: &[f64]| {
            let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
            let h = HistogramVec::new(opts, MODEL_API)?;
            registry.register(Box::new(h.clone()))?;
            Ok::<_, prometheus::Error>(h)
        };
        let counter = |name: &str, help: &str| {
            let c = IntCounterVec::new(Opts::new(name, help), MODEL_API)?;
            registry.register(Box::new(c.clone()))?;
            Ok::<_, prometheus::Error>(c)
        };
        Ok(Inside {
            time_to_first_answer: histogram(
                "tokentap_time_to_first_answer_token_seconds",
                "Time from the request head arriving to the first answer-bearing chunk (text, refusal or tool call; not reasoning), streams that answered.",
                &b.time_to_first_answer,
            )?,
            reasoning_time: histogram(
                "tokentap_reasoning_time_seconds",
                "Time from the first output to the first answer, streams whose reasoning came before the answer.",
                &b.ttft,
            )?,
            reasoning_tokens: counter(
                "tokentap_reasoning_tokens_total",
                "Reasoning tokens: the server's usage details, else a tokenizer on the reasoning text, else one per reasoning chunk.",
            )?,
            cached_input_tokens: counter(
                "tokentap_cached_input_tokens_total",
                "Prompt tokens the server reports as served from its prefix cache.",
            )?,
            server_queue: histogram(
                "tokentap_server_queue_time_seconds",
                "The server's own report of the time the request waited before it was scheduled (vLLM, TGI).",
                &b.ttft,
            )?,
            server_ttft: histogram(
                "tokentap_server_time_to_first_token_seconds",
                "The server's own report of its time to first token (vLLM queue + prefill, llama.cpp prompt, Ollama load + prompt).",
                &b.ttft,
            )?,
            server_prefill: histogram(
                "tokentap_server_prefill_time_seconds",
                "The server's own report of its prompt processing time (vLLM, llama.cpp, Ollama).",
                &b.ttft,
            )?,
            server_generation: histogram(
                "tokentap_server_generation_time_seconds",
                "The server's own report of its generation time, first to last token (vLLM, llama.cpp, Ollama).",
                &b.generation,
            )?,
            outside: histogram(
                "tokentap_ttft_outside_server_seconds",
                "TTFT minus the server's own TTFT of the same request: network, HTTP serving, admission, detokenizing.",
                &b.ttft,
            )?,
            outside_clamped: counter(
                "tokentap_ttft_outside_server_clamped_total",
                "Requests whose server-reported TTFT exceeded tokentap's TTFT, observed as 0 outside the server.",
            )?,
        })
    }

    fn labels(series: &Series) -> [&str; 2] {
        [&*series.model, series.api.as_str()]
    }

    /// The reasoning time of a stream whose reasoning came before its answer.
    pub fn observe_reasoning_time(&self, series: &Series, time: Duration) {
        self.reasoning_time
            .with_label_values(&Self::labels(series))
            .observe(time.as_secs_f64());
    }

    /// A finished request's token counts from the usage details, where it has them.
    pub fn count_tokens(&self, series: &Series, reasoning: Option<u64>, cached: Option<u64>) {
        let labels = Self::labels(series);
        if let Some(n) = reasoning.filter(|&n| n > 0) {
            self.reasoning_tokens.with_label_values(&labels).inc_by(n);
        }
        if let Some(n) = cached {
            self.cached_input_tokens
                .with_label_values(&labels)
                .inc_by(n);
        }
    }

    /// A finished request's server-reported timings, and the part of its TTFT outside the server.
    pub fn observe_server(
        &self,
        series: &Series,
        server: &ServerTimings,
        outside: Option<Outside>,
    ) {
        let labels = Self::labels(series);
        let families = [
            (&self.server_queue, server.queue),
            (&self.server_ttft, server.ttft),
            (&self.server_prefill, server.prefill),
            (&self.server_generation, server.generation),
            (&self.outside, outside.map(|o| o.duration)),
        ];
        for (family, value) in families {
            if let Some(value) = value {
                family
                    .with_label_values(&labels)
                    .observe(value.as_secs_f64());
            }
        }
        if outside.is_some_and(|o| o.clamped) {
            self.outside_clamped.with_label_values(&labels).inc();
        }
    }

    pub(super) fn purge(&self, names: &std::collections::HashSet<std::sync::Arc<str>>) {
        purge(&self.time_to_first_answer, names);
        purge(&self.reasoning_time, names);
        purge(&self.reasoning_tokens, names);
        purge(&self.cached_input_tokens, names);
        purge(&self.server_queue, names);
        purge(&self.server_ttft, names);
        purge(&self.server_prefill, names);
        purge(&self.server_generation, names);
        purge(&self.outside, names);
        purge(&self.outside_clamped, names);
    }
}
