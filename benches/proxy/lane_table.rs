//! The field's lanes (`lanes.rs`) as a table: per target, the median over the rounds of each round's
//! p50 and p99, absolute and added (minus the direct path's in the same round), the figures round by
//! round so their spread shows, and issue 53's targets for tokentap against nginx: added TTFT and
//! keep-alive p50/p99 at most nginx's × 1.1 + 10 µs, the paced frame's delay on the wire at most
//! nginx's + 10 µs.

use std::fmt::Write;

use crate::lanes::{LaneRun, Sizes};
use crate::stats::percentile;
use crate::target::Kind;

/// The six figures of one target in one round, µs: TTFT p50/p99, keep-alive p50/p99, frame p50/p99.
type Figures = [Option<f64>; 6];

const NAMES: [&str; 6] = [
    "TTFT p50",
    "TTFT p99",
    "c=1 p50",
    "c=1 p99",
    "paced frame p50",
    "paced frame p99",
];

pub struct LaneTable {
    pub sizes: Sizes,
    pub rounds: Vec<Vec<(Kind, LaneRun)>>,
}

fn us(samples: &[u64], q: f64) -> Option<f64> {
    let mut v = samples.to_vec();
    percentile(&mut v, q).map(|ns| ns as f64 / 1e3)
}

fn figures(run: &LaneRun) -> Figures {
    [
        us(&run.ttft_ns, 0.50),
        us(&run.ttft_ns, 0.99),
        us(&run.request_ns, 0.50),
        us(&run.request_ns, 0.99),
        us(&run.frame_ns, 0.50),
        us(&run.frame_ns, 0.99),
    ]
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

fn cell(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.0}"))
}

impl LaneTable {
    fn kinds(&self) -> Vec<Kind> {
        let mut kinds: Vec<Kind> = Vec::new();
        for (kind, _) in self.rounds.iter().flatten() {
            if !kinds.contains(kind) {
                kinds.push(*kind);
            }
        }
        kinds.sort_by_key(|k| *k as u8);
        kinds
    }

    /// Each round's figures of `kind`, absolute, or added (minus direct's in the same round).
    fn per_round(&self, kind: Kind, added: bool) -> Vec<Figures> {
        self.rounds
            .iter()
            .filter_map(|round| {
                let of = |k: Kind| {
                    round
                        .iter()
                        .find(|(r, _)| *r == k)
                        .map(|(_, run)| figures(run))
                };
                let mine = of(kind)?;
                if !added {
                    return Some(mine);
                }
                let direct = of(Kind::Direct)?;
                let mut out = [None; 6];
                for i in 0..6 {
                    out[i] = mine[i].zip(direct[i]).map(|(a, b)| a - b);
                }
                Some(out)
            })
            .collect()
    }

    /// The median over the rounds of each figure.
    pub fn medians(&self, kind: Kind, added: bool) -> Figures {
        let rounds = self.per_round(kind, added);
        let mut out = [None; 6];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = median(rounds.iter().filter_map(|f| f[i]).collect());
        }
        out
    }

    fn errors(&self, kind: Kind) -> (u64, Option<&str>) {
        let runs = self.rounds.iter().flatten().filter(|(k, _)| *k == kind);
        let mut errors = 0;
        let mut first = None;
        for (_, run) in runs {
            errors += run.errors;
            first = first.or(run.first_error.as_deref());
        }
        (errors, first)
    }

    pub fn render(&self, out: &mut String) {
        let s = self.sizes;
        let _ = writeln!(
            out,
            "\n## The field's lanes (GetBusbar/benchmarking's method): medians of {} rounds, µs\n\n\
             Per target per round: {} TTFT probes on fresh connections, {} keep-alive requests at c=1, {} paced \
             streams (64 deltas 20 ms apart); the targets take turns, each round in a rotated order.\n",
            self.rounds.len(),
            s.probes,
            s.requests,
            s.streams,
        );
        let kinds = self.kinds();
        let header = |out: &mut String, title: &str| {
            let _ = writeln!(out, "| {title} | {} | errors |", NAMES.join(" | "));
            let _ = writeln!(out, "|---|{}--:|", "--:|".repeat(6));
        };
        let rows = |out: &mut String, title: &str, added: bool| {
            header(out, title);
            for &kind in kinds.iter().filter(|k| !added || **k != Kind::Direct) {
                let cells: Vec<String> =
                    self.medians(kind, added).iter().map(|v| cell(*v)).collect();
                let (errors, _) = self.errors(kind);
                let _ = writeln!(
                    out,
                    "| {} | {} | {errors} |",
                    kind.name(),
                    cells.join(" | ")
                );
            }
        };
        rows(out, "target (absolute)", false);
        out.push('\n');
        rows(out, "target (added to direct)", true);
        for &kind in &kinds {
            if let (_, Some(first)) = self.errors(kind) {
                let _ = writeln!(out, "\n{} first error: {first}", kind.name());
            }
        }
        self.targets(out);
        out.push_str(
            "\nRound by round, added (TTFT p50/p99, c=1 p50/p99, paced frame p50 absolute):\n\n",
        );
        for &kind in kinds.iter().filter(|k| **k != Kind::Direct) {
            let added = self.per_round(kind, true);
            let absolute = self.per_round(kind, false);
            let rounds: Vec<String> = added
                .iter()
                .zip(&absolute)
                .map(|(a, b)| {
                    format!(
                        "{}/{}, {}/{}, {}",
                        cell(a[0]),
                        cell(a[1]),
                        cell(a[2]),
                        cell(a[3]),
                        cell(b[4])
                    )
                })
                .collect();
            let _ = writeln!(out, "- {}: [{}]", kind.name(), rounds.join("; "));
        }
    }

    /// Issue 53's targets for tokentap (and a baseline binary) against nginx in this run.
    fn targets(&self, out: &mut String) {
        let kinds = self.kinds();
        if !kinds.contains(&Kind::Nginx) {
            return;
        }
        let nginx = self.medians(Kind::Nginx, true);
        let nginx_abs = self.medians(Kind::Nginx, false);
        out.push_str("\n| target (issue 53) | figure | bound from nginx | value | met? |\n|---|---|--:|--:|---|\n");
        for kind in [Kind::Tokentap, Kind::Baseline] {
            if !kinds.contains(&kind) {
                continue;
            }
            let mine = self.medians(kind, true);
            let mine_abs = self.medians(kind, false);
            let mut row = |figure: &str, bound: Option<f64>, value: Option<f64>| {
                let met = match bound.zip(value) {
                    Some((b, v)) if v <= b => "**yes**",
                    Some(_) => "no",
                    None => "–",
                };
                let _ = writeln!(
                    out,
                    "| {} | {figure} | {} | {} | {met} |",
                    kind.name(),
                    cell(bound),
                    cell(value)
                );
            };
            for i in 0..4 {
                let bound = nginx[i].map(|n| n * 1.1 + 10.0);
                row(&format!("added {}", NAMES[i]), bound, mine[i]);
            }
            row(
                "paced frame p50 on the wire",
                nginx_abs[4].map(|n| n + 10.0),
                mine_abs[4],
            );
        }
    }
}
