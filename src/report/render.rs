//! The report as text: a terminal table (columns padded with spaces) or Markdown, one or two record
//! sets (`--compare`: before, after and the change). Everything is drawn from [`SummaryJson`], so the
//! text and `--format json` can never disagree.
//!
//! A record file is input like any other: a model name, tenant or id in it may hold escape sequences
//! that set a terminal's title or clear it, or line separators. Every such value passes through
//! [`printable`] before it is printed, and `|` is escaped in Markdown cells.

use std::fmt::Write as _;

use crate::record::conversations::TURN_LABELS;
use crate::record::figure::Figure;
use crate::report::conversations::ConversationsJson;
use crate::report::json::{Side, SlowestJson, Stats, SummaryJson};
use crate::report::query::NO_GROUP;
use crate::report::sketch::{EXACT_UP_TO, RELATIVE_ERROR};
use crate::report::slowest::ranked;
use crate::report::summary::{Limit, Row, Unit, OVERFLOW};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Terminal,
    Markdown,
}

struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Leading columns of text, aligned left; the numbers after them align right.
    left: usize,
}

impl Table {
    fn new(head: &[&str]) -> Self {
        let head = head.iter().map(|h| h.to_string()).collect();
        Table {
            head,
            rows: Vec::new(),
            left: 1,
        }
    }

    fn write(&self, style: Style, out: &mut String) {
        if self.rows.is_empty() {
            return;
        }
        let cell = |text: &String| -> String {
            let text = printable(text);
            match style {
                Style::Markdown => text.replace('|', "\\|"),
                Style::Terminal => text.into_owned(),
            }
        };
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| r.iter().map(cell).collect())
            .collect();
        let columns = self.head.len();
        // A Markdown delimiter cell needs a dash beside its colon.
        let least = if style == Style::Markdown { 3 } else { 1 };
        let mut widths: Vec<usize> = self
            .head
            .iter()
            .map(|h| h.chars().count().max(least))
            .collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String], out: &mut String| {
            let mut text = String::new();
            for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
                let pad = " ".repeat(width - cell.chars().count());
                let cell = if i < self.left {
                    format!("{cell}{pad}")
                } else {
                    format!("{pad}{cell}")
                };
                match style {
                    Style::Markdown => text.push_str(&format!("| {cell} ")),
                    Style::Terminal if i == 0 => text.push_str(&cell),
                    Style::Terminal => text.push_str(&format!("  {cell}")),
                }
            }
            if style == Style::Markdown {
                text.push('|');
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&self.head, out);
        let rule: Vec<String> = (0..columns)
            .map(|i| match (style, i) {
                (Style::Markdown, i) if i < self.left => "-".repeat(widths[i]),
                (Style::Markdown, _) => format!("{}:", "-".repeat(widths[i] - 1)),
                (Style::Terminal, _) => "-".repeat(widths[i]),
            })
            .collect();
        line(&rule, out);
        for row in &rows {
            line(row, out);
        }
        out.push('\n');
    }
}

/// `1234.5` → `1,234.50`.
fn number(value: f64, decimals: usize) -> String {
    let text = format!("{:.*}", decimals, value.abs());
    let (int, frac) = text
        .split_once('.')
        .map_or((text.as_str(), ""), |(i, f)| (i, f));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if value < 0.0 && text.chars().any(|c| c.is_ascii_digit() && c != '0') {
        "-"
    } else {
        ""
    };
    match frac {
        "" => format!("{sign}{grouped}"),
        _ => format!("{sign}{grouped}.{frac}"),
    }
}

fn label(figure: Row) -> String {
    let unit = match figure.unit() {
        Unit::Seconds => "ms",
        Unit::TokensPerSecond => "tokens/s",
        Unit::Tokens => "tokens",
    };
    format!("{} ({unit})", figure.header())
}

/// A figure's value as shown: milliseconds, tokens/s, or whole tokens for a token-count quantile.
fn shown(figure: Row, value: Option<f64>, quantile: bool) -> String {
    match (value, figure.unit()) {
        (None, _) => "-".into(),
        (Some(v), Unit::Seconds) => number(v * 1000.0, 2),
        (Some(v), Unit::Tokens) if quantile => number(v.round(), 0),
        (Some(v), _) => number(v, 2),
    }
}

