//! One request/response exchange from t_arrive to t_end: the timeline, the decoder and the labels of a
//! request, and the single place where a finished request is recorded: its outcome is classified
//! (`record::outcome`), its record concluded (`record::finished`, pure), then written to the metrics
//! (`record::metrics::finish`), the log line and the request_log from here.
//!
//! The state lives in an [`ExchangeGuard`]: first inside the forwarding future, then inside the response
//! body. Whichever way the exchange ends — the body's last frame, an upstream error, or the guard being
//! dropped because the client went away — it is finished exactly once, and the in-flight gauge with it,
//! and so is the request's upstream-connection slot (`limits.max_upstream_connections`) given back.
//! A client that goes away after the API's terminal event has passed (the openai SDK's sync stream
//! closes at `data: [DONE]`, before the server's chunked terminator) had the whole answer: that request
//! is complete, and ends when the terminal event passed.
//!
//! TTFT, the time to first answer (and the reasoning time before it) and the time to first tool call
//! are observed as they happen; the reasoning and cached-prompt tokens, the server's own timings and
//! the part of the TTFT outside the server when the request ends (docs/metrics.md, "Inside the TTFT").

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use prometheus::IntGauge;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tracing::field::DisplayValue;

use crate::config::{Metering, Slo};
use crate::decode::dialect::timings::tgi_headers;
use crate::decode::dialect::Dialect;
use crate::decode::messages;
use crate::decode::response::{Format, ResponseDecoder};
use crate::decode::tokenizer::{TextCount, Tokenizers};
use crate::logging::fields::Millis;
use crate::logging::records::RecordWriter;
use crate::record::api::Api;
use crate::record::conversations::{Conversations, Turn};
use crate::record::finished::{conclude, t_end, FinishedRecord};
use crate::record::gaps::Gaps;
use crate::record::metrics::{family, Metrics, Series};
use crate::record::outcome::{classify, End, Outcome, Seen};
use crate::record::request_record::{self, RequestRecord};
use crate::record::server::ServerTimings;
use crate::record::timeline::{Mark, Timeline};
use crate::record::tokens::TokenSource;
use crate::shutdown::{Count, Counted};
use crate::tap::identity::{Identify, Identity};
use crate::tap::list_read::ListRead;
pub use crate::tap::list_read::{HeldBody, Readers};
use crate::tap::RequestSeen;

/// What every exchange is given: the metrics it records into, the SLO ceilings, the metering bounds,
/// the configured tokenizers and the count of requests in flight a shutdown waits on.
pub struct ExchangeContext {
    pub metrics: Arc<Metrics>,
    pub slo: Slo,
    pub metering: Metering,
    pub tokenizers: Arc<Tokenizers>,
    /// Requests between t_arrive and t_end: what a shutdown waits for.
    pub requests: Count,
    /// Reads each request's id and tenant.
    pub identify: Identify,
    /// The per-request records (`request_log:`), when on.
    pub records: Option<Records>,
    /// The turns seen, to recognise conversations; `None`: `conversations.max_turns: 0`.
    pub conversations: Option<Conversations>,
    /// The threads large message lists are read on.
    pub readers: Readers,
}

/// Where finished requests' records go, and what they list.
pub struct Records {
    pub writer: Arc<RecordWriter>,
    /// `request_log.gaps`: list every gap.
    pub gaps: bool,
    pub max_gaps: usize,
}

pub struct Exchange {
    context: Arc<ExchangeContext>,
    api: Api,
    method: Method,
    path: String,
    timeline: Timeline,
    request_model: Arc<RequestSeen>,
    dialect: Option<Box<dyn Dialect>>,
    decoder: Option<ResponseDecoder>,
    /// The choice of each output the decoder found in the frame being read; reused.
    marks: Vec<u32>,
    /// When the API's terminal event passed.
    ended: Option<Instant>,
    /// The server's timings its response headers carried (TGI's `x-queue-time`).
    header_timings: ServerTimings,
    status: Option<StatusCode>,
    series: Option<Series>,
    in_flight: IntGauge,
    /// This request in [`ExchangeContext::requests`], until it finishes.
    counted: Option<Counted>,
    /// One of `limits.max_upstream_connections`, and one of its client connection's
    /// `limits.max_upstream_per_connection`, held from forwarding until the exchange finishes.
    upstream_permits: [Option<OwnedSemaphorePermit>; 2],
    /// The request's id and tenant, once its head was read.
    identity: Option<Identity>,
    /// Wall-clock arrival and the request's own gaps: only kept for a record (`request_log:`).
    recording: Option<(SystemTime, Gaps)>,
    /// The request's message list, read off the held body beside the forwarding: `None` when the API
    /// carries none or recognition is off.
    messages: Option<ListRead>,
}

