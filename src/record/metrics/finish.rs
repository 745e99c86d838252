//! A finished request, written to the metrics: everything observed once, at t_end (the figures known
//! only then, the counters, the verdict). What is observed as it happens (TTFT, each gap, the time to
//! first answer, the reasoning time) is the tap's (`tap/exchange.rs`), on the same [`Series`].

use std::time::Duration;

use prometheus::Histogram;

use super::family::{self, Apis, Family, Label};
use super::{status_label, Metrics, Series};
use crate::record::conversations::{turn_label, Turn};
use crate::record::finished::FinishedRecord;
use crate::record::outcome::Outcome;
use crate::record::server::outside;

impl Metrics {
    /// Writes `record`, the request's conclusion, under its `series`.
    pub fn finish(&self, series: &Series, record: &FinishedRecord) {
        let figures = &record.figures;
        let ok = record.outcome == Outcome::Ok;
        if let Some(reason) = record.skipped {
            self.count_metering_skipped(series.api, reason.as_str());
        }
        self.count_request(series, status_label(record.status), record.outcome.as_str());
        if let Some(t) = &series.tokens {
            if let Some(n) = record.output_tokens {
                t.output_tokens.inc_by(n);
            }
            if let Some(source) = record.token_source {
                self.count_token_source(series, source.as_str());
            }
            if let Some(n) = record.input_tokens {
                t.input_tokens.inc_by(n);
            }
        }
        if ok {
            series.e2e.observe(figures.e2e.as_secs_f64());
            if let Some(t) = series.tokens.as_ref().filter(|_| record.streaming) {
                observe(&t.generation, figures.generation);
                observe(&t.tpot, figures.tpot);
                observe(&t.max_gap, figures.max_gap);
                if let Some(rate) = figures.output_tokens_per_second {
                    t.tokens_per_second.observe(rate);
                }
            }
        }
        if series.tokens.is_some() {
            self.inside
                .count_tokens(series, record.reasoning_tokens, record.cached_input_tokens);
            if !record.server.is_empty() {
                let ttft = figures.ttft.filter(|_| record.streaming);
                let outside = outside(ttft, record.server.ttft);
                self.inside.observe_server(series, &record.server, outside);
            }
        }
        for &kind in &record.verdict.missed {
            self.count_violation(series, kind);
        }
        if record.verdict.goodput {
            series.goodput.inc();
        }
    }
}

impl Metrics {
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
            self.observe(series, &family::THINK_TIME, think.as_secs_f64());
        }
    }

    /// Observes `value` on the histogram row `family` under `series`' labels: how a per-request family
    /// with no field of its own is written. A row that holds no series for the request's API (a path no
    /// dialect knows) is left alone, as the series bound counts it.
    pub fn observe(&self, series: &Series, family: &'static Family, value: f64) {
        self.observe_at(series, family, None, value);
    }

    /// [`Metrics::observe`] for a row labelled by `turn` too.
    pub(super) fn observe_at(
        &self,
        series: &Series,
        family: &'static Family,
        turn: Option<&str>,
        value: f64,
    ) {
        if let Some(values) = values(series, family, turn) {
            if let Some(h) = self.families.histogram(family) {
                h.with_label_values(&values).observe(value);
            }
        }
    }

    /// Adds `n` to the counter row `family` under `series`' labels.
    pub fn count(&self, series: &Series, family: &'static Family, n: u64) {
        if let Some(values) = values(series, family, None) {
            if let Some(c) = self.families.counter(family) {
                c.with_label_values(&values).inc_by(n);
            }
        }
    }
}

/// The label values of `series` for a row labelled by model, API, (when configured) tenant and `turn`;
/// `None` for a row with other labels, or one that holds no series for the request's API.
fn values<'a>(series: &'a Series, family: &Family, turn: Option<&'a str>) -> Option<Vec<&'a str>> {
    if family.apis == Apis::Known && series.tokens.is_none() {
        return None;
    }
    family
        .labels
        .iter()
        .filter_map(|label| match label {
            Label::Model => Some(Some(&*series.model)),
            Label::Api => Some(Some(series.api.as_str())),
            Label::Tenant => series.tenant.as_deref().map(Some),
            Label::Turn => Some(turn),
            _ => Some(None),
        })
        .collect()
}

fn observe(histogram: &Histogram, value: Option<Duration>) {
    if let Some(value) = value {
        histogram.observe(value.as_secs_f64());
    }
}
