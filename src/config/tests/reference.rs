//! The reference page (docs/configuration.md) and the annotated example (config/tokentap.yaml) held to
//! the code: every key the types take is in both, neither names a key the types refuse, and each
//! default the page states is the code's, compared as parsed values (and so is each default
//! docs/operations.md repeats). The keys come from the types themselves (their serialized form), not
//! from a list here.

use serde_json::Value;

use super::*;

const PAGE: (&str, &str) = (
    "docs/configuration.md",
    include_str!("../../../docs/configuration.md"),
);
const OPERATIONS: (&str, &str) = (
    "docs/operations.md",
    include_str!("../../../docs/operations.md"),
);
const EXAMPLE: &str = include_str!("../../../config/tokentap.yaml");

/// Turns on the sections that are off by default and puts one entry in each map keyed by a name, so
/// that the walk over the serialized config sees every key inside them.
const EVERY_PART: &str = "
listen_tls: {}
request_log: {}
tenants: {slo: {<tenant>: {}}}
slo: {models: {<model>: {}}}
tokenizers: {<model>: ''}
traces: {headers: {<name>: ''}}
otlp_metrics: {headers: {<name>: ''}}
";

/// Every key the types take, as a dotted path; `<model>` and `<tenant>` stand for any name.
fn keys() -> Vec<String> {
    fn walk(value: &Value, path: &str, keys: &mut Vec<String>) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (key, value) in map {
                    let path = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    walk(value, &path, keys);
                }
            }
            _ => keys.push(path.to_owned()),
        }
    }
    let mut keys = Vec::new();
    walk(&serialized(EVERY_PART), "", &mut keys);
    keys
}

/// A document, parsed (not validated) and serialized.
fn serialized(document: &str) -> Value {
    let config = yaml::parse(document).unwrap_or_else(|e| panic!("{document:?}: {e}"));
    serde_json::to_value(config).unwrap()
}

fn at<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.').try_fold(value, |v, segment| v.get(segment))
}

/// A document that writes `key` (its sections as nested mappings): with `value`, or left out of an
/// empty parent.
fn document(key: &str, value: Option<&str>) -> String {
    let segments: Vec<&str> = key.split('.').collect();
    let (last, parents) = segments.split_last().unwrap();
    let mut text = String::new();
    for (depth, parent) in parents.iter().enumerate() {
        text += &format!("{:width$}{parent}:\n", "", width = 2 * depth);
    }
    let indent = " ".repeat(2 * parents.len());
    match value {
        Some(value) => text + &format!("{indent}{last}: {value}\n"),
        None if parents.is_empty() => text,
        None => text.trim_end().to_owned() + " {}\n",
    }
}

/// Whether `path` (a document's keys, one a segment: a model name may hold dots) is `key` or a
/// section on the way to it; a `<…>` segment of the key is any name.
fn leads_to(path: &[String], key: &str) -> bool {
    let (mut path, mut key) = (path.iter(), key.split('.'));
    loop {
        match (path.next(), key.next()) {
            (None, _) => return true,
            (Some(_), None) => return false,
            (Some(p), Some(k)) if p == k || k.starts_with('<') => {}
            _ => return false,
        }
    }
}

/// What a row of the page says of a key's default: a value in backticks, or words (none, off, …).
#[derive(Debug)]
enum Stated {
    Value(String),
    Words(String),
}

