//! The span sink (`traces:`, docs/tracing.md): a finished request the emitter sampled becomes one span,
//! built here from the same [`Finished`] event every other sink writes (so a span and its record never
//! disagree), and queued for the background exporter (`record/trace/export.rs`), which never waits.
//!
//! Named and attributed after the OpenTelemetry GenAI and HTTP semantic conventions; tokentap's own
//! figures are `tokentap.` + the record's field name (`tokentap.ttft_s`), every figure of the figure
//! table the request carries, read through the table. Events mark the first token, the first answer
//! and the first tool call at their times.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Finished, Sink};
use crate::record::figure::Figure;
use crate::record::outcome::Outcome;
use crate::record::server::outside;
use crate::record::trace::span::{Attribute, Event, Span, Status, Value};
use crate::record::trace::{SpanExporter, TraceContext};

/// Where sampled requests' spans go, and what each says of the upstream.
pub struct Spans {
    pub exporter: Arc<SpanExporter>,
    /// The upstream's host and port (`server.address`, `server.port`).
    pub server: (String, u16),
}

impl Sink for Spans {
    fn emit(&self, finished: &Finished<'_>) {
        if let Some(context) = finished.span {
            let server = (self.server.0.as_str(), self.server.1);
            (self.exporter).offer(span_of(finished, context, server), finished.who.client);
        }
    }
}

/// Each figure's attribute key, `tokentap.{record field}`, made once.
static FIGURE_KEYS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let key = |f: &Figure| format!("tokentap.{}", f.row().record_field());
    Figure::ALL.iter().map(key).collect()
});

fn figure_key(figure: Figure) -> &'static str {
    let keys: &'static [String] = &FIGURE_KEYS;
    keys.get(figure as usize)
        .map_or("tokentap.figure", String::as_str)
}

/// The moments a span marks with an event, each at its figure's time.
const EVENTS: [(&str, Figure); 3] = [
    ("tokentap.first_token", Figure::Ttft),
    ("tokentap.first_answer", Figure::TimeToFirstAnswer),
    ("tokentap.first_tool_call", Figure::TimeToFirstToolCall),
];

/// The GenAI operation of a tokentap `api` label; `None` for a path no dialect knows, and for audio
/// (`transcriptions`, `speech`), which the GenAI conventions name no operation for.
pub fn operation(api: &str) -> Option<&'static str> {
    match api {
        "chat" | "messages" | "responses" | "ollama" => Some("chat"),
        "completions" | "generate" | "llamacpp" => Some("text_completion"),
        _ => None,
    }
}

/// The span of `finished`, in the trace `context`, its upstream at `server`.
pub fn span_of(finished: &Finished<'_>, context: &TraceContext, server: (&str, u16)) -> Span {
    let record = finished.record;
    let who = &finished.who;
    let start = unix_nanos(who.start);
    let at = |seconds: f64| start.saturating_add(nanos(seconds));
    let api = finished.api.as_str();
    let operation = operation(api);
    let model = finished.request_model.or(finished.response_model);
    let name = match (operation, model) {
        (Some(op), Some(model)) => format!("{op} {model}"),
        (Some(op), None) => op.to_owned(),
        // Not an API tokentap reads: named as an HTTP server span without a route.
        (None, _) => who.method.to_owned(),
    };
    let mut a = Attributes(Vec::with_capacity(40));
    a.str("gen_ai.operation.name", operation);
    a.str("gen_ai.request.model", finished.request_model);
    a.str("gen_ai.response.model", finished.response_model);
    a.str("gen_ai.response.id", finished.response_id);
    a.int("gen_ai.usage.input_tokens", record.input_tokens);
    a.int("gen_ai.usage.output_tokens", record.output_tokens);
    let ttft = record.carried(Figure::Ttft);
    a.double("gen_ai.response.time_to_first_chunk", ttft);
    a.str("server.address", Some(server.0));
    a.int("server.port", Some(u64::from(server.1)));
    a.str("http.request.method", Some(who.method));
    let status = record.status.map(|s| s.as_u16());
    a.int("http.response.status_code", status.map(u64::from));
    let error = error_type(record.outcome, status);
    a.str("error.type", error.as_deref());
    a.str("tokentap.id", Some(who.id));
    a.str("tokentap.client_request_id", who.client_id);
    a.str("tokentap.model", Some(&finished.series.model));
    a.str("tokentap.api", Some(api));
    a.str("tokentap.tenant", finished.series.tenant.as_deref());
    if let Some(turn) = finished.turn {
        a.str("tokentap.conversation", Some(&*turn.conversation));
        a.int("tokentap.turn", Some(u64::from(turn.turn)));
    }
    a.str("tokentap.outcome", Some(record.outcome.as_str()));
    if who.captured {
        a.bool("tokentap.captured", true);
    }
    a.bool("tokentap.stream", record.streaming);
    for figure in Figure::ALL {
        a.double(figure_key(figure), record.carried(figure));
    }
    let source = record.token_source.map(|s| s.as_str());
    a.str("tokentap.output_tokens_source", source);
    a.int("tokentap.cached_input_tokens", record.cached_input_tokens);
    a.int("tokentap.reasoning_tokens", record.reasoning_tokens);
    a.bool("tokentap.goodput", record.verdict.goodput);
    if !record.verdict.missed.is_empty() {
        let missed = record.verdict.missed.iter();
        let missed = Value::Strs(missed.map(|k| k.as_str().to_owned()).collect());
        a.push("tokentap.slo_missed", missed);
    }
    let outside = outside(record.figures.ttft, record.server.ttft);
    let outside = outside.map(|o| o.duration.as_secs_f64());
    a.double("tokentap.ttft_outside_server_s", outside);
    let mut events = Vec::new();
    for (name, figure) in EVENTS {
        if let Some(seconds) = record.carried(figure) {
            let mut figure_attribute = Attributes(Vec::with_capacity(1));
            figure_attribute.double(figure_key(figure), Some(seconds));
            events.push(Event {
                name,
                at: at(seconds),
                attributes: figure_attribute.0,
            });
        }
    }
    Span {
        context: context.clone(),
        name,
        start,
        end: start.saturating_add(duration_nanos(record.figures.e2e)),
        attributes: a.0,
        events,
        status: match error {
            Some(error) => Status::Error(error),
            None => Status::Unset,
        },
    }
}

