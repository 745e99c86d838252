//! What is inside a TTFT, per dialect, on tokio's paused clock: the time to the first answer next to the
//! first output of any kind, the reasoning time before it, reasoning and cached-prompt tokens, and the
//! server's own timings beside tokentap's with the part of the TTFT outside the server. Each stream has
//! its server's documented shape; each test asserts the bytes the client got and the scraped figures.

use crate::support;

use support::*;
use tokentap::record::metrics::family;

fn assert_close(actual: f64, expected: f64, what: &str) {
    assert!(
        (actual - expected).abs() < 1e-9,
        "{what}: got {actual}, expected {expected}"
    );
}

/// Sends `body` to `path` through a proxy in front of `events`; the bytes must arrive unchanged.
async fn run(path: &str, body: &str, head: fn() -> Step, events: Vec<(u64, String)>) -> Metrics {
    stream_with(path, body, head, events, "").await
}

async fn stream_with(
    path: &str, body: &str, head: fn() -> Step, events: Vec<(u64, String)>, yaml: &str,
) -> Metrics {
    let sent: String = events.iter().map(|(_, e)| e.as_str()).collect();
    run_with(path, body, timed(head(), &events), &sent, yaml).await
}

/// The client must get exactly `sent`.
async fn run_with(path: &str, body: &str, steps: Vec<Step>, sent: &str, yaml: &str) -> Metrics {
    let upstream = upstream(move |_| steps.clone()).await;
    let proxy = proxy(&upstream.url(), yaml).await;
    let got = send(&client(), post(&proxy, path, body)).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.end, Ok(()));
    assert_eq!(String::from_utf8_lossy(&got.body), sent);
    settle(&proxy).await;
    scrape(&proxy).await
}

fn labels(api: &'static str) -> [(&'static str, &'static str); 2] {
    [("model", "m"), ("api", api)]
}

fn seconds(m: &Metrics, family: &str, api: &'static str) -> (f64, f64) {
    let l = labels(api);
    (
        m.get(&format!("{family}_count"), &l),
        m.get(&format!("{family}_sum"), &l),
    )
}

const TTFT: &str = family::TTFT.name;
const ANSWER: &str = family::TIME_TO_FIRST_ANSWER.name;
const REASONING: &str = family::REASONING_TIME.name;
const REASONING_TOKENS: &str = family::REASONING_TOKENS.name;
const CACHED: &str = family::CACHED_INPUT_TOKENS.name;
const QUEUE: &str = family::SERVER_QUEUE.name;
const SERVER_TTFT: &str = family::SERVER_TTFT.name;
const PREFILL: &str = family::SERVER_PREFILL.name;
const GENERATION: &str = family::SERVER_GENERATION.name;
const OUTSIDE: &str = family::OUTSIDE_SERVER.name;

fn chat_body() -> String {
    chat_request("m")
}

