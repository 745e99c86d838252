//! Every per-request figure, declared once, as a row: its name, unit, the SLO kind judged on it, when a
//! request carries it, when its histogram observes it and how `tokentap report` shows it. The
//! timeline computes the values ([`Figures`], `timeline.rs`); every sink reads them through this table:
//! the metrics (`metrics/finish.rs` observes each row's family), the log line and the request record
//! (`emit/`, `request_record.rs`: `ttft_ms=`, `ttft_s`), the report's rows and `--slowest-by`
//! (`report/`), the live page's histograms (`live/`). Adding a figure is a field and its formula in
//! `timeline.rs`, a row here (and its arm in [`Figure::of`]), its record field in `request_record.rs`,
//! and, when it has a histogram, its family row and its arm of `family::of_figure` (`metrics/family.rs`).

use std::time::Duration;

use crate::config::SloKind;
use crate::record::timeline::Figures;

/// A per-request figure, in the order every sink lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Figure {
    Ttft,
    TimeToFirstAnswer,
    TimeToFirstToolCall,
    ReasoningTime,
    MaxGap,
    Tpot,
    E2e,
    Generation,
    OutputTokensPerSecond,
    TimeToResponseHead,
}

/// What a figure counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A duration, in seconds (milliseconds on the log line).
    Seconds,
    /// Output tokens per second.
    TokensPerSecond,
}

/// Which finished requests carry a figure, in their record, log line and span, or in its histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Whenever it was measured.
    Measured,
    /// A stream metered to its end (the stream figures: a JSON body or a stream whose metering switched
    /// off has none).
    Stream,
    /// A stream metered to its end that ended `ok`: a cancelled or broken stream's generation time,
    /// TPOT and longest gap describe the part it got, not a whole answer.
    OkStream,
    /// Every request that ended `ok`.
    Ok,
    /// Observed as it happens, in the stream (the waits: TTFT, the first answer, the first tool call,
    /// the reasoning time), so never again at the end.
    AsItHappens,
}

/// One figure's row.
#[derive(Debug)]
pub struct Row {
    pub figure: Figure,
    /// The figure's name: the record's field is `{name}_s` (seconds) or `{name}` (tokens/s), the log
    /// line's `{name}_ms` or `{name}`.
    pub name: &'static str,
    pub unit: Unit,
    /// The ceiling judged on it (`record::slo` says exactly how).
    pub slo: Option<SloKind>,
    /// When the record, the log line and a span carry it.
    pub carried: When,
    /// When a request is observed into its histogram (`metrics::family::of_figure` names it), if it
    /// has one.
    pub histogram: Option<When>,
    /// `tokentap report`'s row: its header and its key in the JSON and in `--slowest-by`, and whether
    /// only `ok` requests count in it.
    pub report: Option<Report>,
    /// The live page's chart of it: its key (in `/api/v1/live`) and its title.
    pub live: Option<(&'static str, &'static str)>,
}

/// How `tokentap report` shows a figure.
#[derive(Debug, PartialEq, Eq)]
pub struct Report {
    pub header: &'static str,
    pub tag: &'static str,
    /// The row sums only `ok` requests (a cancelled request's E2E or TPOT is not a whole answer's).
    pub ok_only: bool,
    /// `--slowest-by NAME` takes it, by the row's name (the waits and the totals: what a user asks
    /// "which were slowest" about); the `--slowest` table's column is `{short} ms`.
    pub slowest: Option<&'static str>,
    /// What the row means, said once below the report's tables when it is shown.
    pub note: Option<&'static str>,
}

impl Figure {
    pub const ALL: [Figure; 10] = [
        Figure::Ttft,
        Figure::TimeToFirstAnswer,
        Figure::TimeToFirstToolCall,
        Figure::ReasoningTime,
        Figure::MaxGap,
        Figure::Tpot,
        Figure::E2e,
        Figure::Generation,
        Figure::OutputTokensPerSecond,
        Figure::TimeToResponseHead,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn row(self) -> &'static Row {
        &TABLE[self as usize]
    }

