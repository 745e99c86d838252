//! The per-request record (`request_log:` in the config): one JSON object per finished request, the
//! schema shared by the writer and by `tokentap report`. Field names and units are a stable interface
//! (docs/records.md); a change that removes or redefines a field bumps [`RECORD_VERSION`].
//!
//! Durations are seconds as floating point, like Prometheus; a figure that does not apply is absent
//! (serialized as nothing, read back as `None`). Never prompt or completion text, never a credential.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::format_description::FormatItem;
use time::macros::format_description;
use time::{Date, OffsetDateTime};

use crate::record::api::Api;
use crate::record::conversations::Turn;
use crate::record::figure::Figure;
use crate::record::finished::{FinishedRecord, SkipReason};
use crate::record::gaps::GapSummary;
use crate::record::server::outside;
use crate::record::session::{InSession, SessionEnded};
use crate::record::slo::Ending;
use crate::record::timeline::Figures;

/// The `v` field of every record.
pub const RECORD_VERSION: u32 = 1;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Schema version, [`RECORD_VERSION`].
    pub v: u32,
    /// Wall-clock time the request arrived, RFC 3339 UTC with microseconds.
    pub start: String,
    /// tokentap's own id of the request, unique within the process; also in the info log line.
    pub id: String,
    /// The client's `x-request-id`, when it sent a usable one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<String>,
    /// The `model` label the metrics counted the request under.
    pub model: String,
    /// The `api` label.
    pub api: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The conversation the request is a turn of (an id tokentap draws, never derived from the
    /// content); absent when the request carries no message list or recognition is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    /// Its turn in that conversation, 1 for the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// The client's time since the turn it continues ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_s: Option<f64>,
    /// A response inside a WebSocket session (`api="realtime"`): the session's id (its record's `id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Its position in that session, 1 for the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_response: Option<u64>,
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
    /// t_tool − t_arrive: the first chunk that started a tool call, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_first_tool_call_s: Option<f64>,
    /// t_head − t_arrive: the upstream's status and headers, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_response_head_s: Option<f64>,
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
    /// Audio and text apart, where the usage says (realtime responses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_text_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_audio_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_text_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_audio_tokens: Option<u64>,
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
    /// The ceilings missed (`ttft`, `tpot`, `itl`, `e2e`, `time_to_first_answer`, `time_to_first_tool_call`).
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
    /// The trace of the request's span (32 hex digits), when one was sampled and handed to the
    /// exporter (`traces:`, docs/tracing.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// That span's id (16 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    /// Metered from a packet capture (`tokentap capture`): its times are the packets' (docs/metrics.md);
    /// absent for a request tokentap forwarded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub captured: bool,
    /// Why the response was not measured to its end, when it was not: the stream figures and tokens
    /// are then absent (docs/records.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmetered: Option<Unmetered>,
}

/// Why tokentap stopped measuring a response or a session (it forwarded every byte all the same): a
/// budget that was spent (`budget` and `reason` = `cap` or `share`), or a stream it could not read
/// (`reason` alone: `event_too_large`, `malformed_event`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unmetered {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    pub reason: String,
}

impl Unmetered {
    pub fn of(skip: SkipReason) -> Self {
        Unmetered {
            budget: skip.budget().map(|b| b.as_str().to_owned()),
            reason: skip.as_str().to_owned(),
        }
    }
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

/// Who sent a request and when: what the record says beyond the figures.
#[derive(Debug, Clone)]
pub struct Identity<'a> {
    pub id: &'a str,
    pub client_id: Option<&'a str>,
    /// Wall-clock arrival.
    pub start: SystemTime,
    pub model: &'a str,
    pub api: &'a str,
    pub tenant: Option<&'a str>,
    /// Its place in its conversation, when it has one.
    pub turn: Option<&'a Turn>,
    /// Its place in its WebSocket session, when it is a response inside one.
    pub session: Option<InSession<'a>>,
    /// Metered from a packet capture.
    pub captured: bool,
}

