//! The folder tree is the data path, and imports only run down it: a module may use its own stage, a
//! later stage or a leaf, never an earlier stage, and no two rooms import each other (directly or round
//! a circle), nor two parts of one room (the files and folders directly inside its folder). Stages, in path order: `capture` (packets read off an interface, a source of bytes before the rest) → `net` → `proxy` → `tap` → `decode` → `record`; leaves (`config`,
//! `logging`, `shutdown`) use only leaves; tools beside the path (`app`, which assembles every stage
//! into a running tokentap, `report`, and `scripted`, the model server of the demo and the tests) may use
//! any stage or leaf and are used by none. A room is a
//! file or folder directly inside a stage or tool folder (`decode/response.rs`, `decode/dialect/`,
//! `app/start.rs`) or a leaf. Imports are read as text: every `crate::` path and every `super::` path
//! (resolved against the module it is written in, inline `mod tests { … }` included) outside comments
//! and string literals, `use crate::{a, b::c}` groups included. `docs/architecture.md` explains the rule.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The stages in path order; a module may import only from its own position or a later one.
const STAGES: &[&str] = &["capture", "net", "proxy", "tap", "decode", "record"];
/// Tools beside the path (`app`: startup and shutdown; `report`: `tokentap report`; `scripted`: the
/// scripted model server): before every
/// stage, so they may use any stage or leaf, and nothing but the crate root and the binary uses them.
const TOOLS: &[&str] = &["app", "report", "scripted"];
/// Modules at the bottom: they may import only each other.
const LEAVES: &[&str] = &["config", "govern", "logging", "shutdown"];

/// A module's place on the path: tools first, then each stage in order, leaves after every stage.
fn rank(top: &str) -> Option<usize> {
    if TOOLS.contains(&top) {
        return Some(0);
    }
    STAGES
        .iter()
        .position(|stage| *stage == top)
        .map(|at| at + 1)
        .or_else(|| LEAVES.contains(&top).then_some(STAGES.len() + 1))
}

/// The room a module path (`["decode", "response", "ResponseDecoder"]`) belongs to: `decode::response`, or the leaf.
fn room(segments: &[String]) -> String {
    match segments {
        [top, second, ..] if STAGES.contains(&top.as_str()) || TOOLS.contains(&top.as_str()) => {
            format!("{top}::{second}")
        }
        [top, ..] => top.clone(),
        [] => String::new(),
    }
}

/// The module path of a file under `src/`: `src/decode/dialect/mod.rs` → `["decode", "dialect"]`.
fn module_of(file: &Path, src: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap_or(file);
    let mut segments: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if segments
        .last()
        .is_some_and(|last| last == "mod" || last == "lib")
    {
        segments.pop();
    }
    segments
}

/// A source text as code: comments (line, block and doc) removed, and the insides of string, byte
/// string, raw string and character literals blanked, so every brace and path left is the code's own.
fn code_of(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut code = String::with_capacity(text.len());
    let mut at = 0;
    // Whether the identifier-like run before `at` is empty or only `b` (`br"…"`).
    let raw_may_open = |at: usize| match at.checked_sub(1).map(|before| chars[before]) {
        None => true,
        Some('b') => !at
            .checked_sub(2)
            .is_some_and(|before| is_ident(chars[before])),
        Some(before) => !is_ident(before),
    };
    while at < chars.len() {
        let c = chars[at];
        let next = chars.get(at + 1).copied();
        if c == '/' && next == Some('/') {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while at < chars.len() {
                if chars[at] == '/' && chars.get(at + 1) == Some(&'*') {
                    depth += 1;
                    at += 2;
                } else if chars[at] == '*' && chars.get(at + 1) == Some(&'/') {
                    depth -= 1;
                    at += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    at += 1;
                }
            }
            code.push(' ');
        } else if c == 'r' && matches!(next, Some('"' | '#')) && raw_may_open(at) {
            // r"…", r#"…"#: no escapes, closed by a quote and as many hashes.
            let mut hashes = 0;
            let mut open = at + 1;
            while chars.get(open) == Some(&'#') {
                hashes += 1;
                open += 1;
            }
            if chars.get(open) != Some(&'"') {
                code.push(c); // `r#ident`, a raw identifier.
                at += 1;
                continue;
            }
            at = open + 1;
            while at < chars.len() {
                let closes =
                    chars[at] == '"' && (1..=hashes).all(|n| chars.get(at + n) == Some(&'#'));
                if closes {
                    at += 1 + hashes;
                    break;
                }
                at += 1;
            }
            code.push_str("\"\"");
        } else if c == '"' {
            at += 1;
            while at < chars.len() && chars[at] != '"' {
                at += if chars[at] == '\\' { 2 } else { 1 };
            }
            at += 1;
            code.push_str("\"\"");
        } else if c == '\'' && (next == Some('\\') || chars.get(at + 2) == Some(&'\'')) {
            // A character literal ('{', '\n', '\u{7b}'), not a lifetime or a label ('a, 'static).
            at += 1;
            while at < chars.len() && chars[at] != '\'' {
                at += if chars[at] == '\\' { 2 } else { 1 };
            }
            at += 1;
            code.push_str("' '");
        } else {
            code.push(c);
            at += 1;
        }
    }
    code
}

