//! SLO verdicts (the `slo:` config keys; docs/metrics.md explains goodput): what each ceiling is judged
//! on, which ceilings a finished request missed, and whether it counts as goodput. The proxy
//! (`record::finished`) and `tokentap report` (from a record) both judge here.
//!
//! A ceiling is missed when the measured value is above it (a value equal to the ceiling meets it, matching
//! the histogram's `le` bucket). A ceiling whose figure does not exist for the request (TPOT or ITL with fewer
//! than two tokens, TTFT of a JSON body (a body of audio, speech, has one: its first byte), the time to first answer of a stream that ended
//! `ok` with reasoning only, the time to first tool call of a stream that called none) is met. For a request that failed or was cancelled, a wait still open when
//! it broke off counts with its lower bound (the time already waited), so a ceiling already exceeded is
//! still counted as missed, and such a request is never goodput.

use std::time::Duration;

use crate::config::{ByKind, Ceilings, SloKind};
use crate::record::timeline::Figures;

/// How a request ended, as far as judging it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    /// A stream metered to its end: the stream figures apply.
    pub streaming: bool,
    /// Its first output is timed, so the waits (TTFT, the first answer) apply: a stream metered to its
    /// end, or a 2xx answer to speech (a body of audio, whose first byte is its first output).
    pub timed: bool,
    /// It ended `ok`.
    pub ok: bool,
    /// For a request that did not end `ok`: the gap still open when it broke off, where known.
    pub open_gap: Option<Duration>,
}

/// What each ceiling is judged on, by kind (`None`: does not apply, met).
pub type Judged = ByKind<Option<Duration>>;

/// The figure a ceiling of `kind` is judged on: for a request that did not end `ok`, a wait not yet
/// over counts with the time already waited (its E2E), TPOT not at all, and the largest gap with the
/// one still open. A new SLO kind is an arm here.
pub fn judged_figure(kind: SloKind, figures: &Figures, end: &Ending) -> Option<Duration> {
    let stream = |d: Option<Duration>| d.filter(|_| end.streaming);
    let timed = |d: Option<Duration>| d.filter(|_| end.timed);
    let waited = |d: Option<Duration>| match end.ok {
        true => timed(d),
        false => timed(d.or(Some(figures.e2e))),
    };
    match kind {
        SloKind::Ttft => waited(figures.ttft),
        SloKind::TimeToFirstAnswer => waited(figures.time_to_first_answer),
        // Most requests call no tool, so one that broke off before a call is not taken to have
        // waited for one: only a call that came is judged.
        SloKind::TimeToFirstToolCall => stream(figures.time_to_first_tool_call),
        SloKind::Tpot => stream(figures.tpot.filter(|_| end.ok)),
        SloKind::Itl => stream(figures.max_gap.max(end.open_gap.filter(|_| !end.ok))),
        SloKind::E2e => Some(figures.e2e),
    }
}

/// Every kind's [`judged_figure`].
pub fn judged(figures: &Figures, end: &Ending) -> Judged {
    ByKind::from_fn(|kind| judged_figure(kind, figures, end))
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    pub missed: Vec<SloKind>,
    pub goodput: bool,
}

impl Verdict {
    /// For the log line: `met` for goodput, else why not, joined by `;`: the outcome when it was not
    /// `ok` (`cancelled`, `upstream_error`, `timeout`), `not_2xx` for an answer outside 2xx, and the
    /// ceilings missed (`missed:ttft,itl`). With no ceiling configured, an `ok` 2xx request is `met`.
    pub fn describe<'a>(
        &'a self, outcome: &'a str, status: Option<http::StatusCode>,
    ) -> Described<'a> {
        Described {
            verdict: self,
            outcome,
            status,
        }
    }
}

/// A [`Verdict`] in the log line's words ([`Verdict::describe`]), written where it goes.
pub struct Described<'a> {
    verdict: &'a Verdict,
    outcome: &'a str,
    status: Option<http::StatusCode>,
}

impl std::fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.verdict.goodput {
            return f.write_str("met");
        }
        let mut separator = "";
        if self.outcome != "ok" {
            f.write_str(self.outcome)?;
            separator = ";";
        } else if !self.status.is_some_and(|s| s.is_success()) {
            f.write_str("not_2xx")?;
            separator = ";";
        }
        for (i, kind) in self.verdict.missed.iter().enumerate() {
            f.write_str(if i == 0 { separator } else { "," })?;
            if i == 0 {
                f.write_str("missed:")?;
            }
            f.write_str(kind.as_str())?;
        }
        Ok(())
    }
}

