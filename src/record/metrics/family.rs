//! Every series family tokentap exports, declared once, as a row: its name, help, kind, labels and
//! buckets. Registration (`registry.rs`), the idle retirement of model and tenant values, the series
//! bound ([`super::bound`]) and the live page's names all follow from the rows, and a test holds
//! docs/metrics.md's table to them. Adding a per-request histogram is one row here and one `observe`
//! where its figure is known (see [`super::finish`]); tests name a family by its row (`TTFT.name`).
//!
//! Not here: the two families the log writers own in `logging` (a leaf, which cannot use this stage):
//! `tokentap_log_lines_dropped_total` and the request_log counters.

use crate::config::SloKind;
use crate::govern::{BUDGET_NAMES, SPENT_REASONS};
use crate::record::conversations::UNREAD_REASONS;
use crate::record::figure::Figure;

/// Which boundaries a histogram takes: a configured set (with its SLO ceilings added), or its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buckets {
    Ttft,
    /// A wait judged by its own ceiling (the time to first answer, to first tool call): TTFT's
    /// boundaries plus that kind's ceilings.
    Wait(SloKind),
    Itl,
    Tpot,
    E2e,
    Generation,
    TokensPerSecond,
    /// tokentap's own delay per frame: fixed, from 5 µs to 1 s (`forwarding::BUCKETS`).
    Forwarding,
    /// Prompt tokens: fixed, powers of 4 from 64 to 1,048,576 ([`PROMPT_TOKEN_BUCKETS`]).
    PromptTokens,
    /// The client's time between turns: fixed, 100 ms to 30 min ([`THINK_BUCKETS`]).
    Think,
    /// Turns per conversation, responses per realtime session: fixed, 1 to 256 ([`TURN_BUCKETS`]).
    Turns,
    /// A WebSocket session's duration: fixed, 1 s to 4 h ([`SESSION_BUCKETS`]).
    Session,
}

/// [`Buckets::PromptTokens`].
pub const PROMPT_TOKEN_BUCKETS: [f64; 8] = [
    64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
];
/// [`Buckets::Think`], seconds.
pub const THINK_BUCKETS: [f64; 14] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];
/// [`Buckets::Session`], seconds.
pub const SESSION_BUCKETS: [f64; 12] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0,
];
/// [`Buckets::Turns`].
pub const TURN_BUCKETS: [f64; 11] = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0, 256.0];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram(Buckets),
}

impl Kind {
    /// The type docs/metrics.md and the exposition give it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram(_) => "histogram",
        }
    }
}

/// A label, each from a bounded set (docs/metrics.md, "the series bound").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    Model,
    Api,
    /// Present only when `tenants:` is configured.
    Tenant,
    Status,
    Outcome,
    Slo,
    TokenSource,
    /// A fixed set of reasons, all of them named here.
    Reason(&'static [&'static str]),
    /// A request's position in its conversation (`record::conversations::TURN_LABELS`).
    Turn,
    /// What recognising a conversation found (`record::conversations::Lookup`).
    Lookup,
    /// How something tokentap did came out, a fixed set named here (a config reload's).
    Result(&'static [&'static str]),
    /// Any other label whose values are a fixed set named here (a budget's name, its state).
    Fixed(&'static str, &'static [&'static str]),
}

impl Label {
    pub fn name(self) -> &'static str {
        match self {
            Label::Model => "model",
            Label::Api => "api",
            Label::Tenant => "tenant",
            Label::Status => "status",
            Label::Outcome => "outcome",
            Label::Slo => "slo",
            Label::TokenSource => "token_source",
            Label::Reason(_) => "reason",
            Label::Turn => "turn",
            Label::Lookup | Label::Result(_) => "result",
            Label::Fixed(name, _) => name,
        }
    }
}

/// Which APIs a family labelled `api` has series for: a path no dialect knows (`api="other"`, any path
/// a client makes up) gets only the families that hold for every request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Apis {
    Every,
    Known,
}

/// One exported family.
#[derive(Debug, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub labels: &'static [Label],
    pub apis: Apis,
}

impl Family {
    /// A histogram's `_sum` series name.
    pub fn sum(&self) -> String {
        format!("{}_sum", self.name)
    }

    /// A histogram's `_count` series name.
    pub fn count(&self) -> String {
        format!("{}_count", self.name)
    }

    /// A histogram's `_bucket` series name.
    pub fn bucket(&self) -> String {
        format!("{}_bucket", self.name)
    }

    /// Its label names, in order, `tenant` only when `tenants` is configured.
    pub fn label_names(&self, tenants: bool) -> Vec<&'static str> {
        self.labels
            .iter()
            .filter(|l| tenants || **l != Label::Tenant)
            .map(|l| l.name())
            .collect()
    }

    pub fn has(&self, label: Label) -> bool {
        self.labels.contains(&label)
    }
}

