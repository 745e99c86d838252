//! Micro-benchmarks of tokentap's per-chunk hot path, so a change that slows it shows up:
//! the SSE framer, the OpenAI dialect decoder, the Anthropic and Responses ones' per-token events, the response decoder (framer + dialect), the exchange (decoder +
//! timeline + histogram observations), and a whole request through tokentap in-process (`through_proxy_*`:
//! the client and upstream legs, forwarding, taps and metering). Every figure is per vLLM-shaped chunk of
//! ~240 bytes unless the name says otherwise. Run with `cargo bench --bench hot_path`.
#![forbid(unsafe_code)]

use std::sync::Arc;

use divan::counter::{BytesCount, ItemsCount};
use divan::{black_box, Bencher};
use http::{HeaderValue, Method, StatusCode};
use tokentap::config::{Config, Metering};
use tokentap::decode::dialect::{detect, Dialect, EventOutput, Observations};
use tokentap::decode::event::FramedEvent;
use tokentap::decode::response::{Format, ResponseDecoder};
use tokentap::decode::sse::SseFramer;
use tokentap::decode::tokenizer::TextCount;
use tokentap::record::metrics::Metrics;
use tokentap::record::outcome::End;
use tokentap::tap::exchange::{Exchange, ExchangeContext, ExchangeGuard};
use tokentap::tap::RequestSeen;

fn main() {
    divan::main();
}

/// A content chunk as vLLM 0.x sends it (one token).
const CONTENT: &[u8] = br#"data: {"id":"chatcmpl-a86038c5d743ac9b","object":"chat.completion.chunk","created":1796207719,"model":"tiny-llama","choices":[{"index":0,"delta":{"content":" control"},"logprobs":null,"finish_reason":null,"token_ids":null}]}

"#;
const ROLE: &[u8] = br#"data: {"id":"chatcmpl-a86038c5d743ac9b","object":"chat.completion.chunk","created":1796207719,"model":"tiny-llama","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}

"#;
const USAGE: &[u8] = br#"data: {"id":"chatcmpl-a86038c5d743ac9b","object":"chat.completion.chunk","created":1796207719,"model":"tiny-llama","choices":[],"usage":{"prompt_tokens":17,"total_tokens":33,"completion_tokens":16},"system_fingerprint":"vllm-0.32.0-967dd6de"}

"#;
/// A content chunk whose text has escapes (a newline and a quote), which serde_json must unescape.
const CONTENT_ESCAPED: &[u8] = br#"data: {"id":"chatcmpl-a86038c5d743ac9b","object":"chat.completion.chunk","created":1796207719,"model":"tiny-llama","choices":[{"index":0,"delta":{"content":"\n\"a"},"logprobs":null,"finish_reason":null,"token_ids":null}]}

"#;
/// A reasoning chunk as vLLM sends it with a reasoning parser (DeepSeek-R1, Qwen3).
const REASONING: &[u8] = br#"data: {"id":"chatcmpl-a86038c5d743ac9b","object":"chat.completion.chunk","created":1796207719,"model":"qwen3","choices":[{"index":0,"delta":{"reasoning_content":" think"},"logprobs":null,"finish_reason":null,"token_ids":null}]}

"#;
/// A tool-call argument chunk.
const TOOL_CALL: &[u8] = br#"data: {"id":"chatcmpl-a86038c5d743ac9b","object":"chat.completion.chunk","created":1796207719,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": "}}]},"logprobs":null,"finish_reason":null}]}

"#;
/// vLLM's last chunk with usage details (`--enable-prompt-tokens-details`) and its per-request
/// `metrics`.
const USAGE_METRICS: &[u8] = br#"data: {"id":"chatcmpl-a86038c5d743ac9b","object":"chat.completion.chunk","created":1796207719,"model":"tiny-llama","choices":[],"usage":{"prompt_tokens":17,"total_tokens":33,"completion_tokens":16,"prompt_tokens_details":{"cached_tokens":16},"completion_tokens_details":{"reasoning_tokens":4}},"metrics":{"time_to_first_token_ms":30.0,"generation_time_ms":90.5,"queue_time_ms":2.5,"mean_itl_ms":30.1,"tokens_per_second":33.0}}

