//! `tokentap report`: per-request records (`request_log:`, [`RequestRecord`]) turned into an
//! aiperf-style summary of real traffic: counts, throughputs, TTFT, ITL, TPOT, E2E and their
//! quantiles, goodput and attainment per SLO ceiling (as recorded, or again with what-if ceilings),
//! outcomes; grouped by model, tenant or API, within a time window, or two record sets compared.
//! docs/report.md is the user's page.
//!
//! A tool beside the proxy, never on its data path: it reads the record schema and the SLO judge of
//! `record`, and the value syntaxes of `config`; nothing in the proxy imports it. Memory is bounded
//! whatever the input: records stream through one at a time into [`sketch::Sketch`]es.
//!
//! [`RequestRecord`]: crate::record::request_record::RequestRecord

pub mod conversations;
pub mod input;
pub mod json;
pub mod query;
pub mod render;
pub mod sketch;
pub mod slowest;
pub mod summary;

use std::io::Write;

use crate::config::Slo;
use input::InputStats;
use query::{By, Window};
use render::Style;
use slowest::Slowest;
use summary::{Report, Verdicts};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Markdown,
    Json,
}

impl Format {
    pub fn parse(text: &str) -> Result<Format, String> {
        match text {
            "table" => Ok(Format::Table),
            "markdown" => Ok(Format::Markdown),
            "json" => Ok(Format::Json),
            _ => Err(format!(
                "--format: invalid format {text:?}: expected table, markdown or json"
            )),
        }
    }
}

/// What `tokentap report` was asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// The record files (`-` is stdin); with `compare`, the "before" set.
    pub files: Vec<String>,
    /// The "after" set of `--compare`; empty for a single report.
    pub compare: Vec<String>,
    pub by: Option<By>,
    pub window: Window,
    pub format: Format,
    /// What-if ceilings (`--slo`, or a config's `slo:`); `None` keeps each record's own verdict.
    pub slo: Option<Slo>,
    /// Fail instead of skipping a malformed line or a record of another version.
    pub strict: bool,
    /// Progress on stderr even when it is not a terminal.
    pub progress: bool,
    /// `--slowest N` (`--slowest-by`): list the N slowest requests; 0 lists none.
    pub slowest: usize,
    pub slowest_by: slowest::SlowBy,
}

fn verdicts(options: &Options) -> Verdicts {
    options
        .slo
        .clone()
        .map_or(Verdicts::Recorded, Verdicts::WhatIf)
}

/// Reads one record set; the warnings go to `warn`.
fn read(
    options: &Options, files: &[String], warn: &mut dyn Write,
) -> Result<(Report, InputStats), String> {
    let mut report = Report::new(verdicts(options), options.by);
    report.slowest = Slowest::new(options.slowest, options.slowest_by);
    let window = options.window;
    let mut progress = input::progress_sink(options.progress);
    let sink = progress.as_mut().map(|p| p.as_mut() as &mut dyn Write);
    let stats = input::read_all(files, sink, |record| {
        report.add(&record, |start| window.contains(start));
    })?;
    let mut warnings = stats.warnings();
    if report.bad_start > 0 {
        warnings.push(format!(
            "{} record(s) skipped: `start` is not an RFC 3339 time",
            report.bad_start
        ));
    }
    if options.strict && !warnings.is_empty() {
        return Err(format!("--strict: {}", warnings.join("; ")));
    }
    for warning in warnings {
        let _ = writeln!(warn, "tokentap report: {warning}");
    }
    Ok((report, stats))
}

/// Runs the report: the text or JSON goes to `out`, warnings to `warn`. An error is a file that
/// cannot be opened, a bad combination of options, or anything skipped under `--strict`.
pub fn run(options: &Options, out: &mut dyn Write, warn: &mut dyn Write) -> Result<(), String> {
    if options.files.is_empty() {
        return Err("no record file given (use - for stdin)".into());
    }
    let stdin = |files: &[String]| files.iter().filter(|f| *f == "-").count();
    if stdin(&options.files) + stdin(&options.compare) > 1 {
        return Err("- (stdin) can be read only once".into());
    }
    let (before, before_stats) = read(options, &options.files, warn)?;
    let text = if options.compare.is_empty() {
        let side = json::side(&before, &before_stats);
        match options.format {
            Format::Json => json_text(&json::Document {
                report: json::REPORT_VERSION,
                body: side,
            })?,
            Format::Table => render::single(&side, Style::Terminal),
            Format::Markdown => render::single(&side, Style::Markdown),
        }
    } else {
        let (after, after_stats) = read(options, &options.compare, warn)?;
        let (b, a) = (
            json::side(&before, &before_stats),
            json::side(&after, &after_stats),
        );
        match options.format {
            Format::Json => json_text(&json::CompareDocument {
                report: json::REPORT_VERSION,
                before: b,
                after: a,
            })?,
            Format::Table => render::compare(&b, &a, Style::Terminal),
            Format::Markdown => render::compare(&b, &a, Style::Markdown),
        }
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing the report: {e}"))
}

fn json_text(value: &impl serde::Serialize) -> Result<String, String> {
    let mut text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    text.push('\n');
    Ok(text)
}
