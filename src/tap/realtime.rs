//! A realtime WebSocket session metered as it passes (SPEC §10): the relay (`session.rs`) hands each
//! read of either side to this [`Watch`] before writing it on; a frame reader per direction
//! (`decode/websocket`) finds the messages, `decode/realtime` says what each one means, and here they
//! become responses: each one a request of `api="realtime"` with its own meter (`record/meter.rs`),
//! from its trigger to its done event, and at the end the session's own figures.
//!
//! Which trigger a response answers: vLLM's `input_audio_buffer.commit` (not `final`; one made while a
//! response is pending or running starts none, as vLLM ignores it), OpenAI's `response.create`, or the
//! server's `input_audio_buffer.committed`, the latest before the response's first server event
//! (`response.created`, else its first output). OpenAI responses are told apart by their
//! `response_id` (out-of-band ones may run beside the default one); vLLM's run one at a time.
//!
//! A response the session's end cuts is finished like a cut stream: `cancelled` when the client went
//! (or closed first), `upstream_error` when the upstream did, `timeout` at `timeouts.session_idle` or
//! a shutdown's cut. Nothing here waits, and what it holds is bounded: the readers' bounds, at most
//! [`MAX_OPEN`] responses open (more are not metered), the session's model name cut to 256 bytes.

use std::sync::Arc;
use std::time::SystemTime;

use http::StatusCode;
use tokio::time::Instant;

use crate::decode::realtime::{self, Event, MessageReader, Protocol, Usage};
use crate::decode::websocket::{Allowance, Deflate, FrameReader, Message};
use crate::govern::{Budget, Lease};
use crate::record::api::Api;
use crate::record::finished::{DecoderReport, SkipReason};
use crate::record::meter::{finish_session, Ending, Listed, Meter, Names, Read};
use crate::record::outcome::{End, Outcome};
use crate::record::session::{InSession, Modalities, SessionEnded};
use crate::record::trace::TraceContext;
use crate::tap::context::{ExchangeContext, Settings};
use crate::tap::identity::Identity;
use crate::tap::session::{Ended, Side, Watch};

/// Responses metered at once in one session; beyond them a response is not metered.
const MAX_OPEN: usize = 16;
/// The longest model name kept from the session's events.
const MAX_MODEL: usize = 256;
/// What a session's meter holds besides its inflaters (its readers of frames and messages, its state
/// and at most [`MAX_OPEN`] responses), leased from `session_meters` when the session begins.
pub const SESSION_BYTES: u64 = 16 << 10;

/// The handshake a session came from.
pub struct Handshake {
    /// Who opened the session (`tap/identity.rs`): its id is the session's, and every response in it
    /// carries its tenant, client request id and trace as an HTTP request carries its own.
    pub identity: Identity,
    pub path: String,
    /// The `model` of the handshake's query, if any.
    pub model: Option<String>,
}

impl Handshake {
    /// The handshake of the request `identity` names to `path` with `query`: its `model=` read
    /// (percent-decoded).
    pub fn new(identity: &Identity, path: &str, query: Option<&str>) -> Self {
        let model = (query.unwrap_or("").split('&'))
            .find_map(|pair| pair.strip_prefix("model="))
            .map(percent_decoded)
            .filter(|m| !m.is_empty() && m.len() <= MAX_MODEL);
        Handshake {
            identity: identity.clone(),
            path: path.to_owned(),
            model,
        }
    }
}

/// A query value with its `%XX` escapes (and `+`) decoded; an escape that is not one is kept as it
/// is, and bytes that are not UTF-8 replaced.
fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One session's meter (see the module's documentation).
pub struct SessionMeter {
    client: FrameReader,
    upstream: FrameReader,
    /// Each direction's message being read, its fields only.
    messages: [MessageReader; 2],
    session: Session,
    /// What the meter's own state holds of `session_meters`.
    _memory: Lease,
}

struct Session {
    /// Each response takes the settings current at its trigger (a reload changes them for the
    /// responses after it), and the session's end those current then.
    context: Arc<ExchangeContext>,
    handshake: Handshake,
    start: SystemTime,
    opened: Instant,
    model: Option<String>,
    protocol: Option<Protocol>,
    /// The trigger the next response answers, and whether the client asked (a commit or
    /// `response.create`, not the server's `committed`): a response asked for and not begun when the
    /// session ends is cut like one begun.
    pending: Option<(Instant, bool)>,
    open: Vec<Open>,
    responses: u64,
    input_tokens: u64,
    output_tokens: u64,
    /// The close frame each side sent: its code, and when.
    closed: [Option<(Option<u16>, Instant)>; 2],
    /// The first side whose connection ended (end of file) without a close frame.
    gone: Option<Side>,
    /// A budget was spent: the session's messages are no longer read, its responses no longer metered.
    unmetered: Option<SkipReason>,
}

