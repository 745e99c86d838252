//! The end of a request as a pure function: from the decoder's report, the timeline, the outcome and the
//! status to a [`FinishedRecord`] holding every figure, the token count and its source, and the SLO
//! verdict. No clock, no metrics, no log: the exchange writes the record out (`tap::exchange`).
//!
//! The rules decided here: which token count is believed ([`output_tokens`]) and which figures exist
//! (the stream figures only for a stream metered to its end). What each ceiling is judged on, a request
//! that broke off included, is `record::slo`'s, which `tokentap report` shares.

use http::StatusCode;
use tokio::time::Instant;

use crate::config::Ceilings;
use crate::govern::{Budget, Spent};
use crate::record::figure::Figure;
use crate::record::outcome::{End, Outcome};
use crate::record::server::ServerTimings;
use crate::record::slo::{judge, judged, Ending, Judged, Verdict};
use crate::record::timeline::{Figures, Timeline};
use crate::record::tokens::{output_tokens, Offered, TokenSource};

/// Why the decoder switched metering off for the rest of a response (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    EventTooLarge,
    MalformedEvent,
    /// A budget of the governor was spent (`src/govern/`): tokentap stopped measuring, not forwarding.
    Unmetered(Budget, Spent),
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::EventTooLarge => "event_too_large",
            SkipReason::MalformedEvent => "malformed_event",
            SkipReason::Unmetered(_, spent) => spent.as_str(),
        }
    }

    /// The budget that was spent, for [`SkipReason::Unmetered`].
    pub fn budget(self) -> Option<Budget> {
        match self {
            SkipReason::Unmetered(budget, _) => Some(budget),
            _ => None,
        }
    }
}

/// What the decoder hands over at the end of the body (`decode::response::ResponseDecoder::finish`): everything
/// recorded from the decoding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecoderReport {
    /// A stream of events (SSE or NDJSON), as opposed to one JSON body or a body of audio.
    pub streaming: bool,
    /// The output was audio (speech): its events are pieces of audio, not tokens, so only the usage
    /// counts tokens.
    pub audio: bool,
    /// Why metering switched off, if it did; the figures below are then not to be trusted.
    pub skipped: Option<SkipReason>,
    /// The server reported an error inside the stream.
    pub error_event: bool,
    /// The API's terminal event passed.
    pub terminal_event: bool,
    /// The server's output tokens (`completion_tokens`, `output_tokens`, `eval_count`, …).
    pub usage_output_tokens: Option<u64>,
    /// The reasoning tokens the usage details report.
    pub reasoning_tokens: Option<u64>,
    /// Output-bearing events that carried reasoning.
    pub reasoning_events: u64,
    /// The server's input tokens.
    pub input_tokens: Option<u64>,
    /// The input tokens the server reports as served from its prefix cache.
    pub cached_input_tokens: Option<u64>,
    /// The server's own timings, where it reports them.
    pub server: ServerTimings,
    /// The tokenizer's count of the streamed output text; only counted for a stream without usage,
    /// the one case where it is used.
    pub tokenizer_count: Option<u64>,
    /// The tokenizer's count of the streamed reasoning text; only counted for a stream that carried
    /// reasoning and whose usage has no reasoning details.
    pub tokenizer_reasoning_count: Option<u64>,
}

/// Everything recorded about a finished request.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedRecord {
    pub outcome: Outcome,
    pub status: Option<StatusCode>,
    /// A stream of events metered to its end: the stream figures (TTFT, TPOT, gaps, tokens/s) apply.
    pub streaming: bool,
    /// Why metering switched off, if it did.
    pub skipped: Option<SkipReason>,
    /// The figures at t_end, with the output tokens below (0 when unknown).
    pub figures: Figures,
    pub output_tokens: Option<u64>,
    pub token_source: Option<TokenSource>,
    pub input_tokens: Option<u64>,
    /// Reasoning tokens: the usage details' count where reported.
    pub reasoning_tokens: Option<u64>,
    /// Input tokens served from the server's prefix cache, as the server reports.
    pub cached_input_tokens: Option<u64>,
    /// The server's own timings, where it reports them.
    pub server: ServerTimings,
    /// What each SLO ceiling was judged on ([`crate::record::slo::judged_figure`]).
    pub judged: Judged,
    pub verdict: Verdict,
}

