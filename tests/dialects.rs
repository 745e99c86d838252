//! Every API dialect end to end: a fixture stream in that server's real wire format (see the README in
//! each tests/fixtures/<dialect>/) is replayed through the proxy by the scripted upstream. The client
//! must get the very same bytes, and the figures must be exactly what the fixture implies. These tests
//! run on tokio's paused clock with one event every 10 ms, so TTFT, ITL, E2E and TPOT are exact.

use crate::support;

use support::*;
use tokentap::record::metrics::family;

const TICK_MS: u64 = 10;

struct Fixture {
    name: &'static str,
    bytes: &'static [u8],
    path: &'static str,
    content_type: &'static str,
    request: &'static str,
    /// The `model` and `api` labels the request gets.
    labels: [(&'static str, &'static str); 2],
    /// Events in the stream, the 0-based position of the first output-bearing one, and how many carry output.
    events: usize,
    first: usize,
    outputs: usize,
    /// Output and input tokens, from the server's usage (chunks when it sends none).
    tokens: u64,
    input: u64,
    /// Choices (`n`), and the ITL sum in ticks: each choice's last output minus its first, summed.
    choices: usize,
    itl_ticks: usize,
    /// Where N comes from (`token_source`).
    source: &'static str,
}

fn fixtures() -> Vec<Fixture> {
    vec![
        Fixture {
            name: "OpenAI Responses",
            bytes: include_bytes!("fixtures/responses/responses-stream.sse"),
            path: "/v1/responses",
            content_type: "text/event-stream; charset=utf-8",
            request: r#"{"model":"gpt-4.1","input":"Hi","stream":true}"#,
            labels: [("model", "gpt-4.1"), ("api", "responses")],
            events: 14,
            first: 4,
            outputs: 6,
            tokens: 6,
            input: 9,
            choices: 1,
            itl_ticks: 5,
            source: "usage",
        },
        Fixture {
            name: "Anthropic Messages",
            bytes: include_bytes!("fixtures/anthropic/messages-stream.sse"),
            path: "/v1/messages",
            content_type: "text/event-stream; charset=utf-8",
            request: r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"Weather in SF?"}],"stream":true}"#,
            labels: [("model", "claude-sonnet-4-5"), ("api", "messages")],
            events: 19,
            first: 3,
            outputs: 7,
            tokens: 42,
            input: 600,
            choices: 1,
            itl_ticks: 12,
            source: "usage",
        },
        Fixture {
            name: "TGI generate_stream",
            bytes: include_bytes!("fixtures/tgi/generate-stream.sse"),
            path: "/generate_stream",
            content_type: "text/event-stream",
            request: r#"{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":20}}"#,
            labels: [("model", "unknown"), ("api", "generate")],
            events: 6,
            first: 0,
            outputs: 6,
            tokens: 6,
            input: 7,
            choices: 1,
            itl_ticks: 5,
            source: "usage",
        },
        Fixture {
            name: "Ollama chat",
            bytes: include_bytes!("fixtures/ollama/chat-stream.ndjson"),
            path: "/api/chat",
            content_type: "application/x-ndjson",
            request: r#"{"model":"llama3.2","messages":[{"role":"user","content":"why is the sky blue?"}]}"#,
            labels: [("model", "llama3.2"), ("api", "ollama")],
            events: 7,
            first: 0,
            outputs: 6,
            tokens: 9,
            input: 26,
            choices: 1,
            itl_ticks: 5,
            source: "usage",
        },
        Fixture {
            name: "Ollama generate",
            bytes: include_bytes!("fixtures/ollama/generate-stream.ndjson"),
            path: "/api/generate",
            content_type: "application/x-ndjson",
            request: r#"{"model":"qwen3:0.6b","prompt":"Why is the sky blue?"}"#,
            labels: [("model", "qwen3:0.6b"), ("api", "ollama")],
            events: 6,
            first: 0,
            outputs: 5,
            tokens: 6,
            input: 12,
            choices: 1,
            itl_ticks: 4,
            source: "usage",
        },
        Fixture {
            name: "llama.cpp completion",
            bytes: include_bytes!("fixtures/llamacpp/completion-stream.sse"),
            path: "/completion",
            content_type: "text/event-stream",
            request: r#"{"prompt":"Once upon a time,","n_predict":5,"stream":true}"#,
            // The model is named only in the last event, after the labels were fixed at the first token.
            labels: [("model", "unknown"), ("api", "llamacpp")],
            events: 6,
            first: 0,
            outputs: 5,
            tokens: 5,
            input: 8,
            choices: 1,
            itl_ticks: 4,
            source: "usage",
        },
        // Real vLLM 0.32 streams (tests/fixtures/vllm/README.md).
        tiny_llama(
            "vLLM chat, no usage",
            include_bytes!("fixtures/vllm/chat-stream.sse"),
            8,
            (1, 6, 6),
            (6, 0, "chunks"),
        ),
        tiny_llama(
            "vLLM chat, usage",
            include_bytes!("fixtures/vllm/chat-stream-usage.sse"),
            9,
            (1, 6, 6),
            (6, 30, "usage"),
        ),
        Fixture {
            name: "vLLM chat n=2, usage",
            bytes: include_bytes!("fixtures/vllm/chat-stream-n2-usage.sse"),
            path: "/v1/chat/completions",
            content_type: "text/event-stream",
            request: r#"{"model":"tiny-llama","messages":[{"role":"user","content":"hi"}],"n":2,"stream":true}"#,
            labels: [("model", "tiny-llama"), ("api", "chat")],
            events: 16,
            first: 2,
            outputs: 11,
            tokens: 12,
            input: 30,
            choices: 2,
            // the last output minus the first: choice 0 events 2..=11, choice 1 6..=13 (its event 4 has
            // empty content)
            itl_ticks: 9 + 7,
            source: "usage",
        },
        tiny_llama(
            "vLLM completions, usage",
            include_bytes!("fixtures/vllm/completions-stream-usage.sse"),
            8,
            (0, 5, 6),
            (6, 17, "usage"),
        )
        .asked_on("completions"),
        tiny_llama(
            "vLLM Responses",
            include_bytes!("fixtures/vllm/responses-stream.sse"),
            14,
            (4, 9, 6),
            (6, 30, "usage"),
        )
        .asked_on("responses"),
        tiny_llama(
            "vLLM Messages",
            include_bytes!("fixtures/vllm/messages-stream.sse"),
            11,
            (2, 7, 6),
            (6, 30, "usage"),
        )
        .asked_on("messages"),
        // Real llama-cpp-python 0.3.36 streams (tests/fixtures/llamacpp-python/README.md): no usage, N
        // from the chunks; the completions stream has empty-text chunks, which carry no output.
        tiny_llama(
            "llama-cpp-python chat",
            include_bytes!("fixtures/llamacpp-python/chat-stream.sse"),
            9,
            (1, 6, 6),
            (6, 0, "chunks"),
        ),
        tiny_llama(
            "llama-cpp-python completions",
            include_bytes!("fixtures/llamacpp-python/completions-stream.sse"),
            9,
            (0, 6, 6),
            (6, 0, "chunks"),
        )
        .asked_on("completions"),
    ]
}