impl RequestRecord {
    /// The record of a finished request; `gaps` is its own gap summary (docs/records.md).
    pub fn of(identity: &Identity<'_>, finished: &FinishedRecord, gaps: &GapSummary) -> Self {
        let f = &finished.figures;
        let streaming = finished.streaming;
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        let server = &finished.server;
        let server_record = (!server.is_empty()).then(|| ServerRecord {
            queue_s: secs(server.queue),
            ttft_s: secs(server.ttft),
            prefill_s: secs(server.prefill),
            generation_s: secs(server.generation),
        });
        let ttft_outside_server_s = outside(f.ttft, server.ttft).map(|o| o.duration.as_secs_f64());
        let mut record = RequestRecord {
            v: RECORD_VERSION,
            start: rfc3339_micros(identity.start),
            id: identity.id.to_owned(),
            client_request_id: identity.client_id.map(str::to_owned),
            model: identity.model.to_owned(),
            api: identity.api.to_owned(),
            tenant: identity.tenant.map(str::to_owned),
            conversation: identity.turn.map(|t| t.conversation.to_string()),
            turn: identity.turn.map(|t| t.turn),
            think_s: identity.turn.and_then(|t| t.think).map(|t| t.as_secs_f64()),
            session: identity.session.map(|s| s.id.to_owned()),
            session_response: identity.session.map(|s| s.position),
            input_text_tokens: identity.session.and_then(|s| s.tokens.input_text),
            input_audio_tokens: identity.session.and_then(|s| s.tokens.input_audio),
            output_text_tokens: identity.session.and_then(|s| s.tokens.output_text),
            output_audio_tokens: identity.session.and_then(|s| s.tokens.output_audio),
            status: finished.status.map(|s| s.as_u16()),
            outcome: finished.outcome.as_str().to_owned(),
            stream: streaming,
            e2e_s: f.e2e.as_secs_f64(),
            output_tokens: finished.output_tokens,
            output_tokens_source: finished.token_source.map(|s| s.as_str().to_owned()),
            input_tokens: finished.input_tokens,
            cached_input_tokens: finished.cached_input_tokens,
            reasoning_tokens: finished.reasoning_tokens,
            gaps: gaps.count,
            itl_p50_s: gaps.p50,
            itl_p99_s: gaps.p99,
            goodput: finished.verdict.goodput,
            slo_missed: finished
                .verdict
                .missed
                .iter()
                .map(|k| k.as_str().to_owned())
                .collect(),
            server: server_record,
            ttft_outside_server_s,
            gaps_s: gaps.listed.clone(),
            unmetered: finished.skipped.map(Unmetered::of),
            captured: identity.captured,
            ..RequestRecord::default()
        };
        for figure in Figure::ALL {
            if let Some(field) = record.figure_mut(figure) {
                *field = finished.carried(figure);
            }
        }
        record
    }

    /// The record's value of `figure` (its field: `Row::record_field`).
    pub fn figure(&self, figure: Figure) -> Option<f64> {
        match figure {
            Figure::E2e => Some(self.e2e_s),
            _ => self.figure_ref(figure).copied().flatten(),
        }
    }

    fn figure_ref(&self, figure: Figure) -> Option<&Option<f64>> {
        Some(match figure {
            Figure::Ttft => &self.ttft_s,
            Figure::TimeToFirstAnswer => &self.time_to_first_answer_s,
            Figure::TimeToFirstToolCall => &self.time_to_first_tool_call_s,
            Figure::TimeToResponseHead => &self.time_to_response_head_s,
            Figure::ReasoningTime => &self.reasoning_s,
            Figure::Tpot => &self.tpot_s,
            Figure::Generation => &self.generation_s,
            Figure::OutputTokensPerSecond => &self.output_tokens_per_s,
            Figure::MaxGap => &self.max_gap_s,
            // Every record has one: a field of its own, `e2e_s`.
            Figure::E2e => return None,
        })
    }

    fn figure_mut(&mut self, figure: Figure) -> Option<&mut Option<f64>> {
        Some(match figure {
            Figure::Ttft => &mut self.ttft_s,
            Figure::TimeToFirstAnswer => &mut self.time_to_first_answer_s,
            Figure::TimeToFirstToolCall => &mut self.time_to_first_tool_call_s,
            Figure::TimeToResponseHead => &mut self.time_to_response_head_s,
            Figure::ReasoningTime => &mut self.reasoning_s,
            Figure::Tpot => &mut self.tpot_s,
            Figure::Generation => &mut self.generation_s,
            Figure::OutputTokensPerSecond => &mut self.output_tokens_per_s,
            Figure::MaxGap => &mut self.max_gap_s,
            Figure::E2e => return None,
        })
    }

