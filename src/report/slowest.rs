//! `--slowest N`: the N requests with the largest value of one figure (TTFT by default), with what
//! identifies them (start, id, model, tenant, and the span when one was exported) and what explains them (prompt length, outcome, the other
//! figures). A min-heap of N entries: memory stays bounded whatever the input size.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};

use serde::Serialize;

use crate::record::figure::Figure;
use crate::record::request_record::RequestRecord;

/// The figure `--slowest` ranks by: one the figure table gives a `--slowest-by` name
/// (`record::figure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowBy(pub Figure);

impl SlowBy {
    pub const TTFT: SlowBy = SlowBy(Figure::Ttft);

    /// The figures `--slowest-by` takes, by name.
    pub fn names() -> impl Iterator<Item = &'static str> {
        ranked().map(|f| f.row().name)
    }

    pub fn parse(text: &str) -> Result<SlowBy, String> {
        match ranked().find(|f| f.row().name == text) {
            Some(figure) => Ok(SlowBy(figure)),
            None => {
                let names: Vec<&str> = SlowBy::names().collect();
                Err(format!(
                    "--slowest-by: invalid figure {text:?}: expected one of {}",
                    names.join(", ")
                ))
            }
        }
    }

    pub fn as_str(self) -> &'static str {
        self.0.row().name
    }

    fn value(self, r: &RequestRecord) -> Option<f64> {
        r.figure(self.0)
    }
}

/// The figures `--slowest` shows and ranks by, in the table's order.
pub fn ranked() -> impl Iterator<Item = Figure> {
    (Figure::ALL.into_iter())
        .filter(|f| f.row().report.as_ref().is_some_and(|r| r.slowest.is_some()))
}

/// One of the slowest requests, as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slow {
    pub start: String,
    pub id: String,
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// The request's span, when one was sampled (`traces:`): where its trace is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    /// The figures of [`ranked`] it has, by their record field (`ttft_s`, …).
    #[serde(flatten)]
    pub figures: BTreeMap<String, f64>,
}

impl Slow {
    /// Its value of `figure`, when it has one.
    pub fn figure(&self, figure: Figure) -> Option<f64> {
        self.figures.get(&figure.row().record_field()).copied()
    }
}

/// A heap entry: ranked by value, then by start and id so that ties keep the earliest requests.
#[derive(Debug, Clone)]
struct Ranked(f64, Slow);

impl Ranked {
    fn key(&self) -> (f64, Reverse<(&str, &str)>) {
        (self.0, Reverse((self.1.start.as_str(), self.1.id.as_str())))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.key(), other.key());
        a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1))
    }
}

/// The `n` slowest requests by `by` seen so far.
#[derive(Debug, Clone)]
pub struct Slowest {
    pub by: SlowBy,
    n: usize,
    heap: BinaryHeap<Reverse<Ranked>>,
}

impl Slowest {
    pub fn new(n: usize, by: SlowBy) -> Self {
        Slowest {
            by,
            n,
            heap: BinaryHeap::with_capacity(n + 1),
        }
    }

    pub fn add(&mut self, r: &RequestRecord) {
        let Some(value) = self.by.value(r).filter(|v| v.is_finite()) else {
            return;
        };
        if self.n == 0 {
            return;
        }
        if self.heap.len() == self.n {
            if let Some(Reverse(least)) = self.heap.peek() {
                if value <= least.0 {
                    return;
                }
            }
        }
        let slow = Slow {
            start: r.start.clone(),
            id: r.id.clone(),
            model: r.model.clone(),
            tenant: r.tenant.clone(),
            outcome: r.outcome.clone(),
            status: r.status,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            figures: ranked()
                .filter_map(|f| Some((f.row().record_field(), r.figure(f)?)))
                .collect(),
            trace_id: r.trace_id.clone(),
            span_id: r.span_id.clone(),
        };
        self.heap.push(Reverse(Ranked(value, slow)));
        if self.heap.len() > self.n {
            self.heap.pop();
        }
    }

    /// How many are kept.
    pub fn n(&self) -> usize {
        self.n
    }

    /// The slowest first.
    pub fn list(&self) -> Vec<Slow> {
        let mut ranked: Vec<&Ranked> = self.heap.iter().map(|Reverse(r)| r).collect();
        ranked.sort_by(|a, b| b.cmp(a));
        ranked.into_iter().map(|r| r.1.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, ttft: Option<f64>) -> RequestRecord {
        RequestRecord {
            id: id.into(),
            start: format!("2026-12-03T08:00:0{id}Z"),
            ttft_s: ttft,
            ..RequestRecord::default()
        }
    }

    #[test]
    fn keeps_the_n_largest_slowest_first_and_ties_keep_the_earliest() {
        let mut slowest = Slowest::new(3, SlowBy::TTFT);
        let values = [0.2, 0.9, 0.1, 0.5, 0.9, 0.3];
        for (i, v) in values.into_iter().enumerate() {
            slowest.add(&record(&i.to_string(), Some(v)));
        }
        slowest.add(&record("9", None));
        let ids: Vec<String> = slowest.list().into_iter().map(|s| s.id).collect();
        assert_eq!(ids, ["1", "4", "3"]);
        assert!(Slowest::new(0, SlowBy(Figure::E2e)).list().is_empty());
    }
}
