//! The one log line per finished request: it says what happened, and with no ceiling configured a
//! request that is not goodput says why (its outcome, `not_2xx`) instead of a bare "failed". Every
//! value a client chooses (method, path, model, request id) is quoted and escaped, so a model named
//! `inj x status=500 outcome="timeout"` cannot add keys to the line, and line or paragraph separators
//! (U+2028, U+2029) and control characters never reach the log raw: the binary's own log, parsed as a
//! logfmt reader parses it.

use crate::support;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::*;

/// Collects what the log layer writes, for the test to read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn finished_lines(&self) -> Vec<String> {
        let bytes = self.0.lock().expect("log buffer").clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|l| l.contains("request finished"))
            .map(str::to_owned)
            .collect()
    }
}

fn slo_of(line: &str) -> &str {
    let at = line.find(" slo=").expect("an slo field") + 5;
    line[at..].split(' ').next().unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn the_slo_field_says_met_missed_or_why_the_request_did_not_count() {
    let log = Captured::default();
    let writer = log.clone();
    // The binary's field formatter, which writes the request line's pre-formatted figures as they are.
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .fmt_fields(tokentap::logging::fields::Fields)
        .with_writer(move || writer.clone())
        .finish();
    // The test runtime has one thread: every task of the proxy logs through this subscriber.
    let _guard = tracing::subscriber::set_default(subscriber);

    let upstream = upstream(|request| {
        if request.request_line().contains("/missing") {
            return vec![json_response(404, "Not Found", r#"{"error":"no"}"#)];
        }
        vec![
            sse_head(),
            chunk(ROLE_CHUNK.as_bytes()),
            Step::Sleep(ms(200)),
            chunk(content_chunk("a").as_bytes()),
            chunk(DONE.as_bytes()),
            last_chunk(),
        ]
    })
    .await;
    let slow = proxy(&upstream.url(), "slo:\n  ttft: 100ms\n").await;
    let plain = proxy(&upstream.url(), "").await;
    let chat = "/v1/chat/completions";
    send(&client(), post(&plain, chat, &chat_request("m"))).await;
    send(&client(), post(&slow, chat, &chat_request("m"))).await;
    send(
        &client(),
        post(&plain, "/missing/v1/chat/completions", "{}"),
    )
    .await;
    // A client that leaves during the wait for the first token.
    let (mut sender, conn) = open(&plain).await;
    let response = sender
        .send_request(post(&plain, chat, &chat_request("m")))
        .await
        .expect("head");
    drop(response);
    drop(sender);
    conn.abort();
    settle(&plain).await;
    settle(&slow).await;

    let lines = log.finished_lines();
    let verdicts: Vec<&str> = lines.iter().map(|l| slo_of(l)).collect();
    assert_eq!(
        verdicts,
        ["met", "missed:ttft", "not_2xx", "cancelled"],
        "{lines:#?}"
    );
    // Each line names its request by id (tokentap's own here: no client sent x-request-id).
    for line in &lines {
        assert!(line.contains(" id="), "{line}");
    }
}

/// Sends `body` to `path` with `x-request-id: id` over a blocking connection; the status line.
fn request(proxy: &str, method: &str, path: &str, id: &str, body: &str) -> String {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-request-id: {id}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    status_line_blocking(proxy, request.as_bytes(), Duration::from_secs(10))
}

/// A logfmt reader: `key=value` pairs, a value either bare (up to a space) or double-quoted with
/// backslash escapes. Every pair, in order, with the quoted values unescaped as Rust's `Debug` wrote them.
fn logfmt(line: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut rest = line;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].rsplit(' ').next().unwrap_or("").to_owned();
        let after = &rest[eq + 1..];
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => {
                let mut value = String::new();
                let mut chars = quoted.char_indices();
                let mut end = quoted.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '"' => {
                            end = i + 1;
                            break;
                        }
                        '\\' => match chars.next() {
                            Some((_, 'u')) => {
                                let hex: String = chars
                                    .by_ref()
                                    .map(|(_, c)| c)
                                    .skip(1)
                                    .take_while(|&c| c != '}')
                                    .collect();
                                let code = u32::from_str_radix(&hex, 16).unwrap_or(0xfffd);
                                value.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                            }
                            Some((_, 'n')) => value.push('\n'),
                            Some((_, 'r')) => value.push('\r'),
                            Some((_, 't')) => value.push('\t'),
                            Some((_, other)) => value.push(other),
                            None => {}
                        },
                        c => value.push(c),
                    }
                }
                (value, &quoted[end..])
            }
            None => {
                let end = after.find(' ').unwrap_or(after.len());
                (after[..end].to_owned(), &after[end..])
            }
        };
        pairs.push((key, value));
        rest = next;
    }
    pairs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_chosen_values_are_quoted_so_they_add_no_keys_and_no_raw_separators() {
    let _slot = slot();
    // An upstream that answers any name 200, with no model list: each name is admitted as it is.
    let upstream = support::upstream(|_| ok_stream()).await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {}\n",
        upstream.url()
    );
    let process = start_binary("log-line", &yaml, None);
    let names = [
        r#"inj x status=500 outcome=\"timeout\" slo=met"#,
        "line\u{2028}sep\u{2029}arated",
        "back\\\\slash",
    ];
    let chat = "/v1/chat/completions";
    for (i, name) in names.iter().enumerate() {
        let body = format!("{{\"model\":\"{name}\",\"messages\":[],\"stream\":true}}");
        let status = request(&process.proxy, "POST", chat, &format!("id-{i}"), &body);
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    }
    let odd_path = "/v1/a\"b=c/chat/completions";
    let body = r#"{"model":"m","messages":[],"stream":true}"#;
    request(&process.proxy, "POST", odd_path, "x\"y=z", body);
    std::thread::sleep(Duration::from_millis(300));
    process.signal("TERM");
    let (exit, log) = process.wait();
    assert!(exit.success(), "{log}");
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("request finished"))
        .collect();
    assert_eq!(lines.len(), 4, "{log}");
    for c in ['\u{2028}', '\u{2029}', '\u{1b}', '\r'] {
        assert!(!log.contains(c), "{c:?} raw in the log:\n{log}");
    }
    let models: Vec<String> = lines
        .iter()
        .map(|line| {
            let pairs = logfmt(line);
            let mut keys: BTreeMap<&str, usize> = BTreeMap::new();
            for (key, _) in &pairs {
                *keys.entry(key.as_str()).or_default() += 1;
            }
            for key in [
                "status",
                "outcome",
                "slo",
                "model",
                "path",
                "method",
                "id",
                "client_request_id",
            ] {
                assert_eq!(keys.get(key), Some(&1), "{key} in {line}");
            }
            let value = |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
            };
            assert_eq!(value("status").as_deref(), Some("200"), "{line}");
            assert_eq!(value("outcome").as_deref(), Some("ok"), "{line}");
            value("model").unwrap_or_default()
        })
        .collect();
    let sent: Vec<String> = names
        .iter()
        .map(|n| n.replace("\\\\", "\\").replace("\\\"", "\""))
        .collect();
    assert_eq!(models[..3], sent[..], "{log}");
    let last = logfmt(lines[3]);
    let value = |k: &str| {
        last.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(value("path"), Some(odd_path), "{}", lines[3]);
    assert_eq!(value("client_request_id"), Some("x\"y=z"), "{}", lines[3]);
}