use Label::{Api as A, Model as M, Tenant as T};

const fn known(
    name: &'static str, help: &'static str, kind: Kind, labels: &'static [Label],
) -> Family {
    Family {
        name,
        help,
        kind,
        labels,
        apis: Apis::Known,
    }
}

const fn every(
    name: &'static str, help: &'static str, kind: Kind, labels: &'static [Label],
) -> Family {
    Family {
        name,
        help,
        kind,
        labels,
        apis: Apis::Every,
    }
}

const fn single(name: &'static str, help: &'static str, kind: Kind) -> Family {
    every(name, help, kind, &[])
}

use Buckets as B;
use Kind::{Counter, Gauge, Histogram as H};

// The request's timeline (docs/metrics.md, "Series").
pub const TTFT: Family = known(
    "tokentap_time_to_first_token_seconds",
    "Time from the request head arriving to the first output-bearing chunk (TTFT).",
    H(B::Ttft),
    &[M, A, T],
);
pub const ITL: Family = known(
    "tokentap_inter_token_latency_seconds",
    "Gap between consecutive output-bearing chunks, one observation per gap (ITL).",
    H(B::Itl),
    &[M, A],
);
pub const TPOT: Family = known(
    "tokentap_time_per_output_token_seconds",
    "Per-request (E2E - TTFT) / (output tokens - 1), requests with at least 2 output tokens (TPOT).",
    H(B::Tpot),
    &[M, A],
);
pub const E2E: Family = every(
    "tokentap_e2e_request_latency_seconds",
    "Time from the request head arriving to the end of the response body, completed requests.",
    H(B::E2e),
    &[M, A, T],
);
pub const GENERATION: Family = known(
    "tokentap_token_generation_time_seconds",
    "Time from the first output-bearing chunk to the end of the response body.",
    H(B::Generation),
    &[M, A],
);
pub const TOKENS_PER_SECOND: Family = known(
    "tokentap_output_tokens_per_second",
    "Per-request decode speed (output tokens - 1) / token generation time, at least 2 output tokens.",
    H(B::TokensPerSecond),
    &[M, A],
);
pub const MAX_GAP: Family = known(
    "tokentap_max_inter_token_gap_seconds",
    "The longest gap between consecutive output-bearing chunks of a request: stalls show here.",
    H(B::Itl),
    &[M, A],
);
pub const REQUESTS: Family = every(
    "tokentap_requests_total",
    "Finished requests by HTTP status and outcome (ok, cancelled, upstream_error, timeout).",
    Counter,
    &[M, A, Label::Status, Label::Outcome, T],
);
pub const INPUT_TOKENS: Family = known(
    "tokentap_input_tokens_total",
    "Prompt tokens, as reported by the server's usage.",
    Counter,
    &[M, A],
);
pub const OUTPUT_TOKENS: Family = known(
    "tokentap_output_tokens_total",
    "Output tokens: the server's usage, else one per output-bearing chunk.",
    Counter,
    &[M, A],
);
pub const GOODPUT: Family = every(
    "tokentap_goodput_requests_total",
    "Requests that ended ok with a 2xx status and met every configured SLO ceiling.",
    Counter,
    &[M, A, T],
);
pub const SLO_VIOLATIONS: Family = every(
    "tokentap_slo_violations_total",
    "One per SLO ceiling a request missed (slo = ttft, tpot, itl, e2e).",
    Counter,
    &[M, A, Label::Slo],
);
pub const TOKEN_SOURCE: Family = known(
    "tokentap_output_token_source_total",
    "Requests with an output token count, by where it came from (usage, tokenizer, chunks).",
    Counter,
    &[M, A, Label::TokenSource],
);