#[tokio::test(start_paused = true)]
async fn vllm_reasoning_then_answer_with_per_request_metrics_shows_every_part_of_the_wait() {
    // vLLM with a reasoning parser, --enable-per-request-metrics, --enable-prompt-tokens-details and
    // stream_options.include_usage: role chunk, reasoning_content, content, the usage chunk with metrics.
    let usage = r#"{"id":"c","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":4,"total_tokens":44,"prompt_tokens_details":{"cached_tokens":32},"completion_tokens_details":{"reasoning_tokens":2}},"metrics":{"time_to_first_token_ms":60.0,"generation_time_ms":650.0,"queue_time_ms":15.0,"mean_itl_ms":216.7,"tokens_per_second":5.6}}"#;
    let events = vec![
        (0, chat_delta(r#"{"role":"assistant","content":""}"#)),
        (100, chat_delta(r#"{"reasoning_content":"Let"}"#)),
        (200, chat_delta(r#"{"reasoning_content":" me"}"#)),
        (400, chat_delta(r#"{"content":"Hi"}"#)),
        (50, chat_delta(r#"{"content":"!"}"#)),
        (0, sse(usage)),
        (0, "data: [DONE]\n\n".to_owned()),
    ];
    let m = run("/v1/chat/completions", &chat_body(), sse_head, events).await;
    assert_eq!(seconds(&m, TTFT, "chat"), (1.0, 0.1));
    let (n, sum) = seconds(&m, ANSWER, "chat");
    assert_eq!(n, 1.0);
    assert_close(sum, 0.7, "time to first answer");
    let (n, sum) = seconds(&m, REASONING, "chat");
    assert_eq!(n, 1.0);
    assert_close(sum, 0.6, "reasoning time: first answer - first output");
    assert_eq!(
        m.get(REASONING_TOKENS, &labels("chat")),
        2.0,
        "usage details"
    );
    assert_eq!(m.get(CACHED, &labels("chat")), 32.0);
    let (n, sum) = seconds(&m, QUEUE, "chat");
    assert_eq!(n, 1.0);
    assert_close(sum, 0.015, "server queue");
    assert_close(seconds(&m, PREFILL, "chat").1, 0.060, "server prefill");
    assert_close(
        seconds(&m, SERVER_TTFT, "chat").1,
        0.075,
        "server TTFT = queue + prefill",
    );
    assert_close(
        seconds(&m, GENERATION, "chat").1,
        0.650,
        "server generation",
    );
    let (n, sum) = seconds(&m, OUTSIDE, "chat");
    assert_eq!(n, 1.0);
    assert_close(sum, 0.1 - 0.075, "outside the server = TTFT - server TTFT");
}

#[tokio::test(start_paused = true)]
async fn an_answer_only_stream_answers_at_its_ttft_and_has_no_reasoning_or_server_series() {
    let events = vec![
        (0, chat_delta(r#"{"role":"assistant","content":""}"#)),
        (250, chat_delta(r#"{"content":"Hi"}"#)),
        (20, chat_delta(r#"{"content":"!"}"#)),
        (0, "data: [DONE]\n\n".to_owned()),
    ];
    let m = run("/v1/chat/completions", &chat_body(), sse_head, events).await;
    assert_eq!(seconds(&m, TTFT, "chat"), (1.0, 0.25));
    assert_eq!(seconds(&m, ANSWER, "chat"), (1.0, 0.25));
    for absent in [
        &family::REASONING_TIME.count(),
        REASONING_TOKENS,
        CACHED,
        &family::SERVER_QUEUE.count(),
        &family::SERVER_TTFT.count(),
        &family::OUTSIDE_SERVER.count(),
    ] {
        assert!(
            !m.has(absent, &[]),
            "{absent} costs nothing when nothing reports it"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_reasoning_only_stream_has_a_ttft_no_answer_and_counts_its_reasoning_chunks() {
    let events = vec![
        (300, chat_delta(r#"{"reasoning":"Hmm"}"#)),
        (30, chat_delta(r#"{"reasoning":" so"}"#)),
        (30, chat_delta(r#"{"reasoning":" then"}"#)),
        (0, "data: [DONE]\n\n".to_owned()),
    ];
    let m = run("/v1/chat/completions", &chat_body(), sse_head, events).await;
    assert_eq!(seconds(&m, TTFT, "chat"), (1.0, 0.3));
    assert_eq!(seconds(&m, ANSWER, "chat"), (0.0, 0.0));
    assert_eq!(seconds(&m, REASONING, "chat"), (0.0, 0.0));
    assert_eq!(
        m.get(REASONING_TOKENS, &labels("chat")),
        3.0,
        "no details: one per chunk"
    );
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_first_is_the_first_answer() {
    let call = r#"{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}"#;
    let events = vec![
        (0, chat_delta(r#"{"role":"assistant","content":null}"#)),
        (120, chat_delta(call)),
        (
            10,
            chat_delta(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}"#),
        ),
        (0, "data: [DONE]\n\n".to_owned()),
    ];
    let m = run("/v1/chat/completions", &chat_body(), sse_head, events).await;
    assert_eq!(seconds(&m, TTFT, "chat"), (1.0, 0.12));
    assert_eq!(seconds(&m, ANSWER, "chat"), (1.0, 0.12));
    assert_eq!(seconds(&m, REASONING, "chat"), (0.0, 0.0));
}

#[tokio::test(start_paused = true)]
async fn anthropic_thinking_then_text_with_a_prompt_cache_hit() {
    let start = r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":1800,"output_tokens":1}}}"#;
    let thinking = r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me think"}}"#;
    let signature = r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}"#;
    let text =
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Yes."}}"#;
    let delta = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#;
    let events = vec![
        (10, named("message_start", start)),
        (190, named("content_block_delta", thinking)),
        (500, named("content_block_delta", signature)),
        (300, named("content_block_delta", text)),
        (0, named("message_delta", delta)),
        (0, named("message_stop", r#"{"type":"message_stop"}"#)),
    ];
    let body = r#"{"model":"m","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let m = run("/v1/messages", body, sse_head, events).await;
    assert_eq!(seconds(&m, TTFT, "messages"), (1.0, 0.2));
    assert_eq!(seconds(&m, ANSWER, "messages"), (1.0, 1.0));
    assert_eq!(seconds(&m, REASONING, "messages"), (1.0, 0.8));
    assert_eq!(m.get(CACHED, &labels("messages")), 1800.0);
    assert_eq!(
        m.get(family::INPUT_TOKENS.name, &labels("messages")),
        1812.0
    );
    assert_eq!(
        m.get(REASONING_TOKENS, &labels("messages")),
        1.0,
        "one thinking chunk"
    );
}

#[tokio::test(start_paused = true)]
async fn responses_reasoning_then_output_text_with_cached_input_and_reasoning_tokens() {
    let reasoning = r#"{"type":"response.reasoning_text.delta","item_id":"r","output_index":0,"content_index":0,"delta":"Think","sequence_number":3}"#;
    let text = r#"{"type":"response.output_text.delta","item_id":"o","output_index":1,"content_index":0,"delta":"Hi","sequence_number":7}"#;
    let completed = r#"{"type":"response.completed","sequence_number":9,"response":{"id":"r","model":"m","status":"completed","usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":16},"output_tokens":12,"output_tokens_details":{"reasoning_tokens":10},"total_tokens":42}}}"#;
    let events = vec![
        (
            0,
            named(
                "response.created",
                r#"{"type":"response.created","sequence_number":0,"response":{"id":"r","model":"m","status":"in_progress"}}"#,
            ),
        ),
        (150, named("response.reasoning_text.delta", reasoning)),
        (350, named("response.output_text.delta", text)),
        (0, named("response.completed", completed)),
    ];
    let body = r#"{"model":"m","input":"hi","stream":true}"#;
    let m = run("/v1/responses", body, sse_head, events).await;
    assert_eq!(seconds(&m, TTFT, "responses"), (1.0, 0.15));
    assert_eq!(seconds(&m, ANSWER, "responses"), (1.0, 0.5));
    assert_close(
        seconds(&m, REASONING, "responses").1,
        0.35,
        "reasoning time",
    );
    assert_eq!(m.get(REASONING_TOKENS, &labels("responses")), 10.0);
    assert_eq!(m.get(CACHED, &labels("responses")), 16.0);
}

#[tokio::test(start_paused = true)]
async fn ollama_thinking_then_content_and_its_durations_give_the_server_ttft() {
    let line = |s: &str| format!("{s}\n");
    let done = r#"{"model":"m","created_at":"t","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":900000000,"load_duration":20000000,"prompt_eval_count":26,"prompt_eval_duration":150000000,"eval_count":3,"eval_duration":600000000}"#;
    let events = vec![
        (
            400,
            line(
                r#"{"model":"m","created_at":"t","message":{"role":"assistant","content":"","thinking":"Hmm"},"done":false}"#,
            ),
        ),
        (
            300,
            line(
                r#"{"model":"m","created_at":"t","message":{"role":"assistant","content":"Yes"},"done":false}"#,
            ),
        ),
        (0, line(done)),
    ];
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"think":true}"#;
    let m = run("/api/chat", body, ndjson_head, events).await;
    assert_eq!(seconds(&m, TTFT, "ollama"), (1.0, 0.4));
    assert_eq!(seconds(&m, ANSWER, "ollama"), (1.0, 0.7));
    assert_close(seconds(&m, REASONING, "ollama").1, 0.3, "reasoning time");
    assert_close(
        seconds(&m, SERVER_TTFT, "ollama").1,
        0.17,
        "load + prompt eval",
    );
    assert_close(seconds(&m, PREFILL, "ollama").1, 0.15, "prompt eval");
    assert_close(seconds(&m, GENERATION, "ollama").1, 0.6, "eval");
    assert_close(seconds(&m, OUTSIDE, "ollama").1, 0.4 - 0.17, "outside");
    assert!(
        !m.has(&family::SERVER_QUEUE.count(), &[]),
        "Ollama reports no queue"
    );
    assert!(!m.has(CACHED, &[]), "Ollama reports no cached prompt");
}

#[tokio::test(start_paused = true)]
async fn llama_cpp_timings_give_the_server_prefill_and_the_cached_prompt() {
    let token = |t: &str, n: u64| {
        sse(&format!(
            r#"{{"index":0,"content":"{t}","tokens":[1],"stop":false,"id_slot":0,"tokens_predicted":{n},"tokens_evaluated":8}}"#
        ))
    };
    let stop = r#"{"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"model":"m","tokens_predicted":2,"tokens_evaluated":8,"stop_type":"limit","tokens_cached":9,"timings":{"prompt_n":3,"prompt_ms":21.5,"predicted_n":2,"predicted_ms":58.0}}"#;
    let events = vec![
        (50, token(" the", 1)),
        (30, token(" fox", 2)),
        (0, sse(stop)),
    ];
    let body = r#"{"prompt":"Once upon a time","n_predict":2,"stream":true,"model":"m"}"#;
    let m = run("/completion", body, sse_head, events).await;
    assert_eq!(seconds(&m, TTFT, "llamacpp"), (1.0, 0.05));
    assert_eq!(seconds(&m, ANSWER, "llamacpp"), (1.0, 0.05));
    assert_eq!(
        m.get(CACHED, &labels("llamacpp")),
        5.0,
        "8 prompt tokens, 3 processed"
    );
    assert_close(seconds(&m, SERVER_TTFT, "llamacpp").1, 0.0215, "prompt_ms");
    assert_close(seconds(&m, OUTSIDE, "llamacpp").1, 0.05 - 0.0215, "outside");
}

#[tokio::test(start_paused = true)]
async fn tgi_queue_time_header_of_a_json_answer_is_the_server_queue_time() {
    let body =
        r#"{"generated_text":"Hi","details":{"finish_reason":"length","generated_tokens":2}}"#;
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-queue-time: 12\r\nx-inference-time: 80\r\nx-time-per-token: 40\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let steps = vec![Step::Raw(head.into_bytes())];
    let m = run_with(
        "/generate",
        r#"{"inputs":"hi","model":"m"}"#,
        steps,
        body,
        "",
    )
    .await;
    assert_close(
        seconds(&m, QUEUE, "generate").1,
        0.012,
        "x-queue-time in ms",
    );
    assert_eq!(seconds(&m, QUEUE, "generate").0, 1.0);
    assert!(
        !m.has(&family::OUTSIDE_SERVER.count(), &[]),
        "no TTFT without a stream"
    );
}

#[tokio::test(start_paused = true)]
async fn a_first_answer_over_its_ceiling_is_a_violation_and_not_goodput_while_ttft_is_met() {
    let events = vec![
        (100, chat_delta(r#"{"reasoning_content":"Let"}"#)),
        (2_000, chat_delta(r#"{"content":"Hi"}"#)),
        (0, "data: [DONE]\n\n".to_owned()),
    ];
    let yaml = "slo: {ttft: 500ms, time_to_first_answer: 1500ms}";
    let m = stream_with("/v1/chat/completions", &chat_body(), sse_head, events, yaml).await;
    let l = labels("chat");
    let slo = |kind| [l[0], l[1], ("slo", kind)];
    assert_eq!(
        m.get(family::SLO_VIOLATIONS.name, &slo("time_to_first_answer")),
        1.0
    );
    assert_eq!(m.get(family::SLO_VIOLATIONS.name, &slo("ttft")), 0.0);
    assert_eq!(m.get(family::GOODPUT.name, &l), 0.0);
    let bucket = |le| [l[0], l[1], ("le", le)];
    assert_eq!(
        m.get(&family::TIME_TO_FIRST_ANSWER.bucket(), &bucket("1.5")),
        0.0
    );
    assert_eq!(
        m.get(&family::TIME_TO_FIRST_ANSWER.bucket(), &bucket("3")),
        1.0
    );
}

#[cfg(feature = "tokenizer")]
#[tokio::test(start_paused = true)]
async fn without_reasoning_details_a_configured_tokenizer_counts_the_reasoning_text() {
    const WORDS: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tokenizer/words.json"
    );
    // Usage without completion_tokens_details (vLLM's default): the reasoning text is tokenized,
    // apart from the answer. The test tokenizer makes a token of each word and punctuation mark.
    let usage = r#"{"id":"c","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11}}"#;
    let events = vec![
        (100, chat_delta(r#"{"reasoning_content":"hello world,"}"#)),
        (100, chat_delta(r#"{"reasoning_content":" hello"}"#)),
        (100, chat_delta(r#"{"content":"world"}"#)),
        (0, sse(usage)),
        (0, "data: [DONE]\n\n".to_owned()),
    ];
    let yaml = format!("tokenizers:\n  m: {WORDS}\n");
    let m = stream_with(
        "/v1/chat/completions",
        &chat_body(),
        sse_head,
        events,
        &yaml,
    )
    .await;
    assert_eq!(
        m.get(REASONING_TOKENS, &labels("chat")),
        4.0,
        "hello world , hello"
    );
    assert_eq!(
        m.get(family::OUTPUT_TOKENS.name, &labels("chat")),
        6.0,
        "usage"
    );
    assert_close(seconds(&m, REASONING, "chat").1, 0.2, "reasoning time");
}

/// One stream shape of one API: the events (pause in ms, event), and what the clocks must say.
struct Shape {
    name: &'static str,
    path: &'static str,
    api: &'static str,
    body: &'static str,
    head: fn() -> Step,
    events: Vec<(u64, String)>,
    /// TTFT and time to first answer (ms); reasoning time (ms) when reasoning came first.
    ttft: u64,
    answer: Option<u64>,
    reasoning: Option<u64>,
}

fn anthropic_delta(delta: &str) -> String {
    named(
        "content_block_delta",
        &format!(r#"{{"type":"content_block_delta","index":0,"delta":{delta}}}"#),
    )
}

fn responses_event(kind: &str, delta: &str) -> String {
    named(
        kind,
        &format!(r#"{{"type":"{kind}","output_index":0,"delta":"{delta}"}}"#),
    )
}

fn ollama_line(message: &str) -> String {
    format!("{{\"model\":\"m\",\"created_at\":\"t\",\"message\":{message},\"done\":false}}\n")
}

const MESSAGES_BODY: &str = r#"{"model":"m","max_tokens":64,"stream":true,"messages":[]}"#;
const RESPONSES_BODY: &str = r#"{"model":"m","input":"hi","stream":true}"#;
const OLLAMA_BODY: &str = r#"{"model":"m","messages":[]}"#;

fn shapes() -> Vec<Shape> {
    let stop = named("message_stop", r#"{"type":"message_stop"}"#);
    let completed = named(
        "response.completed",
        r#"{"type":"response.completed","response":{"model":"m","status":"completed"}}"#,
    );
    let done =
        "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true}\n";
    vec![
        Shape {
            name: "anthropic thinking only",
            path: "/v1/messages",
            api: "messages",
            body: MESSAGES_BODY,
            head: sse_head,
            events: vec![
                (
                    150,
                    anthropic_delta(r#"{"type":"thinking_delta","thinking":"Hm"}"#),
                ),
                (
                    50,
                    anthropic_delta(r#"{"type":"thinking_delta","thinking":" so"}"#),
                ),
                (0, stop.clone()),
            ],
            ttft: 150,
            answer: None,
            reasoning: None,
        },
        Shape {
            name: "anthropic text only",
            path: "/v1/messages",
            api: "messages",
            body: MESSAGES_BODY,
            head: sse_head,
            events: vec![
                (80, anthropic_delta(r#"{"type":"text_delta","text":"Hi"}"#)),
                (0, stop.clone()),
            ],
            ttft: 80,
            answer: Some(80),
            reasoning: None,
        },
        Shape {
            name: "anthropic tool use first",
            path: "/v1/messages",
            api: "messages",
            body: MESSAGES_BODY,
            head: sse_head,
            events: vec![
                (
                    90,
                    anthropic_delta(r#"{"type":"input_json_delta","partial_json":"{\"city\":"}"#),
                ),
                (
                    10,
                    anthropic_delta(r#"{"type":"text_delta","text":"Done"}"#),
                ),
                (0, stop),
            ],
            ttft: 90,
            answer: Some(90),
            reasoning: None,
        },
        Shape {
            name: "responses reasoning summary only",
            path: "/v1/responses",
            api: "responses",
            body: RESPONSES_BODY,
            head: sse_head,
            events: vec![
                (
                    60,
                    responses_event("response.reasoning_summary_text.delta", "Plan"),
                ),
                (0, completed.clone()),
            ],
            ttft: 60,
            answer: None,
            reasoning: None,
        },
        Shape {
            name: "responses function call first",
            path: "/v1/responses",
            api: "responses",
            body: RESPONSES_BODY,
            head: sse_head,
            events: vec![
                (
                    70,
                    responses_event("response.function_call_arguments.delta", "{"),
                ),
                (30, responses_event("response.output_text.delta", "ok")),
                (0, completed.clone()),
            ],
            ttft: 70,
            answer: Some(70),
            reasoning: None,
        },
        Shape {
            name: "responses text only",
            path: "/v1/responses",
            api: "responses",
            body: RESPONSES_BODY,
            head: sse_head,
            events: vec![
                (40, responses_event("response.output_text.delta", "Hi")),
                (0, completed),
            ],
            ttft: 40,
            answer: Some(40),
            reasoning: None,
        },
        Shape {
            name: "ollama thinking only",
            path: "/api/chat",
            api: "ollama",
            body: OLLAMA_BODY,
            head: ndjson_head,
            events: vec![
                (
                    200,
                    ollama_line(r#"{"role":"assistant","content":"","thinking":"Hm"}"#),
                ),
                (0, done.to_owned()),
            ],
            ttft: 200,
            answer: None,
            reasoning: None,
        },
        Shape {
            name: "ollama tool call after thinking",
            path: "/api/chat",
            api: "ollama",
            body: OLLAMA_BODY,
            head: ndjson_head,
            events: vec![
                (
                    100,
                    ollama_line(r#"{"role":"assistant","content":"","thinking":"Hm"}"#),
                ),
                (
                    250,
                    ollama_line(
                        r#"{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]}"#,
                    ),
                ),
                (0, done.to_owned()),
            ],
            ttft: 100,
            answer: Some(350),
            reasoning: Some(250),
        },
        Shape {
            name: "ollama content only",
            path: "/api/chat",
            api: "ollama",
            body: OLLAMA_BODY,
            head: ndjson_head,
            events: vec![
                (30, ollama_line(r#"{"role":"assistant","content":"Hi"}"#)),
                (0, done.to_owned()),
            ],
            ttft: 30,
            answer: Some(30),
            reasoning: None,
        },
    ]
}

#[tokio::test(start_paused = true)]
async fn every_reasoning_api_times_reasoning_only_answer_only_and_tool_call_first_streams() {
    for shape in shapes() {
        let name = shape.name;
        let m = run(shape.path, shape.body, shape.head, shape.events).await;
        let api = shape.api;
        let s = |n: u64| n as f64 / 1e3;
        assert_eq!(seconds(&m, TTFT, api), (1.0, s(shape.ttft)), "{name}: TTFT");
        let answer = shape.answer.map_or((0.0, 0.0), |a| (1.0, s(a)));
        assert_eq!(seconds(&m, ANSWER, api), answer, "{name}: first answer");
        let reasoning = shape.reasoning.map_or((0.0, 0.0), |r| (1.0, s(r)));
        assert_eq!(
            seconds(&m, REASONING, api),
            reasoning,
            "{name}: reasoning time"
        );
    }
}
