//! The one log line per finished request: it says what happened, and with no ceiling configured a
//! request that is not goodput says why (its outcome, `not_2xx`) instead of a bare "failed".

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

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
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
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