// Inside the TTFT (docs/metrics.md, "Inside the TTFT").
pub const TIME_TO_FIRST_ANSWER: Family = known(
    "tokentap_time_to_first_answer_token_seconds",
    "Time from the request head arriving to the first answer-bearing chunk (text, refusal or tool call; not reasoning), streams that answered.",
    H(B::Wait(SloKind::TimeToFirstAnswer)),
    &[M, A],
);
pub const TIME_TO_FIRST_TOOL_CALL: Family = known(
    "tokentap_time_to_first_tool_call_seconds",
    "Time from the request head arriving to the first chunk that starts a tool call, streams that called a tool: how long an agent waits before it can act.",
    H(B::Wait(SloKind::TimeToFirstToolCall)),
    &[M, A],
);
pub const TIME_TO_RESPONSE_HEAD: Family = known(
    "tokentap_time_to_response_head_seconds",
    "Time from the request head arriving to the upstream's response head (status and headers) reaching tokentap, every request the upstream answered: a non-streamed answer's whole wait, a stream's wait before the server committed to it.",
    H(B::Ttft),
    &[M, A],
);
pub const REASONING_TIME: Family = known(
    "tokentap_reasoning_time_seconds",
    "Time from the first output to the first answer, streams whose reasoning came before the answer.",
    H(B::Ttft),
    &[M, A],
);
pub const REASONING_TOKENS: Family = known(
    "tokentap_reasoning_tokens_total",
    "Reasoning tokens: the server's usage details, else a tokenizer on the reasoning text, else one per reasoning chunk.",
    Counter,
    &[M, A],
);
pub const CACHED_INPUT_TOKENS: Family = known(
    "tokentap_cached_input_tokens_total",
    "Prompt tokens the server reports as served from its prefix cache.",
    Counter,
    &[M, A],
);
pub const SERVER_QUEUE: Family = known(
    "tokentap_server_queue_time_seconds",
    "The server's own report of the time the request waited before it was scheduled (vLLM, TGI).",
    H(B::Ttft),
    &[M, A],
);
pub const SERVER_TTFT: Family = known(
    "tokentap_server_time_to_first_token_seconds",
    "The server's own report of its time to first token (vLLM queue + prefill, llama.cpp prompt, Ollama load + prompt).",
    H(B::Ttft),
    &[M, A],
);
pub const SERVER_PREFILL: Family = known(
    "tokentap_server_prefill_time_seconds",
    "The server's own report of its prompt processing time (vLLM, llama.cpp, Ollama).",
    H(B::Ttft),
    &[M, A],
);
pub const SERVER_GENERATION: Family = known(
    "tokentap_server_generation_time_seconds",
    "The server's own report of its generation time, first to last token (vLLM, llama.cpp, Ollama).",
    H(B::Generation),
    &[M, A],
);
pub const OUTSIDE_SERVER: Family = known(
    "tokentap_ttft_outside_server_seconds",
    "TTFT minus the server's own TTFT of the same request: network, HTTP serving, admission, detokenizing.",
    H(B::Ttft),
    &[M, A],
);
pub const OUTSIDE_SERVER_CLAMPED: Family = known(
    "tokentap_ttft_outside_server_clamped_total",
    "Requests whose server-reported TTFT exceeded tokentap's TTFT, observed as 0 outside the server.",
    Counter,
    &[M, A],
);

// Per API only.
pub const IN_FLIGHT: Family = every(
    "tokentap_requests_in_flight",
    "Requests between the request head and the end of the response body.",
    Gauge,
    &[A],
);
/// The values of `reason` on [`METERING_SKIPPED`] (`record::finished::SkipReason`).
pub const SKIP_REASONS: &[&str] = &["event_too_large", "malformed_event"];
pub const METERING_SKIPPED: Family = known(
    "tokentap_metering_skipped_total",
    "Responses forwarded whole whose token-level figures were skipped, by reason.",
    Counter,
    &[A, Label::Reason(SKIP_REASONS)],
);

// tokentap's own limits (`refusals.rs`).
pub const CONNECTIONS_REFUSED: Family = single(
    "tokentap_connections_refused_total",
    "Client connections closed at once because limits.max_connections were open.",
    Counter,
);
pub const CONNECTIONS_RECLAIMED: Family = single(
    "tokentap_connections_reclaimed_total",
    "Idle client connections (between requests, or before a whole head) closed at limits.max_connections to make room for a new one.",
    Counter,
);
pub const HEAD_TIMEOUTS: Family = single(
    "tokentap_request_head_timeouts_total",
    "Client connections closed because a request head was not complete within timeouts.client_header_read.",
    Counter,
);
pub const HEADER_TOO_LARGE: Family = single(
    "tokentap_request_header_too_large_total",
    "HTTP/1.1 request heads answered 431 (or 414) for being too large or having over 100 headers.",
    Counter,
);
pub const UPSTREAM_REFUSED: Family = single(
    "tokentap_upstream_requests_refused_total",
    "Requests answered 503 because limits.max_upstream_connections upstream requests were in progress.",
    Counter,
);
pub const CONNECTION_SHARE_REFUSED: Family = single(
    "tokentap_connection_share_refused_total",
    "Requests answered 503 because their client connection already had limits.max_upstream_per_connection upstream requests in progress.",
    Counter,
);
pub const HELD_BYTES_REFUSED: Family = single(
    "tokentap_held_bytes_refused_total",
    "Requests answered 503 because their client's share of the held_bodies budget had no room for their body within timeouts.request_body_idle.",
    Counter,
);
pub const HELD_BYTES_WAITED: Family = single(
    "tokentap_held_bytes_waited_total",
    "Requests whose body waited for room in their client's share of the held_bodies budget before it was held (and then sent, or refused).",
    Counter,
);
pub const UPLOADS_PER_CLIENT_REFUSED: Family = single(
    "tokentap_streamed_uploads_refused_total",
    "Requests answered 503 because their client address was already uploading limits.max_streamed_uploads_per_client bodies larger than limits.hold_request_body_bytes.",
    Counter,
);
/// The histogram each per-request figure is observed into (`record::figure`: a figure's row says when).
pub const fn of_figure(figure: Figure) -> &'static Family {
    match figure {
        Figure::Ttft => &TTFT,
        Figure::TimeToFirstAnswer => &TIME_TO_FIRST_ANSWER,
        Figure::TimeToFirstToolCall => &TIME_TO_FIRST_TOOL_CALL,
        Figure::ReasoningTime => &REASONING_TIME,
        Figure::Tpot => &TPOT,
        Figure::Generation => &GENERATION,
        Figure::OutputTokensPerSecond => &TOKENS_PER_SECOND,
        Figure::MaxGap => &MAX_GAP,
        Figure::E2e => &E2E,
        Figure::TimeToResponseHead => &TIME_TO_RESPONSE_HEAD,
    }
}

