//! Building an upstream's answer: a response head, chunks of a chunked body, and OpenAI chat events.

use std::time::Duration;

use super::upstream::Step;

pub fn sse_head() -> Step {
    Step::Raw(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nx-upstream: scripted\r\ntransfer-encoding: chunked\r\n\r\n".to_vec())
}

/// One chunk of a chunked body.
pub fn chunk(data: &[u8]) -> Step {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    Step::Raw(out)
}

pub fn last_chunk() -> Step {
    Step::Raw(b"0\r\n\r\n".to_vec())
}

/// An Ollama-style head: newline-delimited JSON, chunked.
pub fn ndjson_head() -> Step {
    Step::Raw(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n".to_vec())
}

pub fn json_response(status: u16, reason: &str, body: &str) -> Step {
    Step::Raw(
        format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nx-upstream: scripted\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn content_chunk(text: &str) -> String {
    format!("data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n")
}

pub const ROLE_CHUNK: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n";

pub fn usage_chunk(prompt: u64, completion: u64) -> String {
    format!("data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{}}}}}\n\n", prompt + completion)
}

/// One SSE event of `data` only.
pub fn sse(data: &str) -> String {
    format!("data: {data}\n\n")
}

/// One SSE event with an `event:` name (Anthropic, Responses).
pub fn named(event: &str, data: &str) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// An OpenAI chat chunk of model `m` with this `delta` object.
pub fn chat_delta(delta: &str) -> String {
    sse(&format!(
        r#"{{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{{"index":0,"delta":{delta},"finish_reason":null}}]}}"#
    ))
}

pub const DONE: &str = "data: [DONE]\n\n";

/// A vLLM-like stream: head, role chunk, then `tokens` content chunks `gap` apart, `[DONE]`, end.
pub fn token_stream(tokens: usize, gap: Duration) -> Vec<Step> {
    let mut steps = vec![sse_head(), chunk(ROLE_CHUNK.as_bytes())];
    for i in 0..tokens {
        steps.push(Step::Sleep(gap));
        steps.push(chunk(content_chunk(&format!("t{i}")).as_bytes()));
    }
    steps.push(chunk(DONE.as_bytes()));
    steps.push(last_chunk());
    steps
}

/// A stream: `head`, then each event after its pause (ms), then the end of the body.
pub fn timed(head: Step, events: &[(u64, String)]) -> Vec<Step> {
    let mut steps = vec![head];
    for (pause, event) in events {
        steps.push(Step::Sleep(ms(*pause)));
        steps.push(chunk(event.as_bytes()));
    }
    steps.push(last_chunk());
    steps
}

/// The shortest complete stream: head, one content chunk, `[DONE]`, end.
pub fn ok_stream() -> Vec<Step> {
    vec![
        sse_head(),
        chunk(content_chunk("a").as_bytes()),
        chunk(DONE.as_bytes()),
        last_chunk(),
    ]
}
