//! Every problem of a config file, not only the first, each with its key and line. The document is read
//! (and then validated); at each error the key it names is taken out of the document (so it takes its
//! default) and the rest is read again, until it reads clean or [`MAX_PROBLEMS`] are found. Each
//! problem is placed on its line (`lines`), and two slips YAML makes hard to see are said as what
//! they are: a line indented further than the key above it (YAML reads it as the rest of that key's
//! value, so it showed as a bad duration) and a key written under the wrong section.

use super::lines::Lines;
use super::yaml::{Document, Found};
use super::{Config, ConfigError};

/// At most this many problems are reported for one file.
pub const MAX_PROBLEMS: usize = 50;

/// One problem of a config file: the error (naming its key) and the line it is on.
#[derive(Debug)]
pub struct Problem {
    /// From 1; `None` when the key is not written in the file (a check across keys, a default).
    pub line: Option<usize>,
    pub error: ConfigError,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.error),
            None => write!(f, "{}", self.error),
        }
    }
}

/// The line `key` is written on in `text`, from 1 (where `check-config` places a refusal of the plan,
/// `app/plan.rs`, as it places the file's own problems).
pub fn line_of(text: &str, key: &str) -> Option<usize> {
    Lines::of(text).line(key)
}

/// Reads and validates `text`; every problem found, in the order found, when it is not clean.
pub(super) fn check(text: &str) -> Result<Config, Vec<Problem>> {
    let lines = Lines::of(text);
    let mut document = Document::parse(text).map_err(|found| vec![place(text, &lines, *found)])?;
    let mut problems: Vec<(String, Problem)> = Vec::new();
    for _ in 0..MAX_PROBLEMS * 2 {
        let found = match document.read() {
            Ok(config) => match config.validate() {
                Ok(()) if problems.is_empty() => return Ok(config),
                Ok(()) => break,
                Err(error) => Box::new(Found {
                    key: key_of(&error),
                    line: None,
                    error,
                }),
            },
            Err(found) => found,
        };
        let key = found.key.clone();
        // Taking a key out can make its section fail a check of its own: that is the same problem.
        let said = problems.iter().any(|(k, _)| within(k, &key));
        if !said {
            problems.push((key.clone(), place(text, &lines, *found)));
        }
        if problems.len() >= MAX_PROBLEMS || !remove(&mut document, &key) {
            break;
        }
    }
    let mut problems: Vec<Problem> = problems.into_iter().map(|(_, p)| p).collect();
    problems.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
    Err(problems)
}

/// Whether `key` is `said` or one of its ancestors.
fn within(said: &str, key: &str) -> bool {
    said == key
        || said
            .strip_prefix(key)
            .is_some_and(|rest| rest.starts_with(['.', '[']))
}

/// Takes `key` out of the document, else its nearest ancestor the document holds.
fn remove(document: &mut Document, key: &str) -> bool {
    let mut key = key;
    loop {
        if document.remove(key) {
            return true;
        }
        match key.rfind(['.', '[']) {
            Some(at) => key = &key[..at],
            None => return false,
        }
    }
}

/// The key a validation error names.
fn key_of(error: &ConfigError) -> String {
    match error {
        ConfigError::Invalid { key, .. } | ConfigError::UnknownKey { key, .. } => key.clone(),
        _ => String::new(),
    }
}

/// The problem on its line, said as a slip where it is one.
fn place(text: &str, lines: &Lines, found: Found) -> Problem {
    let Found { key, line, error } = found;
    let line = match &error {
        // A key written twice: where it is written the second time.
        ConfigError::Syntax(said) if said.contains("written twice") => {
            lines.last_line(&key).or(line)
        }
        _ => line.or_else(|| lines.line(&key)),
    };
    let error = match error {
        ConfigError::UnknownKey {
            key,
            section,
            known,
            hint: _,
        } => {
            let hint = unknown_key_hint(&key, &section, &known);
            ConfigError::UnknownKey {
                key,
                section,
                known,
                hint,
            }
        }
        error => error,
    };
    if let Some((slipped, said)) = line.and_then(|l| indentation_slip(text, l, &key, &error)) {
        return Problem {
            line: Some(slipped),
            error: ConfigError::Syntax(said),
        };
    }
    Problem { line, error }
}