/// The values of `reason` on [`SESSIONS_REFUSED`], all exported from the start.
pub const SESSION_REFUSED_REASONS: &[&str] = &["max_sessions", "per_client"];
pub const SESSIONS_REFUSED: Family = every(
    "tokentap_sessions_refused_total",
    "WebSocket upgrades answered 503 before anything went upstream, by reason: max_sessions \
     (limits.max_sessions sessions were open), per_client (the client address had \
     limits.max_sessions_per_client open).",
    Counter,
    &[Label::Reason(SESSION_REFUSED_REASONS)],
);
pub const SESSIONS_IN_FLIGHT: Family = single(
    "tokentap_sessions_in_flight",
    "Upgraded (WebSocket) sessions open: from the upstream's 101 to the end of the relay.",
    Gauge,
);
pub const SESSIONS: Family = known(
    "tokentap_sessions_total",
    "Finished WebSocket sessions, by outcome: ok (a close frame from either side), cancelled (the client's connection went away without one), upstream_error (the upstream's went away without one, or broke), timeout (timeouts.session_idle, or a shutdown's cut).",
    Counter,
    &[M, A, Label::Outcome],
);
pub const SESSION_DURATION: Family = known(
    "tokentap_session_duration_seconds",
    "From the upstream's 101 to the end of a WebSocket session, observed at its end.",
    H(B::Session),
    &[M, A],
);
pub const SESSION_RESPONSES: Family = known(
    "tokentap_session_responses",
    "Responses metered in a WebSocket session (api=\"realtime\" in the request families), observed at its end.",
    H(B::Turns),
    &[M, A],
);
/// The values of `reason` on [`SESSION_MESSAGES_SKIPPED`] (`decode::websocket::Skip`).
pub const SESSION_SKIP_REASONS: &[&str] = &["too_large", "malformed", "inflate"];
pub const SESSION_MESSAGES_SKIPPED: Family = every(
    "tokentap_session_messages_skipped_total",
    "WebSocket messages forwarded unread by the realtime meter, by reason: too_large (over 1 MiB, inflated), malformed (a frame that breaks RFC 6455: the direction is read no further), inflate (compressed data that does not inflate, or over 16 MiB inflated: the direction is read no further).",
    Counter,
    &[Label::Reason(SESSION_SKIP_REASONS)],
);
/// The values of `reason` on [`METRICS_PORT_REFUSED`], all exported from the start.
pub const METRICS_PORT_REASONS: &[&str] = &[
    "max_connections",
    "send_timeout",
    "live_busy",
    "host",
    "reclaimed",
    "cross_site",
];
pub const METRICS_PORT_REFUSED: Family = every(
    "tokentap_metrics_port_refused_total",
    "What the metrics port turned away, by reason: max_connections (limits.max_metrics_connections \
     were open, every one busy), send_timeout (an answer not taken within timeouts.metrics_send), live_busy \
     (/api/v1/live answered 503: too many distinct views held), host (a Host not in \
     metrics.allowed_hosts), reclaimed (an idle connection closed at limits.max_metrics_connections \
     to make room for a new one), cross_site (POST /-/reload from a page of another site, as the \
     browser said: Sec-Fetch-Site or Origin).",
    Counter,
    &[Label::Reason(METRICS_PORT_REASONS)],
);

