//! The scripted upstream: an OpenAI-compatible chat endpoint that streams like vLLM (a role-only chunk at
//! once, content chunks after a prefill delay at a fixed rate, a usage chunk, `[DONE]`), served by
//! `tokentap::scripted`. Each chunk's JSON carries `"bench_sent_ns"`, the instant it was handed to the
//! socket on this process's clock, and the response head carries `x-bench-recv-ns`, when the request
//! reached the upstream: the load generator runs in the same process, so client receive time − upstream
//! send time is exact.
//!
//! The script comes with each request, in headers every proxy passes on: `x-bench-tokens`,
//! `x-bench-gap-us`, `x-bench-prefill-us`; `x-bench-json: 1` asks for one whole JSON chat completion
//! instead of a stream (the keep-alive lane of `lanes.rs`).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use tokentap::scripted::{
    chunk, framed, json_response, last_chunk, Chunks, Make, RecordedRequest, Scripted, Step,
    Upstream, DONE,
};

static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();

/// Nanoseconds since this process's benchmark epoch (monotonic; shared by upstream and load generator).
pub fn now_ns() -> u64 {
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

pub const MODEL: &str = "bench-llama-8b";
const WORDS: [&str; 8] = [
    " the", " model", " streams", " tokens", " while", " latency", " stays", " low",
];

/// One stream's script, read from the request headers.
#[derive(Debug, Clone, Copy)]
pub struct Script {
    pub tokens: u32,
    pub gap: Duration,
    pub prefill: Duration,
}

impl Script {
    pub fn headers(&self, headers: &mut HeaderMap) {
        let mut put = |name: &'static str, value: u128| {
            if let Ok(v) = HeaderValue::from_str(&value.to_string()) {
                headers.insert(name, v);
            }
        };
        put("x-bench-tokens", self.tokens.into());
        put("x-bench-gap-us", self.gap.as_micros());
        put("x-bench-prefill-us", self.prefill.as_micros());
    }

    fn from_request(request: &RecordedRequest) -> Script {
        let num = |name: &str, default: u64| {
            request
                .header(name)
                .first()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        Script {
            tokens: num("x-bench-tokens", 16) as u32,
            gap: Duration::from_micros(num("x-bench-gap-us", 20_000)),
            prefill: Duration::from_micros(num("x-bench-prefill-us", 0)),
        }
    }
}

/// Binds `127.0.0.1:0` and serves the script on it until the process ends (a `tokentap::scripted`
/// server that keeps no log); returns the address.
pub async fn spawn() -> std::io::Result<SocketAddr> {
    let server = Scripted::new(answer)
        .forgetful()
        .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await?;
    let addr = server.addr;
    // The load generator reads how many connections the upstream accepted.
    let _ = SERVER.set(server);
    Ok(addr)
}

/// Connections the upstream has accepted: shows whether a proxy pools its upstream connections.
pub fn accepted() -> u64 {
    SERVER.get().map_or(0, Upstream::accepted)
}

static SERVER: OnceLock<Upstream> = OnceLock::new();

/// One chunk: the chat chunk of `choices` and `after`, stamped with the instant it is written.
fn stamped(id: &str, choices: String, after: String) -> Step {
    let id = id.to_owned();
    Step::Render(Arc::new(move || {
        let stamp = format!("{after},\"bench_sent_ns\":{}", now_ns());
        framed(Chunks::chat(&id, MODEL).event(&choices, &stamp).as_bytes())
    }))
}

/// The script of one request: the role chunk at once, each content chunk at its time after the
/// prefill (paced from the request's arrival, so the writes do not add up), usage, `[DONE]`.
fn answer(request: &RecordedRequest) -> Vec<Step> {
    let recv_ns = now_ns();
    let script = Script::from_request(request);
    let id = format!("chatcmpl-{recv_ns:016x}");
    if request
        .header("x-bench-json")
        .first()
        .is_some_and(|v| v == "1")
    {
        return vec![json_response(200, "OK", &completion(&id, script.tokens))];
    }
    let head = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nx-bench-recv-ns: {recv_ns}\r\ntransfer-encoding: chunked\r\n\r\n");
    let mut steps = vec![
        Step::Raw(head.into_bytes()),
        stamped(
            &id,
            r#"{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}"#.to_owned(),
            String::new(),
        ),
    ];
    // One turn per content chunk, made as its time comes: the memory phase's streams are a million
    // chunks long.
    let (turn_id, tokens) = (id.clone(), script.tokens);
    let turn: Make = Arc::new(move |i| {
        let word = WORDS[i as usize % WORDS.len()];
        let finish = if i + 1 == u64::from(tokens) {
            "\"length\""
        } else {
            "null"
        };
        vec![
            Step::At(script.prefill + script.gap * i as u32),
            stamped(
                &turn_id,
                format!(
                    r#"{{"index":0,"delta":{{"content":"{word}"}},"logprobs":null,"finish_reason":{finish}}}"#
                ),
                String::new(),
            ),
        ]
    });
    steps.push(Step::Each(0..u64::from(script.tokens), turn));
    let usage = format!(
        r#","usage":{{"prompt_tokens":24,"total_tokens":{},"completion_tokens":{}}}"#,
        24 + script.tokens,
        script.tokens
    );
    steps.push(stamped(&id, String::new(), usage));
    steps.push(chunk(DONE.as_bytes()));
    steps.push(last_chunk());
    steps
}

/// A whole chat completion of `tokens` words, as a non-streaming answer carries it.
fn completion(id: &str, tokens: u32) -> String {
    let text: String = (0..tokens as usize)
        .map(|i| WORDS[i % WORDS.len()])
        .collect();
    format!(
        r#"{{"id":"{id}","object":"chat.completion","created":1700000000,"model":"{MODEL}","choices":[{{"index":0,"message":{{"role":"assistant","content":"{text}"}},"logprobs":null,"finish_reason":"length"}}],"usage":{{"prompt_tokens":24,"total_tokens":{},"completion_tokens":{tokens}}}}}"#,
        24 + tokens
    )
}
