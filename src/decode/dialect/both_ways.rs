//! What the scanners' differential tests share: the fixtures' events (every scanner), and for the
//! Anthropic and Responses tests the check that the scanner reads an event as serde_json does (with and
//! without the text) and the mutations of those events (bytes inserted, deleted and replaced, a value
//! swapped for a snippet); the OpenAI test mutates chunks its own, finer way.

use proptest::prelude::*;

use super::{BothWays, Observations};

/// Every event of the fixtures: the `data:` lines' JSON payloads, or an NDJSON fixture's lines.
pub fn data_events(fixtures: &[&'static str]) -> Vec<&'static str> {
    fixtures
        .iter()
        .flat_map(|f| f.lines())
        .filter_map(|l| l.strip_prefix("data:").or(l.starts_with('{').then_some(l)))
        .map(str::trim)
        .filter(|d| d.starts_with('{'))
        .collect()
}

/// Wherever the scanner reads `event`, it reads it as serde_json does, with and without the text.
pub fn same_both_ways(read: BothWays, event: &[u8]) {
    for with_text in [false, true] {
        let (fast, serde) = read(event, &Observations::default(), with_text);
        if let Some(fast) = fast {
            assert_eq!(
                Some(fast),
                serde,
                "{:?} (text {with_text})",
                String::from_utf8_lossy(event)
            );
        }
    }
}

/// What every mutation may splice in: other types, odd numbers, escapes, a duplicate key, deep nesting
/// and odd bytes; each test adds its dialect's keys.
pub const SNIPPETS: &[&str] = &[
    "null",
    "true",
    "0",
    "1.5",
    "-1",
    "1e400",
    "\"\"",
    "\"x\"",
    "\"\\u00e9\"",
    "\"\\ud800\"",
    "[]",
    "{}",
    "[1,{\"text\":\"a\"}]",
    "\"text\":\"dup\",",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    "\u{0}",
    "\u{7f}",
    "é",
];

/// Every one of `events`: read as serde_json reads it, and by the scanner exactly where `fast` says it
/// should be (a delta, its type spelled with an escape or not).
pub fn fast_exactly_where(read: BothWays, events: &[&str], fast: fn(&str) -> bool) {
    for event in events {
        same_both_ways(read, event.as_bytes());
        let (fast_read, _) = read(event.as_bytes(), &Observations::default(), true);
        assert_eq!(fast_read.is_some(), fast(event), "{event}");
    }
}

/// 4,000 mutations (see [`mutated`]) of the fixtures' events and `shapes`, each read alike both ways
/// wherever the scanner reads it.
pub fn mutations_read_alike(
    read: BothWays, fixtures: &[&'static str], shapes: &[&'static str], snippets: &[&'static str],
) {
    let config = ProptestConfig {
        cases: 4000,
        ..ProptestConfig::default()
    };
    let mutants = mutated(fixtures, shapes, snippets);
    let outcome = proptest::test_runner::TestRunner::new(config).run(&mutants, |event| {
        same_both_ways(read, &event);
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

/// One to three edits of one of the fixtures' events or `shapes`: a snippet inserted, a byte deleted or
/// replaced, or the value after the next colon swapped for a snippet.
pub fn mutated(
    fixtures: &[&'static str], shapes: &[&'static str], snippets: &[&'static str],
) -> impl Strategy<Value = Vec<u8>> {
    let snippets: Vec<&'static str> = SNIPPETS.iter().chain(snippets).copied().collect();
    let mut base = data_events(fixtures);
    base.extend_from_slice(shapes);
    (
        proptest::sample::select(base),
        proptest::collection::vec(
            (
                0usize..400,
                0u8..4,
                proptest::sample::select(snippets),
                any::<u8>(),
            ),
            1..4,
        ),
    )
        .prop_map(|(event, edits)| {
            let mut bytes = event.as_bytes().to_vec();
            for (at, op, snippet, byte) in edits {
                let at = at % (bytes.len() + 1);
                match op {
                    0 => {
                        bytes.splice(at..at, snippet.bytes());
                    }
                    1 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    2 if at < bytes.len() => bytes[at] = byte,
                    _ => {
                        if let Some(colon) = bytes[at..].iter().position(|&b| b == b':') {
                            let start = at + colon + 1;
                            let end = bytes[start..]
                                .iter()
                                .position(|&b| b == b',' || b == b'}')
                                .map_or(bytes.len(), |e| start + e);
                            bytes.splice(start..end, snippet.bytes());
                        }
                    }
                }
            }
            bytes
        })
}
