//! The time to the first tool call, on tokio's paused clock, in each dialect that streams tool calls
//! (OpenAI chat `tool_calls` and the legacy `function_call`, Responses function calls, Anthropic
//! `tool_use`, Ollama `tool_calls`), each stream in its server's documented shape: the histogram, the
//! record field, the `time_to_first_tool_call` ceiling and the report's ranking, with the bytes the
//! client got unchanged. A stream that calls no tool (or only the provider's own server tool) observes
//! nothing and meets the ceiling.

use crate::support;

use support::*;
use tokentap::record::metrics::family;
use tokentap::record::request_record::RequestRecord;

/// One API's stream: 50 ms to a text output, 300 ms more to the chunk that starts a tool call, then
/// the call's arguments 20 ms later and the end.
struct Case {
    path: &'static str,
    api: &'static str,
    body: &'static str,
    head: fn() -> Step,
    text: String,
    call: String,
    rest: Vec<String>,
}

const CHAT_BODY: &str = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}"#;
const RESPONSES_BODY: &str = r#"{"model":"m","stream":true,"input":"weather?","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}"#;
const MESSAGES_BODY: &str = r#"{"model":"m","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"weather?"}],"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]}"#;
const OLLAMA_BODY: &str = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}"#;

fn chat() -> Case {
    Case {
        path: "/v1/chat/completions",
        api: "chat",
        body: CHAT_BODY,
        head: sse_head,
        text: chat_delta(r#"{"role":"assistant","content":"Let me check."}"#),
        call: chat_delta(
            r#"{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}"#,
        ),
        rest: vec![
            chat_delta(
                r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":\"Paris\"}"}}]}"#,
            ),
            DONE.to_owned(),
        ],
    }
}

/// The pre-`tools` shape some servers and gateways still stream.
fn chat_function_call() -> Case {
    Case {
        call: chat_delta(r#"{"function_call":{"name":"get_weather","arguments":""}}"#),
        rest: vec![
            chat_delta(r#"{"function_call":{"arguments":"{}"}}"#),
            DONE.to_owned(),
        ],
        ..chat()
    }
}

fn responses() -> Case {
    Case {
        path: "/v1/responses",
        api: "responses",
        body: RESPONSES_BODY,
        head: sse_head,
        text: named(
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Let me check.","sequence_number":3}"#,
        ),
        call: named(
            "response.output_item.added",
            r#"{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"","status":"in_progress"},"sequence_number":5}"#,
        ),
        rest: vec![
            named(
                "response.function_call_arguments.delta",
                r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"{\"city\":\"Paris\"}","sequence_number":6}"#,
            ),
            named(
                "response.completed",
                r#"{"type":"response.completed","sequence_number":9,"response":{"id":"r","model":"m","status":"completed","usage":{"input_tokens":30,"output_tokens":12,"total_tokens":42}}}"#,
            ),
        ],
    }
}

fn anthropic_block(index: u32, block: &str) -> String {
    named(
        "content_block_start",
        &format!(
            r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"{block}","id":"toolu_1","name":"get_weather","input":{{}}}}}}"#
        ),
    )
}

fn messages() -> Case {
    Case {
        path: "/v1/messages",
        api: "messages",
        body: MESSAGES_BODY,
        head: sse_head,
        text: named(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me check."}}"#,
        ),
        call: anthropic_block(1, "tool_use"),
        rest: vec![
            named(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Paris\"}"}}"#,
            ),
            named(
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#,
            ),
            named("message_stop", r#"{"type":"message_stop"}"#),
        ],
    }
}