/// Every module path a source text names, as a path from the crate root, comments and literals left
/// out: `crate::a::b::C` gives `["a", "b", "C"]`, `crate::{a::b, c}` gives `["a", "b"]` and `["c"]`,
/// and `super::b` is resolved against the module it is written in: `module` (the file's, from
/// [`module_of`]) and, inside an inline `mod tests { … }`, that module's name after it.
fn crate_paths(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let code = code_of(text);
    let mut paths = Vec::new();
    // One entry per open brace: the inline module it opens, if it does.
    let mut braces: Vec<Option<String>> = Vec::new();
    for (at, c) in code.char_indices() {
        match c {
            '{' => braces.push(inline_module(&code[..at])),
            '}' => {
                braces.pop();
            }
            _ => {}
        }
        let rest = &code[at..];
        if !(rest.starts_with("crate::") || rest.starts_with("super::")) {
            continue;
        }
        if code[..at].ends_with(|c: char| is_ident(c) || c == ':') {
            continue; // `tokentap_crate::`, or the second `super` of `super::super::`.
        }
        let (base, rest) = match rest.strip_prefix("crate::") {
            Some(rest) => (Vec::new(), rest),
            None => {
                let mut base: Vec<String> = module.to_vec();
                base.extend(braces.iter().flatten().cloned());
                let mut rest = rest;
                while let Some(after) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = after;
                }
                (base, rest)
            }
        };
        let resolved = |item: &str| {
            let mut path = base.clone();
            path.extend(segments_of(item));
            path
        };
        if let Some(group) = rest.strip_prefix('{') {
            let end = matching_brace(group);
            paths.extend(split_top_level(&group[..end]).into_iter().map(resolved));
        } else {
            paths.push(resolved(rest));
        }
    }
    paths.retain(|path| !path.is_empty());
    paths
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The module an opening brace begins, when the code just before it is `mod name`.
fn inline_module(before: &str) -> Option<String> {
    let before = before.trim_end();
    let head = before.trim_end_matches(is_ident);
    let name = &before[head.len()..];
    let spaced = head.trim_end();
    let keyword_head = spaced.strip_suffix("mod")?;
    let module = !name.is_empty() && spaced.len() < head.len() && !keyword_head.ends_with(is_ident);
    module.then(|| name.to_owned())
}

