//! A finished request, written out once to every sink: the metrics, the log line, the per-request
//! record (`request_log:`), its span (`traces:`, `spans.rs`), and whatever sink is added next. The meter builds the [`Finished`] event
//! (`record/meter.rs`) and hands it to [`Emitter::emit`], the one place a finished request leaves
//! tokentap; each sink writes what it carries of it, its figures read through the figure table
//! (`record::figure`), so a new figure reaches every sink from its row and a new sink is one more
//! [`Sink`].
//!
//! Whether a request becomes a span is decided here, once, before any sink runs ([`Emitter::sampled`]:
//! tail sampling, when the verdict is known), and carried in the event ([`Finished::span`]): so the
//! record names exactly the span the span sink exports, and neither sink asks the other.

mod log;
mod records;
mod spans;

use crate::govern::Client;
use std::sync::Arc;
use std::time::SystemTime;

use crate::record::api::Api;
use crate::record::conversations::Turn;
use crate::record::finished::FinishedRecord;
use crate::record::gaps::GapSummary;
use crate::record::metrics::{Metrics, Series};
use crate::record::outcome::Outcome;
use crate::record::session::{InSession, SessionEnded};
use crate::record::trace::{self, Sampler, TraceContext, Tracing};

pub use log::LogLine;
pub use records::Records;
pub use spans::{operation, span_of, Spans};

/// Who sent a finished request, and what it asked: what a sink says beside the figures.
#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    /// tokentap's own id of the request.
    pub id: &'a str,
    /// The client's `x-request-id`, when it sent a usable one.
    pub client_id: Option<&'a str>,
    pub method: &'a str,
    /// The path, without its query.
    pub path: &'a str,
    /// Wall-clock arrival.
    pub start: SystemTime,
    /// Who the client is, for its shares of the governor's budgets (the conversations' turns, the
    /// records and spans waiting to be written).
    pub client: &'a Client,
    /// Metered from a packet capture (`tokentap capture`), not a proxied connection.
    pub captured: bool,
}

/// One finished request, as every sink gets it.
#[derive(Clone, Copy)]
pub struct Finished<'a> {
    pub who: Who<'a>,
    pub api: Api,
    /// Its labels (model, tenant) and the children of the families it wrote to.
    pub series: &'a Series,
    /// Every figure, the tokens and the verdict.
    pub record: &'a FinishedRecord,
    /// Its place in its conversation, when it has one.
    pub turn: Option<&'a Turn>,
    /// Its own gaps, when a sink lists them (`request_log:`).
    pub gaps: &'a GapSummary,
    /// The `model` the request body named (its label may be `other` or `unknown`).
    pub request_model: Option<&'a str>,
    /// The model the response named.
    pub response_model: Option<&'a str>,
    /// The response's id, where the decoder keeps one.
    pub response_id: Option<&'a str>,
    /// Its span, when it was sampled ([`Emitter::sampled`]): the trace it joined at admission and its
    /// span's id. The span sink exports it, the record names it.
    pub span: Option<&'a TraceContext>,
    /// A response inside a WebSocket session: its place there.
    pub session: Option<InSession<'a>>,
}

/// Somewhere a finished request is written.
pub trait Sink: Send + Sync {
    fn emit(&self, finished: &Finished<'_>);

    /// A WebSocket session ended, counted under the `model` label given; a sink that writes no
    /// sessions passes it over.
    fn session(&self, _ended: &SessionEnded<'_>, _model: &str) {}

    /// Whether it writes a request's own gaps: `(list every gap, at most this many)`; the meter keeps
    /// them only then.
    fn gaps(&self) -> Option<(bool, usize)> {
        None
    }
}

/// Every sink a finished request goes to.
pub struct Emitter {
    metrics: Arc<Metrics>,
    sinks: Vec<Box<dyn Sink>>,
    /// `traces.sample`, with the span sink among the sinks; `None`: no request becomes a span.
    sampler: Option<Sampler>,
}

impl Emitter {
    /// The metrics and the log line, always; `records` when `request_log:` is on.
    pub fn new(metrics: Arc<Metrics>, records: Option<Records>) -> Self {
        let mut sinks: Vec<Box<dyn Sink>> = vec![Box::new(LogLine)];
        if let Some(records) = records {
            sinks.push(Box::new(records));
        }
        Emitter {
            metrics,
            sinks,
            sampler: None,
        }
    }

    /// Adds the span sink (`traces:`): sampled requests become spans.
    pub fn with_spans(mut self, tracing: Tracing) -> Self {
        self.sampler = Some(tracing.sampler);
        self.with(Spans {
            exporter: tracing.exporter,
            server: tracing.server,
        })
    }

    /// The span a request in `trace` that ended as `record` says becomes, decided at its end (tail
    /// sampling: a ratio, and every failure or SLO miss), before any sink sees it; `None` without
    /// `traces:`, or when it is not sampled.
    pub fn sampled<'a>(
        &self, trace: Option<&'a TraceContext>, record: &FinishedRecord,
    ) -> Option<&'a TraceContext> {
        let (sampler, trace) = (self.sampler.as_ref()?, trace?);
        let ending = trace::Ending {
            failed: record.outcome != Outcome::Ok
                || record.status.is_some_and(|s| s.as_u16() >= 500),
            missed_slo: !record.verdict.missed.is_empty(),
        };
        sampler.keep(trace, ending).then_some(trace)
    }

