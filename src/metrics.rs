//! The exported series (SPEC §2), registered into an owned registry, and the capped `model` label.
//!
//! Labelled children are resolved once per request into a [`Series`], never per chunk. Label values come
//! from closed enums or from [`ModelLabels`], which admits at most `max_models` distinct model names and
//! counts the rest as `other`, so no client can blow up the series count.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::config::{Config, SloKind};
use crate::dialect::Api;

/// Label for requests whose model could not be read from the request or the response.
pub const UNKNOWN_MODEL: &str = "unknown";
/// Label for models beyond the `max_models` cap.
pub const OTHER_MODEL: &str = "other";
/// Longer model names are counted as `other`: a real model name is never this long.
const MAX_MODEL_LEN: usize = 200;

pub struct Metrics {
    registry: Registry,
    ttft: HistogramVec,
    itl: HistogramVec,
    tpot: HistogramVec,
    e2e: HistogramVec,
    generation: HistogramVec,
    tokens_per_second: HistogramVec,
    max_gap: HistogramVec,
    requests: IntCounterVec,
    input_tokens: IntCounterVec,
    output_tokens: IntCounterVec,
    goodput: IntCounterVec,
    slo_violations: IntCounterVec,
    in_flight: IntGaugeVec,
    metering_skipped: IntCounterVec,
    token_source: IntCounterVec,
    pub models: ModelLabels,
    pub refusals: Refusals,
}

/// What tokentap's own limits turned away before a request could be counted, or instead of
/// forwarding it. Unlabelled: nothing a client sends chooses a series here.
#[derive(Clone)]
pub struct Refusals {
    /// Client connections closed at once because `limits.max_connections` were open.
    pub connections: IntCounter,
    /// Client connections closed because a request head was not complete in `client_header_read`.
    pub head_timeouts: IntCounter,
    /// HTTP/1.1 request heads hyper answered with 431 (or 414) because they were too large.
    pub header_too_large: IntCounter,
    /// Requests answered 503 because `limits.max_upstream_connections` were in progress.
    pub upstream_requests: IntCounter,
}

impl Refusals {
    fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let counter = |name: &str, help: &str| -> Result<IntCounter, prometheus::Error> {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        Ok(Refusals {
            connections: counter(
                "tokentap_connections_refused_total",
                "Client connections closed at once because limits.max_connections were open.",
            )?,
            head_timeouts: counter(
                "tokentap_request_head_timeouts_total",
                "Client connections closed because a request head was not complete within timeouts.client_header_read.",
            )?,
            header_too_large: counter(
                "tokentap_request_header_too_large_total",
                "HTTP/1.1 request heads answered 431 (or 414) for being too large or having over 100 headers.",
            )?,
            upstream_requests: counter(
                "tokentap_upstream_requests_refused_total",
                "Requests answered 503 because limits.max_upstream_connections upstream requests were in progress.",
            )?,
        })
    }
}

/// One request's labelled children, resolved once.
#[derive(Clone)]
pub struct Series {
    pub model: Arc<str>,
    pub api: Api,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub tpot: Histogram,
    pub e2e: Histogram,
    pub generation: Histogram,
    pub tokens_per_second: Histogram,
    pub max_gap: Histogram,
    pub input_tokens: IntCounter,
    pub output_tokens: IntCounter,
    pub goodput: IntCounter,
}

const MODEL_API: &[&str] = &["model", "api"];

fn with_boundaries(base: &[f64], extra: &[f64]) -> Vec<f64> {
    let mut all: Vec<f64> = base.iter().chain(extra).copied().collect();
    all.sort_by(f64::total_cmp);
    all.dedup();
    all
}

