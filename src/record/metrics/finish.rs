//! A finished request, written to the metrics: everything observed once, at t_end (the figures known
//! only then, the counters, the verdict). The figures come from the figure table (`record::figure`):
//! each row's histogram is observed when its row says a request carries it. What is observed as it
//! happens (TTFT, each gap, the first answer, the reasoning time, the first tool call) is the meter's
//! (`record/meter.rs`), on the same [`Series`].

use std::sync::Arc;
use std::time::SystemTime;

use super::family::{self, Family};
use prometheus::IntCounterVec;

use super::exemplars::Exemplar;
use super::rebucket::Rebucketable;
use super::{status_label, Metrics, Series};
use crate::record::conversations::{turn_label, Turn};
use crate::record::figure::{Figure, When};
use crate::record::finished::{FinishedRecord, SkipReason};
use crate::record::outcome::Outcome;
use crate::record::server::outside;

impl Metrics {
    /// Writes `record`, the request's conclusion, under its `series`.
    pub fn finish(&self, series: &Series, record: &FinishedRecord) {
        let ok = record.outcome == Outcome::Ok;
        match record.skipped {
            Some(SkipReason::Unmetered(budget, spent)) => {
                self.budgets.count_unmetered(budget, spent)
            }
            Some(reason) => self.count_metering_skipped(series.api, reason.as_str()),
            None => {}
        }
        self.count_request(series, status_label(record.status), record.outcome.as_str());
        for figure in Figure::ALL {
            let Some(when) = figure.row().histogram else {
                continue;
            };
            if when == When::AsItHappens || !when.holds(record.streaming, ok) {
                continue;
            }
            if let Some(value) = figure.of(&record.figures) {
                series.observe_once(self, figure, value);
            }
        }
        if series.known() {
            if let Some(n) = record.output_tokens {
                count_on(&self.output_tokens, &family::OUTPUT_TOKENS, series, n);
            }
            if let Some(source) = record.token_source {
                self.count_token_source(series, source.as_str());
            }
            if let Some(n) = record.input_tokens {
                count_on(&self.input_tokens, &family::INPUT_TOKENS, series, n);
            }
            self.inside
                .count_tokens(series, record.reasoning_tokens, record.cached_input_tokens);
            if !record.server.is_empty() {
                let ttft = record.figures.ttft.filter(|_| record.streaming);
                let outside = outside(ttft, record.server.ttft);
                self.inside.observe_server(series, &record.server, outside);
            }
        }
        for &kind in &record.verdict.missed {
            self.count_violation(series, kind);
        }
        if record.verdict.goodput {
            count_on(&self.goodput, &family::GOODPUT, series, 1);
        }
    }

    /// A request whose span was exported (`trace_id`, `span_id`), decided at its end, `at`: its
    /// exemplar on the bucket of each value it observed into a family of `family::EXEMPLARS` (ITL's:
    /// its longest gap, one of the gaps it observed there).
    pub fn exemplify(
        &self, series: &Series, record: &FinishedRecord, span: ([u8; 16], [u8; 8]),
        request_id: &str, at: SystemTime,
    ) {
        let ok = record.outcome == Outcome::Ok;
        let request_id: Arc<str> = Arc::from(request_id);
        for (family, figure) in family::EXEMPLARS {
            let observed = match figure.row().histogram {
                _ if family.name == family::ITL.name => true,
                Some(When::AsItHappens) => true,
                Some(when) => when.holds(record.streaming, ok),
                None => false,
            };
            let value = figure.of(&record.figures).filter(|_| observed);
            let values = series.labels(None).of(family);
            if let (Some(value), Some(values), Some(h)) = (value, values, self.exemplified(family))
            {
                let exemplar = Exemplar {
                    trace_id: span.0,
                    span_id: span.1,
                    request_id: request_id.clone(),
                    value,
                    at,
                };
                h.exemplify(&values, exemplar);
            }
        }
    }

    /// The registered family of a row of `family::EXEMPLARS`.
    pub(super) fn exemplified(&self, row: &Family) -> Option<&Rebucketable> {
        if row.name == family::ITL.name {
            return Some(&self.itl);
        }
        let figure = Figure::ALL
            .into_iter()
            .find(|f| family::of_figure(*f).name == row.name)?;
        self.figure_histograms[figure as usize].as_ref()
    }

    /// Writes a request's place in its conversation: its TTFT and prompt by turn, the think time
    /// before it.
    pub fn finish_turn(&self, series: &Series, turn: &Turn, record: &FinishedRecord) {
        let position = Some(turn_label(turn.turn));
        if let Some(ttft) = record.figures.ttft.filter(|_| record.streaming) {
            self.observe_at(series, &family::TURN_TTFT, position, ttft.as_secs_f64());
        }
        if let Some(n) = record.input_tokens {
            self.observe_at(series, &family::TURN_INPUT_TOKENS, position, n as f64);
        }
        if let Some(think) = turn.think {
            self.observe_at(series, &family::THINK_TIME, None, think.as_secs_f64());
        }
    }

    /// Observes `value` on the histogram row `family` under `series`' labels (and `turn`'s, for a row
    /// labelled by it): how a family that is not a figure's is written. A row that holds no series for
    /// the request's API (a path no dialect knows) is left alone, as the series bound counts it.
    pub(super) fn observe_at(
        &self, series: &Series, family: &'static Family, turn: Option<&str>, value: f64,
    ) {
        if let Some(values) = series.labels(turn).of(family) {
            if let Some(h) = self.families.histogram(family) {
                h.with_label_values(&values).observe(value);
            }
        }
    }
}

/// Adds `n` to `vec`, the counter row `family`, under `series`' labels.
pub(super) fn count_on(vec: &IntCounterVec, family: &Family, series: &Series, n: u64) {
    if let Some(values) = series.labels(None).of(family) {
        vec.with_label_values(&values).inc_by(n);
    }
}
