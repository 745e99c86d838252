//! Where the upstream's own model list says a served model's files are: vLLM's `/v1/models` gives each
//! served name a `root`, the `--model` it was started with. Started from a directory (`--model
//! /models/llama --served-model-name llama-8b`) that is a local path, and in a sidecar sharing the
//! model's volume tokentap sees the same path; started from a hub id (`--model org/llama`) it is that
//! id, which the hub cache under `tokenizer_dirs` knows by name.
//!
//! So a `root` is read two ways. An absolute path must be lexically normal (no empty, `.` or `..`
//! segments, no control characters, at most [`MAX_ROOT_BYTES`]); the only file ever opened is
//! `<root>/tokenizer.json`, a regular file of at most [`MAX_FILE_BYTES`]. Any absolute path is taken,
//! not only those under `tokenizer_dirs`: the upstream is the server the operator pointed tokentap at,
//! and it already decides the counts outright whenever it reports usage; what it can name here is a
//! file tokentap may read that is called `tokenizer.json`, parsed and never sent anywhere.
//! `model_list.tokenizer_from_root: false` turns this off (docs/tokenizers.md). Anything else (a hub
//! id, a relative path) is looked up as a model name under the search roots, with a name's rules.
//!
//! Each answer says why when there is no file, for the one log line a look-up writes.

use std::io::ErrorKind;
use std::path::PathBuf;

use super::discover::{self, FILE_NAME};

/// Longest absolute `root` read.
pub const MAX_ROOT_BYTES: usize = 4096;
/// Largest `tokenizer.json` read from a `root` (the largest vocabularies' files are tens of MB).
pub const MAX_FILE_BYTES: u64 = 128 << 20;

/// The `tokenizer.json` that `root`, as the upstream's list gives it, points to; else why not.
pub fn tokenizer_at(root: &str, roots: &[PathBuf]) -> Result<PathBuf, String> {
    if !root.starts_with('/') {
        if roots.is_empty() {
            return Err(format!(
                "its root {root:?} is no absolute path (a hub id?) and tokenizer_dirs is empty"
            ));
        }
        return discover::find(roots, root).ok_or_else(|| {
            format!(
                "its root {root:?} is no absolute path (a hub id?) and no tokenizer_dirs has it"
            )
        });
    }
    let dir = normal_absolute(root).ok_or_else(|| {
        format!("its root {root:?} is not a plain absolute path (empty, . or .. segments, control characters, or too long)")
    })?;
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(format!("its root {root:?} is not a directory")),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(format!(
                "its root {root:?} is not a directory tokentap can see (on another machine, or a volume tokentap does not mount)"
            ))
        }
        Err(e) => return Err(format!("its root {root:?} cannot be read by tokentap: {e}")),
    }
    let file = dir.join(FILE_NAME);
    match std::fs::metadata(&file) {
        Ok(meta) if !meta.is_file() => Err(format!("{} is not a regular file", file.display())),
        Ok(meta) if meta.len() > MAX_FILE_BYTES => Err(format!(
            "{} is larger than {} MiB",
            file.display(),
            MAX_FILE_BYTES >> 20
        )),
        Ok(_) => match std::fs::File::open(&file) {
            Ok(_) => Ok(file),
            Err(e) => Err(format!("{} cannot be read by tokentap: {e}", file.display())),
        },
        Err(e) if e.kind() == ErrorKind::NotFound => Err(format!(
            "its root {root:?} has no {FILE_NAME} (a SentencePiece tokenizer.model alone is not read)"
        )),
        Err(e) => Err(format!("{} cannot be read by tokentap: {e}", file.display())),
    }
}

/// `root` as a path when it is absolute and lexically normal (one trailing `/` allowed).
fn normal_absolute(root: &str) -> Option<PathBuf> {
    if root.len() > MAX_ROOT_BYTES || root.contains(char::is_control) {
        return None;
    }
    let trimmed = root.strip_suffix('/').unwrap_or(root);
    let rest = trimmed.strip_prefix('/')?;
    let normal = |s: &str| !s.is_empty() && s != "." && s != "..";
    rest.split('/').all(normal).then(|| PathBuf::from(trimmed))
}

#[cfg(test)]
mod tests {
    use super::super::discover::tests::Scratch;
    use super::*;

    #[test]
    fn an_absolute_root_with_a_tokenizer_json_is_taken_wherever_it_is() {
        let scratch = Scratch::new("root-abs");
        let file = scratch.file("llama/tokenizer.json", "{}");
        let root = format!("{}/llama", scratch.0.display());
        assert_eq!(tokenizer_at(&root, &[]), Ok(file.clone()));
        assert_eq!(tokenizer_at(&format!("{root}/"), &[]), Ok(file.clone()));
        // Hidden directories are fine in a path the upstream was started with (~/.cache/...).
        let hidden = scratch.file(".cache/m/tokenizer.json", "{}");
        let root = format!("{}/.cache/m", scratch.0.display());
        assert_eq!(tokenizer_at(&root, &[]), Ok(hidden));
    }

    #[test]
    fn a_root_without_a_readable_tokenizer_json_says_why() {
        let scratch = Scratch::new("root-bad");
        scratch.file("only-config/config.json", "{}");
        scratch.file("a-file", "{}");
        scratch.file("dir-named/tokenizer.json/x", "{}");
        let at = |rest: &str| format!("{}/{rest}", scratch.0.display());
        let cases = [
            (at("only-config"), "has no tokenizer.json"),
            (at("a-file"), "is not a directory"),
            (at("absent"), "not a directory tokentap can see"),
            (at("dir-named"), "is not a regular file"),
            (
                at("only-config/../only-config"),
                "not a plain absolute path",
            ),
            (at("./only-config"), "not a plain absolute path"),
            (
                format!("{}//x", scratch.0.display()),
                "not a plain absolute path",
            ),
            (at("x\n"), "not a plain absolute path"),
            (
                format!("/{}", "x".repeat(MAX_ROOT_BYTES)),
                "not a plain absolute path",
            ),
            ("meta-llama/Llama-3.1-8B".into(), "tokenizer_dirs is empty"),
            ("relative/dir".into(), "tokenizer_dirs is empty"),
            ("".into(), "tokenizer_dirs is empty"),
        ];
        for (root, why) in cases {
            let got = tokenizer_at(&root, &[]).expect_err(&root);
            assert!(got.contains(why), "{root:?}: {got}");
        }
    }

    #[test]
    fn a_hub_id_root_is_looked_up_by_name_under_the_search_roots() {
        let hub = Scratch::new("root-hub");
        let file = hub.file("models--org--llama/snapshots/abc/tokenizer.json", "{}");
        let roots = std::slice::from_ref(&hub.0);
        assert_eq!(tokenizer_at("org/llama", roots), Ok(file));
        let got = tokenizer_at("org/other", roots).expect_err("absent");
        assert!(got.contains("no tokenizer_dirs has it"), "{got}");
        // A hub id is a name: it may not leave the roots.
        let escape = tokenizer_at("../outside", roots).expect_err("refused");
        assert!(escape.contains("no tokenizer_dirs has it"), "{escape}");
    }
}