"#;
const CAPTURE: &[u8] = include_bytes!("../tests/fixtures/openai/vllm-0.32-chat-stream.sse");

fn limits() -> Metering {
    Config::default().metering
}

fn chat_dialect() -> Box<dyn Dialect> {
    dialect_of("/v1/chat/completions")
}

/// The data of an SSE event line, as the framer hands it to the dialect.
fn event_data(chunk: &[u8]) -> &[u8] {
    chunk
        .strip_prefix(b"data: ")
        .unwrap_or(chunk)
        .trim_ascii_end()
}

#[divan::bench]
fn framer_one_event_per_feed(bencher: Bencher) {
    let mut framer = SseFramer::new(limits().max_event_bytes);
    bencher
        .counter(BytesCount::of_slice(CONTENT))
        .bench_local(|| {
            let mut n = 0usize;
            let _ = framer.feed(black_box(CONTENT), |e| n += e.data.len());
            n
        });
}

#[divan::bench]
fn framer_event_split_in_two_feeds(bencher: Bencher) {
    let mut framer = SseFramer::new(limits().max_event_bytes);
    let (a, b) = CONTENT.split_at(CONTENT.len() / 2);
    bencher
        .counter(BytesCount::of_slice(CONTENT))
        .bench_local(|| {
            let mut n = 0usize;
            let _ = framer.feed(black_box(a), |e| n += e.data.len());
            let _ = framer.feed(black_box(b), |e| n += e.data.len());
            n
        });
}

/// The chat dialect reading `chunk`'s event, no tokenizer.
fn dialect_per_event(bencher: Bencher, chunk: &[u8]) {
    one_event(bencher, chat_dialect(), event_data(chunk));
}

/// The dialect `detect` gives the path.
fn dialect_of(path: &str) -> Box<dyn Dialect> {
    match detect(path).1 {
        Some(dialect) => dialect,
        None => unreachable!("{path} has a dialect"),
    }
}

/// `dialect` reading the one event `data`, over and over, no tokenizer.
fn one_event(bencher: Bencher, mut dialect: Box<dyn Dialect>, data: &[u8]) {
    let event = FramedEvent::unnamed(data);
    let (mut obs, mut choices) = (Observations::default(), Vec::new());
    bencher.bench_local(|| {
        choices.clear();
        let mut output = EventOutput::new(None, &mut choices);
        dialect.on_event(black_box(&event), &mut obs, &mut output)
    });
}

/// Anthropic's per-token event, `content_block_delta`, as the Messages API sends it (text and thinking).
#[divan::bench(args = ["text", "thinking"])]
fn anthropic_dialect_per_event(bencher: Bencher, kind: &str) {
    let data: &[u8] = match kind {
        "thinking" => br#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" the user"}}"#,
        _ => br#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":" control"}}"#,
    };
    one_event(bencher, dialect_of("/v1/messages"), data);
}

/// TGI's per-token event on `/generate_stream`, as TGI sends it (a token, no text yet, no details).
#[divan::bench]
fn tgi_dialect_per_event(bencher: Bencher) {
    let data: &[u8] = br#"{"index":2,"token":{"id":6509,"text":" learning","logprob":-0.0103,"special":false},"generated_text":null,"details":null}"#;
    one_event(bencher, dialect_of("/generate_stream"), data);
}

/// llama.cpp's per-token event on `/completion`, as its server sends it (no `timings` until the last).
#[divan::bench]
fn llamacpp_dialect_per_event(bencher: Bencher) {
    let data: &[u8] = br#"{"index":0,"content":" quick","tokens":[1001],"stop":false,"id_slot":0,"tokens_predicted":2,"tokens_evaluated":8}"#;
    one_event(bencher, dialect_of("/completion"), data);
}