    /// Its value in `figures`, in its unit (seconds, or tokens per second).
    pub fn of(self, figures: &Figures) -> Option<f64> {
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        match self {
            Figure::Ttft => secs(figures.ttft),
            Figure::TimeToFirstAnswer => secs(figures.time_to_first_answer),
            Figure::TimeToFirstToolCall => secs(figures.time_to_first_tool_call),
            Figure::ReasoningTime => secs(figures.reasoning_time),
            Figure::Tpot => secs(figures.tpot),
            Figure::Generation => secs(figures.generation),
            Figure::OutputTokensPerSecond => figures.output_tokens_per_second,
            Figure::MaxGap => secs(figures.max_gap),
            Figure::E2e => Some(figures.e2e.as_secs_f64()),
            Figure::TimeToResponseHead => secs(figures.time_to_response_head),
        }
    }

    /// Sets its value in `figures` (the inverse of [`Figure::of`], for a figure read back from a record).
    pub fn set(self, figures: &mut Figures, value: Option<f64>) {
        let secs = value.and_then(|v| Duration::try_from_secs_f64(v).ok());
        match self {
            Figure::Ttft => figures.ttft = secs,
            Figure::TimeToFirstAnswer => figures.time_to_first_answer = secs,
            Figure::TimeToFirstToolCall => figures.time_to_first_tool_call = secs,
            Figure::ReasoningTime => figures.reasoning_time = secs,
            Figure::Tpot => figures.tpot = secs,
            Figure::Generation => figures.generation = secs,
            Figure::OutputTokensPerSecond => figures.output_tokens_per_second = value,
            Figure::MaxGap => figures.max_gap = secs,
            Figure::E2e => figures.e2e = secs.unwrap_or_default(),
            Figure::TimeToResponseHead => figures.time_to_response_head = secs,
        }
    }

    /// The figure the SLO ceiling of `kind` is judged on.
    pub fn judged_for(kind: SloKind) -> Figure {
        match kind {
            SloKind::Ttft => Figure::Ttft,
            SloKind::Tpot => Figure::Tpot,
            SloKind::Itl => Figure::MaxGap,
            SloKind::E2e => Figure::E2e,
            SloKind::TimeToFirstAnswer => Figure::TimeToFirstAnswer,
            SloKind::TimeToFirstToolCall => Figure::TimeToFirstToolCall,
        }
    }

    /// The figure `tokentap report` knows by `tag` (its JSON key, `--slowest-by`).
    pub fn by_tag(tag: &str) -> Option<Figure> {
        Figure::ALL
            .into_iter()
            .find(|f| f.row().report.as_ref().is_some_and(|r| r.tag == tag))
    }
}

impl Row {
    /// The request record's field.
    pub fn record_field(&self) -> String {
        match self.unit {
            Unit::Seconds => format!("{}_s", self.name),
            Unit::TokensPerSecond => self.name.to_owned(),
        }
    }

    /// The log line's field.
    pub fn log_field(&self) -> String {
        match self.unit {
            Unit::Seconds => format!("{}_ms", self.name),
            Unit::TokensPerSecond => self.name.to_owned(),
        }
    }
}

impl When {
    /// Whether a finished request that was a stream metered to its end (`streaming`) and ended `ok`
    /// carries a figure it has.
    pub fn holds(self, streaming: bool, ok: bool) -> bool {
        match self {
            When::Measured => true,
            When::Stream => streaming,
            When::OkStream => streaming && ok,
            When::Ok => ok,
            When::AsItHappens => false,
        }
    }
}

const fn row(
    figure: Figure, name: &'static str, unit: Unit, slo: Option<SloKind>, carried: When,
    histogram: Option<When>,
    (report, live): (Option<Report>, Option<(&'static str, &'static str)>),
) -> Row {
    Row {
        figure,
        name,
        unit,
        slo,
        carried,
        histogram,
        report,
        live,
    }
}

const fn report(
    (header, tag): (&'static str, &'static str), ok_only: bool, slowest: Option<&'static str>,
    note: Option<&'static str>,
) -> Option<Report> {
    Some(Report {
        header,
        tag,
        ok_only,
        slowest,
        note,
    })
}

use Unit::{Seconds, TokensPerSecond};
use When::{AsItHappens, Measured, Ok, OkStream, Stream};