/// The values of `reason` on [`TLS_HANDSHAKE_FAILURES`], all exported from the start.
pub const TLS_HANDSHAKE_REASONS: &[&str] = &[
    "timeout",
    "closed",
    "not_tls",
    "plain_http",
    "client_alert",
    "incompatible",
    "other",
];
pub const TLS_HANDSHAKE_FAILURES: Family = every(
    "tokentap_tls_handshake_failures_total",
    "Client connections to a listen_tls listener closed before their TLS handshake completed, by \
     reason: timeout (not done within timeouts.client_header_read), closed (the client went away), \
     not_tls (bytes that are not TLS), plain_http (plain HTTP sent to the TLS port: answered 400 saying \
     so, as nginx does), client_alert (the \
     client refused, e.g. a certificate it does not trust), incompatible (no TLS version, cipher suite \
     or ALPN protocol in common), other.",
    Counter,
    &[Label::Reason(TLS_HANDSHAKE_REASONS)],
);

// tokentap's own upstream connections (`upstream.rs`).
pub const UPSTREAM_IDLE: Family = single(
    "tokentap_upstream_idle_connections",
    "Upstream connections kept open, unused, for the next request.",
    Gauge,
);
pub const UPSTREAM_CLOSED_BY_UPSTREAM: Family = single(
    "tokentap_upstream_idle_closed_by_upstream_total",
    "Idle upstream connections the upstream closed (its keep-alive timeout, a restart); none of them is used again.",
    Counter,
);
pub const UPSTREAM_EXPIRED: Family = single(
    "tokentap_upstream_idle_expired_total",
    "Idle upstream connections tokentap closed after timeouts.upstream_idle.",
    Counter,
);
pub const UPSTREAM_RESENT: Family = single(
    "tokentap_upstream_requests_resent_total",
    "Requests sent again on a new connection because a reused one closed without answering them and \
     they cannot have been served: not written, idempotent, or closed within 100 ms of their last byte.",
    Counter,
);
pub const MODELS_LISTED: Family = single(
    "tokentap_upstream_models_listed",
    "Model names in the upstream's last list (GET /v1/models or /api/tags): those names may take a model \
     label; 0 (it lists nothing, or model_list.enabled is false): a name takes one on its first 2xx; -1 \
     (no answer yet, or a list that cannot be read): only the configured names take one.",
    Gauge,
);

// The page itself.
pub const SERIES_LIMIT: Family = single(
    "tokentap_metrics_series_limit",
    "The most series this process can ever export: metrics.max_series, or less when max_models names on \
     every API cannot fill it (docs/metrics.md: the series bound).",
    Gauge,
);
pub const SERIES: Family = single(
    "tokentap_metrics_series",
    "Series on this page, as of this scrape (never above tokentap_metrics_series_limit).",
    Gauge,
);
pub const ENCODES: Family = single(
    "tokentap_metrics_encodes_total",
    "Encodings of this page; scrapes that arrive while one runs share it.",
    Counter,
);
pub const LABELS_RETIRED: Family = single(
    "tokentap_model_labels_retired_total",
    "Model label values removed after metrics.model_idle without a request, or because the upstream's \
     list no longer names them; their series restart from zero if the model comes back.",
    Counter,
);
pub const FORWARDING_DELAY: Family = single(
    "tokentap_forwarding_delay_seconds",
    "The delay tokentap itself adds to each forwarded response frame: from its bytes reaching tokentap's \
     upstream socket (the kernel's receive timestamp; where there is none, the upstream read) to the start \
     of the client write that took its last byte. Waking up, the read, decoding and metering are inside it.",
    H(B::Forwarding),
);

// Reloading the config (SIGHUP, `POST /-/reload`: docs/operations.md, "Reload").
/// The values of `result` on [`CONFIG_RELOADS`], all exported from the start.
pub const RELOAD_RESULTS: &[&str] = &["success", "failure", "refused"];
pub const CONFIG_RELOADS: Family = every(
    "tokentap_config_reloads_total",
    "Config reloads (SIGHUP, POST /-/reload), by result: success (the file was read, checked and \
     applied), failure (it could not be read, did not parse or failed a check, as check-config would \
     say; nothing changed), refused (it was valid but changed a key that needs a restart, named in the \
     log; nothing changed).",
    Counter,
    &[Label::Result(RELOAD_RESULTS)],
);
pub const CONFIG_LAST_RELOAD: Family = single(
    "tokentap_config_last_reload_success_timestamp_seconds",
    "When the config running now was loaded (Unix time, seconds): at start, then at each successful reload.",
    Gauge,
);

// Spans exported to an OpenTelemetry collector (`spans.rs`, docs/tracing.md).
pub const SPANS_EXPORTED: Family = single(
    "tokentap_spans_exported_total",
    "Spans the collector accepted (traces:): one per sampled request.",
    Counter,
);
/// The values of `reason` on [`SPANS_DROPPED`], all exported from the start.
pub const SPAN_DROP_REASONS: &[&str] = &[
    "queue_full",
    "timeout",
    "rejected",
    "failed",
    "shutdown",
    "budget",
];
pub const SPANS_DROPPED: Family = every(
    "tokentap_spans_dropped_total",
    "Sampled spans not exported, by reason: queue_full (traces.queue spans were waiting), timeout (the \
     export took longer than traces.timeout), rejected (the collector answered a status other than 2xx, \
     or rejected some spans of a batch), failed (no connection, or it broke before an answer), shutdown \
     (still queued when the shutdown's flush, or a replaced exporter's after a reload, ran out of time), \
     budget (no room in the spans budget: the request's client's share, or the cap).",
    Counter,
    &[Label::Reason(SPAN_DROP_REASONS)],
);