/// Ollama's per-token line on `/api/chat`, as its server sends it (NDJSON, one JSON object a line).
#[divan::bench]
fn ollama_dialect_per_event(bencher: Bencher) {
    let data: &[u8] = br#"{"model":"llama3.2","created_at":"2025-10-17T14:43:01.123457789Z","message":{"role":"assistant","content":" sky"},"done":false}"#;
    one_event(bencher, dialect_of("/api/chat"), data);
}

/// The Responses API's per-token event, `response.output_text.delta`, as vLLM sends it.
#[divan::bench]
fn responses_dialect_per_event(bencher: Bencher) {
    let data: &[u8] = br#"{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_a1b2c3","output_index":0,"content_index":0,"delta":" control","logprobs":[]}"#;
    one_event(bencher, dialect_of("/v1/responses"), data);
}

#[divan::bench(args = ["content", "role", "usage"])]
fn openai_dialect_per_event(bencher: Bencher, kind: &str) {
    let chunk = match kind {
        "role" => ROLE,
        "usage" => USAGE,
        _ => CONTENT,
    };
    dialect_per_event(bencher, chunk);
}

/// The other shapes of chunk the decoder reads: reasoning, a tool call's arguments, and vLLM's last
/// chunk with usage details and per-request metrics.
#[divan::bench(args = ["reasoning", "tool_call", "usage_metrics"])]
fn openai_dialect_per_event_shape(bencher: Bencher, kind: &str) {
    let chunk = match kind {
        "reasoning" => REASONING,
        "tool_call" => TOOL_CALL,
        _ => USAGE_METRICS,
    };
    dialect_per_event(bencher, chunk);
}

/// The same events when a tokenizer counts the model's output: the dialect also hands over each
/// chunk's text (the buffer is cleared each time, as a tokenizer's running count would consume it).
#[divan::bench(args = ["content", "escaped"])]
fn openai_dialect_per_event_with_text(bencher: Bencher, kind: &str) {
    let chunk = match kind {
        "escaped" => CONTENT_ESCAPED,
        _ => CONTENT,
    };
    let event = FramedEvent::unnamed(event_data(chunk));
    let mut dialect = chat_dialect();
    let (mut obs, mut choices, mut texts) = (Observations::default(), Vec::new(), Vec::new());
    bencher.bench_local(|| {
        choices.clear();
        texts.iter_mut().for_each(String::clear);
        let mut output = EventOutput::new(Some(&mut texts), &mut choices);
        dialect.on_event(black_box(&event), &mut obs, &mut output)
    });
}

#[divan::bench]
fn decoder_per_content_chunk(bencher: Bencher) {
    let mut decoder = ResponseDecoder::new(chat_dialect(), Format::Sse, &limits(), TextCount::Off);
    let mut marks = Vec::new();
    decoder.feed(ROLE, &mut marks);
    bencher.counter(ItemsCount::new(1usize)).bench_local(|| {
        marks.clear();
        decoder.feed(black_box(CONTENT), &mut marks)
    });
}

/// The whole vLLM capture (19 events), fed as one frame per event as a server flushes them.
#[divan::bench]
fn decoder_vllm_capture_per_stream(bencher: Bencher) {
    let mut events: Vec<&[u8]> = Vec::new();
    let mut rest = CAPTURE;
    while let Some(end) = memchr::memmem::find(rest, b"\n\n") {
        let (event, tail) = rest.split_at(end + 2);
        events.push(event);
        rest = tail;
    }
    let limits = limits();
    bencher
        .counter(ItemsCount::new(events.len()))
        .bench_local(|| {
            let mut decoder =
                ResponseDecoder::new(chat_dialect(), Format::Sse, &limits, TextCount::Off);
            let mut marks = Vec::new();
            for event in &events {
                decoder.feed(black_box(event), &mut marks);
            }
            decoder.finish(true, &mut marks);
            marks.len()
        });
}

fn exchange_context() -> Arc<ExchangeContext> {
    let config = Config::default();
    let metrics = Arc::new(Metrics::new(&config).unwrap_or_else(|e| panic!("metrics: {e}")));
    Arc::new(ExchangeContext::metering_only(&config, metrics))
}

