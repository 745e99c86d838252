//! One request's meter: what the response tap's frames and end mean for the request's figures. The tap
//! knows *when* (a frame passed, the body ended, the client left) and calls the meter once per frame
//! ([`Meter::on_frame`]) and once at the end ([`Meter::finish`]); the meter knows *what*: it keeps the
//! timeline, resolves the request's series once (its labels from the request's and the response's
//! model and the tenant, and the SLO ceilings with them), observes the figures that are observed as
//! they happen (TTFT, each gap, the first answer and the reasoning before it, the first tool call),
//! classifies how the request ended, once, concludes its record, places it in its conversation and
//! hands the finished request to the emitter (`emit/`), which writes it to every sink.
//!
//! The meter also holds the request in `tokentap_requests_in_flight` from t_arrive to t_end.

use std::sync::Arc;

use http::StatusCode;
use prometheus::IntGauge;
use tokio::time::Instant;

use crate::config::{Ceilings, Slo};
use crate::record::api::Api;
use crate::record::conversations::{Conversations, MessageList, Turn, Unread};
use crate::record::emit::{Emitter, Finished, Who};
use crate::record::figure::Figure;
use crate::record::finished::{conclude, t_end, DecoderReport, SkipReason};
use crate::record::gaps::Gaps;
use crate::record::metrics::{Metrics, Series};
use crate::record::outcome::{classify, End, Seen};
use crate::record::session::{InSession, SessionEnded};
use crate::record::timeline::{Mark, Timeline};
use crate::record::trace::TraceContext;

/// What every request's meter is given: the part of the config a reload may change (the ceilings, the
/// emitter's sinks) beside what outlives a reload (the metrics, the conversations). A request is given
/// the one current at its admission and finishes under it (`tap/exchange.rs`).
pub struct MeterContext {
    pub metrics: Arc<Metrics>,
    /// The SLO ceilings: default, per model, per tenant.
    pub slo: Slo,
    /// The turns seen, to recognise conversations; `None`: `conversations.max_turns: 0`.
    pub conversations: Option<Arc<Conversations>>,
    /// Where a finished request goes.
    pub emitter: Emitter,
}

/// What the decoder read in one frame of the response (or at its end).
#[derive(Debug, Default, Clone, Copy)]
pub struct Read<'a> {
    /// The choice of each output the frame carried, in order.
    pub outputs: &'a [u32],
    /// An answer (not reasoning) has passed, so far.
    pub answered: bool,
    /// Reasoning passed before the first answer.
    pub reasoning_first: bool,
    /// A tool call has started, so far.
    pub tool_called: bool,
    /// The API's terminal event has passed.
    pub ended: bool,
}

/// The names a request's labels come from; read when the labels are resolved (once).
#[derive(Debug, Default, Clone, Copy)]
pub struct Names<'a> {
    /// The request body's `model`.
    pub request_model: Option<&'a str>,
    /// The model the response names.
    pub response_model: Option<&'a str>,
    /// The tenant the request names (before the label's cap).
    pub tenant: Option<&'a str>,
}

/// What the request's message list came to, for its conversation.
#[derive(Debug, Clone, Copy)]
pub enum Listed<'a> {
    /// The API carries no list, recognition is off, or the body was not a list: not a conversation.
    Nothing,
    /// It carries one, but it was not read (a body too large to hold, no reader in time, …).
    Unread(Unread),
    List(&'a MessageList),
}

/// How the request ended, besides the tap's [`End`].
pub struct Ending<'a> {
    pub end: End,
    /// The decoder's report; `None` when the response was not metered.
    pub report: Option<DecoderReport>,
    /// What the decoder read last, when it flushed at the end.
    pub last: Read<'a>,
    /// The request body was cut for going idle.
    pub request_body_idle: bool,
    pub names: Names<'a>,
    pub who: Who<'a>,
    pub listed: Listed<'a>,
    /// The Responses API's id of this response, which a later turn may name.
    pub response_id: Option<&'a str>,
    /// The trace the request joined at admission (`traces:`), its span's id drawn there.
    pub trace: Option<&'a TraceContext>,
    /// A response inside a WebSocket session: its place there.
    pub session: Option<InSession<'a>>,
}