/// Why the request failed, as `error.type` says it: its outcome when not `ok`, else a status of 500 or
/// more (as the HTTP conventions write it for a server span); `None` when it did not fail.
fn error_type(outcome: Outcome, status: Option<u16>) -> Option<String> {
    if outcome != Outcome::Ok {
        return Some(outcome.as_str().to_owned());
    }
    status
        .filter(|s| *s >= 500)
        .map(|status| status.to_string())
}

/// A figure's seconds as whole nanoseconds: a figure is a `Duration` carried as `f64` seconds, which
/// this reads back to its nanosecond (every duration under a hundred days), as the record's reader does.
fn nanos(seconds: f64) -> u64 {
    let n = (seconds * 1e9).round();
    if n.is_finite() && n > 0.0 {
        n as u64
    } else {
        0
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn unix_nanos(t: SystemTime) -> u64 {
    duration_nanos(t.duration_since(UNIX_EPOCH).unwrap_or_default())
}

/// Attributes in order, each only when the request has it.
struct Attributes(Vec<Attribute>);

impl Attributes {
    fn push(&mut self, key: &'static str, value: Value) {
        self.0.push(Attribute { key, value });
    }

    fn str(&mut self, key: &'static str, value: Option<&str>) {
        if let Some(value) = value {
            self.push(key, Value::Str(value.to_owned()));
        }
    }

    fn int(&mut self, key: &'static str, value: Option<u64>) {
        if let Some(value) = value {
            self.push(key, Value::Int(i64::try_from(value).unwrap_or(i64::MAX)));
        }
    }

    fn double(&mut self, key: &'static str, value: Option<f64>) {
        if let Some(value) = value {
            self.push(key, Value::Double(value));
        }
    }

    fn bool(&mut self, key: &'static str, value: bool) {
        self.push(key, Value::Bool(value));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::StatusCode;

    use super::super::tests::every_figure;
    use super::super::Who;
    use super::*;
    use crate::config::{Config, SloKind};
    use crate::record::api::Api;
    use crate::record::conversations::Turn;
    use crate::record::finished::FinishedRecord;
    use crate::record::gaps::GapSummary;
    use crate::record::metrics::Metrics;
    use crate::record::trace::context::{ids_for, SpanId};

    const START: u64 = 1_796_288_442_123_456_789;

    /// The span of `record`, a chat request for `qwen` from tenant `acme`, turn 2 of `c-1`.
    fn span(record: &FinishedRecord, api: Api, request_model: Option<&str>) -> Span {
        let metrics = Metrics::new(&Config::default()).unwrap_or_else(|e| panic!("{e}"));
        let label = metrics.model_label(Some("qwen"), None, true);
        let series = metrics.series_of(label, None, api);
        let turn = Turn {
            conversation: "c-1".into(),
            turn: 2,
            think: None,
        };
        let finished = Finished {
            who: Who {
                id: "r1",
                client_id: None,
                method: "POST",
                path: "/v1/chat/completions",
                start: UNIX_EPOCH + Duration::from_nanos(START),
                client: &crate::govern::Client::Unknown,
                captured: false,
            },
            api,
            series: &series,
            record,
            turn: Some(&turn),
            gaps: &GapSummary::default(),
            request_model,
            response_model: Some("Qwen/Qwen2.5-0.5B"),
            response_id: None,
            span: None,
            session: None,
        };
        let context = ids_for(&http::HeaderMap::new());
        span_of(&finished, &context, ("127.0.0.1", 8000))
    }

    #[test]
    fn a_span_is_named_and_attributed_after_the_genai_conventions_and_carries_every_figure() {
        let mut record = every_figure();
        record.input_tokens = Some(7);
        record.verdict.missed = vec![SloKind::Ttft];
        let span = span(&record, Api::Chat, Some("qwen"));
        assert_eq!(span.name, "chat qwen");
        let get = |key| span.attribute(key).cloned();
        let s = |v: &str| Some(Value::Str(v.to_owned()));
        assert_eq!(get("gen_ai.operation.name"), s("chat"));
        assert_eq!(get("gen_ai.request.model"), s("qwen"));
        assert_eq!(get("gen_ai.response.model"), s("Qwen/Qwen2.5-0.5B"));
        assert_eq!(get("gen_ai.response.id"), None);
        assert_eq!(get("gen_ai.usage.input_tokens"), Some(Value::Int(7)));
        assert_eq!(get("gen_ai.usage.output_tokens"), Some(Value::Int(3)));
        assert_eq!(
            get("gen_ai.response.time_to_first_chunk"),
            Some(Value::Double(0.1))
        );
        assert_eq!(get("server.address"), s("127.0.0.1"));
        assert_eq!(get("server.port"), Some(Value::Int(8000)));
        assert_eq!(get("http.request.method"), s("POST"));
        assert_eq!(get("http.response.status_code"), Some(Value::Int(200)));
        assert_eq!(get("error.type"), None);
        assert_eq!(get("tokentap.conversation"), s("c-1"));
        assert_eq!(get("tokentap.turn"), Some(Value::Int(2)));
        assert_eq!(
            get("tokentap.slo_missed"),
            Some(Value::Strs(vec!["ttft".into()]))
        );
        // Every figure of the table, under the record's field name, with the record's value.
        for figure in Figure::ALL {
            let key = format!("tokentap.{}", figure.row().record_field());
            let value = record.carried(figure).map(Value::Double);
            assert_eq!(span.attribute(&key).cloned(), value, "{key}");
            assert!(value.is_some(), "{key} is measured here");
        }
        assert_eq!(span.status, Status::Unset);
        let mut keys: Vec<&str> = span.attributes.iter().map(|a| a.key).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), span.attributes.len(), "keys are unique");
    }

    #[test]
    fn the_span_runs_from_t_arrive_to_t_end_with_an_event_at_each_first() {
        let record = every_figure();
        let span = span(&record, Api::Chat, Some("qwen"));
        assert_eq!(span.start, START);
        assert_eq!(span.end, START + 400_000_000);
        let events: Vec<(&str, u64)> = span.events.iter().map(|e| (e.name, e.at)).collect();
        assert_eq!(
            events,
            [
                ("tokentap.first_token", START + 100_000_000),
                ("tokentap.first_answer", START + 200_000_000),
                ("tokentap.first_tool_call", START + 300_000_000),
            ]
        );
        let ttft = Attribute {
            key: "tokentap.ttft_s",
            value: Value::Double(0.1),
        };
        assert_eq!(span.events[0].attributes, [ttft]);
    }

    #[test]
    fn a_figure_reads_back_to_its_nanosecond() {
        for n in [1u64, 999, 123_456_789, 1_234_567_891, 86_399_999_999_999] {
            let seconds = Duration::from_nanos(n).as_secs_f64();
            assert_eq!(nanos(seconds), n, "{n}");
        }
        assert_eq!(nanos(-1.0), 0);
        assert_eq!(nanos(f64::NAN), 0);
    }

    #[test]
    fn a_failure_is_an_error_with_its_type_and_an_unknown_api_is_named_by_its_method() {
        let cut = FinishedRecord {
            outcome: Outcome::UpstreamError,
            ..every_figure()
        };
        let span_cut = span(&cut, Api::Chat, Some("qwen"));
        assert_eq!(span_cut.status, Status::Error("upstream_error".into()));
        assert_eq!(
            span_cut.attribute("error.type"),
            Some(&Value::Str("upstream_error".into()))
        );
        let failed = FinishedRecord {
            status: Some(StatusCode::SERVICE_UNAVAILABLE),
            ..every_figure()
        };
        assert_eq!(
            span(&failed, Api::Chat, Some("qwen")).status,
            Status::Error("503".into())
        );
        let refused = FinishedRecord {
            status: Some(StatusCode::NOT_FOUND),
            ..every_figure()
        };
        assert_eq!(
            span(&refused, Api::Chat, Some("qwen")).status,
            Status::Unset
        );
        let other = span(&every_figure(), Api::Other, Some("qwen"));
        assert_eq!(other.name, "POST");
        assert!(other.attribute("gen_ai.operation.name").is_none());
        let completions = span(&every_figure(), Api::LlamaCpp, None);
        assert_eq!(completions.name, "text_completion Qwen/Qwen2.5-0.5B");
    }

    #[test]
    fn flags_say_sampled_and_whether_the_parent_is_remote() {
        let root = span(&every_figure(), Api::Chat, Some("qwen"));
        assert_eq!(root.otlp_flags(), 0x101);
        let mut child = root.clone();
        child.context.parent = Some(SpanId([1; 8]));
        child.context.flags = 0;
        assert_eq!(child.otlp_flags(), 0x301);
    }
}