/// The leading `a::b::c` of `text`, as segments.
fn segments_of(text: &str) -> Vec<String> {
    let path: String = text
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
        .collect();
    path.split("::")
        .filter(|segment| !segment.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The index of the `}` closing a group whose `{` came just before `text`.
fn matching_brace(text: &str) -> usize {
    let mut depth = 0usize;
    for (at, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return at,
            '}' => depth -= 1,
            _ => {}
        }
    }
    text.len()
}

/// `a::b, c::{d, e}` → `a::b`, `c::{d, e}` (only the first segments matter here).
fn split_top_level(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&group[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("read src")
        .map(|entry| entry.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// One import between two rooms: where it is written and what it names.
struct Import {
    file: String,
    path: String,
}

type Edges = BTreeMap<(String, String), Vec<Import>>;

/// Every import of the library from one room into another, by (from, to).
fn room_imports() -> Edges {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let sources = files.iter().map(|file| {
        let name = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        let text = fs::read_to_string(file).expect("read source file");
        (name, module_of(file, &src), text)
    });
    edges_of(sources)
}

/// The imports between rooms in these sources, each a file's name, its module path and its text.
fn edges_of(sources: impl IntoIterator<Item = (String, Vec<String>, String)>) -> Edges {
    let mut edges = Edges::new();
    for (file, module, text) in sources {
        // The binary (`src/bin/`, `src/main.rs`) and the crate root sit above the path.
        if module.is_empty() || module[0] == "bin" || module[0] == "main" {
            continue;
        }
        let from = room(&module);
        for path in crate_paths(&text, &module) {
            let to = room(&path);
            if to == from || rank(&path[0]).is_none() {
                continue; // Inside the room, or a crate-root re-export such as `crate::Config`.
            }
            edges.entry((from.clone(), to)).or_default().push(Import {
                file: file.clone(),
                path: format!("crate::{}", path.join("::")),
            });
        }
    }
    edges
}

/// The part of its room a module path is in: the file or folder directly inside the room's folder
/// (`record::metrics::registry`); `None` for the room's own `mod.rs` and the items it defines (its
/// door: it declares its parts and says what they offer outside) and for its `tests`.
fn part(segments: &[String], src: &Path) -> Option<String> {
    let room = room(segments);
    let name = segments.get(room.split("::").count())?;
    let folder = src.join(room.replace("::", "/"));
    let exists = folder.join(format!("{name}.rs")).is_file() || folder.join(name).is_dir();
    // A room's tests read every part of it, as its tests may.
    (exists && name != "tests").then(|| format!("{room}::{name}"))
}

/// The imports between the parts of one room, by (from, to).
fn part_imports() -> Edges {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut edges = Edges::new();
    for file in &files {
        let module = module_of(file, &src);
        if module.is_empty() || module[0] == "bin" || module[0] == "main" {
            continue;
        }
        let Some(from) = part(&module, &src) else {
            continue;
        };
        let text = fs::read_to_string(file).expect("read source file");
        for path in crate_paths(&text, &module) {
            let Some(to) = part(&path, &src) else {
                continue;
            };
            if to != from && room(&path) == room(&module) {
                let name = file.strip_prefix(root).unwrap_or(file).display();
                edges.entry((from.clone(), to)).or_default().push(Import {
                    file: name.to_string(),
                    path: format!("crate::{}", path.join("::")),
                });
            }
        }
    }
    edges
}

fn top(room: &str) -> &str {
    room.split("::").next().unwrap_or(room)
}

/// A circle of rooms each importing the next, the first room repeated at the end, if there is one.
fn circle(edges: &Edges) -> Option<Vec<&str>> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().insert(to);
    }
    // Depth-first search for a path from a room back to itself.
    fn find<'a>(
        at: &'a str, next: &BTreeMap<&'a str, BTreeSet<&'a str>>, stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(start) = stack.iter().position(|room| *room == at) {
            let mut cycle = stack[start..].to_vec();
            cycle.push(at);
            return Some(cycle);
        }
        if !done.insert(at) {
            return None;
        }
        stack.push(at);
        for to in next.get(at).into_iter().flatten() {
            if let Some(cycle) = find(to, next, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    next.keys()
        .find_map(|room| find(room, &next, &mut Vec::new(), &mut done))
}

#[test]
fn every_src_file_is_in_a_stage_or_a_leaf() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut homeless = Vec::new();
    for file in &files {
        let module = module_of(file, &src);
        let placed = module.is_empty()
            || module[0] == "bin"
            || module[0] == "main"
            || rank(&module[0]).is_some();
        if !placed {
            homeless.push(file.display().to_string());
        }
    }
    assert!(
        homeless.is_empty(),
        "files outside every stage folder and leaf (add them to a stage, or a new stage to STAGES \
         and docs/architecture.md): {homeless:#?}"
    );
}

#[test]
fn no_module_imports_from_an_earlier_stage_or_a_tool() {
    let mut wrong = Vec::new();
    for ((from, to), imports) in room_imports() {
        let (Some(from_rank), Some(to_rank)) = (rank(top(&from)), rank(top(&to))) else {
            continue;
        };
        let why = if to_rank < from_rank {
            format!("{} comes before {} on the path", top(&to), top(&from))
        } else if TOOLS.contains(&top(&to)) && top(&to) != top(&from) {
            format!(
                "{} is a tool, which only the crate root and the binary use",
                top(&to)
            )
        } else {
            continue;
        };
        for import in imports {
            wrong.push(format!(
                "{} imports {} ({from} may not use {to}: {why})",
                import.file, import.path,
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run back up the path or into a tool:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_two_rooms_import_each_other() {
    if let Some(steps) = circle_said(&room_imports()) {
        panic!("rooms import each other in a circle:\n{steps}");
    }
}

/// The first circle of `edges`, one import per step, if there is one.
fn circle_said(edges: &Edges) -> Option<String> {
    let cycle = circle(edges)?;
    let steps: Vec<String> = cycle
        .windows(2)
        .map(|pair| {
            let imports = &edges[&(pair[0].to_owned(), pair[1].to_owned())];
            format!(
                "{} → {}: {} imports {}",
                pair[0], pair[1], imports[0].file, imports[0].path
            )
        })
        .collect();
    Some(steps.join("\n"))
}

/// Inside a room too (issue 51: `record/metrics/registry.rs ↔ rebucket.rs` was the third circle in
/// that folder): no two of its files or folders import each other, directly or round a circle.
#[test]
fn no_two_parts_of_a_room_import_each_other() {
    if let Some(steps) = circle_said(&part_imports()) {
        panic!("parts of a room import each other in a circle:\n{steps}");
    }
}

fn joined(paths: Vec<Vec<String>>) -> Vec<String> {
    paths.iter().map(|path| path.join("::")).collect()
}

#[test]
fn the_import_reader_finds_plain_grouped_and_nested_paths() {
    let text = "use crate::decode::response::{Format, ResponseDecoder};\n\
                use crate::{config::Config, tap::{RequestSeen, RequestTap}};\n\
                // use crate::net::server;\n\
                let x = crate::record::slo::judge(a); my_crate::net::x();\n";
    assert_eq!(
        joined(crate_paths(text, &segments_of("net::server"))),
        [
            "decode::response",
            "config::Config",
            "tap",
            "record::slo::judge"
        ]
    );
    assert_eq!(
        room(&segments_of("decode::response::ResponseDecoder")),
        "decode::response"
    );
    assert_eq!(room(&segments_of("config::Config")), "config");
    assert_eq!(room(&segments_of("app::start::start")), "app::start");
}

#[test]
fn the_import_reader_resolves_super_against_the_module_it_is_written_in() {
    let text = "use super::{discover, load};\n\
                use super::super::sse::SseFramer;\n\
                /* use super::gone; */ const BRACE: char = '{'; let s = \"super::not { a path\";\n\
                let r = r#\"}\"#; fn f<'a>(x: &'a str) {}\n\
                #[cfg(test)]\n\
                mod tests {\n\
                    use super::*;\n\
                    use super::super::root::Scratch;\n\
                    mod deeper { use super::super::Model; }\n\
                }\n\
                use super::after_tests;\n";
    assert_eq!(
        joined(crate_paths(text, &segments_of("decode::tokenizer::loader"))),
        [
            "decode::tokenizer::discover",
            "decode::tokenizer::load",
            "decode::sse::SseFramer",
            "decode::tokenizer::loader",
            "decode::tokenizer::root::Scratch",
            "decode::tokenizer::loader::Model",
            "decode::tokenizer::after_tests",
        ]
    );
    // In a folder's `mod.rs`, `super` is the folder's parent.
    assert_eq!(
        joined(crate_paths(
            "use super::tap::RequestTap;",
            &segments_of("net")
        )),
        ["tap::RequestTap"]
    );
}

#[test]
fn a_circle_through_super_is_found() {
    let source = |file: &str, module: &str, text: &str| {
        (file.to_owned(), segments_of(module), text.to_owned())
    };
    // `decode/a.rs` uses its sibling through `super::`, `decode/b.rs` names `a` from the crate root.
    let sources = [
        source("src/decode/a.rs", "decode::a", "use super::b::Thing;"),
        source(
            "src/decode/b.rs",
            "decode::b",
            "use crate::decode::a::Other;",
        ),
        source("src/decode/c.rs", "decode::c", "use super::a::Other;"),
    ];
    let edges = edges_of(sources);
    assert_eq!(
        circle(&edges),
        Some(vec!["decode::a", "decode::b", "decode::a"])
    );
    // Without the `super::` import there is none.
    let sources = [
        source("src/decode/a.rs", "decode::a", "fn f() {}"),
        source(
            "src/decode/b.rs",
            "decode::b",
            "use crate::decode::a::Other;",
        ),
    ];
    assert_eq!(circle(&edges_of(sources)), None);
}