fn begin_chat(context: &Arc<ExchangeContext>, start: tokio::time::Instant) -> Exchange {
    let (api, dialect) = detect("/v1/chat/completions");
    Exchange::begin(
        context.clone(),
        api,
        dialect,
        Method::POST,
        "/v1/chat/completions".to_owned(),
        start,
        Arc::new(RequestSeen::default()),
    )
}

/// What the response tap does per frame: decoder, timeline, TTFT/ITL histogram observations.
#[divan::bench]
fn exchange_on_data_per_content_chunk(bencher: Bencher) {
    let context = exchange_context();
    let start = tokio::time::Instant::now();
    let mut exchange = begin_chat(&context, start);
    exchange.on_response(
        StatusCode::OK,
        Some(&HeaderValue::from_static("text/event-stream")),
    );
    exchange.on_data(ROLE, start);
    bencher
        .counter(ItemsCount::new(1usize))
        .bench_local(|| exchange.on_data(black_box(CONTENT), tokio::time::Instant::now()));
}

/// One whole short request as the exchange sees it: begin (labels, in-flight gauge), the response head,
/// 11 events (role, 8 contents, usage, `[DONE]`), the end (outcome, the pure conclusion, every metric
/// written, the log line handed to `tracing`, here without a subscriber).
#[divan::bench]
fn exchange_per_short_request(bencher: Bencher) {
    let context = exchange_context();
    let done: &[u8] = b"data: [DONE]\n\n";
    bencher.counter(ItemsCount::new(1usize)).bench_local(|| {
        let start = tokio::time::Instant::now();
        let mut guard = ExchangeGuard::new(begin_chat(&context, start));
        if let Some(exchange) = guard.get_mut() {
            exchange.on_response(
                StatusCode::OK,
                Some(&HeaderValue::from_static("text/event-stream")),
            );
            exchange.on_data(ROLE, start);
            for _ in 0..8 {
                exchange.on_data(black_box(CONTENT), tokio::time::Instant::now());
            }
            exchange.on_data(USAGE, tokio::time::Instant::now());
            exchange.on_data(done, tokio::time::Instant::now());
        }
        guard.finish(End::Complete);
    });
}

/// The whole data path in one process: a hyper client sends a streaming chat request to tokentap
/// (started in-process, default configuration, no log subscriber), which forwards it to a scripted
/// upstream on loopback that answers with role, `contents` content chunks, usage and `[DONE]`, each
/// written as soon as the one before it is; the client reads the whole body. Client, tokentap and
/// upstream share one current-thread runtime, so the figure includes the client's and the upstream's own
/// work and the loopback system calls: it is for before/after comparisons of tokentap (its client and
/// upstream legs, the forwarding, the taps, the metering), not a cost of tokentap alone.
mod through {
    use std::net::SocketAddr;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::client::conn::http1::SendRequest;
    use hyper_util::rt::TokioIo;
    use tokentap::scripted::{chunk, last_chunk, Scripted, Step, DONE};
    use tokio::net::TcpStream;
    use tokio::runtime::Runtime;

    use super::{CONTENT, ROLE, USAGE};

    pub struct Through {
        pub runtime: Runtime,
        client: SendRequest<Full<Bytes>>,
        _proxy: tokentap::Running,
        /// The request body sent each time.
        pub body: Bytes,
    }

    /// The upstream (`tokentap::scripted`, keeping no log): a chunked SSE response whose events go out
    /// one write each.
    async fn upstream(contents: usize) -> SocketAddr {
        let mut steps = vec![
            Step::Raw(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec()),
            chunk(ROLE),
        ];
        steps.extend((0..contents).map(|_| chunk(CONTENT)));
        steps.extend([chunk(USAGE), chunk(DONE.as_bytes()), last_chunk()]);
        let server = Scripted::new(move |_| steps.clone())
            .forgetful()
            .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind");
        server.addr
    }