/// A stream of one choice from the conformance suite's tiny model (tests/fixtures/vllm/,
/// llamacpp-python/), as a chat stream: its events, (first output, last output, outputs) and (N, input
/// tokens, token_source).
fn tiny_llama(
    name: &'static str, bytes: &'static [u8], events: usize,
    (first, last, outputs): (usize, usize, usize),
    (tokens, input, source): (u64, u64, &'static str),
) -> Fixture {
    Fixture {
        name,
        bytes,
        path: "/v1/chat/completions",
        content_type: "text/event-stream",
        request: r#"{"model":"tiny-llama","messages":[{"role":"user","content":"hi"}],"stream":true}"#,
        labels: [("model", "tiny-llama"), ("api", "chat")],
        events,
        first,
        outputs,
        tokens,
        input,
        choices: 1,
        itl_ticks: last - first,
        source,
    }
}

impl Fixture {
    /// The tiny model's stream as another of its APIs answers it: that API's path, request and label.
    fn asked_on(self, api: &'static str) -> Fixture {
        let (path, request) = match api {
            "completions" => (
                "/v1/completions",
                r#"{"model":"tiny-llama","prompt":"hi","stream":true}"#,
            ),
            "responses" => (
                "/v1/responses",
                r#"{"model":"tiny-llama","input":"hi","stream":true}"#,
            ),
            "messages" => (
                "/v1/messages",
                r#"{"model":"tiny-llama","max_tokens":6,"messages":[{"role":"user","content":"hi"}],"stream":true}"#,
            ),
            other => panic!("no tiny-llama request for the {other} API"),
        };
        Fixture {
            path,
            request,
            labels: [("model", "tiny-llama"), ("api", api)],
            ..self
        }
    }
}

fn head(content_type: &str) -> Step {
    Step::Raw(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        .into_bytes(),
    )
}

/// The stream cut after each event: after each blank line (SSE) or each line (NDJSON).
fn events(fixture: &Fixture) -> Vec<&'static [u8]> {
    let separator: &[u8] = if fixture.content_type.contains("ndjson") {
        b"\n"
    } else {
        b"\n\n"
    };
    let (mut out, mut rest) = (Vec::new(), fixture.bytes);
    while let Some(at) = rest.windows(separator.len()).position(|w| w == separator) {
        let (event, tail) = rest.split_at(at + separator.len());
        out.push(event);
        rest = tail;
    }
    assert!(rest.is_empty(), "{}: trailing bytes", fixture.name);
    out
}