/// A quantile from the sketch rather than the kept values is marked `~`.
fn approx(stats: &Stats, cell: String) -> String {
    if stats.exact {
        cell
    } else {
        format!("~{cell}")
    }
}

fn opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".into(), |v| number(v, decimals))
}

/// The figures shown for `s`: per-gap rows when the records carry gaps, the per-request gap
/// quantiles only where some requests were recorded without every gap.
fn figures_shown(s: &SummaryJson) -> Vec<Row> {
    let partial_gaps = s.requests_with_every_gap < s.requests_with_gaps;
    Row::all()
        .filter(|f| s.metrics.contains_key(f.tag()))
        .filter(|f| partial_gaps || !matches!(f, Row::RequestGapP50 | Row::RequestGapP99))
        .collect()
}

pub use crate::logging::printable::printable;

fn title(name: &str, style: Style, out: &mut String) {
    let name = &printable(name);
    match style {
        Style::Markdown => {
            let _ = writeln!(out, "### {name}\n");
        }
        Style::Terminal => {
            let _ = writeln!(out, "{name}\n{}", "=".repeat(name.chars().count()));
        }
    }
}

/// The groups' names in the order a report shows them: turns by position (`1`, `2`, `3`, `4-7`, `8-15`,
/// `16+`), any other grouping by name; records without a group (`-`) and the overflow after them.
fn ordered<'a>(by: Option<&str>, names: impl IntoIterator<Item = &'a String>) -> Vec<&'a String> {
    let mut names: Vec<&String> = names.into_iter().collect();
    let position = |name: &str| match by {
        Some("turn") => TURN_LABELS.iter().position(|l| *l == name),
        _ => None,
    };
    names.sort_by_key(|n| {
        let last = [NO_GROUP, OVERFLOW].iter().position(|l| l == n);
        (last, position(n), n.as_str())
    });
    names
}

fn group_name(side: &Side, group: Option<&str>) -> String {
    match (side.by, group) {
        (Some(by), Some(g)) => format!("{by} = {g}"),
        _ => "All requests".to_owned(),
    }
}

fn span(s: &SummaryJson) -> String {
    match (&s.start, &s.end) {
        (Some(a), Some(b)) => format!("{} → {}", printable(a), printable(b)),
        _ => "no records".into(),
    }
}

fn summary(s: &SummaryJson, style: Style, out: &mut String) {
    let _ = writeln!(out, "{}\n", span(s));
    let mut figures = Table::new(&["Metric", "avg", "min", "max", "p99", "p90", "p50", "n"]);
    for figure in figures_shown(s) {
        let Some(st) = s.metrics.get(figure.tag()) else {
            continue;
        };
        figures.rows.push(vec![
            label(figure),
            shown(figure, st.avg, false),
            shown(figure, st.min, false),
            shown(figure, st.max, false),
            approx(st, shown(figure, st.p99, true)),
            approx(st, shown(figure, st.p90, true)),
            approx(st, shown(figure, st.p50, true)),
            number(st.count as f64, 0),
        ]);
    }
    figures.write(style, out);
    let mut totals = Table::new(&["Metric", "value"]);
    for (name, value, decimals) in SCALARS {
        totals
            .rows
            .push(vec![name.to_owned(), opt(value(s), decimals)]);
    }
    totals.write(style, out);
    let mut attainment = Table::new(&["SLO ceiling", "limit", "met", "missed", "attainment"]);
    for a in &s.attainment {
        attainment.rows.push(vec![
            a.ceiling.clone(),
            match a.limit {
                Some(Limit::Seconds(l)) => format!("{} ms", number(l * 1000.0, 2)),
                Some(Limit::PerModel) => "per model/tenant".into(),
                _ => "as recorded".into(),
            },
            number(a.met as f64, 0),
            number(a.missed as f64, 0),
            a.share
                .map_or_else(|| "-".into(), |v| format!("{}%", number(v * 100.0, 2))),
        ]);
    }
    attainment.write(style, out);
    let mut outcomes = Table::new(&["Outcome", "status", "requests", "share"]);
    for o in &s.outcomes {
        let share = o.count as f64 / s.request_count.max(1) as f64 * 100.0;
        outcomes.rows.push(vec![
            o.outcome.clone(),
            o.status.clone(),
            number(o.count as f64, 0),
            format!("{}%", number(share, 2)),
        ]);
    }
    outcomes.write(style, out);
    let counted: u64 = s.output_token_sources.iter().map(|c| c.count).sum();
    let mut sources = Table::new(&["Output tokens from", "requests", "share"]);
    for c in &s.output_token_sources {
        let share = c.count as f64 / counted.max(1) as f64 * 100.0;
        sources.rows.push(vec![
            c.source.clone(),
            number(c.count as f64, 0),
            format!("{}%", number(share, 2)),
        ]);
    }
    if !sources.rows.is_empty() {
        sources.write(style, out);
    }
}

