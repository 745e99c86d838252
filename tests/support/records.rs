//! The request records a test's tokentap writes (`request_log:`): a fresh file for them, and its
//! records read back once the writer (a thread of its own) has written them, and `tokentap report`'s JSON
//! of such a file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokentap::record::request_record::RequestRecord;

/// A fresh path in the temp directory for the records of `name` (this process's own).
pub fn temp_file(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("tokentap-{name}-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// The records in `path`, once it holds at least `n` (the writer is a thread of its own: waiting at
/// most [`super::HANG`]).
pub fn read_records(path: &Path, n: usize) -> Vec<RequestRecord> {
    read_lines(path, n)
}

/// The same, each record as plain JSON.
pub fn read_json_records(path: &Path, n: usize) -> Vec<serde_json::Value> {
    read_lines(path, n)
}

fn read_lines<T: DeserializeOwned>(path: &Path, n: usize) -> Vec<T> {
    let since = std::time::Instant::now();
    while since.elapsed() < super::HANG {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n {
            return text
                .lines()
                .map(|line| serde_json::from_str(line).expect("a record per line"))
                .collect();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = std::fs::read_to_string(path).unwrap_or_default();
    panic!("fewer than {n} records in {}:\n{text}", path.display());
}

/// `tokentap report --format json` of the records in `path` (strict), with these ceilings for `--slo`.
pub fn json_report(path: &Path, slo: Option<tokentap::config::Slo>) -> serde_json::Value {
    use tokentap::report::{query::Window, run, slowest::SlowBy, Format, Options};
    let options = Options {
        files: vec![path.to_string_lossy().into_owned()],
        compare: Vec::new(),
        by: None,
        window: Window::default(),
        format: Format::Json,
        slo,
        strict: true,
        progress: false,
        slowest: 0,
        slowest_by: SlowBy::TTFT,
    };
    let (mut out, mut warn) = (Vec::new(), Vec::new());
    run(&options, &mut out, &mut warn).expect("report");
    serde_json::from_slice(&out).expect("json")
}
