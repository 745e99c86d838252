//! The numbers: TTFT, ITL, TPOT, E2E, tokens and goodput, each checked against a script whose timing is
//! known exactly. These tests run on tokio's paused clock: the scripted upstream's sleeps advance time by
//! exactly their length, so every figure is exact, however loaded the machine.

use crate::support;

use std::time::Duration;

use support::*;
use tokentap::record::metrics::family;

const CHAT: &str = "/v1/chat/completions";

/// Role chunk at once, first token after `ttft`, later tokens after each gap, then usage (if any) and [DONE]
/// after `tail`.
fn token_script(
    ttft: Duration, gaps: &[u64], usage: Option<(u64, u64)>, tail: Duration,
) -> Vec<Step> {
    let mut steps = vec![
        sse_head(),
        chunk(ROLE_CHUNK.as_bytes()),
        Step::Sleep(ttft),
        chunk(content_chunk("t0").as_bytes()),
    ];
    for (i, gap) in gaps.iter().enumerate() {
        steps.push(Step::Sleep(ms(*gap)));
        steps.push(chunk(content_chunk(&format!("t{}", i + 1)).as_bytes()));
    }
    steps.push(Step::Sleep(tail));
    if let Some((prompt, completion)) = usage {
        steps.push(chunk(usage_chunk(prompt, completion).as_bytes()));
    }
    steps.push(chunk(DONE.as_bytes()));
    steps.push(last_chunk());
    steps
}

/// The events of a captured SSE body, each with its blank-line terminator.
fn fixture_events(capture: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(capture)
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| format!("{e}\n\n"))
        .collect()
}

/// Replays events one chunk each: `lead` after the head, `gap` after every event.
fn replay(events: &[String], lead: Duration, gap: Duration) -> Vec<Step> {
    let mut steps = vec![sse_head(), Step::Sleep(lead)];
    for event in events {
        steps.push(chunk(event.as_bytes()));
        steps.push(Step::Sleep(gap));
    }
    steps.push(last_chunk());
    steps
}

fn assert_close(actual: f64, expected: f64, what: &str) {
    assert!(
        (actual - expected).abs() < 1e-6,
        "{what}: got {actual}, expected {expected}"
    );
}

const M: &[(&str, &str)] = &[("model", "m"), ("api", "chat")];

#[tokio::test(start_paused = true)]
async fn ttft_is_stopped_by_the_first_content_not_by_the_role_chunk() {
    let upstream = upstream(|_| token_script(ms(300), &[20, 20], None, ms(0))).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.status, 200);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(&family::TTFT.count(), M), 1.0);
    assert_close(m.get(&family::TTFT.sum(), M), 0.300, "TTFT");
}

#[tokio::test(start_paused = true)]
async fn itl_tpot_e2e_and_rate_follow_the_formulas_on_a_known_script() {
    // Tokens at 250, 270, 300, 350, 370 ms; usage and [DONE] 10 ms after the last token.
    let upstream =
        upstream(|_| token_script(ms(250), &[20, 30, 50, 20], Some((11, 5)), ms(10))).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    assert_eq!(got.end, Ok(()));
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    // One ITL observation per gap: 5 output chunks, 4 gaps, summing to t_last − t_first.
    assert_eq!(m.get(&family::ITL.count(), M), 4.0);
    assert_close(m.get(&family::ITL.sum(), M), 0.120, "ITL sum");
    assert_close(m.get(&family::MAX_GAP.sum(), M), 0.050, "max gap");
    // E2E = t_end − t_arrive = 380 ms; generation = 380 − 250 = 130 ms; TPOT = 130 / (5 − 1) = 32.5 ms.
    assert_close(m.get(&family::E2E.sum(), M), 0.380, "E2E");
    assert_close(
        m.get(&family::GENERATION.sum(), M),
        0.130,
        "generation time",
    );
    assert_close(m.get(&family::TPOT.sum(), M), 0.0325, "TPOT");
    assert_close(
        m.get(&family::TOKENS_PER_SECOND.sum(), M),
        4.0 / 0.130,
        "tokens/s",
    );
    assert_eq!(m.get(family::INPUT_TOKENS.name, M), 11.0);
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, M), 5.0);
    // Buckets are cumulative and fine at the low end: the 20 ms gaps sit at or below le=0.02.
    assert_eq!(
        m.get(&family::ITL.bucket(), &[("model", "m"), ("le", "0.02")]),
        2.0
    );
    assert_eq!(
        m.get(&family::ITL.bucket(), &[("model", "m"), ("le", "0.03")]),
        3.0
    );
}