impl FinishedRecord {
    /// The value of `figure` this request carries (in its record, log line and span): none where its
    /// row says it does not apply (`record::figure`).
    pub fn carried(&self, figure: Figure) -> Option<f64> {
        let applies = (figure.row().carried).holds(self.streaming, self.outcome == Outcome::Ok);
        figure.of(&self.figures).filter(|_| applies)
    }

    /// The `slo` field of the log line: `met`, or why not.
    pub fn slo(&self) -> crate::record::slo::Described<'_> {
        self.verdict.describe(self.outcome.as_str(), self.status)
    }
}

/// When the request ended (t_end), having ended as `end` at `now`: a client that left after the API's
/// terminal event passed had the whole answer when that event passed.
pub fn t_end(end: End, terminal_event_at: Option<Instant>, now: Instant) -> Instant {
    match (end, terminal_event_at) {
        (End::ClientGone, Some(at)) => at,
        _ => now,
    }
}

/// The record of a request that ended at `end` with `outcome`. `report` is the decoder's, `None` when
/// the response was not metered (not 2xx, or an unknown API); `ceilings` are those of its model.
pub fn conclude(
    report: Option<&DecoderReport>, timeline: &Timeline, outcome: Outcome, end: Instant,
    status: Option<StatusCode>, ceilings: &Ceilings,
) -> FinishedRecord {
    let metered = report.filter(|r| r.skipped.is_none());
    let streaming = metered.is_some_and(|r| r.streaming);
    let counted = metered.and_then(|r| {
        let offered = Offered {
            usage: r.usage_output_tokens,
            reasoning: r.reasoning_tokens,
            events: timeline.output_chunks(),
            streaming: r.streaming,
            audio: r.audio,
            parsed: r.reasoning_events > 0 || timeline.called_tool(),
        };
        output_tokens(offered, || r.tokenizer_count)
    });
    let figures = timeline.figures(end, counted.map_or(0, |c| c.0));
    let ending = Ending {
        streaming,
        // A body of audio is no stream, but its first byte is timed (a decoder reports on 2xx only).
        timed: streaming || report.is_some_and(|r| r.audio),
        ok: outcome == Outcome::Ok,
        // The gap still open when the request broke off.
        open_gap: timeline
            .last()
            .map(|last| end.saturating_duration_since(last)),
    };
    let judged = judged(&figures, &ending);
    let succeeded = outcome == Outcome::Ok && status.is_some_and(|s| s.is_success());
    FinishedRecord {
        outcome,
        status,
        streaming,
        skipped: report.and_then(|r| r.skipped),
        figures,
        output_tokens: counted.map(|c| c.0),
        token_source: counted.map(|c| c.1),
        input_tokens: metered.and_then(|r| r.input_tokens),
        reasoning_tokens: metered.and_then(reasoning_tokens),
        cached_input_tokens: metered.and_then(|r| r.cached_input_tokens),
        server: metered.map(|r| r.server).unwrap_or_default(),
        verdict: judge(ceilings, &judged, succeeded),
        judged,
    }
}

