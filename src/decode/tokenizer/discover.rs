//! Where a served model's `tokenizer.json` is, found from its name alone under the configured search
//! roots (`tokenizer_dirs`, by default the HuggingFace hub cache), so exact counts need no per-model
//! configuration. Two layouts are recognised under each root, in this order:
//!
//! - a model directory: `<root>/<name>/tokenizer.json`, or for an absolute name (vLLM serves
//!   `--model /models/llama` as `/models/llama`) `<name>/tokenizer.json` when the name lies under the root;
//! - the HuggingFace hub cache: `org/name` (or `name`) → `<root>/models--org--name/snapshots/<rev>/
//!   tokenizer.json`, `<rev>` from `refs/main`, else the most recently modified snapshot holding one.
//!
//! Model names come from clients, so a name is never a path of its own: it is only ever joined under a
//! root, after checking it lexically (1 to [`MAX_SEGMENTS`] `/`-separated segments, none empty, none
//! starting with `.` — so no `.`, `..` or hidden directory — no `\` and no control characters; an
//! absolute name must start with a root). The only file ever opened is one named `tokenizer.json` (and
//! a hub cache's `refs/main`). Symbolic links inside a root are followed: the root's contents are the
//! operator's (the hub cache itself links snapshots to `blobs/`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub const FILE_NAME: &str = "tokenizer.json";
/// Most path segments a model name may have.
pub const MAX_SEGMENTS: usize = 8;
/// Longest model name looked up.
const MAX_NAME_BYTES: usize = 512;
/// Directory entries read per directory when listing snapshots or scanning a root.
const MAX_ENTRIES: usize = 4096;

/// The HuggingFace hub cache, as `huggingface_hub` (and so vLLM) finds it: `$HF_HUB_CACHE`, else
/// `$HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
/// `$HOME/.cache/huggingface/hub`. Only absolute values count; `None` when none is set.
pub fn hf_hub_cache(env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let absolute = |name: &str| env(name).map(PathBuf::from).filter(|p| p.is_absolute());
    absolute("HF_HUB_CACHE")
        .or_else(|| absolute("HUGGINGFACE_HUB_CACHE"))
        .or_else(|| Some(absolute("HF_HOME")?.join("hub")))
        .or_else(|| Some(absolute("XDG_CACHE_HOME")?.join("huggingface/hub")))
        .or_else(|| Some(absolute("HOME")?.join(".cache/huggingface/hub")))
}

/// The `tokenizer.json` for `model` under the first root that has one.
pub fn find(roots: &[PathBuf], model: &str) -> Option<PathBuf> {
    roots.iter().find_map(|root| find_under(root, model))
}

fn find_under(root: &Path, model: &str) -> Option<PathBuf> {
    let relative = relative_name(root, model)?;
    let dir = relative.iter().fold(root.to_path_buf(), |p, s| p.join(s));
    let in_dir = dir.join(FILE_NAME);
    if in_dir.is_file() {
        return Some(in_dir);
    }
    // A hub repository id is `name` or `org/name`, given as such (not as a path under the root).
    match (model.starts_with('/'), relative.as_slice()) {
        (false, [name]) => hf_snapshot(&root.join(format!("models--{name}"))),
        (false, [org, name]) => hf_snapshot(&root.join(format!("models--{org}--{name}"))),
        _ => None,
    }
}

/// The segments of `model` below `root`, or `None` when the name may not be looked up there.
fn relative_name<'a>(root: &Path, model: &'a str) -> Option<Vec<&'a str>> {
    if model.len() > MAX_NAME_BYTES || model.contains(['\\']) || model.contains(char::is_control) {
        return None;
    }
    let relative = if model.starts_with('/') {
        // "" for the filesystem root; the '/' after the root keeps `/models` from taking `/modelsx`.
        let root = root.to_str()?.trim_end_matches('/');
        model.strip_prefix(root)?.strip_prefix('/')?
    } else {
        model
    };
    let segments: Vec<&str> = relative.split('/').collect();
    let fine = |s: &&str| !s.is_empty() && !s.starts_with('.');
    (segments.len() <= MAX_SEGMENTS && segments.iter().all(fine)).then_some(segments)
}

