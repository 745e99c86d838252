//! `--slowest N`: the N requests with the largest value of one figure (TTFT by default), with what
//! identifies them (start, id, model, tenant) and what explains them (prompt length, outcome, the other
//! figures). A min-heap of N entries: memory stays bounded whatever the input size.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use serde::Serialize;

use crate::record::request_record::RequestRecord;

/// Which figure ranks the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowBy {
    Ttft,
    TimeToFirstAnswer,
    TimeToFirstToolCall,
    MaxGap,
    Tpot,
    E2e,
}

impl SlowBy {
    pub fn parse(text: &str) -> Result<SlowBy, String> {
        match text {
            "ttft" => Ok(SlowBy::Ttft),
            "time_to_first_answer" => Ok(SlowBy::TimeToFirstAnswer),
            "time_to_first_tool_call" => Ok(SlowBy::TimeToFirstToolCall),
            "max_gap" => Ok(SlowBy::MaxGap),
            "tpot" => Ok(SlowBy::Tpot),
            "e2e" => Ok(SlowBy::E2e),
            _ => Err(format!(
                "--slowest-by: invalid figure {text:?}: expected ttft, time_to_first_answer, \
                 time_to_first_tool_call, max_gap, tpot or e2e"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SlowBy::Ttft => "ttft",
            SlowBy::TimeToFirstAnswer => "time_to_first_answer",
            SlowBy::TimeToFirstToolCall => "time_to_first_tool_call",
            SlowBy::MaxGap => "max_gap",
            SlowBy::Tpot => "tpot",
            SlowBy::E2e => "e2e",
        }
    }

    fn value(self, r: &RequestRecord) -> Option<f64> {
        match self {
            SlowBy::Ttft => r.ttft_s,
            SlowBy::TimeToFirstAnswer => r.time_to_first_answer_s,
            SlowBy::TimeToFirstToolCall => r.time_to_first_tool_call_s,
            SlowBy::MaxGap => r.max_gap_s,
            SlowBy::Tpot => r.tpot_s,
            SlowBy::E2e => Some(r.e2e_s),
        }
    }
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_first_answer_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_first_tool_call_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_gap_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_s: Option<f64>,
    pub e2e_s: f64,
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
            ttft_s: r.ttft_s,
            time_to_first_answer_s: r.time_to_first_answer_s,
            time_to_first_tool_call_s: r.time_to_first_tool_call_s,
            max_gap_s: r.max_gap_s,
            tpot_s: r.tpot_s,
            e2e_s: r.e2e_s,
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
        let mut slowest = Slowest::new(3, SlowBy::Ttft);
        let values = [0.2, 0.9, 0.1, 0.5, 0.9, 0.3];
        for (i, v) in values.into_iter().enumerate() {
            slowest.add(&record(&i.to_string(), Some(v)));
        }
        slowest.add(&record("9", None));
        let ids: Vec<String> = slowest.list().into_iter().map(|s| s.id).collect();
        assert_eq!(ids, ["1", "4", "3"]);
        assert!(Slowest::new(0, SlowBy::E2e).list().is_empty());
    }
}