// Metrics pushed to an OpenTelemetry collector (`otlp.rs`, docs/tracing.md).
pub const OTLP_METRIC_EXPORTS: Family = single(
    "tokentap_otlp_metric_exports_total",
    "Metric exports the collector accepted (otlp_metrics:): one per otlp_metrics.interval.",
    Counter,
);
/// The values of `reason` on [`OTLP_METRIC_EXPORTS_DROPPED`], all exported from the start.
pub const OTLP_METRIC_DROP_REASONS: &[&str] = &["timeout", "rejected", "failed", "skipped"];
pub const OTLP_METRIC_EXPORTS_DROPPED: Family = every(
    "tokentap_otlp_metric_exports_dropped_total",
    "Metric exports not accepted, by reason: timeout (longer than otlp_metrics.timeout), rejected (a \
     status other than 2xx, or a partial success naming rejected data points), failed (no connection, or \
     it broke before an answer), skipped (an interval passed while the export before it still ran). \
     Nothing is lost with them: the next export carries the totals (cumulative) or what changed since \
     the last accepted one (delta).",
    Counter,
    &[Label::Reason(OTLP_METRIC_DROP_REASONS)],
);

// Agents: conversations recognised from the wire (docs/metrics.md, "Conversations").
pub const TURN_TTFT: Family = known(
    "tokentap_turn_time_to_first_token_seconds",
    "TTFT by the request's position in its conversation (turn 1, 2, 3, 4-7, 8-15, 16+): how the wait grows as an agent's context does.",
    H(B::Ttft),
    &[M, Label::Turn],
);
pub const TURN_INPUT_TOKENS: Family = known(
    "tokentap_turn_input_tokens",
    "Prompt tokens (as the server reports them) by the request's position in its conversation: the context an agent drags along.",
    H(B::PromptTokens),
    &[M, Label::Turn],
);
pub const THINK_TIME: Family = known(
    "tokentap_conversation_think_time_seconds",
    "Time from the end of a conversation's turn to the arrival of the turn that continues it: the client's, its tools' and its user's time, not the server's.",
    H(B::Think),
    &[M],
);
pub const CONVERSATION_TURNS: Family = single(
    "tokentap_conversation_turns",
    "Turns per conversation, observed when a conversation ends (no turn for conversations.idle).",
    H(B::Turns),
);
pub const CONVERSATION_LOOKUPS: Family = every(
    "tokentap_conversation_lookups_total",
    "Requests with a message list, by what recognising their conversation found: result=\"continued\" (a later turn of a conversation seen), \"first\" (a new conversation), \"unread\" (the list was not read in time, or the body streamed).",
    Counter,
    &[Label::Lookup],
);
pub const CONVERSATION_UNREAD: Family = every(
    "tokentap_conversation_unread_total",
    "Requests counted result=\"unread\" in tokentap_conversation_lookups_total, by why their message list was not read: streamed (the body was too large to hold), pool_busy (every reader was busy), late (the request ended first), not_json, not_a_message (an item of the list is not a message), too_deep, too_many, too_large (a bound of the reader).",
    Counter,
    &[Label::Reason(&UNREAD_REASONS)],
);
pub const CONVERSATION_TURNS_HELD: Family = single(
    "tokentap_conversation_turns_held",
    "Turns remembered to recognise conversations (at most conversations.max_turns; digests only, no text).",
    Gauge,
);

/// The histograms whose buckets carry exemplars (docs/metrics.md, "Exemplars"), each with the figure
/// whose value places a request's exemplar: the waits and E2E, and ITL by the request's longest gap.
pub const EXEMPLARS: [(&Family, Figure); 5] = [
    (&TTFT, Figure::Ttft),
    (&TIME_TO_FIRST_ANSWER, Figure::TimeToFirstAnswer),
    (&TIME_TO_FIRST_TOOL_CALL, Figure::TimeToFirstToolCall),
    (&E2E, Figure::E2e),
    (&ITL, Figure::MaxGap),
];

/// The histograms also served as native histograms, in the protobuf exposition (docs/metrics.md,
/// "Native histograms"): those judged by an SLO ceiling.
pub const NATIVE: [&Family; 6] = [
    &TTFT,
    &TIME_TO_FIRST_ANSWER,
    &TIME_TO_FIRST_TOOL_CALL,
    &ITL,
    &TPOT,
    &E2E,
];