#[tokio::test(start_paused = true)]
async fn usage_count_drives_tpot_when_chunks_carry_several_tokens() {
    // 3 chunks but the server reports 9 tokens (e.g. speculative decoding): N = 9.
    let upstream = upstream(|_| token_script(ms(100), &[40, 40], Some((4, 9)), ms(0))).await;
    let proxy = proxy(&upstream.url(), "").await;
    send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, M), 9.0);
    assert_eq!(m.get(&family::ITL.count(), M), 2.0);
    assert_close(m.get(&family::TPOT.sum(), M), 0.080 / 8.0, "TPOT");
}

#[tokio::test(start_paused = true)]
async fn token_count_falls_back_to_output_chunks_without_usage() {
    const CAPTURE: &[u8] = include_bytes!("fixtures/openai/llama-cpp-python-chat-stream.sse");
    let events = fixture_events(CAPTURE);
    let content_events = events
        .iter()
        .filter(|e| e.contains("\"content\": \"") && !e.contains("\"content\": \"\""))
        .count();
    let upstream = upstream(move |_| replay(&events, ms(0), ms(10))).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(
        &client(),
        post(&proxy, CHAT, r#"{"messages":[],"stream":true}"#),
    )
    .await;
    assert_eq!(got.body, CAPTURE);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    // No model in the request: the response's model labels the series.
    let labels = &[("model", "tiny-gguf"), ("api", "chat")];
    assert!(content_events > 5);
    assert_eq!(
        m.get(family::OUTPUT_TOKENS.name, labels),
        content_events as f64
    );
    assert_eq!(
        m.get(&family::ITL.count(), labels),
        (content_events - 1) as f64
    );
    assert_eq!(m.get(family::INPUT_TOKENS.name, labels), 0.0);
    // The role chunk came first, 10 ms before the first content chunk.
    assert_close(m.get(&family::TTFT.sum(), labels), 0.010, "TTFT");
}

#[tokio::test(start_paused = true)]
async fn goodput_counts_only_requests_within_every_ceiling() {
    let upstream = upstream(|request| {
        let body = String::from_utf8_lossy(&request.body);
        if body.contains("slow-first") {
            token_script(ms(300), &[20], None, ms(0)) // TTFT over 200 ms
        } else if body.contains("stall") {
            token_script(ms(50), &[20, 400, 20], None, ms(0)) // one gap over the 250 ms ITL ceiling
        } else {
            token_script(ms(50), &[20, 20], None, ms(0)) // within everything
        }
    })
    .await;
    let slo = "slo:\n  ttft: 200ms\n  itl: 250ms\n  tpot: 333ms\n  models:\n    relaxed:\n      ttft: 1s\n";
    let proxy = proxy(&upstream.url(), slo).await;
    let client = client();
    for body in [
        r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"fast"}]}"#,
        r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"slow-first"}]}"#,
        r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"stall"}]}"#,
        r#"{"model":"relaxed","stream":true,"messages":[{"role":"user","content":"slow-first"}]}"#,
    ] {
        send(&client, post(&proxy, CHAT, body)).await;
    }
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[("model", "m")]), 3.0);
    assert_eq!(m.get(family::GOODPUT.name, &[("model", "m")]), 1.0);
    assert_eq!(
        m.get(
            family::SLO_VIOLATIONS.name,
            &[("model", "m"), ("slo", "ttft")]
        ),
        1.0
    );
    assert_eq!(
        m.get(
            family::SLO_VIOLATIONS.name,
            &[("model", "m"), ("slo", "itl")]
        ),
        1.0
    );
    assert_eq!(m.get(family::SLO_VIOLATIONS.name, &[("slo", "tpot")]), 0.0);
    // The per-model override lifts TTFT to 1 s for "relaxed": its 300 ms first token is goodput.
    assert_eq!(m.get(family::GOODPUT.name, &[("model", "relaxed")]), 1.0);
    // Each ceiling is a bucket boundary, so attainment is exact in PromQL.
    assert!(m.has(&family::TTFT.bucket(), &[("le", "0.2")]));
    assert!(m.has(&family::TPOT.bucket(), &[("le", "0.333")]));
    assert!(m.has(&family::MAX_GAP.bucket(), &[("le", "0.25")]));
    assert_eq!(
        m.get(&family::TTFT.bucket(), &[("model", "m"), ("le", "0.2")]),
        2.0
    );
}