/// Every row of every table on a page whose columns include `key` and `default`: its keys (a cell
/// may list siblings as `` `slo.ttft`, `.tpot` ``), what it says of their default, its line.
fn page_rows((name, page): (&str, &str)) -> Vec<(Vec<String>, Stated, usize)> {
    let cells = |line: &str| -> Vec<String> {
        let line = line.trim().trim_start_matches('|').trim_end_matches('|');
        let mut cells = vec![String::new()];
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&'|') => cells.last_mut().unwrap().push('|'),
                '|' => cells.push(String::new()),
                c => cells.last_mut().unwrap().push(c),
            }
        }
        cells.iter().map(|c| c.trim().to_owned()).collect()
    };
    let code = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let mut rows = Vec::new();
    let mut columns: Option<(usize, usize)> = None;
    let mut previous_in_table = false;
    for (n, line) in page.lines().enumerate() {
        let in_table = line.trim_start().starts_with('|');
        if in_table && !previous_in_table {
            let header = cells(line);
            let find = |name: &str| header.iter().position(|h| h == name);
            columns = find("key").zip(find("default"));
        } else if in_table && !line.contains("---") {
            if let Some((key, default)) = columns {
                let row = cells(line);
                let listed = code(&row[key]);
                let rest: String = row[key].split('`').step_by(2).collect();
                assert!(
                    rest.chars().all(|c| c == ',' || c == ' '),
                    "{name}:{}: a key cell lists keys only",
                    n + 1
                );
                let first = listed[0].clone();
                let keys = listed
                    .iter()
                    .map(|k| match k.strip_prefix('.') {
                        Some(last) => format!("{}.{last}", first.rsplit_once('.').unwrap().0),
                        None => k.clone(),
                    })
                    .collect();
                let cell = &row[default];
                let stated = match cell.starts_with('`') {
                    true => Stated::Value(code(cell)[0].clone()),
                    false => Stated::Words(cell.clone()),
                };
                rows.push((keys, stated, n + 1));
            }
        }
        previous_in_table = in_table;
    }
    rows
}

#[test]
fn the_reference_page_lists_every_key_once_with_the_codes_default() {
    let keys = keys();
    let rows = page_rows(PAGE);
    let listed: Vec<&String> = rows.iter().flat_map(|(keys, ..)| keys).collect();
    for key in &keys {
        let times = listed.iter().filter(|k| **k == key).count();
        assert_eq!(
            times, 1,
            "docs/configuration.md lists `{key}` {times} times"
        );
    }
    check_defaults(PAGE.0, &rows, &keys);
}

/// docs/operations.md says what happens at each timeout and limit, and leaves their defaults to the
/// reference (said once): no table of it has a `default` column, and every key its tables name is a key.
#[test]
fn the_operations_page_names_keys_and_leaves_their_defaults_to_the_reference() {
    assert!(
        page_rows(OPERATIONS).is_empty(),
        "docs/operations.md repeats defaults: they belong to docs/configuration.md"
    );
    let keys = keys();
    let named: Vec<String> = OPERATIONS
        .1
        .lines()
        .filter(|line| line.trim_start().starts_with("| `"))
        .filter_map(|line| line.split('`').nth(1))
        .filter(|first| {
            ["timeouts.", "limits.", "metering."]
                .iter()
                .any(|s| first.starts_with(s))
        })
        .map(str::to_owned)
        .collect();
    assert!(
        named.len() > 10,
        "docs/operations.md shows the timeouts and limits"
    );
    for key in named {
        assert!(keys.contains(&key), "docs/operations.md: `{key}` is no key");
    }
}

/// Each row's keys are keys, and what it states of their default is the code's default.
fn check_defaults(page: &str, rows: &[(Vec<String>, Stated, usize)], keys: &[String]) {
    for (row_keys, stated, line) in rows {
        for key in row_keys {
            assert!(keys.contains(key), "{page}:{line}: `{key}` is no key");
            let default = serialized(&document(key, None));
            let default = at(&default, key);
            match stated {
                Stated::Value(value) => {
                    let written = serialized(&document(key, Some(value)));
                    assert_eq!(
                        at(&written, key),
                        default,
                        "{page}:{line}: `{key}` defaults to {default:?}, not `{value}`"
                    );
                }
                Stated::Words(words) => {
                    let nothing = match default {
                        None | Some(Value::Null) => true,
                        Some(Value::String(s)) => s.is_empty(),
                        Some(Value::Array(a)) => a.is_empty(),
                        Some(Value::Object(o)) => o.is_empty(),
                        Some(_) => false,
                    };
                    assert!(
                        nothing,
                        "{page}:{line}: `{key}` defaults to {default:?}, which the page must write \
                         in backticks, not as {words:?}"
                    );
                }
            }
        }
    }
}

