//! `tokentap top --prometheus URL`: the fleet's figures as a terminal table, without Grafana. Where
//! `tokentap top` reads one replica's live page, this reads every replica at once through Prometheus
//! ([`tokentap::net::fleet`], which the live page's fleet table reads too): one line a model; above
//! it, the targets up and the requests in flight.
//!
//! Everything printed that Prometheus sent (model names, error text) is cleaned of control characters
//! first.

use std::fmt::Write as _;
use std::time::Duration;

use tokentap::net::fleet::{Fleet, FleetError, Prometheus, Unit, COLUMNS};
use tokentap::report::render::printable;

/// Between tables: the recording rules are evaluated every `evaluation_interval` (15 s in
/// deploy/prometheus/prometheus.yml), so a faster redraw shows nothing new.
const PAUSE: Duration = Duration::from_secs(5);

/// Shows the fleet's figures from the Prometheus at `base` (e.g. `http://prometheus:9090`, or with
/// a path prefix), once or every [`PAUSE`]. The windows are the recording rules' (`--window` is
/// refused with `--prometheus` on the command line).
pub async fn run(base: &str, once: bool) -> Result<(), FleetError> {
    let prometheus = Prometheus::new(base)?;
    loop {
        let fleet = prometheus.fleet().await?;
        if !crate::top::show(&render(prometheus.base(), &fleet), once) {
            return Ok(());
        }
        tokio::time::sleep(PAUSE).await;
    }
}

/// What Prometheus (or the URL given) said, made safe to print: see [`printable`].
fn clean(text: &str) -> String {
    printable(text).into_owned()
}

fn cell(value: Option<f64>, unit: Unit) -> String {
    match (value, unit) {
        (None, _) => "-".into(),
        (Some(s), Unit::Seconds) if s >= 1.0 => format!("{s:.2}s"),
        (Some(s), Unit::Seconds) => format!("{:.0}ms", s * 1000.0),
        (Some(v), Unit::PerSecond) => format!("{v:.2}"),
        (Some(v), Unit::Share) => format!("{:.1}%", v * 100.0),
    }
}

/// The table: a header line, then one line a model with its figures.
pub fn render(base: &str, fleet: &Fleet) -> String {
    let mut out = String::new();
    let count = |v: Option<f64>| v.map_or("?".to_owned(), |v| format!("{v:.0}"));
    let _ = writeln!(
        out,
        "tokentap top · fleet from {} · {}/{} targets up · {} in flight · recording rules (5m, rates 1m)\n",
        clean(base),
        count(fleet.up),
        count(fleet.targets),
        count(fleet.in_flight),
    );
    let _ = write!(out, "{:<28}", "MODEL");
    for column in &COLUMNS {
        let _ = write!(out, " {:>8}", column.header);
    }
    out.push('\n');
    for (model, values) in &fleet.models {
        let mut name = clean(model);
        if name.is_empty() {
            name = "(no model label)".into();
        }
        if name.chars().count() > 28 {
            name = name.chars().take(27).collect::<String>() + "…";
        }
        let _ = write!(out, "{name:<28}");
        for (column, value) in COLUMNS.iter().zip(values) {
            let _ = write!(out, " {:>8}", cell(*value, column.unit));
        }
        out.push('\n');
    }
    if fleet.models.is_empty() {
        out.push_str(
            "(no recorded figures yet: are the recording rules loaded, and tokentap scraped?)\n",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn the_table_has_a_line_a_model_with_each_rule_in_its_column() {
        let mut models = BTreeMap::new();
        let mut row = vec![None; COLUMNS.len()];
        row[0] = Some(2.5); // requests/s
        row[2] = Some(0.972); // p99 TTFT
        row[5] = Some(1.25); // p50 E2E
        row[8] = Some(0.75); // goodput ratio
        models.insert("llama\x1b[2J".to_owned(), row);
        let fleet = Fleet {
            up: Some(3.0),
            targets: Some(3.0),
            in_flight: Some(4.0),
            models,
        };
        let table = render("http://prometheus:9090", &fleet);
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[0].contains("fleet from http://prometheus:9090 · 3/3 targets up · 4 in flight"),
            "{table}"
        );
        assert!(
            lines[2].starts_with("MODEL ") && lines[2].contains("GOODPUT"),
            "{table}"
        );
        let cells: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "llama\\u{1b}[2J",
                "2.50",
                "-",
                "972ms",
                "-",
                "-",
                "1.25s",
                "-",
                "-",
                "75.0%",
                "-",
                "-"
            ],
            "{table}"
        );
        assert!(
            !table.contains('\x1b'),
            "no escape sequence from a label reaches the terminal"
        );
        let empty = render("http://p", &Fleet::default());
        assert!(empty.contains("?/? targets up") && empty.contains("(no recorded figures yet"));
    }
}
