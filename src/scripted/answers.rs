//! The words of a scripted answer: response heads, chunks of a chunked body, SSE events, OpenAI chat
//! and completion chunks, and the streams made of them. Text given to a chunk is the contents of a JSON
//! string, escaped by the caller (scripts use plain words, or escapes on purpose).

use std::time::Duration;

use super::server::Step;

/// An SSE response head, chunked, with `x-upstream: scripted` (so a test sees the server's own headers).
pub fn sse_head() -> Step {
    Step::Raw(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nx-upstream: scripted\r\ntransfer-encoding: chunked\r\n\r\n".to_vec())
}

/// One chunk of a chunked body.
pub fn chunk(data: &[u8]) -> Step {
    Step::Raw(framed(data))
}

/// `data` as one chunk of a chunked body: its size line, the data, CRLF.
pub fn framed(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

pub fn last_chunk() -> Step {
    Step::Raw(b"0\r\n\r\n".to_vec())
}

/// An Ollama-style head: newline-delimited JSON, chunked.
pub fn ndjson_head() -> Step {
    Step::Raw(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n".to_vec())
}

/// A whole JSON response with its `content-length`.
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

/// One SSE event of `data` only.
pub fn sse(data: &str) -> String {
    format!("data: {data}\n\n")
}

/// One SSE event with an `event:` name (Anthropic, Responses).
pub fn named(event: &str, data: &str) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

pub const DONE: &str = "data: [DONE]\n\n";

/// How one stream's OpenAI chunks are spelled: the id and model each repeats, and whether they are
/// chat chunks (`delta`) or completion chunks (`text`).
#[derive(Clone, Copy, Debug)]
pub struct Chunks<'a> {
    pub id: &'a str,
    pub model: &'a str,
    pub chat: bool,
}

impl<'a> Chunks<'a> {
    /// The scripted streams' own spelling: chat chunks of model `m`, id `c1`.
    pub const SCRIPTED: Chunks<'static> = Chunks::chat("c1", "m");

    pub const fn chat(id: &'a str, model: &'a str) -> Self {
        Chunks {
            id,
            model,
            chat: true,
        }
    }

    pub const fn completion(id: &'a str, model: &'a str) -> Self {
        Chunks {
            id,
            model,
            chat: false,
        }
    }

    /// One chunk: `choices` is the inside of its array, `after` more fields after it (`,"usage":{…}`).
    pub fn event(&self, choices: &str, after: &str) -> String {
        let object = match self.chat {
            true => "chat.completion.chunk",
            false => "text_completion",
        };
        format!(
            "data: {{\"id\":\"{}\",\"object\":\"{object}\",\"model\":\"{}\",\"choices\":[{choices}]{after}}}\n\n",
            self.id, self.model
        )
    }

    /// A chat chunk with this `delta` object.
    pub fn delta(&self, delta: &str) -> String {
        self.event(
            &format!(r#"{{"index":0,"delta":{delta},"finish_reason":null}}"#),
            "",
        )
    }

    /// The role-only chunk a chat stream opens with.
    pub fn role(&self) -> String {
        self.delta(r#"{"role":"assistant","content":""}"#)
    }

    /// One chunk of generated text.
    pub fn content(&self, text: &str) -> String {
        match self.chat {
            true => self.delta(&format!(r#"{{"content":"{text}"}}"#)),
            false => self.event(
                &format!(r#"{{"index":0,"text":"{text}","finish_reason":null}}"#),
                "",
            ),
        }
    }

    /// The last chunk `stream_options.include_usage` asks for: no choices, the usage.
    pub fn usage(&self, prompt: u64, completion: u64) -> String {
        self.event(
            "",
            &format!(
                r#","usage":{{"prompt_tokens":{prompt},"completion_tokens":{completion},"total_tokens":{}}}"#,
                prompt + completion
            ),
        )
    }

    /// A streamed answer as vLLM sends it: head, the role chunk at once (chat only), then each piece of
    /// text after its pause, the usage chunk when given, `[DONE]`, the end of the body.
    pub fn stream(
        &self, texts: impl IntoIterator<Item = (Duration, String)>, usage: Option<(u64, u64)>,
    ) -> Vec<Step> {
        let mut steps = vec![sse_head()];
        if self.chat {
            steps.push(chunk(self.role().as_bytes()));
        }
        for (pause, text) in texts {
            if !pause.is_zero() {
                steps.push(Step::Sleep(pause));
            }
            steps.push(chunk(self.content(&text).as_bytes()));
        }
        if let Some((prompt, completion)) = usage {
            steps.push(chunk(self.usage(prompt, completion).as_bytes()));
        }
        steps.push(chunk(DONE.as_bytes()));
        steps.push(last_chunk());
        steps
    }
}

pub fn content_chunk(text: &str) -> String {
    Chunks::SCRIPTED.content(text)
}

/// The scripted streams' role chunk, as a constant.
pub const ROLE_CHUNK: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n";

pub fn usage_chunk(prompt: u64, completion: u64) -> String {
    Chunks::SCRIPTED.usage(prompt, completion)
}

/// An OpenAI chat chunk of model `m` (id `c`) with this `delta` object.
pub fn chat_delta(delta: &str) -> String {
    Chunks::chat("c", "m").delta(delta)
}

/// A vLLM-like stream: head, role chunk, then `tokens` content chunks `gap` apart, `[DONE]`, end.
pub fn token_stream(tokens: usize, gap: Duration) -> Vec<Step> {
    let mut steps = content_stream(tokens, gap);
    steps.insert(1, chunk(ROLE_CHUNK.as_bytes()));
    steps
}

/// [`token_stream`] without the role chunk: head, then `tokens` content chunks (`t0`, `t1`, …), each
/// after `gap`, then `[DONE]` and the end of the body.
pub fn content_stream(tokens: usize, gap: Duration) -> Vec<Step> {
    let mut steps = vec![sse_head()];
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_constant_is_the_role_chunk() {
        assert_eq!(Chunks::SCRIPTED.role(), ROLE_CHUNK);
    }

    #[test]
    fn chunks_are_json_events() {
        let chat = Chunks::chat("x", "llama");
        for event in [
            chat.role(),
            chat.content(" hi"),
            chat.usage(3, 4),
            Chunks::completion("y", "llama").content("a"),
        ] {
            let data = event
                .strip_prefix("data: ")
                .and_then(|e| e.strip_suffix("\n\n"));
            let value: serde_json::Value =
                serde_json::from_str(data.expect("an SSE data event")).expect("JSON");
            assert_eq!(value["model"], "llama");
        }
        let usage: serde_json::Value =
            serde_json::from_str(chat.usage(3, 4)[6..].trim_end()).expect("JSON");
        assert_eq!(usage["usage"]["total_tokens"], 7);
        assert_eq!(usage["choices"], serde_json::json!([]));
    }

    #[test]
    fn a_stream_is_head_role_texts_usage_done_end() {
        let steps = Chunks::chat("x", "m").stream([(ms(5), "a".to_owned())], Some((1, 1)));
        let kinds: Vec<_> = steps
            .iter()
            .map(|s| match s {
                Step::Raw(b) if b.starts_with(b"HTTP/1.1") => "head".to_owned(),
                Step::Raw(b) if b == b"0\r\n\r\n" => "end".to_owned(),
                Step::Raw(b) => String::from_utf8_lossy(b)
                    .split("\r\n")
                    .nth(1)
                    .unwrap_or_default()[..12]
                    .to_owned(),
                Step::Sleep(_) => "sleep".to_owned(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(kinds.len(), 7, "{kinds:?}");
        assert_eq!(kinds[0], "head");
        assert_eq!(kinds[2], "sleep");
        assert_eq!(kinds[5], "data: [DONE]");
        assert_eq!(kinds[6], "end");
    }
}
