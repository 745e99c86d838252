//! What `tokentap report` and `tokentap top` print is safe for a terminal whatever they read: escape
//! sequences (a title set, the screen cleared) and line separators in a model name, tenant or id come
//! out escaped as `\u{…}`; `top` gives up on an answer larger than 64 MiB or slower than `--timeout`
//! with an error, instead of reading a 3 GB body whole or hanging on a drip.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const HOSTILE: &str = "m\u{1b}]0;owned\u{7}\u{1b}[2J\u{2028}\u{202e}x";

/// Runs the binary with `args` (at most 60 s) and returns its output.
fn tokentap(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait_with_output().expect("output")
}

/// Whether `text` holds anything a terminal acts on besides a newline.
fn acts_on_a_terminal(text: &str) -> bool {
    text.chars()
        .any(|c| (c.is_control() && c != '\n') || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202e}'))
}

#[test]
fn a_report_of_records_with_escape_sequences_prints_them_escaped() {
    let record = serde_json::json!({
        "v": 1, "start": "2026-12-03T08:00:00.000Z", "id": HOSTILE, "model": HOSTILE, "api": "chat",
        "tenant": HOSTILE, "status": 200, "outcome": "ok", "stream": true, "e2e_s": 1.0, "ttft_s": 0.1,
        "output_tokens": 3, "gaps": 2, "goodput": true
    });
    let path = std::env::temp_dir().join(format!("tokentap-hostile-{}.jsonl", std::process::id()));
    let mut file = std::fs::File::create(&path).expect("file");
    writeln!(file, "{record}").expect("record");
    drop(file);
    let file = path.to_str().expect("path");
    for args in [
        vec!["report", file, "--by", "model", "--slowest", "3"],
        vec!["report", file, "--by", "tenant", "--format", "markdown"],
    ] {
        let out = tokentap(&args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(
            stdout.contains("m\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\u{2028}\\u{202e}x"),
            "{stdout}"
        );
        assert!(!acts_on_a_terminal(&stdout), "{args:?}:\n{stdout:?}");
    }
    let _ = std::fs::remove_file(&path);
}

/// A metrics port that answers every request with `answer`, then (when `drip`) one byte a second.
async fn fake_metrics_port(answer: Vec<u8>, drip: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut head = [0u8; 4096];
                let _ = stream.read(&mut head).await;
                if stream.write_all(&answer).await.is_err() {
                    return;
                }
                // An endless body, or a slow one: until the client leaves (bounded either way).
                for _ in 0..if drip { 120 } else { 100_000 } {
                    let piece: &[u8] = if drip { b" " } else { &[b' '; 65536] };
                    if stream.write_all(piece).await.is_err() {
                        return;
                    }
                    if drip {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

fn live_view_naming(model: &str) -> String {
    let docs = include_str!("../docs/live.md");
    let example = docs
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("docs/live.md's example");
    let mut view: serde_json::Value = serde_json::from_str(example).expect("json");
    view["models"][0]["model"] = serde_json::Value::from(model);
    view.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_prints_a_hostile_model_name_escaped() {
    let body = live_view_naming(HOSTILE);
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let url = fake_metrics_port(answer.into_bytes(), false).await;
    let out = tokio::task::spawn_blocking(move || tokentap(&["top", "--once", "--url", &url]))
        .await
        .expect("top");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("m\\u{1b}]0;owned"), "{stdout}");
    assert!(!acts_on_a_terminal(&stdout), "{stdout:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_view_prints_a_model_name_from_prometheus_escaped() {
    // A Prometheus (or anything at that URL) answering every query with one sample whose model label
    // holds escape sequences: what `top --prometheus` prints of it acts on no terminal.
    let body = serde_json::json!({
        "status": "success",
        "data": {"resultType": "vector", "result": [
            {"metric": {"model": HOSTILE}, "value": [1_796_000_000.0, "0.25"]}
        ]}
    })
    .to_string();
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let url = fake_metrics_port(answer.into_bytes(), false).await;
    let out =
        tokio::task::spawn_blocking(move || tokentap(&["top", "--once", "--prometheus", &url]))
            .await
            .expect("top");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("m\\u{1b}]0;owned"), "{stdout}");
    assert!(!acts_on_a_terminal(&stdout), "{stdout:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_gives_up_on_an_endless_body_and_on_a_slow_drip_with_an_error() {
    let endless =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 3000000000\r\n\r\n"
            .to_vec();
    let url = fake_metrics_port(endless, false).await;
    let out = tokio::task::spawn_blocking(move || tokentap(&["top", "--once", "--url", &url]))
        .await
        .expect("top");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr.contains("the answer is over 64 MiB"), "{stderr}");
    let drip = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"
        .to_vec();
    let url = fake_metrics_port(drip, true).await;
    let args = ["top", "--once", "--timeout", "2s", "--url"];
    let out = tokio::task::spawn_blocking(move || {
        let mut args = args.to_vec();
        args.push(&url);
        tokentap(&args)
    })
    .await
    .expect("top");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr.contains("no whole answer within 2s"), "{stderr}");
}