/// A response being metered.
struct Open {
    id: Option<String>,
    meter: Meter,
    /// The settings it began under: it is judged by them to its end.
    settings: Arc<Settings>,
    /// Its span in the trace the handshake joined: the caller's parent, an id of its own.
    trace: Option<TraceContext>,
    trigger: Instant,
    position: u64,
    outputs: u64,
}

impl SessionMeter {
    /// A session from `handshake`, whose upstream's `101` agreed `deflate`. When the governor has no
    /// room for its meter, the session is relayed unmetered from the start (its frames followed for
    /// the close codes only).
    pub fn new(
        context: Arc<ExchangeContext>, handshake: Handshake, deflate: Option<Deflate>,
    ) -> Self {
        let model = handshake.model.clone();
        let client = &handshake.identity.client.clone();
        let governor = context.governor.clone();
        let allowance = || Allowance {
            memory: governor.lease(Budget::SessionMeters, client),
            work: governor.inflate(client),
        };
        let mut memory = governor.lease(Budget::SessionMeters, client);
        let refused = memory.grow(SESSION_BYTES).err();
        let mut meter = SessionMeter {
            client: FrameReader::new(deflate.map(|d| d.client), allowance()),
            upstream: FrameReader::new(deflate.map(|d| d.server), allowance()),
            messages: Default::default(),
            _memory: memory,
            session: Session {
                context,
                handshake,
                start: SystemTime::now(),
                opened: Instant::now(),
                model,
                protocol: None,
                pending: None,
                open: Vec::new(),
                responses: 0,
                input_tokens: 0,
                output_tokens: 0,
                closed: [None, None],
                gone: None,
                unmetered: None,
            },
        };
        if let Some(spent) = refused {
            meter.unmetered(SkipReason::Unmetered(Budget::SessionMeters, spent));
        }
        meter
    }

    /// The session's messages stop being read (a budget was spent): its frames are followed for the
    /// close codes only, and the responses open now are let go unfinished (their end will not be seen;
    /// what was observed of them stays).
    fn unmetered(&mut self, reason: SkipReason) {
        self.client.frames_only();
        self.upstream.frames_only();
        let session = &mut self.session;
        session.unmetered.get_or_insert(reason);
        session.pending = None;
        for open in std::mem::take(&mut session.open) {
            open.meter.abandon();
        }
    }

    /// The session ended as `ended` (`session::relay`'s answer): the responses still open are cut,
    /// and the session's own figures counted and written.
    pub fn finish(mut self, ended: &Ended) {
        let session = &mut self.session;
        let now = Instant::now();
        let first_close = match session.closed {
            [Some((_, c)), Some((_, u))] => {
                Some(if c <= u { Side::Client } else { Side::Upstream })
            }
            [Some(_), None] => Some(Side::Client),
            [None, Some(_)] => Some(Side::Upstream),
            [None, None] => None,
        };
        let (outcome, cut) = match (*ended, first_close, session.gone) {
            (Ended::Idle | Ended::Cut, _, _) => (Outcome::Timeout, End::Cut),
            (_, Some(side), _) => (Outcome::Ok, gone(side)),
            (Ended::Broke(side), None, _) | (Ended::Closed, None, Some(side)) => {
                (outcome_of(side), gone(side))
            }
            (Ended::Closed, None, None) => (Outcome::Ok, End::UpstreamBroke),
        };
        if let Some((trigger, true)) = session.pending {
            session.response(None, trigger);
        }
        for open in std::mem::take(&mut session.open) {
            session.finish(open, cut, None, None, Usage::default(), now);
        }
        let [client, upstream] = session.closed.map(|c| c.and_then(|(code, _)| code));
        let ended = SessionEnded {
            id: &session.handshake.identity.id,
            model: session.model.as_deref(),
            api: Api::Realtime,
            start: session.start,
            duration: now.saturating_duration_since(session.opened),
            outcome,
            close_client: client,
            close_upstream: upstream,
            responses: session.responses,
            input_tokens: session.input_tokens,
            output_tokens: session.output_tokens,
            unmetered: session.unmetered,
        };
        finish_session(&session.context.settings().meter, &ended);
    }
}