/// Reasoning tokens: the usage details' count, else (a stream) the tokenizer's count of the reasoning
/// text, else one per output event that carried reasoning; never below the events that carried
/// reasoning (each carried at least one token: vLLM has reported `reasoning_tokens: 0` for a stream of
/// 17 reasoning chunks); `None` when nothing says anything (no reasoning streamed, no details).
fn reasoning_tokens(report: &DecoderReport) -> Option<u64> {
    let events = if report.streaming {
        report.reasoning_events
    } else {
        0
    };
    let counted = report
        .reasoning_tokens
        .or(report.tokenizer_reasoning_count.filter(|_| events > 0));
    match counted {
        Some(n) => Some(n.max(events)),
        None => (events > 0).then_some(events),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::SloKind;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A stream that arrived at t0 and whose outputs (choice, ms after t0) passed.
    fn timeline(t0: Instant, outputs: &[(u32, u64)]) -> Timeline {
        let mut timeline = Timeline::new(t0);
        for &(choice, at) in outputs {
            timeline.on_output(choice, t0 + ms(at));
        }
        timeline
    }

    fn stream_report(usage: Option<u64>) -> DecoderReport {
        DecoderReport {
            streaming: true,
            terminal_event: true,
            usage_output_tokens: usage,
            input_tokens: Some(7),
            ..DecoderReport::default()
        }
    }

    const OK: Option<StatusCode> = Some(StatusCode::OK);

    #[test]
    fn an_ok_stream_has_every_figure_from_usage_and_is_goodput() {
        let t0 = Instant::now();
        let tl = timeline(t0, &[(0, 100), (0, 150), (0, 200)]);
        let report = stream_report(Some(3));
        let record = conclude(
            Some(&report),
            &tl,
            Outcome::Ok,
            t0 + ms(300),
            OK,
            &Ceilings::default(),
        );
        assert!(record.streaming);
        assert_eq!(record.output_tokens, Some(3));
        assert_eq!(record.token_source, Some(TokenSource::Usage));
        assert_eq!(record.input_tokens, Some(7));
        assert_eq!(record.figures.ttft, Some(ms(100)));
        assert_eq!(record.figures.e2e, ms(300));
        // (300 - 100) / (3 - 1)
        assert_eq!(record.figures.tpot, Some(ms(100)));
        assert_eq!(record.judged[SloKind::Itl], Some(ms(50)));
        assert!(record.verdict.goodput);
        assert_eq!(record.slo().to_string(), "met");
    }

    #[test]
    fn reasoning_then_answer_carries_its_figures_tokens_and_the_server_view_into_the_record() {
        let t0 = Instant::now();
        let mut tl = timeline(t0, &[(0, 100), (0, 400)]);
        tl.on_answer(t0 + ms(400), true);
        tl.on_output(0, t0 + ms(450));
        let server = ServerTimings {
            queue: Some(ms(10)),
            ttft: Some(ms(60)),
            ..ServerTimings::default()
        };
        let report = DecoderReport {
            reasoning_events: 1,
            cached_input_tokens: Some(5),
            server,
            ..stream_report(Some(3))
        };
        let ceilings = Ceilings::default().with(SloKind::TimeToFirstAnswer, ms(300));
        let record = conclude(Some(&report), &tl, Outcome::Ok, t0 + ms(500), OK, &ceilings);
        assert_eq!(record.figures.ttft, Some(ms(100)));
        assert_eq!(record.figures.time_to_first_answer, Some(ms(400)));
        assert_eq!(record.figures.reasoning_time, Some(ms(300)));
        assert_eq!(
            record.reasoning_tokens,
            Some(1),
            "one reasoning chunk, no details"
        );
        assert_eq!(record.cached_input_tokens, Some(5));
        assert_eq!(record.server, server);
        assert_eq!(record.verdict.missed, vec![SloKind::TimeToFirstAnswer]);
        let detailed = DecoderReport {
            reasoning_tokens: Some(40),
            ..report
        };
        let record = conclude(
            Some(&detailed),
            &tl,
            Outcome::Ok,
            t0 + ms(500),
            OK,
            &ceilings,
        );
        assert_eq!(record.reasoning_tokens, Some(40), "the usage details win");
        let tokenized = DecoderReport {
            tokenizer_reasoning_count: Some(7),
            ..report
        };
        let record = conclude(
            Some(&tokenized),
            &tl,
            Outcome::Ok,
            t0 + ms(500),
            OK,
            &ceilings,
        );
        assert_eq!(
            record.reasoning_tokens,
            Some(7),
            "a tokenizer before chunks"
        );
    }

    #[test]
    fn a_body_of_audio_is_judged_on_its_time_to_first_audio_and_has_no_token_count() {
        let t0 = Instant::now();
        let tl = timeline(t0, &[(0, 30)]);
        let report = DecoderReport {
            audio: true,
            ..DecoderReport::default()
        };
        let ceilings = Ceilings::default().with(SloKind::Ttft, ms(20));
        let record = conclude(Some(&report), &tl, Outcome::Ok, t0 + ms(70), OK, &ceilings);
        assert!(!record.streaming);
        assert_eq!(record.figures.ttft, Some(ms(30)));
        assert_eq!((record.output_tokens, record.token_source), (None, None));
        assert_eq!(record.verdict.missed, vec![SloKind::Ttft]);
        // A JSON body's missing TTFT is not judged: it has none to wait for.
        let json = DecoderReport::default();
        let record = conclude(
            Some(&json),
            &tl,
            Outcome::Cancelled,
            t0 + ms(70),
            OK,
            &ceilings,
        );
        assert!(record.verdict.missed.is_empty());
    }

    #[test]
    fn cancelled_while_reasoning_waited_its_e2e_for_the_first_answer() {
        let t0 = Instant::now();
        let tl = timeline(t0, &[(0, 100), (0, 200)]);
        let report = DecoderReport {
            streaming: true,
            reasoning_events: 2,
            ..DecoderReport::default()
        };
        let ceilings = Ceilings::default().with(SloKind::TimeToFirstAnswer, ms(500));
        let end = t0 + ms(900);
        let record = conclude(Some(&report), &tl, Outcome::Cancelled, end, OK, &ceilings);
        assert_eq!(record.figures.time_to_first_answer, None);
        assert_eq!(record.judged[SloKind::TimeToFirstAnswer], Some(ms(900)));
        assert_eq!(record.verdict.missed, vec![SloKind::TimeToFirstAnswer]);
        // Ended ok with reasoning only: no answer to judge, the ceiling is met.
        let record = conclude(Some(&report), &tl, Outcome::Ok, end, OK, &ceilings);
        assert!(record.verdict.missed.is_empty());
    }

    #[test]
    fn usage_below_the_streamed_events_is_corrected() {
        let t0 = Instant::now();
        let tl = timeline(t0, &[(0, 10), (0, 20), (0, 30), (0, 40)]);
        let report = stream_report(Some(2));
        let record = conclude(
            Some(&report),
            &tl,
            Outcome::Ok,
            t0 + ms(40),
            OK,
            &Ceilings::default(),
        );
        assert_eq!(record.output_tokens, Some(4));
        assert_eq!(record.token_source, Some(TokenSource::UsageCorrected));
    }

    #[test]
    fn a_stream_without_usage_takes_the_tokenizer_count_else_the_events() {
        let t0 = Instant::now();
        let tl = timeline(t0, &[(0, 10), (0, 20)]);
        let mut report = stream_report(None);
        report.tokenizer_count = Some(5);
        let end = t0 + ms(20);
        let none = &Ceilings::default();
        let record = conclude(Some(&report), &tl, Outcome::Ok, end, OK, none);
        assert_eq!(record.output_tokens, Some(5));
        assert_eq!(record.token_source, Some(TokenSource::Tokenizer));
        report.tokenizer_count = None;
        let record = conclude(Some(&report), &tl, Outcome::Ok, end, OK, none);
        assert_eq!(record.output_tokens, Some(2));
        assert_eq!(record.token_source, Some(TokenSource::Chunks));
    }

    #[test]
    fn two_choices_share_the_tokens_for_tpot() {
        let t0 = Instant::now();
        let tl = timeline(
            t0,
            &[(0, 100), (1, 110), (0, 200), (1, 210), (0, 300), (1, 310)],
        );
        let report = stream_report(Some(6));
        let record = conclude(
            Some(&report),
            &tl,
            Outcome::Ok,
            t0 + ms(400),
            OK,
            &Ceilings::default(),
        );
        assert_eq!(record.output_tokens, Some(6));
        assert_eq!(record.figures.ttft, Some(ms(100)));
        // (400 - 100) / (6/2 - 1)
        assert_eq!(record.figures.tpot, Some(ms(150)));
        assert_eq!(record.figures.max_gap, Some(ms(100)));
    }

    #[test]
    fn cancelled_before_the_first_token_waited_its_e2e_for_ttft() {
        let t0 = Instant::now();
        let tl = timeline(t0, &[]);
        let report = DecoderReport {
            streaming: true,
            ..DecoderReport::default()
        };
        let ceilings = Ceilings::default()
            .with(SloKind::Ttft, ms(500))
            .with(SloKind::Itl, ms(100));
        let end = t0 + ms(800);
        let record = conclude(Some(&report), &tl, Outcome::Cancelled, end, OK, &ceilings);
        assert_eq!(record.output_tokens, Some(0));
        assert_eq!(record.token_source, Some(TokenSource::Chunks));
        assert_eq!(record.judged[SloKind::Ttft], Some(ms(800)));
        assert_eq!(record.judged[SloKind::Itl], None);
        assert_eq!(record.judged[SloKind::Tpot], None);
        assert_eq!(record.verdict.missed, vec![SloKind::Ttft]);
        assert!(!record.verdict.goodput);
        assert_eq!(record.slo().to_string(), "cancelled;missed:ttft");
    }

    #[test]
    fn a_stream_broken_off_counts_its_open_gap_as_a_lower_bound_of_itl() {
        let t0 = Instant::now();
        let tl = timeline(t0, &[(0, 100), (0, 150)]);
        let report = DecoderReport {
            streaming: true,
            ..DecoderReport::default()
        };
        let ceilings = Ceilings::default()
            .with(SloKind::Ttft, ms(500))
            .with(SloKind::Tpot, ms(1))
            .with(SloKind::Itl, ms(200));
        let end = t0 + ms(1_150);
        let record = conclude(Some(&report), &tl, Outcome::Timeout, end, OK, &ceilings);
        assert_eq!(record.judged[SloKind::Ttft], Some(ms(100)));
        assert_eq!(record.judged[SloKind::Itl], Some(ms(1_000)));
        assert_eq!(
            record.judged[SloKind::Tpot],
            None,
            "no TPOT for a request cut short"
        );
        assert_eq!(record.verdict.missed, vec![SloKind::Itl]);
        assert_eq!(record.slo().to_string(), "timeout;missed:itl");
    }

    #[test]
    fn a_client_gone_after_the_terminal_event_is_recorded_as_the_ok_request_it_was() {
        let t0 = Instant::now();
        let tl = timeline(t0, &[(0, 100), (0, 200)]);
        let report = stream_report(Some(2));
        let (terminal, gone) = (Some(t0 + ms(210)), t0 + ms(5_000));
        let end = t_end(End::ClientGone, terminal, gone);
        assert_eq!(end, t0 + ms(210), "it ended when the terminal event passed");
        assert_eq!(t_end(End::ClientGone, None, gone), gone);
        assert_eq!(t_end(End::Cut, terminal, gone), gone);
        let seen = crate::record::outcome::Seen {
            terminal_event: true,
            ..Default::default()
        };
        let outcome = crate::record::outcome::classify(End::ClientGone, seen);
        assert_eq!(outcome, Outcome::Ok);
        let record = conclude(
            Some(&report),
            &tl,
            Outcome::Ok,
            end,
            OK,
            &Ceilings::default(),
        );
        assert_eq!(record.figures.e2e, ms(210));
        assert_eq!(record.figures.tpot, Some(ms(110)));
        assert!(record.verdict.goodput);
    }

    #[test]
    fn a_not_2xx_answer_is_not_goodput_and_has_no_token_figures() {
        let t0 = Instant::now();
        let tl = timeline(t0, &[]);
        let status = Some(StatusCode::NOT_FOUND);
        let record = conclude(
            None,
            &tl,
            Outcome::Ok,
            t0 + ms(5),
            status,
            &Ceilings::default(),
        );
        assert!(!record.streaming);
        assert_eq!(record.output_tokens, None);
        assert_eq!(record.token_source, None);
        assert_eq!(record.judged[SloKind::Ttft], None);
        assert_eq!(record.judged[SloKind::E2e], Some(ms(5)));
        assert!(!record.verdict.goodput);
        assert_eq!(record.slo().to_string(), "not_2xx");
    }

    #[test]
    fn a_skipped_decoder_gives_no_tokens_and_no_stream_figures() {
        let t0 = Instant::now();
        let tl = timeline(t0, &[(0, 100), (0, 900)]);
        let report = DecoderReport {
            skipped: Some(SkipReason::MalformedEvent),
            ..stream_report(Some(2))
        };
        let ceilings = Ceilings::default().with(SloKind::Itl, ms(100));
        let record = conclude(Some(&report), &tl, Outcome::Ok, t0 + ms(900), OK, &ceilings);
        assert!(!record.streaming);
        assert_eq!(record.skipped, Some(SkipReason::MalformedEvent));
        assert_eq!((record.output_tokens, record.input_tokens), (None, None));
        assert_eq!(record.judged[SloKind::Itl], None);
        assert!(record.verdict.goodput);
    }

    #[test]
    fn a_json_body_takes_its_usage_and_has_only_e2e() {
        let t0 = Instant::now();
        let tl = timeline(t0, &[]);
        let report = DecoderReport {
            usage_output_tokens: Some(12),
            ..DecoderReport::default()
        };
        let ceilings = Ceilings::default().with(SloKind::E2e, ms(100));
        let record = conclude(Some(&report), &tl, Outcome::Ok, t0 + ms(250), OK, &ceilings);
        assert_eq!(record.output_tokens, Some(12));
        assert_eq!(record.token_source, Some(TokenSource::Usage));
        assert_eq!(record.judged[SloKind::Ttft], None);
        assert_eq!(record.verdict.missed, vec![SloKind::E2e]);
        assert_eq!(record.slo().to_string(), "missed:e2e");
    }

    #[test]
    fn reasoning_tokens_are_never_below_the_reasoning_events() {
        // vLLM has reported `reasoning_tokens: 0` for a stream of 17 reasoning chunks.
        let report = DecoderReport {
            reasoning_tokens: Some(0),
            reasoning_events: 17,
            ..stream_report(Some(40))
        };
        let record = conclude(
            Some(&report),
            &timeline(Instant::now(), &[(0, 10), (0, 20)]),
            Outcome::Ok,
            Instant::now() + ms(100),
            Some(StatusCode::OK),
            &Ceilings::default(),
        );
        assert_eq!(record.reasoning_tokens, Some(17));
        // Without usage a reasoning stream's output count is a floor.
        let report = DecoderReport {
            reasoning_events: 1,
            ..stream_report(None)
        };
        let t0 = Instant::now();
        let record = conclude(
            Some(&report),
            &timeline(t0, &[(0, 10), (0, 20)]),
            Outcome::Ok,
            t0 + ms(100),
            Some(StatusCode::OK),
            &Ceilings::default(),
        );
        assert_eq!(record.token_source, Some(TokenSource::Floor));
        assert_eq!(record.output_tokens, Some(2));
    }
}
