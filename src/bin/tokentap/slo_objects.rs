//! `tokentap slo-objects`: the SLO ceilings of a config rendered as the objects SLO tools keep, Pyrra's
//! `ServiceLevelObjective` (one per ceiling) or Sloth's `PrometheusServiceLevel` (one with an SLO per
//! ceiling, and goodput), each on tokentap's own counters, so the ceilings are written once, in
//! tokentap's config, and the objectives follow them (docs/deploy.md, "SLO objects").
//!
//! A ceiling's error ratio is the recording rules' (`deploy/prometheus/rules/tokentap-recording.yml`):
//! `tokentap_slo_violations_total{slo=kind}` over the count of the histogram of the figure that kind
//! judges (`tokentap_time_to_first_token_seconds_count` for `ttft`), so a request is judged only where
//! the figure exists (a non-streamed answer has no TTFT). tokentap judges each request by its model's own
//! ceiling, so the default ceiling's object takes the models that have none of their own for that kind,
//! and each model's own ceiling is an object of its own. Per-tenant ceilings are judged into the same
//! counter (it has no `tenant` label), so they have no object apart.

use std::fmt::Write as _;

use tokentap::config::{format_duration, Config, SloKind};
use tokentap::record::figure::Figure;
use tokentap::record::metrics::family;

/// Which tool's objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Pyrra,
    Sloth,
}

impl Format {
    pub fn parse(text: &str) -> Result<Format, String> {
        match text {
            "pyrra" => Ok(Format::Pyrra),
            "sloth" => Ok(Format::Sloth),
            other => Err(format!("--format: {other:?} is neither pyrra nor sloth")),
        }
    }
}

/// The objective shared by every object: the share of judged requests within their ceiling.
pub struct Objective {
    /// Percent, above 0 and below 100.
    pub target: f64,
    /// Pyrra's `window` (Sloth takes its window from its own configuration).
    pub window: String,
}

impl Objective {
    pub fn parse(target: &str, window: &str) -> Result<Objective, String> {
        let percent: f64 = target.parse().map_err(|_| {
            format!("--target: {target:?} is not a number (a percentage: 99, 99.5)")
        })?;
        if !(percent > 0.0 && percent < 100.0) {
            return Err(format!(
                "--target: {target} must be above 0 and below 100 (a percentage)"
            ));
        }
        if !prometheus_duration(window) {
            return Err(format!(
                "--window: {window:?} is not a Prometheus duration (30d, 4w, 2w3d)"
            ));
        }
        Ok(Objective {
            target: percent,
            window: window.to_owned(),
        })
    }
}

/// One ceiling's objective: which requests, which ceiling.
struct Ceiling {
    kind: SloKind,
    ceiling: String,
    /// `Some(model)`: that model's own ceiling; `None`: the default, for every model without one.
    model: Option<String>,
    /// For the default: the models with a ceiling of their own for this kind, left out.
    others: Vec<String>,
}

impl Ceiling {
    /// A DNS-1123 name for the object: `tokentap-ttft`, `tokentap-ttft-llama-3-1-70b`.
    fn name(&self) -> String {
        let mut name = format!("tokentap-{}", self.kind.as_str().replace('_', "-"));
        if let Some(model) = &self.model {
            name.push('-');
            name.push_str(&dns_label(model));
        }
        name.truncate(253);
        name.trim_end_matches('-').to_owned()
    }

    /// The label matchers after `slo=…` or alone: the model, or the models left out.
    fn matchers(&self) -> String {
        match &self.model {
            Some(model) => format!("model=\"{}\"", promql_string(model)),
            None if self.others.is_empty() => String::new(),
            None => {
                let names: Vec<String> = self.others.iter().map(|m| regex_escape(m)).collect();
                format!("model!~\"{}\"", promql_string(&names.join("|")))
            }
        }
    }

    fn errors(&self) -> String {
        let slo = format!("slo=\"{}\"", self.kind.as_str());
        match self.matchers().as_str() {
            "" => format!("{}{{{slo}}}", family::SLO_VIOLATIONS.name),
            m => format!("{}{{{slo},{m}}}", family::SLO_VIOLATIONS.name),
        }
    }

    fn total(&self) -> String {
        let count = family::of_figure(Figure::judged_for(self.kind)).count();
        match self.matchers().as_str() {
            "" => count,
            m => format!("{count}{{{m}}}"),
        }
    }

    fn description(&self) -> String {
        let kind = self.kind.as_str();
        match &self.model {
            Some(model) => format!(
                "Requests of model {model} within its own {kind} ceiling of {}.",
                self.ceiling
            ),
            None => format!(
                "Requests within the default {kind} ceiling of {}, per model{}.",
                self.ceiling,
                match self.others.is_empty() {
                    true => "",
                    false => " (the models with a ceiling of their own have objects of their own)",
                }
            ),
        }
    }
}

