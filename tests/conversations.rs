//! Conversations recognised from the wire, on tokio's paused clock: agent loops that send their
//! history back re-serialised (other key order, `null` fields, text as parts, a moved cache marker),
//! interleaved with each other, are each one conversation numbered turn by turn, with the think time
//! between turns; the records, the per-turn families and the lookups say so, and the upstream gets
//! every body byte for byte. A body too large to hold streams and is counted `unread`.

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;
use tokentap::record::metrics::family;
use tokentap::Running;

const CHAT: &str = "/v1/chat/completions";

/// The upstream's answer: a tool call when the last message is the user's first question, else
/// text; usage with the prompt size the body implies.
fn answer(request: &RecordedRequest) -> Vec<Step> {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    let messages = body["messages"].as_array().map_or(0, Vec::len) as u64;
    let call = r#"{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}"#;
    let delta = match messages {
        2 => call.to_owned(),
        _ => r#"{"role":"assistant","content":"18C and sunny."}"#.to_owned(),
    };
    timed(
        sse_head(),
        &[
            (100, chat_delta(&delta)),
            (0, usage_chunk(100 * messages, 5)),
            (0, DONE.to_owned()),
        ],
    )
}

/// One agent: asks, runs the tool it is asked for, asks again, then a follow-up — sending its history
/// back the way SDKs re-serialise it, `think` between turns. The record file is read at the end.
async fn agent(proxy: &Running, topic: &str, think: Duration) {
    let client = client();
    let system = json!({"role": "system", "content": format!("You help with {topic}.")});
    let user =
        json!({"role": "user", "content": format!("What is the weather in Paris, for {topic}?")});
    let mut history = vec![system.clone(), user.clone()];
    let request = |messages: Vec<Value>| {
        let body = json!({"model": "m", "stream": true, "messages": messages}).to_string();
        post(proxy, CHAT, &body)
    };
    let got = send(&client, request(history.clone())).await;
    assert_eq!(got.status, 200);
    tokio::time::sleep(think).await;
    // The SDK's message object, sent back with its nulls; the first messages as text parts.
    history = vec![
        json!({"content": [{"type": "text", "text": format!("You help with {topic}.")}], "role": "system"}),
        json!({"role": "user", "content": user["content"], "cache_control": {"type": "ephemeral"}}),
        json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "18C"}),
    ];
    let got = send(&client, request(history.clone())).await;
    assert_eq!(got.status, 200);
    tokio::time::sleep(think).await;
    history.push(json!({"role": "assistant", "content": "18C and sunny."}));
    history.push(json!({"role": "user", "content": "And tomorrow?"}));
    let got = send(&client, request(history)).await;
    assert_eq!(got.status, 200);
}