impl Exchange {
    pub fn begin(
        context: Arc<ExchangeContext>,
        api: Api,
        dialect: Option<Box<dyn Dialect>>,
        method: Method,
        path: String,
        arrive: Instant,
        request_model: Arc<RequestSeen>,
    ) -> Self {
        let in_flight = context.metrics.in_flight(api);
        in_flight.inc();
        let counted = Some(context.requests.enter());
        let recording = context
            .records
            .as_ref()
            .map(|r| (SystemTime::now(), Gaps::new(r.gaps, r.max_gaps)));
        Exchange {
            context,
            api,
            method,
            path,
            timeline: Timeline::new(arrive),
            request_model,
            dialect,
            decoder: None,
            marks: Vec::new(),
            ended: None,
            header_timings: ServerTimings::default(),
            status: None,
            series: None,
            counted,
            in_flight,
            upstream_permits: [None, None],
            identity: None,
            recording,
            messages: None,
        }
    }

    /// The held request body, just sent upstream: its message list is read now, while the upstream
    /// works, for the conversation this request continues (`tap::list_read`: at once for a small
    /// body, on one of the context's readers for a larger one, dropped when the request ends). `None`:
    /// the body streams (too large to hold), so its list is not read.
    pub fn read_messages(&mut self, body: Option<HeldBody>) {
        if self.context.conversations.is_none() || !messages::has_messages(self.api) {
            return;
        }
        self.messages = Some(ListRead::start(self.api, body, &self.context.readers));
    }

    /// Reads the request's id and tenant from its head (the head itself is left as it is).
    pub fn identify(&mut self, headers: &HeaderMap) {
        self.identity = Some(self.context.identify.of(headers));
    }

    /// Holds `permit` (an upstream slot) and `share` (one of its client connection's) until the exchange
    /// finishes, however it ends.
    pub fn hold(&mut self, permit: OwnedSemaphorePermit, share: Option<OwnedSemaphorePermit>) {
        self.upstream_permits = [Some(permit), share];
    }

    /// The response head arrived. Successful responses of a known API are metered from here on.
    pub fn on_response(&mut self, status: StatusCode, content_type: Option<&HeaderValue>) {
        self.status = Some(status);
        if status.is_success() {
            if let Some(dialect) = self.dialect.take() {
                let format = Format::of(content_type);
                let text = match format {
                    Format::Json => TextCount::Off,
                    _ => TextCount::start(&self.context.tokenizers, self.request_model.get()),
                };
                let metering = &self.context.metering;
                self.decoder = Some(ResponseDecoder::new(dialect, format, metering, text));
            }
        }
    }

    /// The response head's headers, for the server timings some servers send there (TGI). Read only for
    /// a metered response.
    pub fn on_server_headers(&mut self, headers: &HeaderMap) {
        if self.decoder.is_some() {
            self.header_timings = tgi_headers(headers);
        }
    }

    /// A response body frame is passing at `now`.
    pub fn on_data(&mut self, bytes: &[u8], now: Instant) {
        let Some(decoder) = self.decoder.as_mut() else {
            return;
        };
        decoder.feed(bytes, &mut self.marks);
        if self.ended.is_none() && decoder.ended() {
            self.ended = Some(now);
        }
        self.observe_marks(now);
        self.observe_answer(now);
        self.observe_tool_call(now);
    }