/// Every ceiling of `config`'s `slo:`, kind by kind: the default's, then each model's own.
fn ceilings(config: &Config) -> Vec<Ceiling> {
    let slo = &config.slo;
    let mut out = Vec::new();
    for kind in SloKind::ALL {
        let own: Vec<(&String, String)> = slo
            .models
            .iter()
            .filter_map(|(m, c)| c[kind].map(|d| (m, format_duration(d))))
            .collect();
        if let Some(d) = slo.default[kind] {
            out.push(Ceiling {
                kind,
                ceiling: format_duration(d),
                model: None,
                others: own.iter().map(|(m, _)| (*m).clone()).collect(),
            });
        }
        for (model, ceiling) in own {
            out.push(Ceiling {
                kind,
                ceiling,
                model: Some(model.clone()),
                others: Vec::new(),
            });
        }
    }
    out
}

/// The objects, as one YAML stream, with a header saying where they came from.
pub fn render(config: &Config, format: Format, objective: &Objective, source: &str) -> String {
    let mut out = format!(
        "# GENERATED by `tokentap slo-objects --config {source}{}`: the SLO ceilings of that config as\n\
         # {}, on tokentap's own counters (docs/deploy.md, \"SLO objects\"). Run it again when the ceilings change.\n",
        match format {
            Format::Pyrra => "",
            Format::Sloth => " --format sloth",
        },
        match format {
            Format::Pyrra => "Pyrra ServiceLevelObjectives (pyrra.dev/v1alpha1)",
            Format::Sloth => "a Sloth PrometheusServiceLevel (sloth.slok.dev/v1)",
        }
    );
    let ceilings = ceilings(config);
    match format {
        Format::Pyrra => pyrra(&mut out, &ceilings, objective),
        Format::Sloth => sloth(&mut out, &ceilings, objective),
    }
    out
}

fn pyrra(out: &mut String, ceilings: &[Ceiling], objective: &Objective) {
    if ceilings.is_empty() {
        out.push_str("# (no SLO ceiling in this config: no objects)\n");
    }
    let mut names = Vec::new();
    for ceiling in ceilings {
        let name = unique(&mut names, ceiling.name());
        let _ = write!(
            out,
            "---\n\
             apiVersion: pyrra.dev/v1alpha1\n\
             kind: ServiceLevelObjective\n\
             metadata:\n  \
               name: {name}\n  \
               labels:\n    \
                 app.kubernetes.io/name: tokentap\n    \
                 # Pyrra copies these onto the PrometheusRule it makes: match your Prometheus' ruleSelector.\n    \
                 release: prometheus\n\
             spec:\n  \
               target: {}\n  \
               window: {}\n  \
               description: {}\n  \
               indicator:\n    \
                 ratio:\n      \
                   errors:\n        \
                     metric: {}\n      \
                   total:\n        \
                     metric: {}\n",
            quoted(&percent(objective.target)),
            objective.window,
            quoted(&ceiling.description()),
            quoted(&ceiling.errors()),
            quoted(&ceiling.total()),
        );
        if ceiling.model.is_none() {
            out.push_str("      grouping:\n        - model\n");
        }
    }
}

fn sloth(out: &mut String, ceilings: &[Ceiling], objective: &Objective) {
    let requests = family::REQUESTS.name;
    let goodput = family::GOODPUT.name;
    let _ = write!(
        out,
        "apiVersion: sloth.slok.dev/v1\n\
         kind: PrometheusServiceLevel\n\
         metadata:\n  \
           name: tokentap\n  \
           labels:\n    \
             app.kubernetes.io/name: tokentap\n    \
             release: prometheus\n\
         spec:\n  \
           service: tokentap\n  \
           slos:\n    \
             - name: goodput\n      \
               objective: {target}\n      \
               description: {}\n      \
               sli:\n        \
                 events:\n          \
                   errorQuery: {}\n          \
                   totalQuery: {}\n      \
               alerting:\n        \
                 name: TokentapGoodputBudgetBurn\n",
        quoted("Requests that ended ok, 2xx, within every ceiling of their model (and tenant), per model."),
        quoted(&format!(
            "sum by (model) (rate({requests}[{{{{.window}}}}])) - sum by (model) (rate({goodput}[{{{{.window}}}}]))"
        )),
        quoted(&format!("sum by (model) (rate({requests}[{{{{.window}}}}]))")),
        target = percent(objective.target),
    );
    let mut names = vec!["goodput".to_owned()];
    for ceiling in ceilings {
        let name = unique(
            &mut names,
            ceiling.name().trim_start_matches("tokentap-").to_owned(),
        );
        let by = match ceiling.model {
            Some(_) => "",
            None => " by (model) ",
        };
        let rate = |series: &str| format!("sum{by}(rate({series}[{{{{.window}}}}]))");
        let alert: String = name
            .split(['-', '.'])
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect();
        let _ = write!(
            out,
            "    - name: {name}\n      \
               objective: {}\n      \
               description: {}\n      \
               sli:\n        \
                 events:\n          \
                   errorQuery: {}\n          \
                   totalQuery: {}\n      \
               alerting:\n        \
                 name: Tokentap{alert}BudgetBurn\n",
            percent(objective.target),
            quoted(&ceiling.description()),
            quoted(&rate(&ceiling.errors())),
            quoted(&rate(&ceiling.total())),
        );
    }
}

