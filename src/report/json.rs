//! `--format json`: the report as one JSON object (docs/report.md shows its shape). Durations in
//! seconds, rates per second, like the records; a figure no record carried is left out.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::Ceilings;
use crate::report::conversations::ConversationsJson;
use crate::report::input::InputStats;
use crate::report::query::format_rfc3339;
use crate::report::slowest::Slow;
use crate::report::summary::{Limit, Report, Row, Summary, Unit, Verdicts};

/// The `report` field: the shape's version, bumped when a field is removed or redefined.
pub const REPORT_VERSION: u32 = 1;

#[derive(Serialize)]
pub struct Document<'a> {
    pub report: u32,
    #[serde(flatten)]
    pub body: Side<'a>,
}

#[derive(Serialize)]
pub struct CompareDocument<'a> {
    pub report: u32,
    pub before: Side<'a>,
    pub after: Side<'a>,
}

#[derive(Serialize)]
pub struct Side<'a> {
    pub input: &'a InputStats,
    pub records_without_time: u64,
    /// `recorded`: the proxy's verdicts; else the what-if ceilings in seconds.
    pub slo: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<&'static str>,
    pub total: SummaryJson,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<String, SummaryJson>,
    /// `--slowest`: the figure they are ranked by, and the requests, slowest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slowest: Option<SlowestJson>,
    /// The records' conversations, when some records carry one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversations: Option<ConversationsJson>,
}

#[derive(Serialize)]
pub struct SlowestJson {
    pub by: &'static str,
    pub requests: Vec<Slow>,
}

#[derive(Serialize)]
pub struct SummaryJson {
    pub request_count: u64,
    pub start: Option<String>,
    pub end: Option<String>,
    pub duration_s: Option<f64>,
    pub request_throughput: Option<f64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub input_token_throughput: Option<f64>,
    pub output_token_throughput: Option<f64>,
    pub good_request_count: u64,
    /// The share of the requests that met every SLO (0 to 1): what the README's goodput ratio is.
    pub goodput_ratio: Option<f64>,
    pub goodput: Option<f64>,
    pub metrics: BTreeMap<&'static str, Stats>,
    pub requests_with_gaps: u64,
    pub requests_with_every_gap: u64,
    pub attainment: Vec<Attainment>,
    pub outcomes: Vec<OutcomeCount>,
    /// Requests with an output token count, by its source (`floor`: a lower bound, docs/metrics.md).
    pub output_token_sources: Vec<SourceCount>,
}

#[derive(Serialize)]
pub struct SourceCount {
    pub source: String,
    pub count: u64,
}

#[derive(Serialize, Clone, Copy)]
pub struct Stats {
    pub unit: &'static str,
    pub count: u64,
    /// The quantiles are exact (at most 1,000 values), else within the sketch's relative error.
    pub exact: bool,
    pub avg: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
}

#[derive(Serialize)]
pub struct Attainment {
    pub ceiling: String,
    /// The what-if ceiling; absent for recorded verdicts (the records do not carry the ceilings) and
    /// when it differs between models.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_s: Option<f64>,
    #[serde(skip)]
    pub limit: Option<Limit>,
    pub met: u64,
    pub missed: u64,
    pub share: Option<f64>,
}

#[derive(Serialize)]
pub struct OutcomeCount {
    pub outcome: String,
    pub status: String,
    pub count: u64,
}

pub fn stats(summary: &Summary, figure: Row) -> Stats {
    let sketch = summary.sketch(figure);
    Stats {
        unit: match figure.unit() {
            Unit::Seconds => "s",
            Unit::TokensPerSecond => "tokens/s",
            Unit::Tokens => "tokens",
        },
        count: sketch.count(),
        exact: sketch.is_exact(),
        avg: sketch.mean(),
        min: sketch.min(),
        max: sketch.max(),
        p50: sketch.quantile(0.5),
        p90: sketch.quantile(0.9),
        p99: sketch.quantile(0.99),
    }
}

fn per_second(n: u64, duration: Option<f64>) -> Option<f64> {
    duration.filter(|d| *d > 0.0).map(|d| n as f64 / d)
}