/// `snapshots/<rev>/tokenizer.json` of a hub cache repository directory: `<rev>` from `refs/main`
/// when that snapshot has the file, else the most recently modified snapshot that has it.
fn hf_snapshot(repo: &Path) -> Option<PathBuf> {
    let snapshots = repo.join("snapshots");
    if !snapshots.is_dir() {
        return None;
    }
    let main = std::fs::read_to_string(repo.join("refs/main")).unwrap_or_default();
    let main = main.trim();
    if !main.is_empty() && main.len() <= 64 && main.bytes().all(|b| b.is_ascii_alphanumeric()) {
        let file = snapshots.join(main).join(FILE_NAME);
        if file.is_file() {
            return Some(file);
        }
    }
    let newest = std::fs::read_dir(&snapshots)
        .ok()?
        .take(MAX_ENTRIES)
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path().join(FILE_NAME))
        .filter(|file| file.is_file())
        .map(|file| (modified(file.parent()), file))
        .max();
    newest.map(|(_, file)| file)
}

fn modified(path: Option<&Path>) -> SystemTime {
    let meta = path.and_then(|p| std::fs::metadata(p).ok());
    meta.and_then(|m| m.modified().ok())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// What is discoverable under `root` now, as (model name, file), for the startup log and
/// `check-config`: hub cache repositories (`org/name`), and model directories one or two levels down
/// (`llama`, `org/llama`; an absolute name such as `<root>/llama` finds the same file). Sorted by name.
pub fn scan(root: &Path) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    for (name, path) in subdirectories(root) {
        if let Some(repo) = name.strip_prefix("models--") {
            if let Some(file) = hf_snapshot(&path) {
                found.push((repo.replacen("--", "/", 1), file));
            }
        } else if path.join(FILE_NAME).is_file() {
            found.push((name, path.join(FILE_NAME)));
        } else {
            for (inner, path) in subdirectories(&path) {
                if path.join(FILE_NAME).is_file() {
                    found.push((format!("{name}/{inner}"), path.join(FILE_NAME)));
                }
            }
        }
    }
    found.sort();
    found
}