/// A duration as Prometheus (and Pyrra) write it: one or more of a number and a unit, `30d`, `2w3d`.
fn prometheus_duration(text: &str) -> bool {
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let unit = ["ms", "s", "m", "h", "d", "w", "y"]
            .into_iter()
            .find(|u| rest[digits..].starts_with(u));
        match (digits, unit) {
            (1.., Some(unit)) => rest = &rest[digits + unit.len()..],
            _ => return false,
        }
    }
    !text.is_empty()
}

/// `name`, or `name-2`, `name-3`… if taken (two model names can make the same DNS label).
fn unique(taken: &mut Vec<String>, name: String) -> String {
    let mut candidate = name.clone();
    let mut n = 2;
    while taken.contains(&candidate) {
        candidate = format!("{name}-{n}");
        n += 1;
    }
    taken.push(candidate.clone());
    candidate
}

/// A percentage as written: `99`, `99.5`.
fn percent(p: f64) -> String {
    let text = format!("{p}");
    text.strip_suffix(".0").map(str::to_owned).unwrap_or(text)
}

/// A YAML single-quoted scalar: only `'` needs escaping (doubled), backslashes stay as they are.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A PromQL string's content: `\` and `"` escaped.
fn promql_string(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// A model name matched literally in an RE2 regex.
fn regex_escape(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A model name as a DNS-1123 label part: lowercase letters and digits, other runs as one `-`.
fn dns_label(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => out.push(c),
            _ if out.ends_with('-') || out.is_empty() => {}
            _ => out.push('-'),
        }
    }
    out.trim_end_matches('-').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_name_is_matched_literally_and_named_as_dns_allows() {
        assert_eq!(regex_escape("llama-3.1-70b"), "llama-3\\.1-70b");
        assert_eq!(promql_string("llama-3\\.1-70b"), "llama-3\\\\.1-70b");
        assert_eq!(
            dns_label("Qwen/Qwen2.5-7B_Instruct"),
            "qwen-qwen2-5-7b-instruct"
        );
        assert_eq!(quoted("it's"), "'it''s'");
        assert_eq!((percent(99.0), percent(99.5)), ("99".into(), "99.5".into()));
        let windows = ["30d", "4w", "2w3d", "90m", "", "30", "d", "3x"];
        let valid: Vec<bool> = windows.iter().map(|w| prometheus_duration(w)).collect();
        assert_eq!(valid, [true, true, true, true, false, false, false, false]);
    }

    #[test]
    fn the_default_ceiling_leaves_out_the_models_with_their_own() {
        let config = Config::from_yaml_str(
            "slo: {ttft: 500ms, e2e: 60s, models: {llama-3.1-70b: {ttft: 1s}, \"Qwen/Q\": {ttft: 2s}}}\n",
        )
        .expect("config");
        let all = ceilings(&config);
        let named: Vec<(String, String, String)> = all
            .iter()
            .map(|c| (c.name(), c.errors(), c.total()))
            .collect();
        let ttft = "tokentap_time_to_first_token_seconds_count";
        assert_eq!(
            named[0],
            (
                "tokentap-ttft".into(),
                "tokentap_slo_violations_total{slo=\"ttft\",model!~\"Qwen/Q|llama-3\\\\.1-70b\"}"
                    .into(),
                format!("{ttft}{{model!~\"Qwen/Q|llama-3\\\\.1-70b\"}}"),
            )
        );
        assert_eq!(named[1].0, "tokentap-ttft-qwen-q");
        assert_eq!(named[2].0, "tokentap-ttft-llama-3-1-70b");
        assert_eq!(
            named[3],
            (
                "tokentap-e2e".into(),
                "tokentap_slo_violations_total{slo=\"e2e\"}".into(),
                "tokentap_e2e_request_latency_seconds_count".into(),
            )
        );
        assert_eq!(all.len(), 4);
    }
}