    /// tokentap in front of a scripted upstream, with `extra` YAML in its config, and a client.
    pub fn start_with(contents: usize, extra: &str) -> Through {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (client, proxy) = runtime.block_on(async {
            let upstream = upstream(contents).await;
            let yaml = format!(
                "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: http://{upstream}\n{extra}"
            );
            let config = tokentap::Config::from_yaml_str(&yaml).expect("config");
            let proxy = tokentap::start(&config).await.expect("start tokentap");
            let stream = TcpStream::connect(proxy.proxy_addr())
                .await
                .expect("connect");
            stream.set_nodelay(true).ok();
            let (client, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .expect("handshake");
            tokio::spawn(connection);
            (client, proxy)
        });
        Through {
            runtime,
            client,
            _proxy: proxy,
            body: Bytes::from_static(
                br#"{"model":"tiny-llama","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
            ),
        }
    }

    impl Through {
        /// One request through the proxy; returns the bytes of the body the client got.
        pub fn request(&mut self) -> usize {
            let request = http::Request::post("/v1/chat/completions")
                .header("host", "bench")
                .header("content-type", "application/json")
                .body(Full::new(self.body.clone()))
                .expect("request");
            let client = &mut self.client;
            self.runtime.block_on(async {
                client.ready().await.expect("ready");
                let response = client.send_request(request).await.expect("response");
                assert_eq!(response.status(), 200);
                let body = response.into_body().collect().await.expect("body");
                body.to_bytes().len()
            })
        }
    }
}

/// One short streamed request through the whole proxy in-process (11 events: role, 8 contents, usage,
/// `[DONE]`), client and upstream included: see [`through`].
#[divan::bench]
fn through_proxy_short_request(bencher: Bencher) {
    through_proxy(bencher, 8);
}

/// The same with 64 content chunks (67 events): the difference from the short request, over 56 events,
/// is the cost of one more chunk through every stage.
#[divan::bench]
fn through_proxy_stream_64(bencher: Bencher) {
    through_proxy(bencher, 64);
}

/// The short request with its body streamed upstream as it arrives (`hold_request_body_bytes: 0`)
/// instead of read whole first (the default): the difference from `through_proxy_short_request` is what
/// holding a small body costs.
#[divan::bench]
fn through_proxy_short_request_body_streamed(bencher: Bencher) {
    through_proxy_with(bencher, 8, "limits:\n  hold_request_body_bytes: 0\n");
}

/// A chat request whose history is about `bytes` long: turns of a user question and an answer, as an
/// agent's later turn sends them.
fn history(bytes: usize) -> String {
    let mut messages =
        vec![serde_json::json!({"role": "system", "content": "You are a careful agent."})];
    let mut size = 0;
    let mut i = 0;
    while size < bytes {
        let text = format!(
            "Step {i}: {}",
            "look at the file and say what it does; ".repeat(8)
        );
        size += text.len() + 40;
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        messages.push(serde_json::json!({"role": role, "content": text}));
        i += 1;
    }
    serde_json::json!({"model": "tiny-llama", "stream": true, "messages": messages}).to_string()
}

fn prompt_bytes(size: &str) -> usize {
    match size {
        "1MB" => 1 << 20,
        _ => 2 << 10,
    }
}

/// Reading a request's message list as digests (decode/messages.rs), what recognising its conversation
/// adds to each request, per request: a 2 KB history and a 1 MB one.
#[divan::bench(args = ["2KB", "1MB"])]
fn conversation_read(bencher: Bencher, size: &str) {
    let body = history(prompt_bytes(size));
    bencher
        .counter(BytesCount::new(body.len()))
        .bench(|| read_list(black_box(body.as_bytes())));
}

/// The list of a chat body, read as the exchange reads it: how many prefixes (0 when not read).
fn read_list(body: &[u8]) -> usize {
    let stop = std::sync::atomic::AtomicBool::new(false);
    let governor = tokentap::govern::Governor::with_defaults();
    let mut lease = governor.lease(tokentap::govern::Budget::MessageLists, &Default::default());
    let api = tokentap::record::api::Api::Chat;
    let list = tokentap::decode::messages::read(api, body, &stop, &mut lease);
    list.ok().flatten().map_or(0, |l| l.prefixes.len())
}

/// An agent's history of `messages` messages about `bytes` long, as a coding agent sends it back: a
/// system prompt, then rounds of a user's text parts, an assistant's tool call and the tool's result
/// (a file's text, the bulk of the bytes).
fn agent_history(messages: usize, bytes: usize) -> String {
    let mut list =
        vec![serde_json::json!({"role": "system", "content": "You are a careful coding agent."})];
    let file = "fn main() { println!(\"hello\"); }\n".repeat(bytes * 3 / messages / 38);
    for i in 1..messages {
        list.push(match i % 3 {
            1 => serde_json::json!({"role": "user", "content": [
                {"type": "text", "text": format!("Step {i}: read the next file and say what it does.")}]}),
            2 => serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": format!("call_{i}"), "type": "function",
                 "function": {"name": "read_file", "arguments": format!("{{\"path\":\"src/{i}.rs\"}}")}}]}),
            _ => serde_json::json!({"role": "tool", "tool_call_id": format!("call_{}", i - 1), "content": file}),
        });
    }
    serde_json::json!({"model": "tiny-llama", "stream": true, "messages": list}).to_string()
}