/// One request's meter; each call is given the [`MeterContext`] the request was admitted under.
pub struct Meter {
    api: Api,
    timeline: Timeline,
    status: Option<StatusCode>,
    /// The labels and their children, and the ceilings of the request's model and tenant.
    series: Option<(Series, Ceilings)>,
    in_flight: IntGauge,
    /// The request's own gaps, when a sink lists them.
    gaps: Option<Gaps>,
    /// When the API's terminal event passed.
    ended: Option<Instant>,
}

impl Meter {
    /// A request to `api` whose head arrived at `arrive`.
    pub fn begin(context: &MeterContext, api: Api, arrive: Instant) -> Self {
        let in_flight = context.metrics.in_flight(api);
        in_flight.inc();
        let gaps = (context.emitter.gaps()).map(|(list, cap)| Gaps::new(list, cap));
        Meter {
            api,
            timeline: Timeline::new(arrive),
            status: None,
            series: None,
            in_flight,
            gaps,
            ended: None,
        }
    }

    /// The response head's status (or tokentap's own answer's), as it arrives: t_head.
    pub fn on_response(&mut self, status: StatusCode) {
        self.on_response_at(status, Instant::now());
    }

    /// The response head's status, which arrived at `at` (a captured packet's time).
    pub fn on_response_at(&mut self, status: StatusCode, at: Instant) {
        self.status = Some(status);
        self.timeline.on_head(Some(at));
    }

    /// The request will not be finished: what was read of it cannot be trusted whole (a capture lost
    /// its bytes), or its end will never be seen (a realtime response whose session stopped being
    /// read). It leaves the requests in flight, and nothing more is counted or written of it.
    pub fn abandon(self) {
        self.in_flight.dec();
    }

    /// When the API's terminal event passed, if it has.
    pub fn terminal_event(&self) -> Option<Instant> {
        self.ended
    }

    /// A frame the decoder read `read` in passed at `now`.
    pub fn on_frame(
        &mut self, context: &MeterContext, read: &Read<'_>, names: &Names<'_>, now: Instant,
    ) {
        if read.ended && self.ended.is_none() {
            self.ended = Some(now);
        }
        for &choice in read.outputs {
            match self.timeline.on_output(choice, now) {
                Mark::First(ttft) => self.observe(context, names, Figure::Ttft, ttft.as_secs_f64()),
                Mark::Gap(gap) => {
                    let (series, _) = self.series_mut(context, names);
                    series.observe_gap(&context.metrics, gap.as_secs_f64());
                    if let Some(gaps) = &mut self.gaps {
                        gaps.push(gap);
                    }
                }
                Mark::ChoiceStart => {}
            }
        }
        if read.answered {
            if let Some(answer) = self.timeline.on_answer(now, read.reasoning_first) {
                let wait = answer.time_to_first_answer.as_secs_f64();
                self.observe(context, names, Figure::TimeToFirstAnswer, wait);
                if let Some(time) = answer.reasoning_time {
                    let time = time.as_secs_f64();
                    self.observe(context, names, Figure::ReasoningTime, time);
                }
            }
        }
        if read.tool_called {
            if let Some(wait) = self.timeline.on_tool_call(now) {
                let wait = wait.as_secs_f64();
                self.observe(context, names, Figure::TimeToFirstToolCall, wait);
            }
        }
    }

    fn observe(&mut self, context: &MeterContext, names: &Names<'_>, figure: Figure, value: f64) {
        let (series, _) = self.series_mut(context, names);
        series.observe(&context.metrics, figure, value);
    }