// Capture mode: the connections read off an interface (`tokentap capture`, docs/deploy.md).
pub const CAPTURE_PACKETS: Family = single(
    "tokentap_capture_packets_total",
    "TCP segments to or from the server's ports read by tokentap capture (from the interface, or a capture file).",
    Counter,
);
/// The values of `result` on [`CAPTURE_SEGMENTS`] (`capture::Segments`), all exported from the start.
pub const CAPTURE_SEGMENT_RESULTS: &[&str] = &["in_order", "out_of_order", "duplicate", "overlap"];
pub const CAPTURE_SEGMENTS: Family = every(
    "tokentap_capture_segments_total",
    "TCP segments with data that tokentap capture put back in order, by result: in_order (the next \
     bytes of their stream), out_of_order (held until the bytes before them came), duplicate (bytes \
     already read: a retransmission), overlap (partly bytes already read: the new part was read).",
    Counter,
    &[Label::Result(CAPTURE_SEGMENT_RESULTS)],
);
/// The values of `reason` on [`CAPTURE_UNMETERED`] (`capture::Unfollowed`), all exported from the start.
pub const CAPTURE_UNMETERED_REASONS: &[&str] = &[
    "mid_stream",
    "lost_segment",
    "not_http",
    "upgrade",
    "max_connections",
    "buffer",
];
pub const CAPTURE_UNMETERED: Family = every(
    "tokentap_capture_unmetered_total",
    "Connections, or a part of one, that tokentap capture did not meter, by reason: mid_stream (it \
     started before the capture: its requests are metered from the first whole request head on), \
     lost_segment (bytes the capture never read: a packet the kernel dropped or cut; metered again from \
     the connection's next request), not_http (bytes that are not HTTP/1.1: TLS, h2c, a malformed \
     head), upgrade (a WebSocket or other upgrade), max_connections (capture.max_connections were \
     followed), buffer (capture.max_connection_bytes, or the capture_flows budget; metered again from \
     the next request). A request in progress then is neither counted nor recorded.",
    Counter,
    &[Label::Reason(CAPTURE_UNMETERED_REASONS)],
);
pub const CAPTURE_CONNECTIONS: Family = single(
    "tokentap_capture_connections",
    "TCP connections tokentap capture follows now (at most capture.max_connections).",
    Gauge,
);

/// The values of `state` on [`BUDGET_BYTES`].
pub const BUDGET_STATES: &[&str] = &["used", "cap"];
const BUDGET: Label = Label::Fixed("budget", &BUDGET_NAMES);
pub const BUDGET_BYTES: Family = every(
    "tokentap_budget_bytes",
    "Each budget of what clients may make tokentap hold (docs/operations.md): bytes held now (state=used) and its cap (state=cap); for budget=inflate, bytes inflated in the last second and the cap per second.",
    Gauge,
    &[BUDGET, Label::Fixed("state", BUDGET_STATES)],
);
pub const BUDGET_REFUSALS: Family = every(
    "tokentap_budget_refusals_total",
    "Leases a budget refused, by reason: cap (every client's use together reached the cap), share (the client's use reached its share).",
    Counter,
    &[BUDGET, Label::Reason(&SPENT_REASONS)],
);
pub const UNMETERED: Family = every(
    "tokentap_unmetered_total",
    "Requests and WebSocket sessions forwarded whole that tokentap stopped measuring because a budget was spent, by budget and reason (cap, share); their records say so (unmetered).",
    Counter,
    &[BUDGET, Label::Reason(&SPENT_REASONS)],
);

