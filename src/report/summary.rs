//! One set of records summed up as they stream past, in bounded memory: counts and token totals, a
//! [`Sketch`] per figure, goodput and each ceiling's misses, and the outcomes. [`Report`] holds one
//! summary for everything and one per group (`--by`), at most [`MAX_GROUPS`] of them.
//!
//! Which records each figure sees mirrors the proxy's metrics (docs/report.md): TTFT, time to first
//! output token and the gaps from every record that carries them (a cancelled stream's first token
//! counts); request latency, inter token latency (TPOT), tokens/s per user and the longest gap only from
//! requests that ended `ok`, like the E2E and TPOT histograms.

use std::collections::BTreeMap;

use crate::config::{Slo, SloKind};
use crate::record::figure::{self, Figure};
use crate::record::request_record::RequestRecord;
use crate::record::slo::{judge, judged};
use crate::report::conversations::Conversations;
use crate::report::query::{parse_rfc3339, By};
use crate::report::sketch::Sketch;
use crate::report::slowest::{SlowBy, Slowest};

/// Groups kept apart; the records of any further group are summed under [`OVERFLOW`].
pub const MAX_GROUPS: usize = 1_000;
pub const OVERFLOW: &str = "other";
/// A longer group name (tokentap's labels are at most 200 bytes) is summed under [`OVERFLOW`].
pub const MAX_GROUP_NAME: usize = 200;
/// Distinct (outcome, status) pairs and ceiling names kept apart (tokentap writes a few of each; a
/// file that names more is summed under [`OVERFLOW`], so memory stays bounded whatever it holds).
pub const MAX_NAMES: usize = 64;

/// `map[key] += 1`, or `map[overflow] += 1` once the map holds [`MAX_NAMES`] keys.
fn count<K: Ord + Clone>(map: &mut BTreeMap<K, u64>, key: &K, overflow: impl FnOnce() -> K) {
    if let Some(n) = map.get_mut(key) {
        *n += 1;
    } else if map.len() < MAX_NAMES {
        map.insert(key.clone(), 1);
    } else {
        *map.entry(overflow()).or_insert(0) += 1;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    TokensPerSecond,
    Tokens,
}

/// A row of the report: a per-request figure the figure table gives a report row (`record::figure`),
/// or a row of the report's own (the gaps, the token counts). Where a row means what aiperf's does it
/// has aiperf's name (`header`, `tag`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row {
    Figure(Figure),
    /// Every gap of the requests whose records list them (`gaps_s`).
    InterChunk,
    RequestGapP50,
    RequestGapP99,
    Isl,
    Osl,
}

/// The rows that are not figures, in the order the report shows them after the figures.
const OWN_ROWS: [Row; 5] = [
    Row::InterChunk,
    Row::RequestGapP50,
    Row::RequestGapP99,
    Row::Isl,
    Row::Osl,
];

impl Row {
    const COUNT: usize = Figure::COUNT + OWN_ROWS.len();

    /// Every row, in the order the report shows them: the figures with a report row, in the table's
    /// order, then the report's own.
    pub fn all() -> impl Iterator<Item = Row> {
        (Figure::ALL.into_iter())
            .filter(|f| f.row().report.is_some())
            .map(Row::Figure)
            .chain(OWN_ROWS)
    }

    /// The row whose JSON key is `tag`.
    pub fn by_tag(tag: &str) -> Option<Row> {
        Row::all().find(|r| r.tag() == tag)
    }

    fn index(self) -> usize {
        match self {
            Row::Figure(f) => f as usize,
            own => Figure::COUNT + OWN_ROWS.iter().position(|r| *r == own).unwrap_or(0),
        }
    }

