//! The folder tree is the data path, and imports only run down it: a module may use its own stage, a
//! later stage or a leaf, never an earlier stage, and no two rooms import each other (directly or round
//! a circle). Stages, in path order: `net` → `proxy` → `tap` → `decode` → `record`; leaves (`config`,
//! `error`, `logging`) use only leaves; tools beside the proxy (`report`) may use any stage or leaf and
//! are used by none. A room is a file or folder directly inside a stage folder
//! (`decode/response.rs`, `decode/dialect/`) or a leaf. Imports are read as text: every `crate::` path
//! outside comments, `use crate::{a, b::c}` groups included. `docs/architecture.md` explains the rule.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The stages in path order; a module may import only from its own position or a later one.
const STAGES: &[&str] = &["net", "proxy", "tap", "decode", "record"];
/// Tools beside the proxy (`tokentap report`): before every stage, so they may use any stage or leaf
/// and nothing on the data path may use them.
const TOOLS: &[&str] = &["report"];
/// Modules at the bottom: they may import only each other.
const LEAVES: &[&str] = &["config", "logging", "shutdown"];

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

/// Every module path a source text names after `crate::`, comments left out: `crate::a::b::C` gives
/// `["a", "b", "C"]`, `crate::{a::b, c}` gives `["a", "b"]` and `["c"]`.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut paths = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `tokentap_crate::` or the like: not this crate.
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = matching_brace(group);
            for item in split_top_level(&group[..end]) {
                paths.push(segments_of(item));
            }
        } else {
            paths.push(segments_of(rest));
        }
    }
    paths.retain(|path| !path.is_empty());
    paths
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

/// Every import of the library from one room into another, by (from, to).
fn room_imports() -> BTreeMap<(String, String), Vec<Import>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut edges: BTreeMap<(String, String), Vec<Import>> = BTreeMap::new();
    for file in files {
        let module = module_of(&file, &src);
        // The binary (`src/bin/`, `src/main.rs`) and the crate root sit above the path.
        if module.is_empty() || module[0] == "bin" || module[0] == "main" {
            continue;
        }
        let from = room(&module);
        let text = fs::read_to_string(&file).expect("read source file");
        for path in crate_paths(&text) {
            let to = room(&path);
            if to == from || rank(&path[0]).is_none() {
                continue; // Inside the room, or a crate-root re-export such as `crate::Config`.
            }
            let name = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            edges.entry((from.clone(), to)).or_default().push(Import {
                file: name,
                path: format!("crate::{}", path.join("::")),
            });
        }
    }
    edges
}

fn top(room: &str) -> &str {
    room.split("::").next().unwrap_or(room)
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
fn no_module_imports_from_an_earlier_stage() {
    let mut wrong = Vec::new();
    for ((from, to), imports) in room_imports() {
        let (Some(from_rank), Some(to_rank)) = (rank(top(&from)), rank(top(&to))) else {
            continue;
        };
        if to_rank < from_rank {
            for import in imports {
                wrong.push(format!(
                    "{} imports {} ({from} may not use {to}: {} comes before {} on the path)",
                    import.file,
                    import.path,
                    top(&to),
                    top(&from),
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run back up the path:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_two_rooms_import_each_other() {
    let edges = room_imports();
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().insert(to);
    }
    // Depth-first search for a path from a room back to itself.
    fn find_cycle<'a>(
        at: &'a str,
        next: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        stack: &mut Vec<&'a str>,
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
            if let Some(cycle) = find_cycle(to, next, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    for room in next.keys() {
        if let Some(cycle) = find_cycle(room, &next, &mut Vec::new(), &mut done) {
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
            panic!("rooms import each other in a circle:\n{}", steps.join("\n"));
        }
    }
}

#[test]
fn the_import_reader_finds_plain_grouped_and_nested_paths() {
    let text = "use crate::decode::response::{Format, ResponseDecoder};\n\
                use crate::{config::Config, tap::{RequestSeen, RequestTap}};\n\
                // use crate::net::server;\n\
                let x = crate::record::slo::judge(a); my_crate::net::x();\n";
    let found: Vec<String> = crate_paths(text).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        found,
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
}