impl Metrics {
    pub fn new(config: &Config) -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let b = &config.buckets;
        let slo = &config.slo;
        let histogram = |name: &str,
                         help: &str,
                         buckets: Vec<f64>|
         -> Result<HistogramVec, prometheus::Error> {
            let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), MODEL_API)?;
            registry.register(Box::new(h.clone()))?;
            Ok(h)
        };
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, prometheus::Error> {
                let c = IntCounterVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(c.clone()))?;
                Ok(c)
            };
        let itl_slo = slo.boundaries(SloKind::Itl);
        let ttft = histogram(
            "tokentap_time_to_first_token_seconds",
            "Time from the request head arriving to the first output-bearing chunk (TTFT).",
            with_boundaries(&b.ttft, &slo.boundaries(SloKind::Ttft)),
        )?;
        let itl = histogram(
            "tokentap_inter_token_latency_seconds",
            "Gap between consecutive output-bearing chunks, one observation per gap (ITL).",
            with_boundaries(&b.itl, &itl_slo),
        )?;
        let tpot = histogram(
            "tokentap_time_per_output_token_seconds",
            "Per-request (E2E - TTFT) / (output tokens - 1), requests with at least 2 output tokens (TPOT).",
            with_boundaries(&b.tpot, &slo.boundaries(SloKind::Tpot)),
        )?;
        let e2e = histogram(
            "tokentap_e2e_request_latency_seconds",
            "Time from the request head arriving to the end of the response body, completed requests.",
            with_boundaries(&b.e2e, &slo.boundaries(SloKind::E2e)),
        )?;
        let generation = histogram(
            "tokentap_token_generation_time_seconds",
            "Time from the first output-bearing chunk to the end of the response body.",
            b.e2e.clone(),
        )?;
        let tokens_per_second = histogram(
            "tokentap_output_tokens_per_second",
            "Per-request decode speed (output tokens - 1) / token generation time, at least 2 output tokens.",
            b.output_tokens_per_second.clone(),
        )?;
        let max_gap = histogram(
            "tokentap_max_inter_token_gap_seconds",
            "The longest gap between consecutive output-bearing chunks of a request: stalls show here.",
            with_boundaries(&b.itl, &itl_slo),
        )?;
        let requests = counter(
            "tokentap_requests_total",
            "Finished requests by HTTP status and outcome (ok, cancelled, upstream_error, timeout).",
            &["model", "api", "status", "outcome"],
        )?;
        let input_tokens = counter(
            "tokentap_input_tokens_total",
            "Prompt tokens, as reported by the server's usage.",
            MODEL_API,
        )?;
        let output_tokens = counter(
            "tokentap_output_tokens_total",
            "Output tokens: the server's usage, else one per output-bearing chunk.",
            MODEL_API,
        )?;
        let goodput = counter(
            "tokentap_goodput_requests_total",
            "Requests that ended ok with a 2xx status and met every configured SLO ceiling.",
            MODEL_API,
        )?;
        let slo_violations = counter(
            "tokentap_slo_violations_total",
            "One per SLO ceiling a request missed (slo = ttft, tpot, itl, e2e).",
            &["model", "api", "slo"],
        )?;
        let metering_skipped = counter(
            "tokentap_metering_skipped_total",
            "Responses forwarded whole whose token-level figures were skipped, by reason.",
            &["api", "reason"],
        )?;
        let token_source = counter(
            "tokentap_output_token_source_total",
            "Requests with an output token count, by where it came from (usage, tokenizer, chunks).",
            &["model", "api", "token_source"],
        )?;
        let in_flight = IntGaugeVec::new(
            Opts::new(
                "tokentap_requests_in_flight",
                "Requests between the request head and the end of the response body.",
            ),
            &["api"],
        )?;
        registry.register(Box::new(in_flight.clone()))?;
        registry.register(Box::new(crate::logging::DroppedLinesCollector::new()?))?;
        let refusals = Refusals::register(&registry)?;
        for api in Api::ALL {
            in_flight.with_label_values(&[api.as_str()]).set(0);
        }
        Ok(Metrics {
            registry,
            ttft,
            itl,
            tpot,
            e2e,
            generation,
            tokens_per_second,
            max_gap,
            requests,
            input_tokens,
            output_tokens,
            goodput,
            slo_violations,
            in_flight,
            metering_skipped,
            token_source,
            models: ModelLabels::new(
                config.max_models,
                config.slo.models.keys().map(String::as_str),
            ),
            refusals,
        })
    }

    pub fn series(&self, model: Arc<str>, api: Api) -> Series {
        let labels = [&*model, api.as_str()];
        Series {
            ttft: self.ttft.with_label_values(&labels),
            itl: self.itl.with_label_values(&labels),
            tpot: self.tpot.with_label_values(&labels),
            e2e: self.e2e.with_label_values(&labels),
            generation: self.generation.with_label_values(&labels),
            tokens_per_second: self.tokens_per_second.with_label_values(&labels),
            max_gap: self.max_gap.with_label_values(&labels),
            input_tokens: self.input_tokens.with_label_values(&labels),
            output_tokens: self.output_tokens.with_label_values(&labels),
            goodput: self.goodput.with_label_values(&labels),
            model,
            api,
        }
    }

    pub fn in_flight(&self, api: Api) -> IntGauge {
        self.in_flight.with_label_values(&[api.as_str()])
    }

    pub fn in_flight_total(&self) -> i64 {
        Api::ALL.iter().map(|api| self.in_flight(*api).get()).sum()
    }

    pub fn count_request(&self, series: &Series, status: &str, outcome: &str) {
        self.requests
            .with_label_values(&[&*series.model, series.api.as_str(), status, outcome])
            .inc();
    }

    pub fn count_violation(&self, series: &Series, slo: SloKind) {
        self.slo_violations
            .with_label_values(&[&*series.model, series.api.as_str(), slo.as_str()])
            .inc();
    }

    pub fn count_token_source(&self, series: &Series, source: &str) {
        self.token_source
            .with_label_values(&[&*series.model, series.api.as_str(), source])
            .inc();
    }

    pub fn count_metering_skipped(&self, api: Api, reason: &str) {
        self.metering_skipped
            .with_label_values(&[api.as_str(), reason])
            .inc();
    }

    /// The Prometheus text exposition of every series.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 * 1024);
        if let Err(err) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!(%err, "encoding metrics failed");
        }
        out
    }
}