    /// The figures the SLO ceilings are judged on, read back from the record (the inverse of [`of`]
    /// for them), so `tokentap report` judges a record as the proxy judged the request.
    ///
    /// [`of`]: RequestRecord::of
    pub fn figures(&self) -> Figures {
        let mut figures = Figures::default();
        for figure in Figure::ALL {
            figure.set(&mut figures, self.figure(figure));
        }
        figures
    }

    /// How the request ended, as judging goes. The gap still open when a request broke off is not in
    /// the record, so an ITL ceiling it missed only on that gap shows as met.
    pub fn ending(&self) -> Ending {
        let two_xx = self.status.is_some_and(|s| (200..300).contains(&s));
        Ending {
            streaming: self.stream,
            timed: self.stream || (self.api == Api::Speech.as_str() && two_xx),
            ok: self.outcome == "ok",
            open_gap: None,
        }
    }
}

/// `t` as RFC 3339 in UTC with microseconds (`2026-12-03T09:00:42.123456Z`). A time before 1970
/// (a clock set wrong) is written as the epoch.
pub fn rfc3339_micros(t: SystemTime) -> String {
    const MICROS: &[FormatItem<'_>] =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z");
    OffsetDateTime::from(t.max(UNIX_EPOCH))
        .format(MICROS)
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000000Z".to_owned())
}

/// An RFC 3339 time (`2026-12-03T08:00:00Z`, with a fraction or an offset) or a bare date (midnight
/// UTC) as seconds since the epoch; `None` for anything else.
pub fn parse_rfc3339(text: &str) -> Option<f64> {
    if let Ok(at) = OffsetDateTime::parse(text, &Rfc3339) {
        return Some(at.unix_timestamp() as f64 + f64::from(at.nanosecond()) / 1e9);
    }
    let date = Date::parse(text, format_description!("[year]-[month]-[day]")).ok()?;
    Some(date.midnight().assume_utc().unix_timestamp() as f64)
}

/// A session's record (docs/records.md): a line of the request records with `"record":"session"`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub v: u32,
    /// Always `"session"`: what tells this line from a request's.
    pub record: String,
    /// Wall-clock time of the upstream's `101`.
    pub start: String,
    /// The handshake's request id; each response's record names it in `session`.
    pub id: String,
    /// The `model` label it was counted under.
    pub model: String,
    pub api: String,
    pub outcome: String,
    pub duration_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close_client: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close_upstream: Option<u16>,
    pub responses: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Why the session's messages stopped being read, when they did (its responses from then on are
    /// not metered, and those open then are not counted as requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmetered: Option<Unmetered>,
}