/// An agent's history read as digests: 2 KB of 6 messages (`3 << 10` asks for about 2 KB), and 1 MB of 500.
#[divan::bench(args = ["2KB", "1MB"])]
fn conversation_read_agent(bencher: Bencher, size: &str) {
    let body = match size {
        "1MB" => agent_history(500, 1 << 20),
        _ => agent_history(6, 3 << 10),
    };
    bencher
        .counter(BytesCount::new(body.len()))
        .bench(|| read_list(black_box(body.as_bytes())));
}

/// A 1 MiB chat body no agent sends: a list of nested arrays or of numbers instead of messages, or one
/// message whose content is that; or (`deep_unsorted`) one whose content is 60 objects nested, each
/// with its keys out of order around the next, the innermost holding 900 KB of text: every level is put
/// in order, the text copied once a level (the reader's worst case per byte).
fn hostile(kind: &str) -> String {
    if kind == "deep_unsorted" {
        let levels = 60;
        let text = "x".repeat(900 << 10);
        let content = format!(
            r#"{}"{text}"{}"#,
            r#"{"z":"#.repeat(levels),
            r#","a":1}"#.repeat(levels)
        );
        return format!(r#"{{"model":"m","messages":[{{"role":"user","content":{content}}}]}}"#);
    }
    let (item, inside) = match kind {
        "nested" => ("[[[[[[[[0]]]]]]]]", false),
        "numbers" => ("0", false),
        "nested_in_message" => ("[[[[[[[[0]]]]]]]]", true),
        _ => ("0", true),
    };
    let items = vec![item; (1 << 20) / (item.len() + 1)].join(",");
    match inside {
        false => format!(r#"{{"model":"m","messages":[{items}]}}"#),
        true => format!(r#"{{"model":"m","messages":[{{"role":"user","content":[{items}]}}]}}"#),
    }
}

/// The hostile bodies of [`hostile`], read.
#[divan::bench(args = ["nested", "numbers", "nested_in_message", "numbers_in_message", "deep_unsorted"])]
fn conversation_read_hostile(bencher: Bencher, kind: &str) {
    let body = hostile(kind);
    bencher
        .counter(BytesCount::new(body.len()))
        .bench(|| read_list(black_box(body.as_bytes())));
}

/// The short request with a 2 KB or 1 MB history through the whole proxy, conversations recognised
/// (the default): against [`through_proxy_prompt_no_conversations`], the cost in place.
#[divan::bench(args = ["2KB", "1MB"])]
fn through_proxy_prompt(bencher: Bencher, size: &str) {
    through_proxy_body(bencher, size, "");
}

/// The same with `conversations: {max_turns: 0}`.
#[divan::bench(args = ["2KB", "1MB"])]
fn through_proxy_prompt_no_conversations(bencher: Bencher, size: &str) {
    through_proxy_body(bencher, size, "conversations: {max_turns: 0}\n");
}

fn through_proxy_body(bencher: Bencher, size: &str, extra: &str) {
    let mut through = through::start_with(
        8,
        &format!("limits: {{hold_request_body_bytes: 2MiB}}\n{extra}"),
    );
    through.body = bytes::Bytes::from(history(prompt_bytes(size)));
    through.request();
    bencher
        .counter(ItemsCount::new(1usize))
        .bench_local(|| through.request());
}

/// A short request with `traces:` on and every request sampled: its trace read at admission, its span
/// built from its record at the end and queued; the collector is a port nothing listens on, so the
/// exporter's posts fail at once and the spans are dropped and counted (none of it on the request's way).
#[divan::bench]
fn through_proxy_short_request_traced(bencher: Bencher) {
    through_proxy_with(bencher, 8, "traces: {endpoint: \"http://127.0.0.1:9\"}\n");
}

/// One finished request's span: its figures (read through the figure table) as attributes and
/// events, built by the span sink on the request's thread when it ends, after the response.
#[divan::bench]
fn span_of_a_finished_request(bencher: Bencher) {
    use std::time::{Duration, SystemTime};
    use tokentap::record::api::Api;
    use tokentap::record::emit::{span_of, Finished, Who};
    use tokentap::record::finished::{conclude, DecoderReport};
    use tokentap::record::gaps::GapSummary;
    use tokentap::record::outcome::Outcome;
    use tokentap::record::timeline::Timeline;
    use tokentap::record::trace::ids_for;
    let config = Config::default();
    let metrics = Metrics::new(&config).unwrap_or_else(|e| panic!("metrics: {e}"));
    let series = metrics.series_of(
        metrics.model_label(Some("tiny-llama"), None, true),
        None,
        Api::Chat,
    );
    let t0 = tokio::time::Instant::now();
    let ms = Duration::from_millis;
    let mut timeline = Timeline::new(t0);
    timeline.on_head(Some(t0 + ms(20)));
    for i in 0..64 {
        timeline.on_output(0, t0 + ms(125 + 17 * i));
    }
    timeline.on_answer(t0 + ms(125), false);
    let report = DecoderReport {
        streaming: true,
        terminal_event: true,
        usage_output_tokens: Some(64),
        input_tokens: Some(512),
        ..DecoderReport::default()
    };
    let ceilings = tokentap::config::Ceilings::default();
    let status = Some(http::StatusCode::OK);
    let record = conclude(
        Some(&report),
        &timeline,
        Outcome::Ok,
        t0 + ms(1250),
        status,
        &ceilings,
    );
    let gaps = GapSummary::default();
    let mut head = http::HeaderMap::new();
    let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    head.insert("traceparent", HeaderValue::from_static(caller));
    bencher.bench_local(|| {
        let context = ids_for(black_box(&head));
        let finished = Finished {
            who: Who {
                id: "0123abcd-1f",
                client_id: None,
                method: "POST",
                path: "/v1/chat/completions",
                start: SystemTime::now(),
                client: &tokentap::govern::Client::Unknown,
                captured: false,
            },
            api: Api::Chat,
            series: &series,
            record: &record,
            turn: None,
            gaps: &gaps,
            request_model: Some("tiny-llama"),
            response_model: Some("tiny-llama"),
            response_id: None,
            span: Some(&context),
            session: None,
        };
        span_of(black_box(&finished), &context, ("127.0.0.1", 8000))
    });
}

/// Requests with `contents` content chunks through the proxy, after one to open the connections.
fn through_proxy(bencher: Bencher, contents: usize) {
    through_proxy_with(bencher, contents, "");
}

fn through_proxy_with(bencher: Bencher, contents: usize, extra: &str) {
    let mut through = through::start_with(contents, extra);
    through.request();
    bencher
        .counter(ItemsCount::new(1usize))
        .bench_local(|| through.request());
}