    pub fn header(self) -> &'static str {
        match self {
            Row::Figure(f) => f.row().report.as_ref().map_or(f.row().name, |r| r.header),
            Row::InterChunk => "Inter Chunk Latency",
            Row::RequestGapP50 => "Request Median Gap",
            Row::RequestGapP99 => "Request p99 Gap",
            Row::Isl => "Input Sequence Length",
            Row::Osl => "Output Sequence Length",
        }
    }

    pub fn tag(self) -> &'static str {
        match self {
            Row::Figure(f) => f.row().report.as_ref().map_or(f.row().name, |r| r.tag),
            Row::InterChunk => "inter_chunk_latency",
            Row::RequestGapP50 => "request_gap_p50",
            Row::RequestGapP99 => "request_gap_p99",
            Row::Isl => "input_sequence_length",
            Row::Osl => "output_sequence_length",
        }
    }

    pub fn unit(self) -> Unit {
        match self {
            Row::Figure(f) => match f.row().unit {
                figure::Unit::Seconds => Unit::Seconds,
                figure::Unit::TokensPerSecond => Unit::TokensPerSecond,
            },
            Row::Isl | Row::Osl => Unit::Tokens,
            _ => Unit::Seconds,
        }
    }

    /// What the row means, said once below the tables when it is shown.
    pub fn note(self) -> Option<&'static str> {
        match self {
            Row::Figure(f) => f.row().report.as_ref().and_then(|r| r.note),
            Row::InterChunk => Some(
                "Inter Chunk Latency: every gap between two output-bearing chunks (the records' gaps_s), \
                 tokentap's inter_token_latency histogram, aiperf's Inter Chunk Latency.",
            ),
            Row::RequestGapP50 => Some(
                "Request Median/p99 Gap: each request's own gap p50/p99 (itl_p50_s, itl_p99_s) over \
                 requests; not the per-gap distribution, which needs records with every gap.",
            ),
            _ => None,
        }
    }
}

/// How goodput and each ceiling are decided: as the proxy recorded them, or again with other ceilings
/// (`--slo` for every request, or a config's `slo:` with its per-model and per-tenant overrides, as
/// the proxy applies them: a tenant's ceiling over its model's over the default).
#[derive(Debug, Clone, PartialEq)]
pub enum Verdicts {
    Recorded,
    WhatIf(Slo),
}

/// The ceiling a row of attainment is about.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    /// The proxy's verdicts: the records do not carry the ceiling.
    Recorded,
    Seconds(f64),
    /// Different for some models or tenants (a config's `slo.models`, `tenants.slo`).
    PerModel,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub requests: u64,
    /// First start and last end (start + E2E), seconds since the epoch.
    pub first_start: Option<f64>,
    pub last_end: Option<f64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    sketches: [Sketch; Row::COUNT],
    /// Requests with at least one gap, and those of them that carry every gap (`gaps_s`).
    pub requests_with_gaps: u64,
    pub requests_with_every_gap: u64,
    pub good: u64,
    /// Requests that missed each ceiling, by its name.
    pub missed: BTreeMap<String, u64>,
    /// Requests by (outcome, status or `none`).
    pub outcomes: BTreeMap<(String, String), u64>,
    /// Requests with an output token count, by where it came from (`floor`: a lower bound).
    pub token_sources: BTreeMap<String, u64>,
}

impl Summary {
    pub fn sketch(&self, row: Row) -> &Sketch {
        &self.sketches[row.index()]
    }

    fn observe(&mut self, row: Row, value: Option<f64>) {
        if let Some(value) = value {
            self.sketches[row.index()].add(value);
        }
    }

    pub fn duration(&self) -> Option<f64> {
        Some(self.last_end? - self.first_start?)
    }

    /// Adds one record that started at `start` (seconds since the epoch).
    pub fn add(&mut self, record: &RequestRecord, start: f64, verdicts: &Verdicts) {
        self.requests += 1;
        let end = start + record.e2e_s.max(0.0);
        self.first_start = Some(self.first_start.map_or(start, |s| s.min(start)));
        self.last_end = Some(self.last_end.map_or(end, |e| e.max(end)));
        self.input_tokens += record.input_tokens.unwrap_or(0);
        self.output_tokens += record.output_tokens.unwrap_or(0);
        let ok = record.outcome == "ok";
        for figure in Figure::ALL {
            let Some(report) = &figure.row().report else {
                continue;
            };
            if ok || !report.ok_only {
                self.observe(Row::Figure(figure), record.figure(figure));
            }
        }
        if record.gaps > 0 {
            self.requests_with_gaps += 1;
            self.observe(Row::RequestGapP50, record.itl_p50_s);
            self.observe(Row::RequestGapP99, record.itl_p99_s);
            if let Some(gaps) = record
                .gaps_s
                .as_ref()
                .filter(|g| g.len() as u64 == record.gaps)
            {
                self.requests_with_every_gap += 1;
                for &gap in gaps {
                    self.observe(Row::InterChunk, Some(gap));
                }
            }
        }
        self.observe(Row::Isl, record.input_tokens.map(|n| n as f64));
        self.observe(Row::Osl, record.output_tokens.map(|n| n as f64));
        let status = record
            .status
            .map_or_else(|| "none".to_owned(), |s| s.to_string());
        let other = || (OVERFLOW.to_owned(), OVERFLOW.to_owned());
        count(&mut self.outcomes, &(record.outcome.clone(), status), other);
        if let Some(source) = &record.output_tokens_source {
            count(&mut self.token_sources, source, || OVERFLOW.to_owned());
        }
        match verdicts {
            Verdicts::Recorded => {
                self.good += u64::from(record.goodput);
                for kind in &record.slo_missed {
                    count(&mut self.missed, kind, || OVERFLOW.to_owned());
                }
            }
            Verdicts::WhatIf(slo) => {
                let tenant = record.tenant.as_deref();
                let ceilings = &slo.ceilings_for_request(&record.model, tenant);
                let succeeded = ok && record.status.is_some_and(|s| (200..300).contains(&s));
                let verdict = judge(
                    ceilings,
                    &judged(&record.figures(), &record.ending()),
                    succeeded,
                );
                self.good += u64::from(verdict.goodput);
                for kind in verdict.missed {
                    count(&mut self.missed, &kind.as_str().to_owned(), || {
                        OVERFLOW.to_owned()
                    });
                }
            }
        }
    }