fn assert_close(actual: f64, expected: f64, what: &str) {
    assert!(
        (actual - expected).abs() < 1e-9,
        "{what}: got {actual}, expected {expected}"
    );
}

#[tokio::test(start_paused = true)]
async fn each_fixture_replayed_event_by_event_gives_exact_figures_and_identical_bytes() {
    for f in fixtures() {
        let steps: Vec<Step> = std::iter::once(head(f.content_type))
            .chain(
                events(&f)
                    .into_iter()
                    .flat_map(|event| [Step::Sleep(ms(TICK_MS)), chunk(event)]),
            )
            .chain([last_chunk()])
            .collect();
        assert_eq!(steps.len(), 2 + 2 * f.events, "{}: event count", f.name);
        let upstream = upstream(move |_| steps.clone()).await;
        let proxy = proxy(&upstream.url(), "").await;
        let got = send(&client(), post(&proxy, f.path, f.request)).await;
        assert_eq!((got.status, &got.end), (200, &Ok(())), "{}", f.name);
        assert_eq!(got.body, f.bytes, "{}: bytes changed", f.name);
        settle(&proxy).await;

        let m = scrape(&proxy).await;
        let l = &f.labels;
        let name = f.name;
        let tick = TICK_MS as f64 / 1000.0;
        let ttft = tick * (f.first + 1) as f64;
        let e2e = tick * f.events as f64;
        assert_close(m.get(&family::TTFT.sum(), l), ttft, &format!("{name} TTFT"));
        let gaps = m.get(&family::ITL.count(), l);
        assert_eq!(
            gaps,
            (f.outputs - f.choices) as f64,
            "{name}: one ITL observation per gap within a choice"
        );
        let itl_sum = tick * f.itl_ticks as f64;
        assert_close(
            m.get(&family::ITL.sum(), l),
            itl_sum,
            &format!("{name} ITL"),
        );
        assert_close(m.get(&family::E2E.sum(), l), e2e, &format!("{name} E2E"));
        let tpot = (e2e - ttft) / (f.tokens as f64 / f.choices as f64 - 1.0);
        assert_close(m.get(&family::TPOT.sum(), l), tpot, &format!("{name} TPOT"));
        assert_eq!(
            m.get(family::OUTPUT_TOKENS.name, l),
            f.tokens as f64,
            "{name}"
        );
        assert_eq!(
            m.get(family::INPUT_TOKENS.name, l),
            f.input as f64,
            "{name}"
        );
        let usage = [l[0], l[1], ("token_source", f.source)];
        assert_eq!(m.get(family::TOKEN_SOURCE.name, &usage), 1.0, "{name}");
        let ok = [l[0], l[1], ("status", "200"), ("outcome", "ok")];
        assert_eq!(m.get(family::REQUESTS.name, &ok), 1.0, "{name}");
        assert_eq!(m.get(family::METERING_SKIPPED.name, &[]), 0.0, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn fixtures_cut_at_random_points_pass_unchanged_and_count_the_same() {
    for f in fixtures() {
        for seed in 1..=4u64 {
            let frames = random_frames(f.bytes, &mut Lcg(seed * 7919), 61);
            let steps: Vec<Step> = std::iter::once(head(f.content_type))
                .chain(
                    frames
                        .iter()
                        .flat_map(|frame| [Step::Sleep(ms(1)), chunk(frame)]),
                )
                .chain([last_chunk()])
                .collect();
            let upstream = upstream(move |_| steps.clone()).await;
            let proxy = proxy(&upstream.url(), "").await;
            let got = send(&client(), post(&proxy, f.path, f.request)).await;
            assert_eq!(got.body, f.bytes, "{} seed {seed}: bytes changed", f.name);
            settle(&proxy).await;
            let m = scrape(&proxy).await;
            let l = &f.labels;
            let what = format!("{} seed {seed}", f.name);
            assert_eq!(
                m.get(family::OUTPUT_TOKENS.name, l),
                f.tokens as f64,
                "{what}"
            );
            assert_eq!(
                m.get(family::INPUT_TOKENS.name, l),
                f.input as f64,
                "{what}"
            );
            let gaps = m.get(&family::ITL.count(), l);
            assert_eq!(gaps, (f.outputs - f.choices) as f64, "{what}");
            assert_eq!(m.get(&family::TTFT.count(), l), 1.0, "{what}");
        }
    }
}

/// Serves `body` as one stream of the given content type, then ends it.
fn script(content_type: &'static str, body: String) -> impl Fn(&RecordedRequest) -> Vec<Step> {
    move |_| vec![head(content_type), chunk(body.as_bytes()), last_chunk()]
}

#[tokio::test(start_paused = true)]
async fn anthropic_error_event_mid_stream_counts_upstream_error() {
    let body = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    );
    let upstream = upstream(script("text/event-stream", body.to_owned())).await;
    let proxy = proxy(&upstream.url(), "").await;
    let got = send(
        &client(),
        post(&proxy, "/v1/messages", r#"{"model":"claude"}"#),
    )
    .await;
    assert_eq!(got.body, body.as_bytes());
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let labels = [("api", "messages"), ("outcome", "upstream_error")];
    assert_eq!(m.get(family::REQUESTS.name, &labels), 1.0);
    assert_eq!(m.get(family::GOODPUT.name, &[("api", "messages")]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn responses_failed_is_an_upstream_error_and_incomplete_ends_normally() {
    let delta = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n";
    let failed = format!("{delta}event: response.failed\ndata: {{\"type\":\"response.failed\",\"response\":{{\"status\":\"failed\",\"error\":{{\"code\":\"server_error\",\"message\":\"x\"}}}}}}\n\n");
    let incomplete = format!("{delta}event: response.incomplete\ndata: {{\"type\":\"response.incomplete\",\"response\":{{\"status\":\"incomplete\",\"incomplete_details\":{{\"reason\":\"max_output_tokens\"}},\"usage\":{{\"input_tokens\":3,\"output_tokens\":1}}}}}}\n\n");
    for (body, outcome) in [(failed, "upstream_error"), (incomplete, "ok")] {
        let upstream = upstream(script("text/event-stream", body)).await;
        let proxy = proxy(&upstream.url(), "").await;
        send(&client(), post(&proxy, "/v1/responses", r#"{"model":"m"}"#)).await;
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        let labels = [("api", "responses"), ("outcome", outcome)];
        assert_eq!(m.get(family::REQUESTS.name, &labels), 1.0, "{outcome}");
    }
}

#[tokio::test(start_paused = true)]
async fn ollama_stream_without_counts_falls_back_to_chunks_and_says_so() {
    let body = "{\"model\":\"m\",\"response\":\"a\",\"done\":false}\n{\"model\":\"m\",\"response\":\"b\",\"done\":false}\n{\"model\":\"m\",\"response\":\"\",\"done\":true}\n";
    let upstream = upstream(script("application/x-ndjson", body.to_owned())).await;
    let proxy = proxy(&upstream.url(), "").await;
    send(&client(), post(&proxy, "/api/generate", r#"{"model":"m"}"#)).await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let l = [("model", "m"), ("api", "ollama")];
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, &l), 2.0);
    let chunks = [l[0], l[1], ("token_source", "chunks")];
    assert_eq!(m.get(family::TOKEN_SOURCE.name, &chunks), 1.0);
}

#[tokio::test(start_paused = true)]
async fn non_streaming_ollama_and_llamacpp_bodies_give_usage_without_timing() {
    let cases = [
        (
            "/api/chat",
            r#"{"model":"llama3.2","created_at":"t","message":{"role":"assistant","content":"Hi"},"done":true,"prompt_eval_count":26,"eval_count":290}"#,
            "ollama",
            290.0,
            26.0,
        ),
        (
            "/completion",
            r#"{"content":" the quick","model":"g.gguf","tokens_predicted":2,"tokens_evaluated":4,"stop":true,"timings":{"prompt_n":4,"predicted_n":2}}"#,
            "llamacpp",
            2.0,
            4.0,
        ),
    ];
    for (path, body, api, tokens, input) in cases {
        let upstream = upstream(move |_| vec![json_response(200, "OK", body)]).await;
        let proxy = proxy(&upstream.url(), "").await;
        let got = send(&client(), post(&proxy, path, "{}")).await;
        assert_eq!(got.body, body.as_bytes());
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        let l = [("api", api)];
        assert_eq!(m.get(family::OUTPUT_TOKENS.name, &l), tokens, "{api}");
        assert_eq!(m.get(family::INPUT_TOKENS.name, &l), input, "{api}");
        assert_eq!(m.get(&family::TTFT.count(), &l), 0.0, "{api}");
        assert_eq!(m.get(&family::E2E.count(), &l), 1.0, "{api}");
    }
}

#[tokio::test(start_paused = true)]
async fn unknown_paths_stay_other_with_no_token_figures() {
    let body = "{\"model\":\"m\",\"response\":\"a\",\"done\":false}\n";
    let upstream = upstream(script("application/x-ndjson", body.to_owned())).await;
    let proxy = proxy(&upstream.url(), "").await;
    send(&client(), post(&proxy, "/api/pull", r#"{"model":"m"}"#)).await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::REQUESTS.name, &[("api", "other")]), 1.0);
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, &[("api", "other")]), 0.0);
    assert_eq!(m.get(&family::TTFT.count(), &[]), 0.0);
    assert!(!m.has(family::TOKEN_SOURCE.name, &[]));
}

/// The openai SDK's sync stream stops reading at `data: [DONE]` and closes; vLLM, uvicorn and
/// llama-cpp-python send the chunked terminator in a later write. Every API has such a terminal event: a
/// client that leaves right after it got the whole answer, and the request is complete (`ok`, with its
/// E2E, TPOT and goodput), ending when that event passed.
#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_right_after_the_terminal_event_got_the_whole_answer() {
    let mut cases: Vec<(&str, &[u8], &str, &str, &str)> = fixtures()
        .into_iter()
        .map(|f| (f.name, f.bytes, f.path, f.content_type, f.request))
        .collect();
    cases.push((
        "vLLM chat",
        include_bytes!("fixtures/openai/vllm-0.32-chat-stream.sse"),
        "/v1/chat/completions",
        "text/event-stream",
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#,
    ));
    for (name, bytes, path, content_type, request) in cases {
        let f = Fixture {
            name,
            bytes,
            path,
            content_type,
            request,
            labels: [("model", ""), ("api", "")],
            events: 0,
            first: 0,
            outputs: 0,
            tokens: 0,
            input: 0,
            choices: 1,
            itl_ticks: 0,
            source: "",
        };
        let events = events(&f);
        let count = events.len();
        let steps: Vec<Step> = std::iter::once(head(content_type))
            .chain(
                events
                    .into_iter()
                    .flat_map(|event| [Step::Sleep(ms(TICK_MS)), chunk(event)]),
            )
            .chain([
                Step::Sleep(std::time::Duration::from_secs(60)),
                last_chunk(),
            ])
            .collect();
        let upstream = upstream(move |_| steps.clone()).await;
        let proxy = proxy(
            &upstream.url(),
            "slo:\n  ttft: 1s\n  tpot: 1s\n  e2e: 10s\n",
        )
        .await;
        let (mut sender, conn) = open(&proxy).await;
        let response = sender
            .send_request(post(&proxy, path, request))
            .await
            .expect("head");
        let mut body = response.into_body();
        let mut got = Vec::new();
        while got.len() < bytes.len() {
            let frame = http_body_util::BodyExt::frame(&mut body).await;
            let frame = frame.expect("a frame").expect("data");
            got.extend_from_slice(frame.data_ref().expect("data"));
        }
        assert_eq!(got, bytes, "{name}");
        drop(body);
        drop(sender);
        conn.abort();
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        let ok = [("status", "200"), ("outcome", "ok")];
        assert_eq!(m.get(family::REQUESTS.name, &ok), 1.0, "{name}");
        let cancelled = [("outcome", "cancelled")];
        assert_eq!(m.get(family::REQUESTS.name, &cancelled), 0.0, "{name}");
        assert_close(
            m.get(&family::E2E.sum(), &[]),
            (TICK_MS * count as u64) as f64 / 1000.0,
            &format!("{name}: E2E ends at the terminal event"),
        );
        let tpot = m.get(&family::TPOT.count(), &[]);
        assert_eq!(tpot, 1.0, "{name}");
        assert_eq!(m.get(family::GOODPUT.name, &[]), 1.0, "{name}");
    }
}

/// A client that leaves before the terminal event did not get the whole answer: `cancelled`.
#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_before_the_terminal_event_is_cancelled() {
    let script = vec![
        sse_head(),
        chunk(ROLE_CHUNK.as_bytes()),
        chunk(content_chunk("a").as_bytes()),
        chunk(content_chunk("b").as_bytes()),
        Step::Sleep(std::time::Duration::from_secs(60)),
        chunk(DONE.as_bytes()),
        last_chunk(),
    ];
    let upstream = upstream(move |_| script.clone()).await;
    let proxy = proxy(&upstream.url(), "").await;
    let (mut sender, conn) = open(&proxy).await;
    let response = sender
        .send_request(post(&proxy, "/v1/chat/completions", &chat_request("m")))
        .await
        .expect("head");
    let mut body = response.into_body();
    let mut got = Vec::new();
    while !got.ends_with(content_chunk("b").as_bytes()) {
        let frame = http_body_util::BodyExt::frame(&mut body).await;
        got.extend_from_slice(
            frame
                .expect("frame")
                .expect("data")
                .data_ref()
                .expect("data"),
        );
    }
    drop(body);
    drop(sender);
    conn.abort();
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(
        m.get(family::REQUESTS.name, &[("outcome", "cancelled")]),
        1.0
    );
    assert_eq!(m.get(&family::E2E.count(), &[]), 0.0);
}