    /// The first answer, if it passed in the frame read at `now`: the time to first answer and the
    /// reasoning time before it, observed as they happen.
    fn observe_answer(&mut self, now: Instant) {
        let Some(decoder) = self.decoder.as_ref() else {
            return;
        };
        if !decoder.answered() {
            return;
        }
        let Some(answer) = self.timeline.on_answer(now, decoder.reasoning_first()) else {
            return;
        };
        let series = self.series();
        if let Some(tokens) = &series.tokens {
            let seconds = answer.time_to_first_answer.as_secs_f64();
            tokens.time_to_first_answer.observe(seconds);
        }
        if let Some(time) = answer.reasoning_time {
            let series = series.clone();
            self.context
                .metrics
                .inside
                .observe_reasoning_time(&series, time);
        }
    }

    /// The first tool call, if it started in the frame read at `now`: the time to first tool call,
    /// observed as it happens.
    fn observe_tool_call(&mut self, now: Instant) {
        if !self.decoder.as_ref().is_some_and(|d| d.tool_called()) {
            return;
        }
        let Some(wait) = self.timeline.on_tool_call(now) else {
            return;
        };
        let series = self.series().clone();
        let family = &family::TIME_TO_FIRST_TOOL_CALL;
        self.context
            .metrics
            .observe(&series, family, wait.as_secs_f64());
    }

    /// The outputs in `marks` passed at `now`: TTFT or a gap each, observed as it happens.
    fn observe_marks(&mut self, now: Instant) {
        let marks = std::mem::take(&mut self.marks);
        for &choice in &marks {
            let mark = self.timeline.on_output(choice, now);
            let Some(tokens) = &self.series().tokens else {
                continue;
            };
            match mark {
                Mark::First(ttft) => tokens.ttft.observe(ttft.as_secs_f64()),
                Mark::Gap(gap) => {
                    tokens.itl.observe(gap.as_secs_f64());
                    if let Some((_, gaps)) = &mut self.recording {
                        gaps.push(gap);
                    }
                }
                Mark::ChoiceStart => {}
            }
        }
        self.marks = marks;
        self.marks.clear();
    }

    /// Labels are resolved once, from the request's `model` and the response's ([`Metrics::model_label`]
    /// says which takes a place: one the upstream lists, else, when it lists nothing, one answered 2xx).
    fn series(&mut self) -> &Series {
        let context = &self.context;
        let request_model = &self.request_model;
        let decoder = &self.decoder;
        let api = self.api;
        let confirmed = self.status.is_some_and(|s| s.is_success());
        let tenant = self.identity.as_ref().and_then(|i| i.tenant.as_deref());
        self.series.get_or_insert_with(|| {
            let response_model = decoder
                .as_ref()
                .and_then(|m| m.observations().model.as_deref());
            let label = context
                .metrics
                .model_label(request_model.get(), response_model, confirmed);
            let tenant = context.metrics.tenant_label(tenant, confirmed);
            context.metrics.series_of(label, tenant, api)
        })
    }

    /// Ends the exchange as `end` at `now`: classifies the outcome, has the decoder hand over its report,
    /// concludes the [`FinishedRecord`] and writes it out.
    fn finish(mut self, end: End, now: Instant) {
        self.in_flight.dec();
        self.counted.take();
        self.upstream_permits = [None, None];
        let terminal_event = self.ended;
        let seen = Seen {
            terminal_event: terminal_event.is_some(),
            error_event: false,
            request_body_idle: self.request_model.body_idle(),
        };
        // The body was delivered whole (the decoder's own say comes with its report).
        let complete = classify(end, seen) == Outcome::Ok;
        let t_end = t_end(end, terminal_event, now);
        let mut report = None;
        if let Some(decoder) = self.decoder.as_mut() {
            let mut finished = decoder.finish(complete, &mut self.marks);
            let mut server = self.header_timings;
            server.merge(finished.server);
            finished.server = server;
            report = Some(finished);
            self.observe_marks(t_end);
            self.observe_answer(t_end);
            self.observe_tool_call(t_end);
        }
        let error_event = report.as_ref().is_some_and(|r| r.error_event);
        let outcome = classify(
            end,
            Seen {
                error_event,
                ..seen
            },
        );
        let series = self.series().clone();
        let ceilings =
            (self.context.slo).ceilings_for_request(&series.model, series.tenant.as_deref());
        let record = conclude(
            report.as_ref(),
            &self.timeline,
            outcome,
            t_end,
            self.status,
            &ceilings,
        );
        let turn = self.place(t_end, now);
        self.write(&series, &record, turn.as_ref());
    }