/// The rows, in [`Figure::ALL`]'s order.
pub const ROWS: [Row; Figure::COUNT] = [
    row(
        Figure::Ttft,
        "ttft",
        Seconds,
        Some(SloKind::Ttft),
        Measured,
        Some(AsItHappens),
        (
            report(
                ("Time to First Token", "time_to_first_token"),
                false,
                Some("TTFT"),
                None,
            ),
            Some(("ttft", "TTFT")),
        ),
    ),
    row(
        Figure::TimeToFirstAnswer,
        "time_to_first_answer",
        Seconds,
        Some(SloKind::TimeToFirstAnswer),
        Measured,
        Some(AsItHappens),
        (
            report(
                ("Time to First Output Token", "time_to_first_output_token"),
                false,
                Some("answer"),
                Some(
                    "Time to First Output Token: to the first answer output, not reasoning; tokentap's \
                     time_to_first_answer.",
                ),
            ),
            Some(("ttfa", "Time to first answer")),
        ),
    ),
    row(
        Figure::TimeToFirstToolCall,
        "time_to_first_tool_call",
        Seconds,
        Some(SloKind::TimeToFirstToolCall),
        Stream,
        Some(AsItHappens),
        (
            report(
                ("Time to First Tool Call", "time_to_first_tool_call"),
                false,
                Some("tool call"),
                Some(
                    "Time to First Tool Call: to the first chunk that starts a tool call, over the requests \
                     that called one (time_to_first_tool_call_s); how long an agent waits before it can act.",
                ),
            ),
            Some(("tool_call", "Time to first tool call")),
        ),
    ),
    row(
        Figure::ReasoningTime,
        "reasoning",
        Seconds,
        None,
        Measured,
        Some(AsItHappens),
        (
            None,
            None,
        ),
    ),
    row(
        Figure::MaxGap,
        "max_gap",
        Seconds,
        Some(SloKind::Itl),
        Stream,
        Some(OkStream),
        (
            report(
                ("Longest Gap", "longest_gap"),
                true,
                Some("max gap"),
                Some("Longest Gap: each request's largest gap, what an itl ceiling is judged on."),
            ),
            None,
        ),
    ),
    row(
        Figure::Tpot,
        "tpot",
        Seconds,
        Some(SloKind::Tpot),
        Stream,
        Some(OkStream),
        (
            report(
                ("Inter Token Latency", "inter_token_latency"),
                true,
                Some("TPOT"),
                Some(
                    "Inter Token Latency: per request, (E2E − TTFT)/(output tokens − 1), aiperf's ITL; \
                     tokentap's TPOT (time_per_output_token).",
                ),
            ),
            Some(("tpot", "TPOT")),
        ),
    ),
    row(
        Figure::E2e,
        "e2e",
        Seconds,
        Some(SloKind::E2e),
        Measured,
        Some(Ok),
        (
            report(
                ("Request Latency", "request_latency"),
                true,
                Some("E2E"),
                None,
            ),
            Some(("e2e", "E2E")),
        ),
    ),
    row(
        Figure::Generation,
        "generation",
        Seconds,
        None,
        Stream,
        Some(OkStream),
        (
            None,
            None,
        ),
    ),
    row(
        Figure::OutputTokensPerSecond,
        "output_tokens_per_s",
        TokensPerSecond,
        None,
        Stream,
        Some(OkStream),
        (
            report(
                (
                    "Output Token Throughput Per User",
                    "output_token_throughput_per_user",
                ),
                true,
                None,
                None,
            ),
            None,
        ),
    ),
    row(
        Figure::TimeToResponseHead,
        "time_to_response_head",
        Seconds,
        None,
        Measured,
        Some(Measured),
        (
            report(
                ("Time to Response Head", "time_to_response_head"),
                false,
                None,
                Some(
                    "Time to Response Head: to the upstream's status and headers, every request it \
                     answered (time_to_response_head_s); a non-streamed answer's whole wait, a stream's \
                     wait before the server committed to it.",
                ),
            ),
            None,
        ),
    ),
];

/// [`ROWS`] at one place, for the references [`Figure::row`] hands out.
static TABLE: [Row; Figure::COUNT] = ROWS;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rows_are_in_the_order_of_all_and_each_slo_kind_has_its_figure() {
        for (i, figure) in Figure::ALL.into_iter().enumerate() {
            assert_eq!(figure as usize, i);
            assert_eq!(ROWS[i].figure, figure);
        }
        for kind in SloKind::ALL {
            assert_eq!(Figure::judged_for(kind).row().slo, Some(kind));
        }
        let names: std::collections::HashSet<_> = ROWS.iter().map(|r| r.name).collect();
        assert_eq!(names.len(), Figure::COUNT, "every name once");
    }
}