/// The whole-set figures: name, value, decimals. `Duration` is the set's own span; the rates divide
/// by the report's.
type Scalar = (&'static str, fn(&SummaryJson) -> Option<f64>, usize);

const SCALARS: [Scalar; 8] = [
    ("Request Count", |s| Some(s.request_count as f64), 0),
    ("Duration (s)", |s| s.duration_s, 3),
    (
        "Request Throughput (requests/s)",
        |s| s.request_throughput,
        2,
    ),
    (
        "Input Token Throughput (tokens/s)",
        |s| s.input_token_throughput,
        2,
    ),
    (
        "Output Token Throughput (tokens/s)",
        |s| s.output_token_throughput,
        2,
    ),
    (
        "Good Request Count",
        |s| Some(s.good_request_count as f64),
        0,
    ),
    (
        "Goodput Ratio (%)",
        |s| s.goodput_ratio.map(|r| r * 100.0),
        2,
    ),
    ("Goodput (requests/s)", |s| s.goodput, 2),
];

fn notes(sides: &[&SummaryJson], out: &mut String) {
    let shown: Vec<Row> = sides.iter().flat_map(|s| figures_shown(s)).collect();
    let mut lines = vec![
        "Quantiles are nearest-rank; avg, min, max and n are exact.".to_owned(),
        "Rates divide by the whole report's span (first start to last end), so the groups' \
         rates add up."
            .to_owned(),
    ];
    let sketched = sides.iter().any(|s| s.metrics.values().any(|m| !m.exact));
    if sketched {
        lines.push(format!(
            "~: more than {EXACT_UP_TO} values, the quantile is within {}% of the exact one \
             (a streaming sketch).",
            RELATIVE_ERROR * 100.0
        ));
    }
    for row in Row::all() {
        if let Some(note) = row.note().filter(|_| shown.contains(&row)) {
            lines.push(note.to_owned());
        }
    }
    let partial: Vec<String> = sides
        .iter()
        .filter(|s| s.requests_with_every_gap < s.requests_with_gaps)
        .filter(|s| s.requests_with_every_gap > 0)
        .map(|s| format!("{} of {}", s.requests_with_every_gap, s.requests_with_gaps))
        .collect();
    if !partial.is_empty() {
        lines.push(format!(
            "Inter Chunk Latency is only from the requests recorded with every gap ({}).",
            partial.join(", ")
        ));
    }
    lines.push(
        "Request Latency (E2E), Inter Token Latency, Output Token Throughput Per User and \
         Longest Gap count requests that ended ok, like the proxy's histograms."
            .to_owned(),
    );
    out.push_str("Notes:\n");
    for line in lines {
        let _ = writeln!(out, "- {line}");
    }
}

fn conversations_table(c: &ConversationsJson, style: Style, out: &mut String) {
    let share = c
        .server_share
        .map_or("-".into(), |s| format!("{:.1}%", s * 100.0));
    title(
        &format!(
            "Conversations: {}, {} turns ({:.2} a conversation, at most {}); the server's share of their time {share}",
            c.conversation_count, c.turn_count, c.turns_per_conversation_avg, c.turns_per_conversation_max
        ),
        style,
        out,
    );
    let mut table = Table::new(&[
        "conversation",
        "model",
        "turns",
        "wall s",
        "in the server s",
        "between turns s",
    ]);
    table.left = 2;
    let s = |v: f64| opt(Some(v), 2);
    for r in &c.slowest {
        table.rows.push(vec![
            r.conversation.clone(),
            r.model.clone(),
            r.turns.to_string(),
            s(r.wall_s),
            s(r.server_s),
            s(r.between_turns_s),
        ]);
    }
    table.rows.push(vec![
        "all".into(),
        "".into(),
        c.turn_count.to_string(),
        s(c.wall_s),
        s(c.server_s),
        s(c.between_turns_s),
    ]);
    table.write(style, out);
    if c.records_not_followed > 0 {
        let _ = writeln!(
            out,
            "({} records of conversations past the first {} are not in these figures)",
            c.records_not_followed,
            crate::report::conversations::MAX_CONVERSATIONS
        );
    }
}

fn slowest_table(slowest: &SlowestJson, style: Style, out: &mut String) {
    let name = format!("Slowest {} by {}", slowest.requests.len(), slowest.by);
    title(&name, style, out);
    let figures: Vec<(Figure, String)> = ranked()
        .filter_map(|f| Some((f, format!("{} ms", f.row().report.as_ref()?.slowest?))))
        .collect();
    let mut headers = vec![
        "start", "id", "model", "tenant", "outcome", "input", "output",
    ];
    headers.extend(figures.iter().map(|(_, header)| header.as_str()));
    let mut table = Table::new(&headers);
    table.left = 5;
    let ms = |v: Option<f64>| opt(v.map(|v| v * 1000.0), 2);
    let tokens = |v: Option<u64>| opt(v.map(|v| v as f64), 0);
    // The span's ids, only when a record names one (`traces:`): where to find its trace.
    let traced = slowest.requests.iter().any(|r| r.trace_id.is_some());
    if traced {
        table
            .head
            .splice(4..4, ["trace id".to_owned(), "span id".to_owned()]);
        table.left += 2;
    }
    for r in &slowest.requests {
        let mut row = vec![
            r.start.clone(),
            r.id.clone(),
            r.model.clone(),
            r.tenant.clone().unwrap_or_else(|| "-".into()),
            r.status
                .map_or_else(|| r.outcome.clone(), |s| format!("{} {s}", r.outcome)),
            tokens(r.input_tokens),
            tokens(r.output_tokens),
        ];
        row.extend(figures.iter().map(|(f, _)| ms(r.figure(*f))));
        if traced {
            let id = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
            row.splice(4..4, [id(&r.trace_id), id(&r.span_id)]);
        }
        table.rows.push(row);
    }
    table.write(style, out);
}

/// One record set: everything, then each group.
pub fn single(side: &Side, style: Style) -> String {
    let mut out = String::new();
    title(&group_name(side, None), style, &mut out);
    summary(&side.total, style, &mut out);
    for name in ordered(side.by, side.groups.keys()) {
        title(&group_name(side, Some(name)), style, &mut out);
        summary(&side.groups[name], style, &mut out);
    }
    if let Some(slowest) = &side.slowest {
        slowest_table(slowest, style, &mut out);
    }
    if let Some(conversations) = &side.conversations {
        conversations_table(conversations, style, &mut out);
    }
    let mut all = vec![&side.total];
    all.extend(side.groups.values());
    notes(&all, &mut out);
    out
}

fn change(before: Option<f64>, after: Option<f64>, scale: f64, decimals: usize) -> [String; 4] {
    let show = |v: Option<f64>| opt(v.map(|v| v * scale), decimals);
    let (delta, percent) = match (before, after) {
        (Some(b), Some(a)) => {
            let delta = number((a - b) * scale, decimals);
            let delta = if a >= b { format!("+{delta}") } else { delta };
            let percent = (b != 0.0).then(|| (a - b) / b.abs() * 100.0);
            let percent = percent.map_or_else(
                || "-".into(),
                |p| {
                    let p = number(p, 1);
                    if p.starts_with('-') {
                        format!("{p}%")
                    } else {
                        format!("+{p}%")
                    }
                },
            );
            (delta, percent)
        }
        _ => ("-".into(), "-".into()),
    };
    [show(before), show(after), delta, percent]
}

fn compared(before: &SummaryJson, after: &SummaryJson, style: Style, out: &mut String) {
    let _ = writeln!(out, "before: {}\nafter:  {}\n", span(before), span(after));
    let mut table = Table::new(&["Metric", "before", "after", "change", "change %"]);
    let mut push = |name: String, cells: [String; 4]| {
        let mut row = vec![name];
        row.extend(cells);
        table.rows.push(row);
    };
    for (name, value, decimals) in SCALARS
        .into_iter()
        .filter(|(n, ..)| !n.starts_with("Duration"))
    {
        push(
            name.into(),
            change(value(before), value(after), 1.0, decimals),
        );
    }
    let mut figures = figures_shown(before);
    figures.extend(
        figures_shown(after)
            .into_iter()
            .filter(|f| !figures_shown(before).contains(f)),
    );
    let order: Vec<Row> = Row::all().collect();
    figures.sort_by_key(|f| order.iter().position(|g| g == f));
    let none = Stats {
        unit: "",
        count: 0,
        exact: true,
        avg: None,
        min: None,
        max: None,
        p50: None,
        p90: None,
        p99: None,
    };
    for figure in figures {
        let b = before.metrics.get(figure.tag()).copied().unwrap_or(none);
        let a = after.metrics.get(figure.tag()).copied().unwrap_or(none);
        let (scale, decimals) = match figure.unit() {
            Unit::Seconds => (1000.0, 2),
            _ => (1.0, 2),
        };
        let unit = label(figure);
        let (name, unit) = unit.split_at(figure.header().len());
        for (stat, bv, av) in [
            ("avg", b.avg, a.avg),
            ("p50", b.p50, a.p50),
            ("p90", b.p90, a.p90),
            ("p99", b.p99, a.p99),
            ("max", b.max, a.max),
        ] {
            push(
                format!("{name} {stat}{unit}"),
                change(bv, av, scale, decimals),
            );
        }
    }
    let mut ceilings: Vec<&String> = before.attainment.iter().map(|a| &a.ceiling).collect();
    for a in &after.attainment {
        if !ceilings.contains(&&a.ceiling) {
            ceilings.push(&a.ceiling);
        }
    }
    for ceiling in ceilings {
        let share = |s: &SummaryJson| {
            s.attainment
                .iter()
                .find(|a| &a.ceiling == ceiling)
                .map_or((s.request_count > 0).then_some(1.0), |a| a.share)
        };
        push(
            format!("SLO attainment {ceiling} (%)"),
            change(share(before), share(after), 100.0, 2),
        );
    }
    let mut outcomes: Vec<(&String, &String)> = before
        .outcomes
        .iter()
        .map(|o| (&o.outcome, &o.status))
        .collect();
    for o in &after.outcomes {
        if !outcomes.contains(&(&o.outcome, &o.status)) {
            outcomes.push((&o.outcome, &o.status));
        }
    }
    outcomes.sort();
    for (outcome, status) in outcomes {
        let n = |s: &SummaryJson| {
            Some(
                s.outcomes
                    .iter()
                    .find(|o| &o.outcome == outcome && &o.status == status)
                    .map_or(0, |o| o.count) as f64,
            )
        };
        push(
            format!("Outcome {outcome} {status}"),
            change(n(before), n(after), 1.0, 0),
        );
    }
    table.write(style, out);
}

/// Two record sets side by side: everything, then each group either of them has.
pub fn compare(before: &Side, after: &Side, style: Style) -> String {
    let mut out = String::new();
    title(&group_name(before, None), style, &mut out);
    compared(&before.total, &after.total, style, &mut out);
    let names = ordered(
        before.by,
        before.groups.keys().chain(
            after
                .groups
                .keys()
                .filter(|k| !before.groups.contains_key(*k)),
        ),
    );
    let empty = crate::report::json::summary(&Default::default(), &[], None);
    for name in names {
        title(&group_name(before, Some(name)), style, &mut out);
        let b = before.groups.get(name).unwrap_or(&empty);
        let a = after.groups.get(name).unwrap_or(&empty);
        compared(b, a, style, &mut out);
    }
    notes(&[&before.total, &after.total], &mut out);
    out
}