/// Every row, in docs/metrics.md's order.
pub const ALL: &[&Family] = &[
    &TTFT,
    &ITL,
    &TPOT,
    &E2E,
    &GENERATION,
    &TOKENS_PER_SECOND,
    &MAX_GAP,
    &TIME_TO_FIRST_ANSWER,
    &TIME_TO_FIRST_TOOL_CALL,
    &TIME_TO_RESPONSE_HEAD,
    &TURN_TTFT,
    &TURN_INPUT_TOKENS,
    &THINK_TIME,
    &CONVERSATION_TURNS,
    &CONVERSATION_LOOKUPS,
    &CONVERSATION_UNREAD,
    &CONVERSATION_TURNS_HELD,
    &REASONING_TIME,
    &REASONING_TOKENS,
    &CACHED_INPUT_TOKENS,
    &SERVER_QUEUE,
    &SERVER_TTFT,
    &SERVER_PREFILL,
    &SERVER_GENERATION,
    &OUTSIDE_SERVER,
    &OUTSIDE_SERVER_CLAMPED,
    &REQUESTS,
    &INPUT_TOKENS,
    &OUTPUT_TOKENS,
    &GOODPUT,
    &SLO_VIOLATIONS,
    &TOKEN_SOURCE,
    &METERING_SKIPPED,
    &IN_FLIGHT,
    &UPSTREAM_REFUSED,
    &CONNECTION_SHARE_REFUSED,
    &HELD_BYTES_REFUSED,
    &HELD_BYTES_WAITED,
    &UPLOADS_PER_CLIENT_REFUSED,
    &SESSIONS_REFUSED,
    &SESSIONS_IN_FLIGHT,
    &SESSIONS,
    &SESSION_DURATION,
    &SESSION_RESPONSES,
    &SESSION_MESSAGES_SKIPPED,
    &CONNECTIONS_REFUSED,
    &CONNECTIONS_RECLAIMED,
    &UPSTREAM_IDLE,
    &UPSTREAM_CLOSED_BY_UPSTREAM,
    &UPSTREAM_EXPIRED,
    &UPSTREAM_RESENT,
    &HEAD_TIMEOUTS,
    &HEADER_TOO_LARGE,
    &TLS_HANDSHAKE_FAILURES,
    &SERIES_LIMIT,
    &SERIES,
    &ENCODES,
    &METRICS_PORT_REFUSED,
    &MODELS_LISTED,
    &LABELS_RETIRED,
    &FORWARDING_DELAY,
    &CONFIG_RELOADS,
    &CONFIG_LAST_RELOAD,
    &SPANS_EXPORTED,
    &SPANS_DROPPED,
    &BUDGET_BYTES,
    &BUDGET_REFUSALS,
    &UNMETERED,
    &OTLP_METRIC_EXPORTS,
    &OTLP_METRIC_EXPORTS_DROPPED,
    &CAPTURE_PACKETS,
    &CAPTURE_SEGMENTS,
    &CAPTURE_UNMETERED,
    &CAPTURE_CONNECTIONS,
];

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::config::Config;

    /// The families the log writers own (`logging`, a leaf that cannot use these rows).
    const LOGGING: [&str; 3] = [
        crate::logging::DROPPED_LINES,
        crate::logging::records::WRITTEN,
        crate::logging::records::DROPPED,
    ];

    /// docs/metrics.md's series table: (name, kind) per row, in order.
    fn documented() -> Vec<(String, String)> {
        include_str!("../../../docs/metrics.md")
            .lines()
            .filter_map(|line| line.strip_prefix("| `tokentap_"))
            .map(|rest| {
                let mut cells = rest.split('|').map(str::trim);
                let name = format!(
                    "tokentap_{}",
                    cells.next().unwrap_or("").trim_end_matches('`')
                );
                (name, cells.next().unwrap_or("").to_owned())
            })
            .collect()
    }

    #[test]
    fn docs_metrics_table_is_the_rows_in_order_with_their_kinds() {
        let table: Vec<(String, String)> = documented()
            .into_iter()
            .filter(|(name, _)| !LOGGING.contains(&name.as_str()))
            .collect();
        let rows: Vec<(String, String)> = ALL
            .iter()
            .map(|f| (f.name.to_owned(), f.kind.as_str().to_owned()))
            .collect();
        assert_eq!(
            table, rows,
            "docs/metrics.md's table and family::ALL differ"
        );
        let names: Vec<String> = documented().into_iter().map(|(n, _)| n).collect();
        for name in LOGGING {
            assert!(
                names.iter().any(|n| n == name),
                "{name} is not in docs/metrics.md"
            );
        }
    }

    #[test]
    fn every_registered_family_is_a_row_or_a_log_writers() {
        let yaml = "tenants: {header: x-tenant}\nrequest_log: {path: /dev/null}";
        let metrics = super::super::Metrics::new(&Config::from_yaml_str(yaml).unwrap()).unwrap();
        for gathered in metrics.gather() {
            let name = gathered.name();
            let row = ALL.iter().find(|f| f.name == name);
            assert!(
                row.is_some() || LOGGING.contains(&name),
                "{name} is registered without a row"
            );
            if let Some(row) = row {
                assert_eq!(gathered.help(), row.help, "{name}");
            }
        }
    }

    #[test]
    fn every_row_has_a_unique_name_and_help() {
        let mut names = HashSet::new();
        for family in ALL {
            assert!(names.insert(family.name), "{} twice", family.name);
            assert!(family.name.starts_with("tokentap_"), "{}", family.name);
            assert!(!family.help.is_empty(), "{}", family.name);
            // OpenMetrics names a counter's family without `_total` and its sample with it: a
            // counter without the suffix would be renamed on that page.
            if family.kind == Kind::Counter {
                assert!(family.name.ends_with("_total"), "{}", family.name);
            }
        }
    }
}
