//! The request records' file when writing it goes wrong, with the binary as an operator runs it: a write
//! cut in the middle of a record (the disk filled up, here a file size limit the test lifts again)
//! leaves one torn line, counted as lost, and the next record starts a line of its own; a FIFO that no
//! one reads as `request_log.path` neither holds up the start nor SIGTERM, and its records arrive once a
//! reader opens it.
#![cfg(unix)]

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokentap::logging::records;

use support::{ok_stream, start_binary_after, upstream, Metrics, Process};

/// One chat request through the proxy: the answer's status line ("" if none came within 30 s).
fn chat(proxy: &str) -> String {
    let request = support::raw_chat("m", true);
    support::status_line_blocking(proxy, &request, Duration::from_secs(30))
}

fn records_counted(process: &Process) -> (f64, f64) {
    let m: Metrics = process.scrape();
    let lost = m.get(records::DROPPED, &[("reason", "write_error")]);
    (m.get(records::WRITTEN, &[]), lost)
}

/// Waits (at most [`support::HANG`]) until `n` records are counted written or lost.
fn all_counted(process: &Process, n: f64) -> (f64, f64) {
    let since = Instant::now();
    while since.elapsed() < support::HANG {
        let (written, lost) = records_counted(process);
        if written + lost >= n {
            return (written, lost);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "{n} records not counted within {:?}: {:?}",
        support::HANG,
        records_counted(process)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_cut_mid_record_leaves_one_torn_line_counted_lost_and_the_next_record_starts_a_new_one(
) {
    let _slot = support::slot();
    let upstream = upstream(|_| ok_stream()).await;
    let dir = std::env::temp_dir().join(format!("tokentap-torn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("requests.jsonl");
    let yaml = format!(
        "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {}\nrequest_log: {{path: {}}}\n",
        upstream.url(),
        path.display()
    );
    // Files may grow to 4 KiB (a full disk, as far as this file is concerned); a write past it fails
    // with EFBIG instead of killing the process.
    let setup = "trap '' XFSZ; ulimit -S -f 4";
    let process = start_binary_after("records-torn", &yaml, Some(setup), Stdio::null());
    for _ in 0..40 {
        let status = chat(&process.proxy);
        assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (_, lost) = all_counted(&process, 40.0);
    assert!(lost > 0.0, "the 4 KiB limit cost no record");
    // Space again.
    let pid = process.child.id().to_string();
    let lifted = Command::new("prlimit")
        .args(["--pid", &pid, "--fsize=unlimited:"])
        .status()
        .expect("prlimit");
    assert!(lifted.success());
    for _ in 0..5 {
        let status = chat(&process.proxy);
        assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
    }
    let (written, lost) = all_counted(&process, 45.0);
    process.signal("TERM");
    let (exit, log) = process.wait();
    assert!(exit.success(), "{log}");
    let text = std::fs::read_to_string(&path).expect("records");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(text.ends_with('\n'));
    let lines: Vec<&str> = text.lines().collect();
    let whole = |l: &&str| serde_json::from_str::<serde_json::Value>(l).is_ok();
    let torn: Vec<usize> = (0..lines.len()).filter(|&i| !whole(&lines[i])).collect();
    println!(
        "{} lines: {} whole records, torn lines at {torn:?}; counted {written} written, {lost} lost",
        lines.len(),
        lines.len() - torn.len()
    );
    assert_eq!(torn.len(), 1, "one torn line:\n{text}");
    assert!(
        lines[torn[0]].starts_with("{\"v\":1,"),
        "{}",
        lines[torn[0]]
    );
    assert!(torn[0] + 1 < lines.len(), "records after the torn one");
    // What is counted written is exactly the whole records in the file; the rest counted lost.
    assert_eq!(written, (lines.len() - 1) as f64, "{text}");
    assert_eq!(written + lost, 45.0);
}

/// Starts the binary with `yaml` and reads its log until the startup line, giving up after `bound`.
/// `None` (and the child killed) if it did not start.
fn start_within(
    yaml: &str, dir: &Path, bound: Duration,
) -> Option<(std::process::Child, String, String)> {
    let config = dir.join("tokentap.yaml");
    std::fs::write(&config, yaml).expect("config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + bound;
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        let field = |key: &str| {
            line.split_once(key)
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .map(|v| v.trim_end_matches("/metrics").to_owned())
        };
        if let (Some(proxy), Some(metrics)) = (field(" listen="), field("metrics=http://")) {
            return Some((child, proxy, metrics));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Sends SIGTERM and waits (at most `bound`) for the exit.
fn terminate(child: &mut std::process::Child, bound: Duration) -> Option<std::process::ExitStatus> {
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if let Ok(Some(exit)) = child.try_wait() {
            return Some(exit);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_no_one_reads_holds_up_neither_the_start_nor_sigterm_and_a_reader_gets_the_records()
{
    let _slot = support::slot();
    let upstream = upstream(|_| ok_stream()).await;
    let dir = std::env::temp_dir().join(format!("tokentap-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let fifo = dir.join("records.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let yaml = format!(
        "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {}\nmodel_list: {{enabled: false}}\nrequest_log: {{path: {}}}\n",
        upstream.url(),
        fifo.display()
    );
    // No reader: it starts, serves, and SIGTERM ends it.
    let started = start_within(&yaml, &dir, Duration::from_secs(15));
    let (mut child, proxy, _) =
        started.expect("tokentap did not start within 15 s with a FIFO no one reads");
    assert!(chat(&proxy).starts_with("HTTP/1.1 200"));
    let exit = terminate(&mut child, Duration::from_secs(15));
    assert!(exit.is_some_and(|e| e.success()), "SIGTERM: {exit:?}");
    // A reader that comes later gets the records sent before it came.
    let started = start_within(&yaml, &dir, Duration::from_secs(15));
    let (mut child, proxy, _) = started.expect("started again");
    for _ in 0..3 {
        assert!(chat(&proxy).starts_with("HTTP/1.1 200"));
    }
    let (tx, rx) = mpsc::channel();
    let reading = fifo.clone();
    std::thread::spawn(move || {
        let Ok(file) = std::fs::File::open(&reading) else {
            return;
        };
        for line in BufReader::new(file).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let records: Vec<String> = (0..3)
        .filter_map(|_| rx.recv_timeout(Duration::from_secs(10)).ok())
        .collect();
    assert_eq!(records.len(), 3, "{records:?}");
    assert!(
        records.iter().all(|r| r.starts_with("{\"v\":1,")),
        "{records:?}"
    );
    let exit = terminate(&mut child, Duration::from_secs(15));
    assert!(exit.is_some_and(|e| e.success()), "SIGTERM: {exit:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