/// A line indented further than the key above it: YAML reads it as the rest of that key's value
/// (then a value refused, "500ms tpot") or refuses the document ("mapping values are not allowed").
/// The slipped line and what to say.
fn indentation_slip(
    text: &str, line: usize, key: &str, error: &ConfigError,
) -> Option<(usize, String)> {
    let rows: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start_matches(' ').len();
    let written = |n: usize| {
        rows.get(n - 1)
            .filter(|l| !l.trim().is_empty() && !l.trim().starts_with('#'))
    };
    let (above, slipped) = match error {
        // The value's line, and the next line written.
        ConfigError::Invalid { value, .. } => {
            let next = (line + 1..=rows.len()).find(|&n| written(n).is_some())?;
            let first = rows[next - 1]
                .split_whitespace()
                .next()?
                .trim_end_matches(':');
            (value.contains(first)).then_some((line, next))?
        }
        // The document refused at a line: the line written before it.
        ConfigError::Syntax(message) if key.is_empty() && message.contains("mapping values") => {
            let before = (1..line).rev().find(|&n| written(n).is_some())?;
            (before, line)
        }
        _ => return None,
    };
    let (above_text, slipped_text) = (rows.get(above - 1)?, rows.get(slipped - 1)?);
    if indent(slipped_text) <= indent(above_text) {
        return None;
    }
    let leaf = above_text
        .trim()
        .trim_start_matches("- ")
        .split(':')
        .next()?
        .trim();
    let name = slipped_text.trim().split([':', ' ']).next()?;
    let said = format!(
        "line {slipped} (`{}`) is indented further than `{leaf}` on line {above}, so YAML reads it \
         as the rest of {leaf}'s value; indent `{name}` as `{leaf}` is",
        slipped_text.trim()
    );
    let said = match key {
        "" => said,
        key => format!("{key}: {said}"),
    };
    Some((slipped, said))
}

/// What may have been meant by an unknown key: a known name a typo away, or the section it belongs to.
fn unknown_key_hint(key: &str, section: &str, known: &[String]) -> String {
    let leaf = key.rsplit('.').next().unwrap_or(key);
    let near: Vec<&str> = known
        .iter()
        .map(String::as_str)
        .filter(|k| typo_away(leaf, k) || (leaf.len() >= 3 && k.contains(leaf)))
        .collect();
    if let [one, ..] = near.as_slice() {
        return format!(" (did you mean `{one}`?)");
    }
    let top = Document::top_level_keys();
    if !section.is_empty() && top.iter().any(|k| k == leaf) {
        return format!(
            " (`{leaf}` is a top-level key: is it indented under `{section}:` by mistake?)"
        );
    }
    // A section keyed by names (`tokenizers:`) takes any key: it says nothing.
    let homes: Vec<String> = top
        .iter()
        .filter(|s| *s != section && !Document::section_has(s, "no such key, surely"))
        .filter(|s| Document::section_has(s, leaf))
        .map(|s| format!("`{s}:`"))
        .collect();
    match homes.as_slice() {
        [] => String::new(),
        [home] => format!(" (`{leaf}` is a key of {home}: is it indented under it?)"),
        homes => format!(
            " (`{leaf}` is a key of {}: is it indented under one of them?)",
            homes.join(", ")
        ),
    }
}

/// Whether `a` is at most two single-character edits from `b` (and not just short).
fn typo_away(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len().min(b.len()) < 3 || a.len().abs_diff(b.len()) > 2 {
        return false;
    }
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut row = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous[j] + usize::from(ca != cb);
            row.push(substitute.min(previous[j + 1] + 1).min(row[j] + 1));
        }
        previous = row;
    }
    previous[b.len()] <= 2
}

/// A file's problems one a line, under a line that counts them.
pub(super) fn report(path: &std::path::Path, problems: &[Problem]) -> String {
    let mut lines = vec![format!("{}: {} problems", path.display(), problems.len())];
    lines.extend(
        problems
            .iter()
            .map(|p| describe(path, std::slice::from_ref(p))),
    );
    lines.join("\n")
}