#[tokio::test(start_paused = true)]
async fn interleaved_agent_loops_are_each_one_conversation_numbered_turn_by_turn() {
    let upstream = upstream(answer).await;
    let path = temp_file("conv-agents");
    let yaml = format!("request_log: {{path: {}}}\n", path.display());
    let proxy = proxy(&upstream.url(), &yaml).await;
    tokio::join!(
        agent(&proxy, "a trip", Duration::from_secs(2)),
        agent(&proxy, "a picnic", Duration::from_secs(5)),
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    // The bodies went upstream as the clients wrote them.
    for request in upstream.requests() {
        let body: Value = serde_json::from_slice(&request.body).expect("the client's JSON");
        assert!(body["messages"].is_array());
    }
    let lookups = |result: &str| m.get(family::CONVERSATION_LOOKUPS.name, &[("result", result)]);
    assert_eq!(
        (lookups("first"), lookups("continued"), lookups("unread")),
        (2.0, 4.0, 0.0)
    );
    for turn in ["1", "2", "3"] {
        let l = [("model", "m"), ("turn", turn)];
        assert_eq!(m.get(&family::TURN_TTFT.count(), &l), 2.0, "turn {turn}");
        assert!(
            (m.get(&family::TURN_TTFT.sum(), &l) - 0.2).abs() < 1e-9,
            "two TTFTs of 100 ms"
        );
    }
    let prompt = |turn| {
        m.get(
            &family::TURN_INPUT_TOKENS.sum(),
            &[("model", "m"), ("turn", turn)],
        )
    };
    assert_eq!(
        (prompt("1"), prompt("2"), prompt("3")),
        (400.0, 800.0, 1200.0)
    );
    let think = [("model", "m")];
    assert_eq!(m.get(&family::THINK_TIME.count(), &think), 4.0);
    let sum = m.get(&family::THINK_TIME.sum(), &think);
    assert!(
        (sum - 14.0).abs() < 0.01,
        "2 × 2 s and 2 × 5 s between turns: {sum}"
    );
    assert_eq!(m.get(family::CONVERSATION_TURNS_HELD.name, &[]), 6.0);

    let records = read_records(&path, 6);
    let mut by_conversation = std::collections::BTreeMap::<String, Vec<(u32, Option<f64>)>>::new();
    for r in &records {
        let id = r
            .conversation
            .clone()
            .expect("every turn has a conversation");
        assert!(id.starts_with("c-") && id.len() == 18, "{id}");
        by_conversation
            .entry(id)
            .or_default()
            .push((r.turn.expect("a turn"), r.think_s));
    }
    assert_eq!(by_conversation.len(), 2, "{by_conversation:?}");
    let mut thinks: Vec<Vec<(u32, Option<u64>)>> = by_conversation
        .values()
        .map(|turns| {
            let mut turns: Vec<_> = turns
                .iter()
                .map(|(t, s)| (*t, s.map(|s| s.round() as u64)))
                .collect();
            turns.sort();
            turns
        })
        .collect();
    thinks.sort();
    assert_eq!(
        thinks,
        [
            [(1, None), (2, Some(2)), (3, Some(2))],
            [(1, None), (2, Some(5)), (3, Some(5))]
        ]
    );
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(start_paused = true)]
async fn a_conversation_ends_after_its_idle_time_with_its_turn_count() {
    let upstream = upstream(answer).await;
    let proxy = proxy(&upstream.url(), "conversations: {idle: 10s}\n").await;
    agent(&proxy, "a trip", Duration::from_secs(1)).await;
    let turns = family::CONVERSATION_TURNS.count();
    assert_eq!(scrape(&proxy).await.get(&turns, &[]), 0.0, "still going");
    tokio::time::sleep(Duration::from_secs(11)).await;
    // Checked as requests finish: the next one, of another conversation, ends it.
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 200);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(&turns, &[]), 1.0);
    assert_eq!(m.get(&family::CONVERSATION_TURNS.sum(), &[]), 3.0);
}