impl SessionRecord {
    /// The record of `ended`, counted under the `model` label.
    pub fn of(ended: &SessionEnded<'_>, model: &str) -> Self {
        SessionRecord {
            v: RECORD_VERSION,
            record: "session".to_owned(),
            start: rfc3339_micros(ended.start),
            id: ended.id.to_owned(),
            model: model.to_owned(),
            api: ended.api.as_str().to_owned(),
            outcome: ended.outcome.as_str().to_owned(),
            duration_s: ended.duration.as_secs_f64(),
            close_client: ended.close_client,
            close_upstream: ended.close_upstream,
            responses: ended.responses,
            input_tokens: ended.input_tokens,
            output_tokens: ended.output_tokens,
            unmetered: ended.unmetered.map(Unmetered::of),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_with_microseconds_in_utc() {
        let at = |secs: u64, micros: u64| {
            rfc3339_micros(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        // `date -u -d @951782400`: the leap day of a year divisible by 400.
        assert_eq!(at(951_782_400, 7), "2000-02-29T00:00:00.000007Z");
        assert_eq!(at(1_796_288_442, 123_456), "2026-12-03T09:00:42.123456Z");
        assert_eq!(at(4_107_542_399, 999_999), "2100-02-28T23:59:59.999999Z");
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000000Z");
        let before = UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(rfc3339_micros(before), "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn a_stream_record_carries_its_figures_tokens_verdict_and_the_servers_timings() {
        use crate::config::{Ceilings, SloKind};
        use crate::record::finished::{conclude, DecoderReport};
        use crate::record::outcome::Outcome;
        use crate::record::server::ServerTimings;
        use crate::record::timeline::Timeline;
        use tokio::time::Instant;

        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut timeline = Timeline::new(t0);
        for at in [100, 150, 200] {
            timeline.on_output(0, t0 + ms(at));
        }
        let report = DecoderReport {
            streaming: true,
            terminal_event: true,
            usage_output_tokens: Some(3),
            input_tokens: Some(7),
            cached_input_tokens: Some(4),
            server: ServerTimings {
                queue: Some(ms(20)),
                ttft: Some(ms(60)),
                ..ServerTimings::default()
            },
            ..DecoderReport::default()
        };
        let ceilings = Ceilings::default().with(SloKind::Ttft, ms(50));
        let ok = Some(http::StatusCode::OK);
        let finished = conclude(
            Some(&report),
            &timeline,
            Outcome::Ok,
            t0 + ms(300),
            ok,
            &ceilings,
        );
        let identity = Identity {
            id: "r1",
            client_id: Some("c1"),
            start: UNIX_EPOCH + Duration::from_secs(1_796_288_442),
            model: "m",
            api: "chat",
            tenant: Some("acme"),
            turn: Some(&Turn {
                conversation: "c-00000000000000ab".into(),
                turn: 3,
                think: Some(Duration::from_millis(1_500)),
            }),
            session: None,
            captured: false,
        };
        let gaps = GapSummary {
            count: 2,
            p50: Some(0.05),
            p99: Some(0.05),
            listed: None,
        };
        let r = RequestRecord::of(&identity, &finished, &gaps);
        assert_eq!(
            (r.v, r.id.as_str(), r.tenant.as_deref()),
            (1, "r1", Some("acme"))
        );
        assert_eq!(r.client_request_id.as_deref(), Some("c1"));
        assert_eq!(r.start, "2026-12-03T09:00:42.000000Z");
        assert_eq!(
            (r.conversation.as_deref(), r.turn, r.think_s),
            (Some("c-00000000000000ab"), Some(3), Some(1.5))
        );
        assert_eq!(
            (r.status, r.outcome.as_str(), r.stream),
            (Some(200), "ok", true)
        );
        assert_eq!((r.e2e_s, r.ttft_s, r.tpot_s), (0.3, Some(0.1), Some(0.1)));
        assert_eq!((r.generation_s, r.max_gap_s), (Some(0.2), Some(0.05)));
        assert_eq!(
            (r.output_tokens, r.input_tokens, r.cached_input_tokens),
            (Some(3), Some(7), Some(4))
        );
        assert_eq!(r.output_tokens_source.as_deref(), Some("usage"));
        assert_eq!((r.gaps, r.itl_p50_s), (2, Some(0.05)));
        assert_eq!(
            (r.goodput, r.slo_missed.clone()),
            (false, vec!["ttft".to_owned()])
        );
        let server = r.server.clone().unwrap_or_default();
        assert_eq!(
            (server.queue_s, server.ttft_s, server.prefill_s),
            (Some(0.02), Some(0.06), None)
        );
        let outside = r.ttft_outside_server_s.unwrap_or_default();
        assert!((outside - 0.04).abs() < 1e-12, "{outside}");
    }

    #[test]
    fn a_record_reads_back_as_written_and_leaves_absent_figures_out() {
        let record = RequestRecord {
            v: RECORD_VERSION,
            id: "r1".into(),
            outcome: "ok".into(),
            ttft_s: Some(0.25),
            slo_missed: vec!["ttft".into()],
            ..RequestRecord::default()
        };
        let line = serde_json::to_string(&record).unwrap_or_default();
        assert!(
            !line.contains("tpot_s") && !line.contains("server"),
            "{line}"
        );
        let back: RequestRecord = serde_json::from_str(&line).unwrap_or_default();
        assert_eq!(back, record);
    }
}