/// Judges a request on what it is [`judged`] on (a figure that is `None` does not apply and meets its
/// ceiling). `succeeded`: outcome ok and a 2xx status.
pub fn judge(ceilings: &Ceilings, judged: &Judged, succeeded: bool) -> Verdict {
    let missed: Vec<SloKind> = SloKind::ALL
        .into_iter()
        .filter(|&kind| match (ceilings[kind], judged[kind]) {
            (Some(ceiling), Some(value)) => value > ceiling,
            _ => false,
        })
        .collect();
    let goodput = succeeded && missed.is_empty();
    Verdict { missed, goodput }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    fn ceilings() -> Ceilings {
        ByKind([ms(500), ms(50), ms(250), ms(10_000), ms(5_000), ms(2_000)])
    }

    /// Judges a stream that ended `ok`: its figures as they are.
    fn judge(ceilings: &Ceilings, figures: &Figures, succeeded: bool) -> Verdict {
        let end = Ending {
            streaming: true,
            timed: true,
            ok: true,
            open_gap: None,
        };
        super::judge(ceilings, &judged(figures, &end), succeeded)
    }

    #[test]
    fn a_slow_first_answer_misses_its_own_ceiling_while_ttft_is_met() {
        let thinking = Figures {
            ttft: ms(200),
            time_to_first_answer: ms(7_000),
            e2e: Duration::from_millis(9_000),
            ..Figures::default()
        };
        let v = judge(&ceilings(), &thinking, true);
        assert_eq!(v.missed, vec![SloKind::TimeToFirstAnswer]);
        assert_eq!(
            v.describe("ok", Some(http::StatusCode::OK)).to_string(),
            "missed:time_to_first_answer"
        );
    }

    #[test]
    fn a_late_tool_call_misses_its_ceiling_and_a_stream_with_none_meets_it() {
        let late = Figures {
            ttft: ms(200),
            time_to_first_answer: ms(200),
            time_to_first_tool_call: ms(2_500),
            e2e: Duration::from_millis(3_000),
            ..Figures::default()
        };
        let v = judge(&ceilings(), &late, true);
        assert_eq!(v.missed, vec![SloKind::TimeToFirstToolCall]);
        assert_eq!(
            v.describe("ok", Some(http::StatusCode::OK)).to_string(),
            "missed:time_to_first_tool_call"
        );
        let none = Figures {
            time_to_first_tool_call: None,
            ..late
        };
        assert!(judge(&ceilings(), &none, true).goodput);
        // A stream cut off before any call, long past the ceiling: not taken to have waited for one.
        let cut = Ending {
            streaming: true,
            timed: true,
            ok: false,
            open_gap: None,
        };
        let judged = judged(&none, &cut);
        assert_eq!(judged[SloKind::TimeToFirstToolCall], None);
        assert_eq!(judged[SloKind::TimeToFirstAnswer], ms(200));
    }

    #[test]
    fn within_every_ceiling_is_goodput_and_equal_counts_as_met() {
        let m = Figures {
            ttft: ms(500),
            tpot: ms(20),
            max_gap: ms(250),
            e2e: Duration::from_millis(900),
            ..Figures::default()
        };
        let v = judge(&ceilings(), &m, true);
        assert_eq!(
            v,
            Verdict {
                missed: vec![],
                goodput: true
            }
        );
        assert_eq!(
            v.describe("ok", Some(http::StatusCode::OK)).to_string(),
            "met"
        );
    }

    #[test]
    fn each_missed_ceiling_is_listed_and_blocks_goodput() {
        let m = Figures {
            ttft: ms(501),
            tpot: ms(20),
            max_gap: ms(900),
            e2e: Duration::from_millis(900),
            ..Figures::default()
        };
        let v = judge(&ceilings(), &m, true);
        assert_eq!(v.missed, vec![SloKind::Ttft, SloKind::Itl]);
        assert!(!v.goodput);
        assert_eq!(
            v.describe("ok", Some(http::StatusCode::OK)).to_string(),
            "missed:ttft,itl"
        );
    }

    #[test]
    fn figures_that_do_not_apply_meet_their_ceiling() {
        let m = Figures {
            ttft: None,
            tpot: None,
            max_gap: None,
            e2e: Duration::from_millis(100),
            ..Figures::default()
        };
        assert!(judge(&ceilings(), &m, true).goodput);
    }

    #[test]
    fn failed_request_is_never_goodput_even_within_ceilings() {
        let v = judge(&ceilings(), &Figures::default(), false);
        assert!(!v.goodput);
    }

    #[test]
    fn the_log_says_why_a_request_is_not_goodput() {
        let within = judge(&Ceilings::default(), &Figures::default(), false);
        assert_eq!(within.describe("cancelled", None).to_string(), "cancelled");
        let not_found = Some(http::StatusCode::NOT_FOUND);
        assert_eq!(within.describe("ok", not_found).to_string(), "not_2xx");
        assert_eq!(
            within.describe("upstream_error", not_found).to_string(),
            "upstream_error"
        );
        let slow = Figures {
            ttft: ms(900),
            ..Figures::default()
        };
        let v = judge(&ceilings(), &slow, false);
        assert_eq!(
            v.describe("timeout", None).to_string(),
            "timeout;missed:ttft"
        );
        // No ceiling configured: an ok 2xx request is met, nothing else is "failed".
        let ok = judge(&Ceilings::default(), &slow, true);
        assert_eq!(
            ok.describe("ok", Some(http::StatusCode::OK)).to_string(),
            "met"
        );
    }

    #[test]
    fn absent_ceiling_is_never_missed() {
        let m = Figures {
            ttft: ms(99_999),
            tpot: ms(99_999),
            max_gap: ms(99_999),
            e2e: Duration::from_millis(99_999),
            ..Figures::default()
        };
        assert!(judge(&Ceilings::default(), &m, true).goodput);
    }
}