#[tokio::test(start_paused = true)]
async fn a_body_too_large_to_hold_streams_unread_and_off_turns_off_recognition() {
    let upstream = upstream(answer).await;
    let path = temp_file("conv-unread");
    let yaml = format!(
        "limits: {{hold_request_body_bytes: 1KiB}}\nrequest_log: {{path: {}}}\n",
        path.display()
    );
    let held = proxy(&upstream.url(), &yaml).await;
    let long = "x".repeat(4096);
    let body =
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": long}]})
            .to_string();
    let got = send(&client(), post(&held, CHAT, &body)).await;
    assert_eq!(got.status, 200);
    settle(&held).await;
    assert_eq!(
        upstream.requests()[0].body,
        body.as_bytes(),
        "forwarded as sent"
    );
    let m = scrape(&held).await;
    assert_eq!(
        m.get(family::CONVERSATION_LOOKUPS.name, &[("result", "unread")]),
        1.0
    );
    assert_eq!(read_records(&path, 1)[0].conversation, None);
    let _ = std::fs::remove_file(&path);

    let path = temp_file("conv-off");
    let yaml = format!(
        "conversations: {{max_turns: 0}}\nrequest_log: {{path: {}}}\n",
        path.display()
    );
    let off = proxy(&upstream.url(), &yaml).await;
    let got = send(&client(), post(&off, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 200);
    settle(&off).await;
    let m = scrape(&off).await;
    let lookups: f64 = ["first", "continued", "unread"]
        .iter()
        .map(|r| m.get(family::CONVERSATION_LOOKUPS.name, &[("result", r)]))
        .sum();
    assert_eq!(lookups, 0.0);
    assert_eq!(read_records(&path, 1)[0].conversation, None);
    let _ = std::fs::remove_file(&path);
}

/// On a multi-threaded runtime with real time and an upstream that answers at once, as in
/// production: every list is read before its request ends, on a new connection or a reused one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_list_is_read_in_time_on_a_busy_runtime() {
    let upstream = upstream(|_| {
        vec![json_response(
            200,
            "OK",
            r#"{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#,
        )]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let client = client();
    let mut history = vec![json!({"role": "user", "content": "one"})];
    for i in 0..40 {
        let body = json!({"model": "m", "messages": history}).to_string();
        let got = send(&client, post(&proxy, CHAT, &body)).await;
        assert_eq!(got.status, 200);
        history.push(json!({"role": "assistant", "content": "hi"}));
        history.push(json!({"role": "user", "content": format!("more {i}")}));
    }
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let lookups = |result: &str| m.get(family::CONVERSATION_LOOKUPS.name, &[("result", result)]);
    assert_eq!(
        (lookups("first"), lookups("continued"), lookups("unread")),
        (1.0, 39.0, 0.0)
    );
}

/// The Responses API chained by `previous_response_id`: the next turn sends only its new input and
/// the id of the answer it follows (read off that answer's `response.created`), and continues it.
#[tokio::test(start_paused = true)]
async fn a_responses_turn_that_names_its_previous_response_continues_it() {
    let upstream = upstream(|request: &RecordedRequest| {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let id = if body["previous_response_id"].is_null() { "resp_1" } else { "resp_2" };
        let created = format!(
            r#"{{"type":"response.created","sequence_number":0,"response":{{"id":"{id}","model":"m","status":"in_progress"}}}}"#
        );
        let text = r#"{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi","sequence_number":1}"#;
        let completed = format!(
            r#"{{"type":"response.completed","sequence_number":2,"response":{{"id":"{id}","model":"m","status":"completed","usage":{{"input_tokens":5,"output_tokens":1,"total_tokens":6}}}}}}"#
        );
        timed(
            sse_head(),
            &[
                (0, named("response.created", &created)),
                (50, named("response.output_text.delta", text)),
                (0, named("response.completed", &completed)),
            ],
        )
    })
    .await;
    let path = temp_file("conv-previous");
    let yaml = format!("request_log: {{path: {}}}\n", path.display());
    let proxy = proxy(&upstream.url(), &yaml).await;
    let client = client();
    let first = json!({"model": "m", "stream": true, "input": "Hello"}).to_string();
    assert_eq!(
        send(&client, post(&proxy, "/v1/responses", &first))
            .await
            .status,
        200
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let next = json!({"model": "m", "stream": true, "previous_response_id": "resp_1",
        "input": [{"role": "user", "content": "And then?"}]})
    .to_string();
    assert_eq!(
        send(&client, post(&proxy, "/v1/responses", &next))
            .await
            .status,
        200
    );
    settle(&proxy).await;
    let records = read_records(&path, 2);
    assert_eq!(records[0].conversation, records[1].conversation);
    assert_eq!((records[0].turn, records[1].turn), (Some(1), Some(2)));
    let think = records[1].think_s.expect("a think time");
    assert!((think - 3.0).abs() < 0.01, "{think}");
    let _ = std::fs::remove_file(&path);
}

/// An agent some hours in: a history of 500 messages, just under 1 MiB (held whole by default, and
/// read on one of the readers), and its next turn with the answer and a new question appended, sent
/// back re-serialised (keys in another order, the tool results' text as parts): one conversation,
/// turns 1 and 2.
#[tokio::test(start_paused = true)]
async fn a_long_agent_history_of_500_messages_continues_its_conversation() {
    let upstream = upstream(answer).await;
    let path = temp_file("conv-long");
    let yaml = format!("request_log: {{path: {}}}\n", path.display());
    let proxy = proxy(&upstream.url(), &yaml).await;
    let client = client();
    let body = |messages: &[Value]| {
        json!({"model": "m", "stream": true, "messages": messages}).to_string()
    };
    let mut history = agent_history(500, 1 << 20);
    let first = body(&history);
    assert!(
        (1_000_000..=1 << 20).contains(&first.len()),
        "{}",
        first.len()
    );
    let got = send(&client, post(&proxy, CHAT, &first)).await;
    assert_eq!(got.status, 200);
    tokio::time::sleep(Duration::from_secs(4)).await;
    for message in history.iter_mut() {
        if message["role"] == "tool" {
            let text = message["content"].take();
            *message = json!({"content": [{"type": "text", "text": text}], "tool_call_id": message["tool_call_id"], "role": "tool"});
        }
    }
    history.push(json!({"role": "assistant", "content": "18C and sunny."}));
    history.push(json!({"role": "user", "content": "Now the tests."}));
    let next = body(&history);
    assert!(
        next.len() > first.len() && next.len() <= 1 << 20,
        "held whole"
    );
    let got = send(&client, post(&proxy, CHAT, &next)).await;
    assert_eq!(got.status, 200);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let lookups = |result: &str| m.get(family::CONVERSATION_LOOKUPS.name, &[("result", result)]);
    assert_eq!(
        (lookups("first"), lookups("continued"), lookups("unread")),
        (1.0, 1.0, 0.0)
    );
    let records = read_records(&path, 2);
    assert_eq!(records[0].conversation, records[1].conversation);
    assert_eq!((records[0].turn, records[1].turn), (Some(1), Some(2)));
    let think = records[1].think_s.expect("a think time");
    assert!((think - 4.0).abs() < 0.01, "{think}");
    let _ = std::fs::remove_file(&path);
}

/// A server that refuses a long history at once (a prompt over its context: vLLM answers 400 before
/// anything is generated) answers before the list is read. The turn still counts: a request whose list
/// a reader is reading when it ends is finished once the list is read (milliseconds), not counted
/// `late` (before, both turns here were `unread`, and the conformance suite's 1 MiB history against
/// the real vLLM the same).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_history_the_server_refuses_at_once_still_continues_its_conversation() {
    let refusal = r#"{"error":{"message":"This model's maximum context length is 512 tokens.","type":"BadRequestError","code":400}}"#;
    let upstream = upstream(move |_| vec![json_response(400, "Bad Request", refusal)]).await;
    let path = temp_file("conv-refused");
    let yaml = format!("request_log: {{path: {}}}\n", path.display());
    let proxy = proxy(&upstream.url(), &yaml).await;
    let client = client();
    let body = |messages: &[Value]| json!({"model": "m", "messages": messages}).to_string();
    let mut history = agent_history(300, 600 << 10);
    for turn in 0..2 {
        let got = send(&client, post(&proxy, CHAT, &body(&history))).await;
        assert_eq!((turn, got.status), (turn, 400));
        assert_eq!(got.body, refusal.as_bytes(), "the server's own answer");
        history.push(json!({"role": "assistant", "content": "(no answer)"}));
        history.push(json!({"role": "user", "content": "And then?"}));
    }
    settle(&proxy).await;
    let records = read_records(&path, 2);
    let m = scrape(&proxy).await;
    let lookups = |result: &str| m.get(family::CONVERSATION_LOOKUPS.name, &[("result", result)]);
    assert_eq!(
        (lookups("first"), lookups("continued"), lookups("unread")),
        (1.0, 1.0, 0.0)
    );
    assert_eq!(records[0].conversation, records[1].conversation);
    assert_eq!((records[0].turn, records[1].turn), (Some(1), Some(2)));
    let _ = std::fs::remove_file(&path);
}