/// The capped set of `model` label values. Models named in the SLO config are always admitted.
pub struct ModelLabels {
    cap: usize,
    known: Mutex<HashSet<Arc<str>>>,
    unknown: Arc<str>,
    other: Arc<str>,
}

impl ModelLabels {
    pub fn new<'a>(cap: usize, configured: impl Iterator<Item = &'a str>) -> Self {
        let known = configured.map(Arc::from).collect();
        ModelLabels {
            cap,
            known: Mutex::new(known),
            unknown: Arc::from(UNKNOWN_MODEL),
            other: Arc::from(OTHER_MODEL),
        }
    }

    /// The label for a model name: itself while the cap allows, else `other` (also for names over 200 bytes
    /// or with control characters); `unknown` when absent.
    pub fn label(&self, model: Option<&str>) -> Arc<str> {
        let Some(model) = model.filter(|m| !m.is_empty()) else {
            return self.unknown.clone();
        };
        // A control character is in no real model's name; admitted, it would take one of the capped
        // places and carry line breaks into the per-request log line.
        if model.len() > MAX_MODEL_LEN || model.chars().any(char::is_control) {
            return self.other.clone();
        }
        let Ok(mut known) = self.known.lock() else {
            return self.other.clone();
        };
        if let Some(existing) = known.get(model) {
            return existing.clone();
        }
        if known.len() >= self.cap {
            return self.other.clone();
        }
        let label: Arc<str> = Arc::from(model);
        known.insert(label.clone());
        label
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_labels_are_capped_and_configured_models_always_fit() {
        let labels = ModelLabels::new(3, ["pinned"].into_iter());
        assert_eq!(&*labels.label(Some("a")), "a");
        assert_eq!(&*labels.label(Some("b")), "b");
        assert_eq!(&*labels.label(Some("c")), OTHER_MODEL);
        assert_eq!(&*labels.label(Some("a")), "a");
        assert_eq!(&*labels.label(Some("pinned")), "pinned");
        assert_eq!(&*labels.label(None), UNKNOWN_MODEL);
        assert_eq!(&*labels.label(Some("")), UNKNOWN_MODEL);
        assert_eq!(&*labels.label(Some(&"x".repeat(500))), OTHER_MODEL);
        let labels = ModelLabels::new(3, std::iter::empty());
        for forged in ["a\nINFO forged", "b\r", "c\u{0}", "d\u{7f}", "e\u{85}"] {
            assert_eq!(&*labels.label(Some(forged)), OTHER_MODEL, "{forged:?}");
        }
        assert_eq!(&*labels.label(Some("ünï-模型 v2")), "ünï-模型 v2");
    }

    #[test]
    fn slo_ceilings_become_bucket_boundaries() {
        assert_eq!(
            with_boundaries(&[0.1, 0.5, 1.0], &[0.25, 0.5]),
            vec![0.1, 0.25, 0.5, 1.0]
        );
    }
}