    /// The ceilings to show attainment for, in the config's order: the what-if ones, or those the
    /// records name as missed (a configured ceiling no request missed is not in the records). A
    /// report asks its total, and shows the same list for every group.
    pub fn ceilings(&self, verdicts: &Verdicts) -> Vec<(String, Limit)> {
        match verdicts {
            Verdicts::WhatIf(slo) => SloKind::ALL
                .into_iter()
                .filter_map(|k| {
                    let all: Vec<f64> = slo.boundaries(k);
                    let overrides = slo.models.values().chain(slo.tenants.values());
                    let overridden = overrides.into_iter().any(|m| m[k].is_some());
                    let limit = match (slo.default[k], overridden) {
                        (Some(d), false) => Limit::Seconds(d.as_secs_f64()),
                        _ if all.is_empty() => return None,
                        _ => Limit::PerModel,
                    };
                    Some((k.as_str().to_owned(), limit))
                })
                .collect(),
            Verdicts::Recorded => {
                let mut names: Vec<&String> = self.missed.keys().collect();
                let order = |n: &str| SloKind::from_key(n).map(|k| k as usize);
                names.sort_by_key(|n| (order(n).unwrap_or(usize::MAX), n.to_string()));
                names
                    .into_iter()
                    .map(|n| (n.clone(), Limit::Recorded))
                    .collect()
            }
        }
    }
}

/// A whole report: everything, and each group when grouped.
#[derive(Debug, Clone)]
pub struct Report {
    pub verdicts: Verdicts,
    pub by: Option<By>,
    pub total: Summary,
    pub groups: BTreeMap<String, Summary>,
    /// Records whose `start` is not a time (counted apart, in no summary).
    pub bad_start: u64,
    /// `--slowest`: over everything, not per group.
    pub slowest: Slowest,
    /// The records' conversations, over everything.
    pub conversations: Conversations,
}

impl Report {
    pub fn new(verdicts: Verdicts, by: Option<By>) -> Self {
        Report {
            verdicts,
            by,
            total: Summary::default(),
            groups: BTreeMap::new(),
            bad_start: 0,
            slowest: Slowest::new(0, SlowBy::TTFT),
            conversations: Conversations::default(),
        }
    }

    /// Adds `record` when it started inside `keep`'s window.
    pub fn add(&mut self, record: &RequestRecord, keep: impl Fn(f64) -> bool) {
        let Some(start) = parse_rfc3339(&record.start) else {
            self.bad_start += 1;
            return;
        };
        if !keep(start) {
            return;
        }
        self.total.add(record, start, &self.verdicts);
        self.slowest.add(record);
        self.conversations.add(record, start);
        if let Some(by) = self.by {
            let key = by.key(record);
            let full = self.groups.len() >= MAX_GROUPS && !self.groups.contains_key(key);
            let key = if full || key.len() > MAX_GROUP_NAME {
                OVERFLOW
            } else {
                key
            };
            if !self.groups.contains_key(key) {
                self.groups.insert(key.to_owned(), Summary::default());
            }
            if let Some(group) = self.groups.get_mut(key) {
                group.add(record, start, &self.verdicts);
            }
        }
    }

    /// The span every rate is divided by: the whole report's, so the groups' rates add up.
    pub fn duration(&self) -> Option<f64> {
        self.total.duration()
    }
}