/// How a response the session's end cut ends, when `side` went first.
fn gone(side: Side) -> End {
    match side {
        Side::Client => End::ClientGone,
        Side::Upstream => End::UpstreamBroke,
    }
}

/// The session's outcome when `side`'s connection went without a close frame.
fn outcome_of(side: Side) -> Outcome {
    match side {
        Side::Client => Outcome::Cancelled,
        Side::Upstream => Outcome::UpstreamError,
    }
}

impl Watch for SessionMeter {
    fn read(&mut self, from: Side, bytes: &[u8], at: Instant) -> u64 {
        let (frames, session) = match from {
            Side::Client => (&mut self.client, &mut self.session),
            Side::Upstream => (&mut self.upstream, &mut self.session),
        };
        let message = &mut self.messages[from as usize];
        let mut work = bytes.len() as u64;
        let mut spent = None;
        frames.feed(bytes, &mut |piece| match piece {
            Message::TextStart => message.begin(),
            Message::Text(text) => {
                work += text.len() as u64;
                message.feed(text);
            }
            Message::TextEnd if session.unmetered.is_none() => {
                if let Some(event) = message
                    .end()
                    .and_then(|f| realtime::meaning(from == Side::Client, f))
                {
                    session.event(event, at);
                }
            }
            Message::TextEnd => {}
            Message::Close(code) => {
                let slot = &mut session.closed[from as usize];
                slot.get_or_insert((code, at));
            }
            Message::Skipped(skip) => {
                let settings = session.context.settings();
                settings.meter.metrics.session_skips.count(skip.as_str())
            }
            Message::Unmetered(budget, why) => spent = Some(SkipReason::Unmetered(budget, why)),
        });
        if let Some(reason) = spent {
            self.unmetered(reason);
        }
        work
    }

    fn ended(&mut self, from: Side, _at: Instant) {
        let closed = self.session.closed.iter().any(Option::is_some);
        if !closed && self.session.gone.is_none() {
            self.session.gone = Some(from);
        }
    }
}

impl Session {
    fn event(&mut self, event: Event<'_>, at: Instant) {
        match event {
            Event::Session { model, protocol } => {
                if let Some(model) = model.filter(|m| !m.is_empty() && m.len() <= MAX_MODEL) {
                    self.model = Some(model.into_owned());
                }
                self.protocol = protocol.or(self.protocol);
            }
            Event::Create => self.pending = Some((at, true)),
            Event::Committed => self.pending = Some((at, false)),
            Event::Commit { last: false } if self.protocol != Some(Protocol::OpenAi) => {
                let running = self.open.iter().any(|o| o.id.is_none());
                if !running && self.pending.is_none() {
                    self.pending = Some((at, true));
                }
            }
            Event::Commit { .. } | Event::Other => {}
            Event::Created { response } => {
                self.protocol = Some(Protocol::OpenAi);
                self.response(response.as_deref(), at);
            }
            Event::Output {
                response,
                empty,
                tool,
            } => {
                if empty {
                    return;
                }
                // Out while the response is borrowed: the labels are resolved from it at the first output.
                let model = self.model.take();
                let tenant = self.handshake.identity.tenant.take();
                if let Some(open) = self.response(response.as_deref(), at) {
                    open.outputs += 1;
                    let read = Read {
                        outputs: &[0],
                        answered: !tool,
                        tool_called: tool,
                        ..Read::default()
                    };
                    let names = names_of(&model, &tenant);
                    open.meter.on_frame(&open.settings.meter, &read, &names, at);
                }
                self.model = model;
                self.handshake.identity.tenant = tenant;
            }
            Event::Done {
                response,
                status,
                usage,
            } => {
                if self.response(response.as_deref(), at).is_none() {
                    return;
                }
                let Some(open) = self.take(response.as_deref()) else {
                    return;
                };
                let end = match status.as_deref() {
                    Some("cancelled") => End::ClientGone,
                    _ => End::Complete,
                };
                let failed = status.as_deref() == Some("failed");
                self.finish(open, end, Some(at), Some(failed), usage, at);
            }
            Event::Error { ends_response } => {
                let vllm = self.protocol != Some(Protocol::OpenAi);
                let started = self.pending.is_some() || self.open.iter().any(|o| o.id.is_none());
                if ends_response && vllm && started && self.response(None, at).is_some() {
                    if let Some(open) = self.take(None) {
                        self.finish(open, End::Complete, None, Some(true), Usage::default(), at);
                    }
                }
            }
        }
    }