#[tokio::test(start_paused = true)]
async fn non_streaming_response_records_e2e_and_usage_but_no_ttft() {
    let body = r#"{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"}}],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}"#;
    let upstream =
        upstream(move |_| vec![Step::Sleep(ms(700)), json_response(200, "OK", body)]).await;
    let proxy = proxy(&upstream.url(), "slo:\n  ttft: 100ms\n  e2e: 1s\n").await;
    let got = send(
        &client(),
        post(&proxy, CHAT, r#"{"model":"m","messages":[]}"#),
    )
    .await;
    assert_eq!(got.body, body.as_bytes());
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_close(m.get(&family::E2E.sum(), M), 0.700, "E2E");
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, M), 34.0);
    assert_eq!(m.get(family::INPUT_TOKENS.name, M), 12.0);
    assert_eq!(m.get(&family::TTFT.count(), &[]), 0.0);
    assert_eq!(m.get(&family::TPOT.count(), &[]), 0.0);
    // The TTFT ceiling does not apply to a non-streaming response; E2E is within 1 s: goodput.
    assert_eq!(m.get(family::GOODPUT.name, M), 1.0);
}

#[tokio::test(start_paused = true)]
async fn e2e_ceiling_misses_are_counted() {
    let upstream = upstream(|_| token_script(ms(50), &[20; 10], None, ms(0))).await;
    let proxy = proxy(&upstream.url(), "slo:\n  e2e: 200ms\n").await;
    send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::SLO_VIOLATIONS.name, &[("slo", "e2e")]), 1.0);
    assert_eq!(m.get(family::GOODPUT.name, &[]), 0.0);
    assert_eq!(m.get(family::REQUESTS.name, &[("outcome", "ok")]), 1.0);
}

#[tokio::test(start_paused = true)]
async fn model_labels_are_capped_and_overflow_counts_as_other() {
    let upstream = upstream(|_| token_script(ms(10), &[10], None, ms(0))).await;
    let proxy = proxy(&upstream.url(), "max_models: 2\n").await;
    let client = client();
    for model in ["a", "b", "c", "d", "a"] {
        send(&client, post(&proxy, CHAT, &chat_request(model))).await;
    }
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[("model", "a")]), 2.0);
    assert_eq!(m.get(family::REQUESTS.name, &[("model", "b")]), 1.0);
    assert_eq!(m.get(family::REQUESTS.name, &[("model", "other")]), 2.0);
    assert!(!m.has(family::REQUESTS.name, &[("model", "c")]));
}

#[tokio::test(start_paused = true)]
async fn completions_api_counts_text_chunks() {
    let upstream = upstream(|_| {
        let mut steps = vec![sse_head()];
        for (i, text) in ["Once", " upon", "", " a", " time"].iter().enumerate() {
            steps.push(Step::Sleep(ms(if i == 0 { 120 } else { 15 })));
            let event = format!("data: {{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"text\":\"{text}\",\"finish_reason\":null}}]}}\n\n");
            steps.push(chunk(event.as_bytes()));
        }
        steps.push(chunk(DONE.as_bytes()));
        steps.push(last_chunk());
        steps
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    send(
        &client(),
        post(
            &proxy,
            "/v1/completions",
            r#"{"model":"m","prompt":"x","stream":true}"#,
        ),
    )
    .await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let labels = &[("model", "m"), ("api", "completions")];
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, labels), 4.0);
    assert_close(m.get(&family::TTFT.sum(), labels), 0.120, "TTFT");
    // The empty-text chunk is not output: the gap after " upon" runs to " a" (30 ms).
    assert_close(m.get(&family::MAX_GAP.sum(), labels), 0.030, "max gap");
}