/// Every key in the example, written or in a comment that shows one (`# key: value`, where the `#`
/// stands at the key's indentation less two, or replaces two of its spaces), with its line.
fn example_keys() -> Vec<(Vec<String>, usize)> {
    let mut found = Vec::new();
    let mut open: Vec<(usize, String)> = Vec::new();
    for (n, line) in EXAMPLE.lines().enumerate() {
        let text = line.trim_start();
        let mut indent = line.len() - text.len();
        let content = match text.strip_prefix('#') {
            Some(comment) => {
                let shown = comment.trim_start();
                let spaces = comment.len() - shown.len();
                if spaces == 0 {
                    continue;
                }
                indent += spaces - 1;
                shown
            }
            None => text,
        };
        let key_char =
            |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.<>".contains(c);
        let Some((key, after)) = content.split_once(':') else {
            continue;
        };
        let starts = key.starts_with(|c: char| c.is_ascii_lowercase() || c == '<');
        if !starts || !key.chars().all(key_char) || !(after.is_empty() || after.starts_with(' ')) {
            continue;
        }
        while open.last().is_some_and(|(i, _)| *i >= indent) {
            open.pop();
        }
        open.push((indent, key.to_owned()));
        found.push((open.iter().map(|(_, k)| k.clone()).collect(), n + 1));
    }
    found
}

#[test]
fn the_example_file_shows_every_key_and_no_other() {
    let keys = keys();
    let found = example_keys();
    for (path, line) in &found {
        assert!(
            keys.iter().any(|key| leads_to(path, key)),
            "config/tokentap.yaml:{line}: `{}` is no key (a comment shaped `# word: …` reads as one)",
            path.join(".")
        );
    }
    for key in &keys {
        // Below a name (`slo.models.<model>`), the example shows one name, not each key again.
        let shown = match key.find(">.") {
            Some(end) => &key[..end + 1],
            None => key,
        };
        let depth = shown.split('.').count();
        let present = found
            .iter()
            .any(|(path, _)| leads_to(path, shown) && path.len() == depth);
        assert!(present, "config/tokentap.yaml does not show `{key}`");
    }
}

#[test]
fn a_key_written_without_a_value_takes_its_default_as_one_left_out_does() {
    for text in [
        "listen:\nmax_models: ~\nshutdown_grace: null\ntimeouts: {connect: ~, idle: }\n",
        "limits: {max_request_body_bytes: ~, max_upstream_per_connection: ~}\nmetering:\n  max_event_bytes:\n",
        "metrics: {model_idle: ~, max_series: ~, allowed_hosts: ~}\nbuckets: {ttft: ~}\nui: {enabled: ~, interval: ~}\n",
        "model_list: {enabled: ~, refresh: ~, names: ~}\nslo: {ttft: ~, models: ~}\ntokenizers: ~\n",
        "request_log: ~\ntenants: ~\ntokenizer_dirs: ~\nupstream_ca_file: ~\n",
    ] {
        assert_eq!(yaml::parse(text).unwrap(), Config::default(), "{text:?}");
    }
    let c = yaml::parse("tenants: {header: x-t, max: ~}\nslo: {models: {m: ~}}\n").unwrap();
    assert_eq!(c.tenants.map(|t| t.max), Some(Tenants::DEFAULT_MAX));
    assert_eq!(
        c.slo.models["m"],
        Ceilings::default(),
        "a model named without ceilings is kept"
    );
    let msg = err("request_log: {path: ~}");
    assert!(
        msg.starts_with("request_log.path: invalid path \"\": request_log needs a `path`"),
        "{msg}"
    );
}

#[test]
fn the_key_walk_and_the_documents_it_builds_see_every_section() {
    let keys = keys();
    for key in [
        "listen",
        "timeouts.upstream_idle",
        "slo.models.<model>.e2e",
        "tenants.slo.<tenant>.ttft",
    ] {
        assert!(keys.contains(&key.to_owned()), "{key}");
    }
    assert!(keys.contains(&"tokenizers.<model>".to_owned()));
    assert_eq!(
        document("slo.models.<model>.ttft", Some("1s")),
        "slo:\n  models:\n    <model>:\n      ttft: 1s\n"
    );
    assert_eq!(document("timeouts.idle", None), "timeouts: {}\n");
    assert_eq!(document("listen", None), "");
    let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(leads_to(
        &path(&["slo", "models", "llama-3.1"]),
        "slo.models.<model>.ttft"
    ));
    assert!(!leads_to(
        &path(&["slo", "model"]),
        "slo.models.<model>.ttft"
    ));
}