/// A file's problems as one line (a log's, a reload's answer): `path:line: error` for one, else the
/// count and each in turn.
pub(super) fn describe(path: &std::path::Path, problems: &[Problem]) -> String {
    let shown = path.display();
    let one = |p: &Problem| match p.line {
        Some(line) => format!("{shown}:{line}: {}", p.error),
        None => format!("{shown}: {}", p.error),
    };
    match problems {
        [problem] => one(problem),
        problems => {
            let each: Vec<String> = problems.iter().map(one).collect();
            format!("{shown}: {} problems: {}", problems.len(), each.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        match check(text) {
            Ok(_) => Vec::new(),
            Err(problems) => problems.iter().map(Problem::to_string).collect(),
        }
    }

    #[test]
    fn every_problem_is_reported_in_line_order_with_its_key() {
        let text = "\
max_models: -3
shutdown_grace: 5
timeouts:
  connect: 1x
  idle: 10m
buckets:
  ttft: [0.1, 0.5, 0.5]
metrics_listen: localhost:9464
";
        let got = problems(text);
        let want = [
            "line 1: max_models: must be a whole number (0 or more), not -3",
            "line 2: shutdown_grace: invalid duration \"5\": ",
            "line 4: timeouts.connect: invalid duration \"1x\": ",
            "line 7: buckets.ttft[2]: invalid bucket boundary \"0.5\": ",
            "line 8: metrics_listen: invalid address \"localhost:9464\": ",
        ];
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for (got, want) in got.iter().zip(want) {
            assert!(got.starts_with(want), "{got}");
        }
    }

    #[test]
    fn a_line_indented_too_far_is_said_as_such_not_as_a_bad_value() {
        for text in [
            "slo:\n  ttft: 500ms\n   tpot: 50ms\n",
            "slo:\n  ttft: 500ms\n   tpot 50ms\n",
        ] {
            let got = problems(text);
            assert_eq!(got.len(), 1, "{got:?}");
            assert!(
                got[0].starts_with("line 3: ")
                    && got[0].contains("is indented further than `ttft` on line 2")
                    && !got[0].contains("invalid duration"),
                "{got:?}"
            );
        }
    }

    #[test]
    fn a_key_under_the_wrong_section_names_the_one_it_belongs_to() {
        let got = problems("slo:\n  ttft: 500ms\ntpot: 50ms\ntimeouts:\n  max_connections: 5\n");
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0].starts_with(
                "line 3: tpot: not a key at the top level (`tpot` is a key of `buckets:`, `slo:`"
            ),
            "{got:?}"
        );
        assert!(
            got[1].starts_with("line 5: timeouts.max_connections: not a key of `timeouts:` (`max_connections` is a key of `limits:`"),
            "{got:?}"
        );
        let upstream = problems("slo:\n  upstream: http://x\n");
        assert!(
            upstream[0]
                .contains("`upstream` is a top-level key: is it indented under `slo:` by mistake?"),
            "{upstream:?}"
        );
    }

    #[test]
    fn a_check_that_fails_after_a_key_is_taken_out_is_not_a_second_problem() {
        let got =
            problems("listen_tls: {cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}\n");
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with("line 1: listen_tls.cert_file: invalid path"),
            "{got:?}"
        );
    }

    #[test]
    fn a_file_with_one_problem_is_said_on_one_line_and_several_one_a_line() {
        let path = std::path::Path::new("t.yaml");
        let one = check("max_models: 0\n").unwrap_err();
        assert_eq!(
            describe(path, &one),
            "t.yaml:1: max_models: invalid value \"0\": must be at least 1"
        );
        let two = check("max_models: 0\nshutdown_grace: 0s\n").unwrap_err();
        assert_eq!(
            report(path, &two),
            "t.yaml: 2 problems\nt.yaml:1: max_models: invalid value \"0\": must be at least 1\n\
             t.yaml:2: shutdown_grace: invalid duration \"0s\": must be greater than zero"
        );
    }

    #[test]
    fn the_count_of_problems_is_bounded() {
        let text: String = (0..200).map(|i| format!("unknown_{i}: 1\n")).collect();
        assert_eq!(problems(&text).len(), MAX_PROBLEMS);
    }
}