fn ollama() -> Case {
    Case {
        path: "/api/chat",
        api: "ollama",
        body: OLLAMA_BODY,
        head: ndjson_head,
        text: r#"{"model":"m","created_at":"2026-12-04T00:00:00Z","message":{"role":"assistant","content":"Let me check."},"done":false}"#.to_owned() + "\n",
        call: r#"{"model":"m","created_at":"2026-12-04T00:00:00Z","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},"done":false}"#.to_owned() + "\n",
        rest: vec![r#"{"model":"m","created_at":"2026-12-04T00:00:00Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":30,"eval_count":12}"#.to_owned() + "\n"],
    }
}

/// Runs `events` through a proxy with a 200 ms tool-call ceiling and records; the client must get
/// every byte unchanged. Returns the scrape and the record.
async fn run(case: &Case, events: Vec<(u64, String)>, name: &str) -> (Metrics, RequestRecord) {
    let sent: String = events.iter().map(|(_, e)| e.as_str()).collect();
    let script = timed((case.head)(), &events);
    let upstream = upstream(move |_| script.clone()).await;
    let path = temp_file(&format!("tool-{name}"));
    let yaml = format!(
        "slo: {{time_to_first_tool_call: 200ms}}\nrequest_log: {{path: {}}}\n",
        path.display()
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    let got = send(&client(), post(&proxy, case.path, case.body)).await;
    assert_eq!(got.status, 200, "{name}");
    assert_eq!(got.end, Ok(()), "{name}");
    assert_eq!(
        String::from_utf8_lossy(&got.body),
        sent,
        "{name}: the bytes"
    );
    settle(&proxy).await;
    let metrics = scrape(&proxy).await;
    let record = read_records(&path, 1).remove(0);
    let _ = std::fs::remove_file(&path);
    (metrics, record)
}

fn tool_call(m: &Metrics, api: &'static str) -> (f64, f64) {
    let l = [("model", "m"), ("api", api)];
    (
        m.get(&family::TIME_TO_FIRST_TOOL_CALL.count(), &l),
        m.get(&family::TIME_TO_FIRST_TOOL_CALL.sum(), &l),
    )
}

fn violations(m: &Metrics, api: &'static str) -> f64 {
    let l = [
        ("model", "m"),
        ("api", api),
        ("slo", "time_to_first_tool_call"),
    ];
    m.get(family::SLO_VIOLATIONS.name, &l)
}

fn goodput(m: &Metrics, api: &'static str) -> f64 {
    m.get(family::GOODPUT.name, &[("model", "m"), ("api", api)])
}

fn assert_close(actual: Option<f64>, expected: f64, what: &str) {
    let actual = actual.unwrap_or_else(|| panic!("{what}: absent"));
    assert!(
        (actual - expected).abs() < 1e-9,
        "{what}: got {actual}, expected {expected}"
    );
}

#[tokio::test(start_paused = true)]
async fn each_dialect_times_the_chunk_that_starts_the_first_tool_call() {
    for (name, case) in [
        ("chat", chat()),
        ("function_call", chat_function_call()),
        ("responses", responses()),
        ("messages", messages()),
        ("ollama", ollama()),
    ] {
        let mut events = vec![(50, case.text.clone()), (300, case.call.clone())];
        events.extend(case.rest.iter().map(|e| (20, e.clone())));
        let (m, record) = run(&case, events, name).await;
        let (count, sum) = tool_call(&m, case.api);
        assert_eq!(count, 1.0, "{name}: one stream that called a tool");
        assert!(
            (sum - 0.35).abs() < 1e-9,
            "{name}: to the call, not the first text: {sum}"
        );
        let ttft = m.get(&family::TTFT.sum(), &[("model", "m"), ("api", case.api)]);
        assert!(
            (ttft - 0.05).abs() < 1e-9,
            "{name}: the TTFT is the text's: {ttft}"
        );
        assert_eq!(violations(&m, case.api), 1.0, "{name}: 350 ms > 200 ms");
        assert_eq!(goodput(&m, case.api), 0.0, "{name}");
        assert_close(record.time_to_first_tool_call_s, 0.35, name);
        assert_eq!(
            record.slo_missed,
            vec!["time_to_first_tool_call".to_owned()],
            "{name}"
        );
        // No usage on a stream that called a tool: the count is what the client saw, a floor (the
        // server generated the call's markup too, which it never streamed).
        let source = |s| {
            let l = [("model", "m"), ("api", case.api), ("token_source", s)];
            m.get(family::TOKEN_SOURCE.name, &l)
        };
        let floor = record.output_tokens_source.as_deref() == Some("floor");
        let usage = record.output_tokens_source.as_deref() == Some("usage");
        assert!(floor || usage, "{name}: {:?}", record.output_tokens_source);
        assert_eq!(source("floor"), f64::from(u8::from(floor)), "{name}");
        assert_eq!(
            source("chunks"),
            0.0,
            "{name}: never counted as exact chunks"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_within_the_ceiling_is_goodput() {
    let case = chat();
    let events = vec![(150, case.call.clone()), (20, DONE.to_owned())];
    let (m, record) = run(&case, events, "within").await;
    assert_eq!(tool_call(&m, "chat").0, 1.0);
    assert_eq!(violations(&m, "chat"), 0.0);
    assert_eq!(goodput(&m, "chat"), 1.0);
    assert_close(record.time_to_first_tool_call_s, 0.15, "within");
    assert!(record.goodput);
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_calls_no_tool_observes_nothing_and_meets_the_ceiling() {
    for (name, case, events) in [
        (
            "text",
            chat(),
            vec![(500, chat().text), (10, DONE.to_owned())],
        ),
        (
            // The provider's own tool (web search) is not a call the client must act on.
            "server_tool",
            messages(),
            vec![
                (500, anthropic_block(0, "server_tool_use")),
                (10, messages().text),
                (0, named("message_stop", r#"{"type":"message_stop"}"#)),
            ],
        ),
    ] {
        let (m, record) = run(&case, events, name).await;
        assert_eq!(tool_call(&m, case.api), (0.0, 0.0), "{name}");
        assert!(
            !m.has(
                &family::TIME_TO_FIRST_TOOL_CALL.count(),
                &[("model", "m"), ("api", case.api)]
            ),
            "{name}: no series at all"
        );
        assert_eq!(violations(&m, case.api), 0.0, "{name}");
        assert_eq!(goodput(&m, case.api), 1.0, "{name}");
        assert_eq!(record.time_to_first_tool_call_s, None, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn only_the_first_of_several_calls_is_timed() {
    let case = chat();
    let second = chat_delta(
        r#"{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"get_time","arguments":""}}]}"#,
    );
    let events = vec![
        (100, case.call.clone()),
        (400, second),
        (0, DONE.to_owned()),
    ];
    let (m, record) = run(&case, events, "two_calls").await;
    assert_eq!(tool_call(&m, "chat"), (1.0, 0.1));
    assert_close(record.time_to_first_tool_call_s, 0.1, "two calls");
}