/// Directories directly in `dir` whose names are valid model-name segments.
fn subdirectories(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .take(MAX_ENTRIES)
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
        .filter(|(name, path)| !name.starts_with('.') && path.is_dir())
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A scratch directory removed when dropped.
    pub(crate) struct Scratch(pub PathBuf);

    impl Scratch {
        pub(crate) fn new(name: &str) -> Self {
            let dir = std::env::temp_dir()
                .join(format!("tokentap-discover-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("scratch dir");
            Scratch(dir)
        }

        pub(crate) fn file(&self, relative: &str, text: &str) -> PathBuf {
            let path = self.0.join(relative);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, text).expect("write");
            path
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_hub_cache_is_found_as_huggingface_hub_finds_it() {
        let all = [
            ("HF_HUB_CACHE", "/hub"),
            ("HF_HOME", "/hf"),
            ("XDG_CACHE_HOME", "/xdg"),
            ("HOME", "/home/u"),
        ];
        let relative = [("HF_HOME", "relative"), ("HOME", "/h")];
        type Vars<'a> = &'a [(&'a str, &'a str)];
        let cases: [(Vars, Option<&str>); 6] = [
            (&all, Some("/hub")),
            (&all[1..], Some("/hf/hub")),
            (&all[2..], Some("/xdg/huggingface/hub")),
            (&all[3..], Some("/home/u/.cache/huggingface/hub")),
            (&relative, Some("/h/.cache/huggingface/hub")),
            (&[], None),
        ];
        for (vars, expected) in cases {
            let env = |name: &str| {
                let hit = vars.iter().find(|(k, _)| *k == name);
                hit.map(|(_, v)| OsString::from(v))
            };
            assert_eq!(hf_hub_cache(env), expected.map(PathBuf::from), "{vars:?}");
        }
    }

    #[test]
    fn a_hub_cache_repository_resolves_through_refs_main_else_the_newest_snapshot() {
        let hub = Scratch::new("hub");
        let roots = std::slice::from_ref(&hub.0);
        let pinned = hub.file("models--org--llama/snapshots/aaa111/tokenizer.json", "{}");
        hub.file("models--org--llama/snapshots/bbb222/tokenizer.json", "{}");
        hub.file("models--org--llama/refs/main", "aaa111\n");
        assert_eq!(find(roots, "org/llama"), Some(pinned));
        // Without refs/main (or when it names a snapshot without the file): the newest snapshot.
        let only = hub.file("models--gpt2/snapshots/ccc333/tokenizer.json", "{}");
        assert_eq!(find(roots, "gpt2"), Some(only));
        hub.file("models--org--old/refs/main", "ddd444");
        hub.file("models--org--old/snapshots/ddd444/config.json", "{}");
        let old = hub.file("models--org--old/snapshots/eee555/tokenizer.json", "{}");
        assert_eq!(find(roots, "org/old"), Some(old));
        assert_eq!(find(roots, "org/missing"), None);
        let names: Vec<String> = scan(&hub.0).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["gpt2", "org/llama", "org/old"]);
    }

    #[test]
    fn a_model_directory_is_found_by_its_name_or_its_absolute_path_under_a_root() {
        let models = Scratch::new("models");
        let llama = models.file("llama/tokenizer.json", "{}");
        let nested = models.file("org/qwen/tokenizer.json", "{}");
        let roots = [PathBuf::from("/nonexistent"), models.0.clone()];
        assert_eq!(find(&roots, "llama"), Some(llama.clone()));
        assert_eq!(find(&roots, "org/qwen"), Some(nested.clone()));
        let absolute = format!("{}/llama", models.0.display());
        assert_eq!(find(&roots, &absolute), Some(llama.clone()));
        let with_slash = [PathBuf::from(format!("{}/", models.0.display()))];
        assert_eq!(find(&with_slash, &absolute), Some(llama.clone()));
        let names: Vec<String> = scan(&models.0).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["llama", "org/qwen"]);
    }

    #[test]
    fn names_that_would_leave_a_root_or_name_another_file_are_refused() {
        let scratch = Scratch::new("escape");
        let root = scratch.0.join("root");
        scratch.file("root/llama/tokenizer.json", "{}");
        scratch.file("outside/tokenizer.json", "{}");
        scratch.file("root/.hidden/tokenizer.json", "{}");
        scratch.file("rootless/tokenizer.json", "{}");
        let roots = [root.clone()];
        let outside = scratch.0.join("outside");
        let refused = [
            "../outside".to_owned(),
            "llama/../../outside".to_owned(),
            "./llama".to_owned(),
            "llama/.".to_owned(),
            "llama//".to_owned(),
            ".hidden".to_owned(),
            "".to_owned(),
            outside.display().to_string(),
            format!("{}/../outside", root.display()),
            format!("{}less", root.display()), // a sibling that merely starts with the root's name
            "llama\\..\\..\\outside".to_owned(),
            "llama\n".to_owned(),
            "llama/tokenizer.json".to_owned(),
            "a/b/c/d/e/f/g/h/i".to_owned(),
            "x".repeat(600),
        ];
        for name in &refused {
            assert_eq!(find(&roots, name), None, "{name:?}");
        }
        assert!(find(&roots, "llama").is_some());
    }

    #[test]
    fn the_filesystem_root_as_a_search_root_takes_absolute_names() {
        let models = Scratch::new("slash");
        let file = models.file("m/tokenizer.json", "{}");
        let absolute = format!("{}/m", models.0.display());
        assert_eq!(find(&[PathBuf::from("/")], &absolute), Some(file));
    }
}