    /// Adds a sink.
    pub fn with(mut self, sink: impl Sink + 'static) -> Self {
        self.sinks.push(Box::new(sink));
        self
    }

    /// The gaps the sinks want listed: `(list every gap, at most this many)`, when any sink keeps a
    /// request's own gaps.
    pub fn gaps(&self) -> Option<(bool, usize)> {
        self.sinks.iter().filter_map(|s| s.gaps()).next()
    }

    pub fn emit(&self, finished: &Finished<'_>) {
        self.metrics.emit(finished);
        for sink in &self.sinks {
            sink.emit(finished);
        }
    }

    /// A WebSocket session ended (its families are counted by `meter::finish_session`): every sink
    /// that writes sessions writes it.
    pub fn emit_session(&self, ended: &SessionEnded<'_>, model: &str) {
        for sink in &self.sinks {
            sink.session(ended, model);
        }
    }
}

impl Sink for Metrics {
    fn emit(&self, finished: &Finished<'_>) {
        self.finish(finished.series, finished.record);
        if let Some(span) = finished.span {
            let ids = (span.trace_id.0, span.span_id.0);
            let (series, record) = (finished.series, finished.record);
            self.exemplify(series, record, ids, finished.who.id, SystemTime::now());
        }
        if let Some(turn) = finished.turn {
            self.finish_turn(finished.series, turn, finished.record);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use http::StatusCode;
    use tokio::time::Instant;

    use super::*;
    use crate::config::{Ceilings, Config};
    use crate::record::figure::Figure;
    use crate::record::finished::{conclude, DecoderReport};
    use crate::record::outcome::Outcome;
    use crate::record::request_record::{self, RequestRecord};
    use crate::record::timeline::Timeline;

    /// A streamed request that has every figure: reasoning, then an answer, then a tool call.
    pub(super) fn every_figure() -> FinishedRecord {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut timeline = Timeline::new(t0);
        timeline.on_head(Some(t0 + ms(50)));
        timeline.on_output(0, t0 + ms(100));
        timeline.on_answer(t0 + ms(200), true);
        timeline.on_output(0, t0 + ms(200));
        timeline.on_tool_call(t0 + ms(300));
        timeline.on_output(0, t0 + ms(300));
        let report = DecoderReport {
            streaming: true,
            terminal_event: true,
            usage_output_tokens: Some(3),
            ..DecoderReport::default()
        };
        let ok = Some(StatusCode::OK);
        let ceilings = Ceilings::default();
        conclude(
            Some(&report),
            &timeline,
            Outcome::Ok,
            t0 + ms(400),
            ok,
            &ceilings,
        )
    }

    /// The keys of a `key=value` line (values may be quoted).
    fn line_keys(line: &str) -> BTreeSet<String> {
        let mut keys = BTreeSet::new();
        let mut quoted = false;
        let mut word = String::new();
        for c in line.chars() {
            match c {
                '"' => quoted = !quoted,
                '=' if !quoted => {
                    keys.insert(std::mem::take(&mut word));
                }
                ' ' if !quoted => word.clear(),
                _ if !quoted => word.push(c),
                _ => {}
            }
        }
        keys
    }

    /// Every figure the table has reaches every sink under its own name, and no sink carries a figure the
    /// table does not: the log line (`{name}_ms`), the record (`{name}_s`), the span (`tokentap.{name}_s`),
    /// the metrics (its family).
    #[test]
    fn every_sink_carries_exactly_the_figures_of_the_table() {
        let record = every_figure();
        for figure in Figure::ALL {
            assert!(
                record.carried(figure).is_some(),
                "{figure:?} is measured here"
            );
        }
        let metrics = Metrics::new(&Config::default()).unwrap_or_else(|e| panic!("{e}"));
        let label = metrics.model_label(Some("m"), None, true);
        let series = metrics.series_of(label, None, Api::Chat);
        let who = Who {
            id: "r1",
            client_id: None,
            method: "POST",
            path: "/v1/chat/completions",
            start: SystemTime::UNIX_EPOCH,
            client: &crate::govern::Client::Unknown,
            captured: false,
        };
        let gaps = GapSummary::default();
        let finished = Finished {
            who,
            api: Api::Chat,
            series: &series,
            record: &record,
            turn: None,
            gaps: &gaps,
            request_model: None,
            response_model: None,
            response_id: None,
            span: None,
            session: None,
        };
        let line = log::Line(&finished).to_string();
        let identity = request_record::Identity {
            id: "r1",
            client_id: None,
            start: SystemTime::UNIX_EPOCH,
            model: "m",
            api: "chat",
            tenant: None,
            turn: None,
            session: None,
            captured: false,
        };
        let json =
            serde_json::to_value(RequestRecord::of(&identity, &record, &gaps)).unwrap_or_default();
        let record_keys: BTreeSet<String> = json
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        let logged = line_keys(&line);
        let figure_like =
            |key: &str| key.ends_with("_s") || key.ends_with("_ms") || key == "output_tokens_per_s";
        let from_table = |suffix: fn(&crate::record::figure::Row) -> String| -> BTreeSet<String> {
            Figure::ALL.iter().map(|f| suffix(f.row())).collect()
        };
        let in_log: BTreeSet<String> = logged.into_iter().filter(|k| figure_like(k)).collect();
        let in_record: BTreeSet<String> =
            record_keys.into_iter().filter(|k| figure_like(k)).collect();
        assert_eq!(in_log, from_table(|r| r.log_field()), "{line}");
        assert_eq!(in_record, from_table(|r| r.record_field()), "{json}");
        let context = trace::ids_for(&http::HeaderMap::new());
        let span = span_of(&finished, &context, ("127.0.0.1", 8000));
        let in_span: BTreeSet<String> = (span.attributes.iter())
            .filter_map(|a| a.key.strip_prefix("tokentap."))
            .filter(|k| figure_like(k))
            .map(str::to_owned)
            .collect();
        assert_eq!(in_span, from_table(|r| r.record_field()), "{span:?}");
        metrics.emit(&finished);
        let families: BTreeSet<String> = metrics
            .gather()
            .iter()
            .filter(|f| {
                f.get_metric()
                    .iter()
                    .any(|m| m.get_histogram().get_sample_count() > 0)
            })
            .map(|f| f.name().to_owned())
            .collect();
        for figure in Figure::ALL {
            let when = figure.row().histogram;
            let family = crate::record::metrics::family::of_figure(figure).name;
            // What is observed as it happens is the meter's, not the finished request's.
            let at_end = when.is_some_and(|w| w != crate::record::figure::When::AsItHappens);
            assert_eq!(families.contains(family), at_end, "{figure:?}: {family}");
        }
    }

    /// The emitter decides a request's span once, at its end, before any sink: with ratio 0 and SLO
    /// misses on, a request that missed a ceiling or failed keeps its trace's ids, one that met every
    /// ceiling gets none; without `traces:` no request does.
    #[test]
    fn the_span_is_decided_at_the_end_before_the_sinks() {
        let metrics = Arc::new(Metrics::new(&Config::default()).unwrap_or_else(|e| panic!("{e}")));
        let off = Emitter::new(metrics.clone(), None);
        let sample = crate::config::Sample {
            ratio: 0.0,
            parent: false,
            slo_misses: true,
            failures: true,
        };
        let on = Emitter {
            sampler: Some(Sampler::new(&sample)),
            ..Emitter::new(metrics, None)
        };
        let context = trace::ids_for(&http::HeaderMap::new());
        let met = every_figure();
        let mut missed = every_figure();
        missed.verdict.missed = vec![crate::config::SloKind::Ttft];
        let failed = FinishedRecord {
            outcome: Outcome::Cancelled,
            ..every_figure()
        };
        assert_eq!(on.sampled(Some(&context), &met), None);
        assert_eq!(on.sampled(Some(&context), &missed), Some(&context));
        assert_eq!(on.sampled(Some(&context), &failed), Some(&context));
        assert_eq!(on.sampled(None, &missed), None);
        assert_eq!(off.sampled(Some(&context), &missed), None);
    }
}