/// `summary` with its rates over `duration` (the whole report's span) and the attainment of each of
/// `ceilings` (the same list for every group).
pub fn summary(
    summary: &Summary, ceilings: &[(String, Limit)], duration: Option<f64>,
) -> SummaryJson {
    let metrics = Row::all()
        .filter(|&f| summary.sketch(f).count() > 0)
        .map(|f| (f.tag(), stats(summary, f)))
        .collect();
    let attainment = ceilings
        .iter()
        .cloned()
        .map(|(ceiling, limit)| {
            let missed = summary.missed.get(&ceiling).copied().unwrap_or(0);
            let met = summary.requests - missed;
            let share = (summary.requests > 0).then(|| met as f64 / summary.requests as f64);
            Attainment {
                ceiling,
                limit_s: match limit {
                    Limit::Seconds(s) => Some(s),
                    _ => None,
                },
                limit: Some(limit),
                met,
                missed,
                share,
            }
        })
        .collect();
    let outcomes = summary
        .outcomes
        .iter()
        .map(|((outcome, status), &count)| OutcomeCount {
            outcome: outcome.clone(),
            status: status.clone(),
            count,
        })
        .collect();
    SummaryJson {
        request_count: summary.requests,
        start: summary.first_start.map(format_rfc3339),
        end: summary.last_end.map(format_rfc3339),
        duration_s: summary.duration(),
        request_throughput: per_second(summary.requests, duration),
        input_tokens: summary.input_tokens,
        output_tokens: summary.output_tokens,
        input_token_throughput: per_second(summary.input_tokens, duration),
        output_token_throughput: per_second(summary.output_tokens, duration),
        good_request_count: summary.good,
        goodput_ratio: (summary.requests > 0)
            .then(|| summary.good as f64 / summary.requests as f64),
        goodput: per_second(summary.good, duration),
        metrics,
        requests_with_gaps: summary.requests_with_gaps,
        requests_with_every_gap: summary.requests_with_every_gap,
        attainment,
        outcomes,
        output_token_sources: summary
            .token_sources
            .iter()
            .map(|(source, &count)| SourceCount {
                source: source.clone(),
                count,
            })
            .collect(),
    }
}

pub fn side<'a>(report: &Report, input: &'a InputStats) -> Side<'a> {
    let duration = report.duration();
    let ceilings = report.total.ceilings(&report.verdicts);
    let slo = match &report.verdicts {
        Verdicts::Recorded => serde_json::Value::from("recorded"),
        Verdicts::WhatIf(slo) => {
            let mut shown = limits(&slo.default);
            if !slo.models.is_empty() {
                let models = slo.models.iter();
                let models = models.map(|(m, c)| (m.clone(), serde_json::Value::Object(limits(c))));
                shown.insert("models".into(), models.collect());
            }
            if !slo.tenants.is_empty() {
                let tenants = slo.tenants.iter();
                let tenants =
                    tenants.map(|(t, c)| (t.clone(), serde_json::Value::Object(limits(c))));
                shown.insert("tenants".into(), tenants.collect());
            }
            serde_json::Value::Object(shown)
        }
    };
    Side {
        input,
        records_without_time: report.bad_start,
        slo,
        by: report.by.map(|b| b.as_str()),
        total: summary(&report.total, &ceilings, duration),
        groups: report
            .groups
            .iter()
            .map(|(name, s)| (name.clone(), summary(s, &ceilings, duration)))
            .collect(),
        slowest: (report.slowest.n() > 0).then(|| SlowestJson {
            by: report.slowest.by.as_str(),
            requests: report.slowest.list(),
        }),
        conversations: report.conversations.summary(),
    }
}

/// `{"ttft_s": 0.3, …}`: the ceilings that are set.
fn limits(ceilings: &Ceilings) -> serde_json::Map<String, serde_json::Value> {
    let mut limits = serde_json::Map::new();
    for (kind, ceiling) in ceilings.iter() {
        if let Some(limit) = ceiling {
            limits.insert(format!("{kind}_s"), limit.as_secs_f64().into());
        }
    }
    limits
}