    /// The request's series and ceilings, resolved the first time they are needed ([`Metrics::model_label`]
    /// says which model name takes a place: one the upstream lists, else, when it lists nothing, one
    /// answered 2xx).
    fn series_mut(
        &mut self, context: &MeterContext, names: &Names<'_>,
    ) -> (&mut Series, &Ceilings) {
        let api = self.api;
        let confirmed = self.status.is_some_and(|s| s.is_success());
        let (series, ceilings) = self.series.get_or_insert_with(|| {
            let metrics = &context.metrics;
            let label = metrics.model_label(names.request_model, names.response_model, confirmed);
            let tenant = metrics.tenant_label(names.tenant, confirmed);
            let series = metrics.series_of(label, tenant, api);
            let ceilings =
                (context.slo).ceilings_for_request(&series.model, series.tenant.as_deref());
            (series, ceilings)
        });
        (series, ceilings)
    }

    /// The request ended: what the decoder read last is read at t_end, the outcome classified, the
    /// record concluded, the request placed in its conversation and emitted to every sink.
    pub fn finish(mut self, context: &MeterContext, ending: Ending<'_>, now: Instant) {
        self.in_flight.dec();
        let t_end = t_end(ending.end, self.ended, now);
        if let End::Refused(_) = ending.end {
            self.timeline.on_head(None);
        }
        self.on_frame(context, &ending.last, &ending.names, t_end);
        let seen = Seen {
            terminal_event: self.ended.is_some(),
            error_event: ending.report.as_ref().is_some_and(|r| r.error_event),
            request_body_idle: ending.request_body_idle,
        };
        let outcome = classify(ending.end, seen);
        self.series_mut(context, &ending.names);
        let Some((series, ceilings)) = &self.series else {
            return;
        };
        let record = conclude(
            ending.report.as_ref(),
            &self.timeline,
            outcome,
            t_end,
            self.status,
            ceilings,
        );
        let turn = self.place(context, &ending, t_end, now);
        let gaps = self.gaps.as_ref().map(Gaps::summary).unwrap_or_default();
        let emitter = &context.emitter;
        emitter.emit(&Finished {
            who: ending.who,
            api: self.api,
            series,
            record: &record,
            turn: turn.as_ref(),
            gaps: &gaps,
            request_model: ending.names.request_model,
            response_model: ending.names.response_model,
            response_id: ending.response_id,
            span: emitter.sampled(ending.trace, &record),
            session: ending.session,
        });
    }

    /// The request's place in its conversation, once it ended at `t_end` (the think time before the
    /// next turn runs from there); `None` without a message list.
    fn place(
        &self, context: &MeterContext, ending: &Ending<'_>, t_end: Instant, now: Instant,
    ) -> Option<Turn> {
        let conversations = context.conversations.as_ref()?;
        let agents = &context.metrics.agents;
        let turn = match ending.listed {
            Listed::List(list) => {
                let arrive = self.timeline.arrive();
                let (turn, lookup) =
                    conversations.place(list, arrive, t_end, ending.response_id, ending.who.client);
                agents.count_lookup(lookup);
                Some(turn)
            }
            Listed::Unread(reason) => {
                agents.count_unread(reason);
                if let Unread::Budget(spent) = reason {
                    let budgets = &context.metrics.budgets;
                    budgets.count_unmetered(crate::govern::Budget::MessageLists, spent);
                }
                None
            }
            Listed::Nothing => None,
        };
        agents.sweep(conversations, now);
        turn
    }
}

/// A WebSocket session ended: counted in the session families under its model's label, and handed to
/// every sink that writes sessions.
pub fn finish_session(context: &MeterContext, ended: &SessionEnded<'_>) {
    let metrics = &context.metrics;
    if let Some(SkipReason::Unmetered(budget, spent)) = ended.unmetered {
        metrics.budgets.count_unmetered(budget, spent);
    }
    let label = metrics.model_label(ended.model, None, true);
    let series = metrics.series(label, ended.api);
    let seconds = ended.duration.as_secs_f64();
    metrics.count_session(&series, ended.outcome, seconds, ended.responses);
    context.emitter.emit_session(ended, &series.model);
}
