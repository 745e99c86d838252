//! The per-request record (`request_log:` in the config): one JSON object per finished request, the
//! schema shared by the writer and by `tokentap report`. Field names and units are a stable interface
//! (docs/records.md); a change that removes or redefines a field bumps [`RECORD_VERSION`].
//!
//! Durations are seconds as floating point, like Prometheus; a figure that does not apply is absent
//! (serialized as nothing, read back as `None`). Never prompt or completion text, never a credential.

use serde::{Deserialize, Serialize};

/// The `v` field of every record.
pub const RECORD_VERSION: u32 = 1;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Schema version, [`RECORD_VERSION`].
    pub v: u32,
    /// Wall-clock time the request arrived, RFC 3339 UTC with microseconds.
    pub start: String,
    /// The client's `x-request-id` when it sent one, else tokentap's own; also in the info log line.
    pub id: String,
    /// The `model` label the metrics counted the request under.
    pub model: String,
    /// The `api` label.
    pub api: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The response status; absent when no response head was sent upstream's way back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// `ok`, `cancelled`, `upstream_error`, `timeout`, … (docs/metrics.md).
    pub outcome: String,
    /// A stream metered to its end: the stream figures apply.
    pub stream: bool,
    pub e2e_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_first_answer_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// `usage`, `tokenizer` or `chunks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Inter-token gaps observed (the ITL observations of this request).
    #[serde(default)]
    pub gaps: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_gap_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_p50_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_p99_s: Option<f64>,
    /// Counted toward goodput: outcome `ok`, a 2xx, every configured ceiling met.
    pub goodput: bool,
    /// The ceilings missed (`ttft`, `tpot`, `itl`, `e2e`, `time_to_first_answer`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slo_missed: Vec<String>,
    /// The server's own timings, where it reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerRecord>,
    /// TTFT minus the server's own TTFT for the same request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_outside_server_s: Option<f64>,
    /// Every gap in order, seconds; only with `request_log.gaps: true`, and capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gaps_s: Option<Vec<f64>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_s: Option<f64>,
}