#[tokio::test(start_paused = true)]
async fn unknown_paths_are_counted_without_token_figures() {
    let upstream = upstream(|_| {
        vec![
            Step::Sleep(ms(40)),
            json_response(200, "OK", r#"{"data":[]}"#),
        ]
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(
        &client(),
        post(
            &proxy,
            "/v1/embeddings",
            r#"{"model":"embedder","input":"x"}"#,
        ),
    )
    .await;
    assert_eq!(got.status, 200);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let labels = &[("model", "embedder"), ("api", "other")];
    assert_eq!(m.get(family::REQUESTS.name, labels), 1.0);
    assert_close(m.get(&family::E2E.sum(), labels), 0.040, "E2E");
    assert!(
        !m.has(family::OUTPUT_TOKENS.name, labels)
            || m.get(family::OUTPUT_TOKENS.name, labels) == 0.0
    );
}

#[tokio::test(start_paused = true)]
async fn guidellm_capture_without_role_chunk_is_metered_from_its_usage() {
    const CAPTURE: &[u8] = include_bytes!("fixtures/openai/guidellm-mock-chat-stream.sse");
    let events = fixture_events(CAPTURE);
    let usage: serde_json::Value = events
        .iter()
        .filter_map(|e| {
            serde_json::from_str::<serde_json::Value>(e.trim().trim_start_matches("data: ")).ok()
        })
        .find(|v| v["usage"].is_object())
        .map(|v| v["usage"].clone())
        .expect("the capture has a usage chunk");
    let upstream = upstream(move |_| replay(&events, ms(80), ms(5))).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("mock-llama"))).await;
    assert_eq!(got.body, CAPTURE);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let labels = &[("model", "mock-llama"), ("api", "chat")];
    assert_eq!(
        m.get(family::OUTPUT_TOKENS.name, labels),
        usage["completion_tokens"].as_f64().unwrap_or(-1.0)
    );
    assert_eq!(
        m.get(family::INPUT_TOKENS.name, labels),
        usage["prompt_tokens"].as_f64().unwrap_or(-1.0)
    );
    // No role chunk: the very first event is the first token, 80 ms after the head.
    assert_close(m.get(&family::TTFT.sum(), labels), 0.080, "TTFT");
}

fn chat_chunk(delta: &str, index: u32) -> Step {
    chunk(format!("data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":{index},\"delta\":{delta},\"finish_reason\":null}}]}}\n\n").as_bytes())
}

fn usage_with(details: &str, completion: u64) -> Step {
    chunk(format!("data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":{{\"prompt_tokens\":4,\"completion_tokens\":{completion}{details}}}}}\n\n").as_bytes())
}

#[tokio::test(start_paused = true)]
async fn a_refusal_stream_has_a_ttft_gaps_and_tpot_and_is_judged_on_them() {
    let upstream = upstream(|_| {
        vec![
            sse_head(),
            chat_chunk(r#"{"role":"assistant","content":""}"#, 0),
            Step::Sleep(ms(300)),
            chat_chunk(r#"{"refusal":"I"}"#, 0),
            Step::Sleep(ms(20)),
            chat_chunk(r#"{"refusal":" can't"}"#, 0),
            Step::Sleep(ms(20)),
            chat_chunk(r#"{"refusal":" help."}"#, 0),
            usage_with("", 3),
            chunk(DONE.as_bytes()),
            last_chunk(),
        ]
    })
    .await;
    let proxy = proxy(&upstream.url(), "slo:\n  ttft: 100ms\n").await;
    send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_close(m.get(&family::TTFT.sum(), M), 0.300, "TTFT");
    assert_eq!(m.get(&family::ITL.count(), M), 2.0);
    assert_close(m.get(&family::TPOT.sum(), M), 0.020, "TPOT");
    // The 300 ms refusal missed the 100 ms ceiling: not goodput.
    assert_eq!(m.get(family::GOODPUT.name, M), 0.0);
    let ttft = [("model", "m"), ("slo", "ttft")];
    assert_eq!(m.get(family::SLO_VIOLATIONS.name, &ttft), 1.0);
}

#[tokio::test(start_paused = true)]
async fn several_choices_are_timed_as_the_reader_of_one_choice_sees_them() {
    // n = 2. Choice 0 at 100, 120, 140 ms; choice 1 at 110, 150, 160 ms; usage 6 tokens; [DONE] at 200.
    let upstream = upstream(|_| {
        let at = |sleep: u64, index: u32, text: &str| {
            [
                Step::Sleep(ms(sleep)),
                chat_chunk(&format!(r#"{{"content":"{text}"}}"#), index),
            ]
        };
        let mut steps = vec![
            sse_head(),
            chat_chunk(r#"{"role":"assistant","content":""}"#, 0),
            chat_chunk(r#"{"role":"assistant","content":""}"#, 1),
        ];
        for (sleep, index, text) in [
            (100, 0, "a"),
            (10, 1, "x"),
            (10, 0, "b"),
            (20, 0, "c"),
            (10, 1, "y"),
            (10, 1, "z"),
        ] {
            steps.extend(at(sleep, index, text));
        }
        steps.extend([
            Step::Sleep(ms(40)),
            usage_with("", 6),
            chunk(DONE.as_bytes()),
            last_chunk(),
        ]);
        steps
    })
    .await;
    let proxy = proxy(&upstream.url(), "").await;
    send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_close(
        m.get(&family::TTFT.sum(), M),
        0.100,
        "TTFT: the first output of any choice",
    );
    // Gaps within each choice: 20 + 20 (choice 0), 40 + 10 (choice 1).
    assert_eq!(m.get(&family::ITL.count(), M), 4.0);
    assert_close(m.get(&family::ITL.sum(), M), 0.090, "ITL");
    assert_close(m.get(&family::MAX_GAP.sum(), M), 0.040, "max gap");
    // 6 tokens over 2 choices: 3 a choice. TPOT = (200 − 100) / (3 − 1).
    assert_close(m.get(&family::TPOT.sum(), M), 0.050, "TPOT");
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, M), 6.0);
}

#[tokio::test(start_paused = true)]
async fn usage_that_leaves_the_streamed_reasoning_out_is_corrected_and_says_so() {
    // Five reasoning events and one answer event, 10 ms apart; usage says 1 completion token and
    // reports the 5 reasoning tokens apart (as xAI's reasoning models do).
    let script = |details: &'static str, completion: u64| {
        move |_: &RecordedRequest| {
            let mut steps = vec![sse_head(), chat_chunk(r#"{"role":"assistant"}"#, 0)];
            for i in 0..6 {
                let delta = if i < 5 {
                    r#"{"reasoning_content":"hm"}"#
                } else {
                    r#"{"content":"Yes"}"#
                };
                steps.extend([Step::Sleep(ms(10)), chat_chunk(delta, 0)]);
            }
            steps.extend([
                usage_with(details, completion),
                chunk(DONE.as_bytes()),
                last_chunk(),
            ]);
            steps
        }
    };
    let cases = [
        (
            script(r#","completion_tokens_details":{"reasoning_tokens":5}"#, 1),
            6.0,
        ),
        // No details, and fewer tokens than events: raised to the events.
        (script("", 2), 6.0),
    ];
    for (script, tokens) in cases {
        let upstream = upstream(script).await;
        let proxy = proxy(&upstream.url(), "").await;
        send(&client(), post(&proxy, CHAT, &chat_request("m"))).await;
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        assert_eq!(m.get(family::OUTPUT_TOKENS.name, M), tokens);
        let corrected = [("model", "m"), ("token_source", "usage_corrected")];
        assert_eq!(m.get(family::TOKEN_SOURCE.name, &corrected), 1.0);
        // TPOT = 50 ms over 5 steps, not 50 ms over 0.
        assert_close(m.get(&family::TPOT.sum(), M), 0.010, "TPOT");
    }
}
