//! The time to the response head, on tokio's paused clock: the upstream's status and headers timed from
//! the request head, for a stream (whose head comes before its first token, so the TTFT is later), for a
//! non-streamed answer (whose head comes with its body), and for an error status; an answer tokentap
//! gave itself (a dead upstream's 502) is not observed and its record has no such field. The figure was
//! added as the house layout says (docs/architecture.md, "What a change touches").

use crate::support;

use support::*;
use tokentap::record::metrics::family;
use tokentap::record::request_record::RequestRecord;

const BODY: &str = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// Sends one request to a proxy in front of `upstream_url`, with records; returns what the client got,
/// the scrape and the record.
async fn run(upstream_url: &str, name: &str) -> (Received, Metrics, RequestRecord) {
    let path = temp_file(&format!("head-{name}"));
    let yaml = format!("request_log: {{path: {}}}\n", path.display());
    let proxy = proxy(upstream_url, &yaml).await;
    let got = send(&client(), post(&proxy, "/v1/chat/completions", BODY)).await;
    settle(&proxy).await;
    let metrics = scrape(&proxy).await;
    let record = read_records(&path, 1).remove(0);
    let _ = std::fs::remove_file(&path);
    (got, metrics, record)
}

/// The histogram's count and sum on the chat API, whatever the model's label (an error status does not
/// admit a name: it counts as `unadmitted`).
fn head(m: &Metrics) -> (f64, f64) {
    let l = [("api", "chat")];
    (
        m.get(&family::TIME_TO_RESPONSE_HEAD.count(), &l),
        m.get(&family::TIME_TO_RESPONSE_HEAD.sum(), &l),
    )
}

fn assert_secs(actual: Option<f64>, expected: f64, what: &str) {
    let actual = actual.unwrap_or_else(|| panic!("{what}: absent"));
    assert!(
        (actual - expected).abs() < 1e-9,
        "{what}: got {actual}, expected {expected}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_is_timed_to_its_head_and_its_first_token_later() {
    let mut script = vec![Step::Sleep(ms(250))];
    script.extend(timed(
        sse_head(),
        &[(100, content_chunk("a")), (10, DONE.to_owned())],
    ));
    let upstream = upstream(move |_| script.clone()).await;
    let (got, metrics, record) = run(&upstream.url(), "stream").await;
    assert_eq!(got.status, 200);
    assert_eq!(
        String::from_utf8_lossy(&got.body),
        content_chunk("a") + DONE,
        "the bytes"
    );
    assert_eq!(head(&metrics), (1.0, 0.25));
    assert_secs(record.time_to_response_head_s, 0.25, "record");
    assert_secs(record.ttft_s, 0.35, "the TTFT, after the head");
}

#[tokio::test(start_paused = true)]
async fn a_non_streamed_answer_and_an_error_status_are_timed_to_their_heads() {
    let answer = r#"{"model":"m","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#;
    for (name, status, reason, wait) in [
        ("json", 200, "OK", 400),
        ("error", 503, "Service Unavailable", 120),
    ] {
        let steps = vec![Step::Sleep(ms(wait)), json_response(status, reason, answer)];
        let upstream = upstream(move |_| steps.clone()).await;
        let (got, metrics, record) = run(&upstream.url(), name).await;
        assert_eq!(got.status, status, "{name}");
        assert_eq!(got.body, answer.as_bytes(), "{name}: the bytes");
        let secs = wait as f64 / 1000.0;
        assert_eq!(head(&metrics), (1.0, secs), "{name}");
        assert_secs(record.time_to_response_head_s, secs, name);
    }
}

#[tokio::test]
async fn tokentaps_own_answer_is_not_a_response_head() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let (got, metrics, record) = run(&url, "dead").await;
    assert_eq!(got.status, 502);
    assert_eq!(head(&metrics), (0.0, 0.0));
    assert_eq!(record.time_to_response_head_s, None);
    assert_eq!(record.status, Some(502));
}