    /// The request's place in its conversation, once it ended at `t_end` (the think time before the
    /// next turn runs from there); `None` without a message list.
    fn place(&self, t_end: Instant, now: Instant) -> Option<Turn> {
        let (conversations, read) = (
            self.context.conversations.as_ref()?,
            self.messages.as_ref()?,
        );
        let agents = &self.context.metrics.agents;
        let turn = match read.finish() {
            Ok(Some(list)) => {
                let answered = self.decoder.as_ref();
                let response_id = answered.and_then(|d| d.observations().response_id.as_deref());
                let arrive = self.timeline.arrive();
                let (turn, lookup) = conversations.place(list, arrive, t_end, response_id);
                agents.count_lookup(lookup);
                Some(turn)
            }
            // No list in the body: not a conversation.
            Ok(None) => None,
            Err(reason) => {
                agents.count_unread(reason);
                None
            }
        };
        agents.sweep(conversations, now);
        turn
    }

    /// Writes a finished request to the metrics and the log line.
    fn write(&self, series: &Series, record: &FinishedRecord, turn: Option<&Turn>) {
        self.context.metrics.finish(series, record);
        if let Some(turn) = turn {
            self.context.metrics.finish_turn(series, turn, record);
        }
        let figures = &record.figures;
        let ok = record.outcome == Outcome::Ok;
        let status = record.status.as_ref().map_or("none", StatusCode::as_str);
        let streaming = record.streaming;
        let id = self.identity.as_ref().map_or("", |i| i.id.as_str());
        let client_id = self.identity.as_ref().and_then(|i| i.client_id.as_deref());
        // Every value a client chooses is a `&str`, written quoted and escaped (`Debug`), so none can
        // add a key to the line or break it (control characters, U+2028/U+2029).
        tracing::info!(
            id,
            client_request_id = client_id,
            method = self.method.as_str(),
            path = self.path.as_str(),
            model = &*series.model,
            api = self.api.as_str(),
            status = %status,
            outcome = record.outcome.as_str(),
            ttft_ms = figures.ttft.filter(|_| streaming).map(millis),
            time_to_first_answer_ms = figures.time_to_first_answer.filter(|_| streaming).map(millis),
            time_to_first_tool_call_ms = figures.time_to_first_tool_call.filter(|_| streaming).map(millis),
            tpot_ms = figures.tpot.filter(|_| streaming && ok).map(millis),
            e2e_ms = millis(figures.e2e),
            output_tokens = record.output_tokens,
            token_source = record.token_source.map(TokenSource::as_str),
            input_tokens = record.input_tokens,
            conversation = turn.map(|t| &*t.conversation),
            turn = turn.map(|t| t.turn),
            think_ms = turn.and_then(|t| t.think).map(millis),
            slo = %record.slo(),
            "request finished"
        );
        if let (Some(records), Some((start, gaps))) = (&self.context.records, &self.recording) {
            let identity = request_record::Identity {
                id,
                client_id,
                start: *start,
                model: &series.model,
                api: self.api.as_str(),
                tenant: series.tenant.as_deref(),
                turn,
            };
            // Plain numbers and strings: serialising cannot fail; a record that did is not written.
            records.writer.send_with(|| {
                serde_json::to_string(&RequestRecord::of(&identity, record, gaps.summary())).ok()
            });
        }
    }
}

/// A figure of the log line: milliseconds to the microsecond (`12.345`), written from integers.
fn millis(d: Duration) -> DisplayValue<Millis> {
    tracing::field::display(Millis::of(d))
}

/// Owns an exchange until it is finished; dropping it unfinished means the client went away.
pub struct ExchangeGuard(Option<Exchange>);

impl ExchangeGuard {
    pub fn new(exchange: Exchange) -> Self {
        ExchangeGuard(Some(exchange))
    }

    pub fn get_mut(&mut self) -> Option<&mut Exchange> {
        self.0.as_mut()
    }

    /// Finishes the exchange as `end`, unless it was already finished.
    pub fn finish(&mut self, end: End) {
        if let Some(exchange) = self.0.take() {
            exchange.finish(end, Instant::now());
        }
    }
}

impl Drop for ExchangeGuard {
    fn drop(&mut self) {
        self.finish(End::ClientGone);
    }
}