    /// The open response `id` names (vLLM's: the one without an id), opened at `at` if it is not:
    /// it answers the pending trigger, or begins now when there is none. `None` when [`MAX_OPEN`] are
    /// open.
    fn response(&mut self, id: Option<&str>, at: Instant) -> Option<&mut Open> {
        if let Some(i) = self.open.iter().position(|o| o.id.as_deref() == id) {
            return self.open.get_mut(i);
        }
        if self.open.len() >= MAX_OPEN {
            return None;
        }
        let trigger = self.pending.take().map_or(at, |(trigger, _)| trigger);
        let settings = self.context.settings();
        let mut meter = Meter::begin(&settings.meter, Api::Realtime, trigger);
        meter.on_response(StatusCode::OK);
        self.responses += 1;
        let trace = self.handshake.identity.trace.as_ref();
        self.open.push(Open {
            id: id.map(str::to_owned),
            meter,
            settings,
            trace: trace.map(TraceContext::another_span),
            trigger,
            position: self.responses,
            outputs: 0,
        });
        self.open.last_mut()
    }

    /// Takes the open response `id` names out of the open ones.
    fn take(&mut self, id: Option<&str>) -> Option<Open> {
        let i = self.open.iter().position(|o| o.id.as_deref() == id)?;
        Some(self.open.swap_remove(i))
    }

    /// Finishes `open` as `end` at `now`; `done`: when its done event passed; `failed`: the done
    /// event said it failed, or an error event ended it.
    fn finish(
        &mut self, open: Open, end: End, done: Option<Instant>, failed: Option<bool>, usage: Usage,
        now: Instant,
    ) {
        let Open {
            id,
            mut meter,
            settings,
            trace,
            trigger,
            position,
            outputs,
        } = open;
        let identity = &self.handshake.identity;
        let names = names_of(&self.model, &identity.tenant);
        let terminal = done.is_some() && end == End::Complete;
        if terminal {
            let read = Read {
                ended: true,
                ..Read::default()
            };
            meter.on_frame(&settings.meter, &read, &names, now);
        }
        self.input_tokens += usage.input.unwrap_or(0);
        self.output_tokens += usage.output.unwrap_or(outputs);
        let report = DecoderReport {
            streaming: true,
            error_event: failed.unwrap_or(false),
            terminal_event: terminal,
            usage_output_tokens: usage.output,
            input_tokens: usage.input,
            cached_input_tokens: usage.cached_input,
            ..DecoderReport::default()
        };
        let session_id = identity.id.as_str();
        let response_id = format!("{session_id}/{position}");
        let start = self.start + trigger.saturating_duration_since(self.opened);
        let path = self.handshake.path.as_str();
        let ending = Ending {
            end,
            report: Some(report),
            last: Read::default(),
            request_body_idle: false,
            names,
            who: identity.who(&response_id, "GET", path, start, false),
            listed: Listed::Nothing,
            response_id: id.as_deref(),
            trace: trace.as_ref(),
            session: Some(InSession {
                id: session_id,
                position,
                tokens: Modalities {
                    input_text: usage.input_text,
                    input_audio: usage.input_audio,
                    output_text: usage.output_text,
                    output_audio: usage.output_audio,
                },
            }),
        };
        meter.finish(&settings.meter, ending, now);
    }
}

fn names_of<'a>(model: &'a Option<String>, tenant: &'a Option<String>) -> Names<'a> {
    Names {
        request_model: model.as_deref(),
        response_model: None,
        tenant: tenant.as_deref(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::websocket::Skip;
    use crate::record::metrics::family::SESSION_SKIP_REASONS;

    #[test]
    fn the_handshakes_model_is_read_from_its_query_percent_decoded() {
        let identity = crate::tap::identity::UNKNOWN.clone();
        let of = |query| Handshake::new(&identity, "/v1/realtime", query).model;
        assert_eq!(
            of(Some("model=gpt-realtime")).as_deref(),
            Some("gpt-realtime")
        );
        assert_eq!(of(Some("a=1&model=org%2Fm+x")).as_deref(), Some("org/m x"));
        assert_eq!(of(Some("model=%zz")).as_deref(), Some("%zz"));
        assert_eq!(of(Some("model=")), None);
        assert_eq!(of(Some("intent=transcription")), None);
        assert_eq!(of(None), None);
        assert_eq!(of(Some(&format!("model={}", "m".repeat(300)))), None);
    }

    #[test]
    fn every_reason_a_reader_skips_for_is_a_value_of_the_families_reason() {
        let reasons: Vec<&str> = Skip::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(reasons, SESSION_SKIP_REASONS);
    }
}
