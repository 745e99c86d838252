//! Where each key of a config file is written, so a problem can name its line: read from the text's
//! indentation (block mappings and `- ` lists), as `slo.models.llama-3.1-70b.ttft` → 9. A key inside a
//! flow mapping (`slo: {ttft: 1s}`) has no line of its own and is found on its nearest written
//! ancestor's. Used only to place messages: nothing is parsed from it.

use std::collections::HashMap;

/// The lines (from 1) of each key written in block style, by dotted key (`buckets.ttft[2]` for a list's
/// item): the first it is written on, and the last (a key written twice).
pub(super) struct Lines(HashMap<String, (usize, usize)>);

/// An open block: its indentation, its dotted key, and how many `- ` items it has had.
struct Open {
    indent: usize,
    key: String,
    items: usize,
}

impl Lines {
    pub(super) fn of(text: &str) -> Lines {
        let mut lines = HashMap::new();
        let mut open: Vec<Open> = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let line = n + 1;
            let content = strip_comment(raw);
            let indent = content.len() - content.trim_start_matches(' ').len();
            let mut rest = content.trim();
            if rest.is_empty() || rest == "---" || rest == "..." {
                continue;
            }
            let mut at = indent;
            // Each `- ` opens an item of the block above it (YAML allows the list at the key's own
            // indentation).
            while let Some(item) = rest.strip_prefix("- ").or((rest == "-").then_some("")) {
                while open
                    .last()
                    .is_some_and(|o| o.indent > at || (o.indent == at && o.key.ends_with(']')))
                {
                    open.pop();
                }
                let Some(parent) = open.last_mut() else {
                    break;
                };
                let key = format!("{}[{}]", parent.key, parent.items);
                parent.items += 1;
                lines.insert(key.clone(), (line, line));
                open.push(Open {
                    indent: at,
                    key,
                    items: 0,
                });
                at += rest.len() - item.trim_start().len();
                rest = item.trim_start();
            }
            let Some(name) = key_of(rest) else {
                continue;
            };
            while open.last().is_some_and(|o| o.indent >= at) {
                open.pop();
            }
            let key = match open.last() {
                Some(parent) => format!("{}.{name}", parent.key),
                None => name.to_owned(),
            };
            lines.entry(key.clone()).or_insert((line, line)).1 = line;
            open.push(Open {
                indent: at,
                key,
                items: 0,
            });
        }
        Lines(lines)
    }

    /// The line of `key`, else of its nearest ancestor written on a line of its own.
    pub(super) fn line(&self, key: &str) -> Option<usize> {
        self.find(key).map(|(first, _)| first)
    }

    /// The last line `key` is written on (the second of a key written twice), else its nearest
    /// ancestor's.
    pub(super) fn last_line(&self, key: &str) -> Option<usize> {
        self.find(key).map(|(_, last)| last)
    }

    fn find(&self, key: &str) -> Option<(usize, usize)> {
        let mut key = key;
        loop {
            if let Some(&lines) = self.0.get(key) {
                return Some(lines);
            }
            key = &key[..key.rfind(['.', '['])?];
        }
    }
}

/// The line without a trailing `# comment` (a `#` at the start or after a space).
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let comment = (0..bytes.len()).find(|&i| bytes[i] == b'#' && (i == 0 || bytes[i - 1] == b' '));
    &line[..comment.unwrap_or(line.len())]
}

/// The key a `key: value` (or `key:`) line opens, quotes taken off; `None` for anything else.
fn key_of(text: &str) -> Option<&str> {
    if let Some(quote) = text.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let end = text[1..].find(quote)? + 1;
        return text[end + 1..].starts_with(':').then(|| &text[1..end]);
    }
    if text.starts_with(['{', '[', '|', '>', '&', '*', '!']) {
        return None;
    }
    let colon = text
        .find(": ")
        .or_else(|| text.ends_with(':').then(|| text.len() - 1))?;
    Some(text[..colon].trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_on_their_lines_and_flow_keys_on_their_ancestors() {
        let text = "\
# a comment: not a key
listen: 0.0.0.0:8080   # trailing
slo:
  ttft: 500ms
  models:
    llama-3.1-70b:
      ttft: 1s
    'quoted.name': {ttft: 2s}
buckets: {ttft: [0.1, 0.5]}
tokenizer_dirs:
- /models
- /more
metrics:
  allowed_hosts:
    - a
    - b
";
        let lines = Lines::of(text);
        for (key, want) in [
            ("listen", 2),
            ("slo", 3),
            ("slo.ttft", 4),
            ("slo.models.llama-3.1-70b.ttft", 7),
            ("slo.models.quoted.name.ttft", 8),
            ("buckets.ttft[1]", 9),
            ("tokenizer_dirs[1]", 12),
            ("metrics.allowed_hosts[0]", 15),
            ("metrics.allowed_hosts[1]", 16),
            ("metrics.max_series", 13),
        ] {
            assert_eq!(lines.line(key), Some(want), "{key}");
        }
        assert_eq!(lines.line("upstream"), None);
    }
}
