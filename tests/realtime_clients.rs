//! Real realtime clients through tokentap: the `websockets` package (permessage-deflate, a fragmented
//! `response.create`, server pings every 10 ms) and the openai SDK's `client.realtime.connect`, against a
//! scripted `websockets` server replaying an OpenAI GA sequence (`tests/websocket/realtime.py`). They get
//! every event, close with 1000, and the TTFT tokentap records is never above their own. Skipped, saying
//! so, where no Python has `websockets` (the conformance suite's client venv has both).

use crate::realtime::{assert_ttfts_agree, records, with_records, FIXTURES};
use crate::support;
use crate::websocket::once_no_session_is_open;

use std::time::Duration;

use serde_json::Value;
use support::*;
use tokentap::record::metrics::family;
use tokio::time::timeout;

/// A Python with the openai SDK beside `websockets` (the conformance suite's client venv has both).
fn openai_python(python: &str) -> bool {
    std::process::Command::new(python)
        .args(["-c", "import openai.resources.realtime"])
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Runs `tests/websocket/realtime.py` with `args`, bounded; its one JSON line.
async fn python_client(python: &str, args: &[&str]) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/websocket/realtime.py");
    let mut command = std::process::Command::new(python);
    command.arg(script).args(args);
    let out = timeout(
        Duration::from_secs(60),
        tokio::task::spawn_blocking(move || command.output()),
    )
    .await
    .expect("client in time")
    .expect("task")
    .expect("client ran");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("one JSON line")
}

#[tokio::test]
async fn the_websockets_client_and_the_openai_sdk_through_tokentap_see_the_ttft_tokentap_records() {
    let _slot = slot();
    let Some(python) = crate::websocket::websockets_python() else {
        eprintln!("SKIPPED realtime real clients: no python with `websockets` (set TOKENTAP_WEBSOCKETS_PYTHON)");
        return;
    };
    let fixture = format!("{FIXTURES}/openai-ga-text.jsonl");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/websocket/realtime.py");
    let (_server, port) =
        crate::websocket::python_server(&python, &[script, "server", &fixture]).await;
    let (path, yaml) = with_records("realtime-python");
    let proxy = proxy(&format!("http://127.0.0.1:{port}"), &yaml).await;
    let url = format!("ws://{}/v1/realtime", proxy.proxy_addr());
    let mut clients = vec!["websockets"];
    if openai_python(&python) {
        clients.push("openai");
    } else {
        eprintln!("SKIPPED the openai SDK's realtime client: {python} has no openai");
    }
    let mut client_ttfts = Vec::new();
    for client in &clients {
        let got = python_client(&python, &[client, &url, &fixture]).await;
        assert_eq!(
            got["events"].as_array().map(Vec::len),
            Some(18),
            "{client}: {got}"
        );
        assert_eq!(got["close_code"], 1000, "{client}: {got}");
        let ttfts = got["ttfts"]
            .as_array()
            .expect("ttfts")
            .iter()
            .filter_map(Value::as_f64);
        client_ttfts.extend(ttfts);
    }
    let metrics = once_no_session_is_open(&proxy).await;
    // Each client: its handshake, its response, its session.
    let (responses, sessions) = records(&path, 3 * clients.len());
    // tokentap's TTFT is never above the client's, and holds the 250 ms the server waits before its
    // first output delta (realtime.py's FIRST_OUTPUT): both true however busy the machine is. How much
    // the clients add (their event loop's work: inflating, joining, the SDK's pydantic events) is a
    // figure, not a bound: 1 to 6 ms on a quiet machine.
    let differences = assert_ttfts_agree(&client_ttfts, &responses, f64::INFINITY);
    for record in &responses {
        let ttft = record["ttft_s"].as_f64().unwrap_or_default();
        assert!(
            ttft >= 0.25,
            "tokentap's TTFT {ttft} s, the server waited 0.25 s"
        );
    }
    eprintln!(
        "realtime python clients {clients:?}: client TTFT − tokentap's TTFT = {differences:?} s"
    );
    let ok = [
        ("model", "gpt-realtime"),
        ("api", "realtime"),
        ("outcome", "ok"),
    ];
    let n = clients.len() as f64;
    assert_eq!(
        metrics.get(family::REQUESTS.name, &ok),
        n,
        "{}",
        metrics.text
    );
    assert_eq!(metrics.get(family::SESSIONS.name, &ok), n);
    assert_eq!(metrics.get(family::OUTPUT_TOKENS.name, &ok[..2]), 7.0 * n);
    for session in &sessions {
        assert_eq!(session["close_client"], 1000, "{session}");
    }
    // The messages the meter could not read: none (the websockets client's are compressed).
    assert_eq!(metrics.get(family::SESSION_MESSAGES_SKIPPED.name, &[]), 0.0);
}
