//! Request bodies the conversation reader meets: an agent's long history, and bodies no agent sends.

use serde_json::{json, Value};

/// An agent's history of `messages` messages about `bytes` long, as a coding agent sends it back: a
/// system prompt, then rounds of a user's text parts, an assistant's tool call and the tool's result
/// (a file's text, the bulk of the bytes). The same shape as `benches/hot_path.rs`' `agent_history`.
pub fn agent_history(messages: usize, bytes: usize) -> Vec<Value> {
    let mut list = vec![json!({"role": "system", "content": "You are a careful coding agent."})];
    let file = "fn main() { println!(\"hello\"); }\n".repeat(bytes * 3 / messages / 38);
    for i in 1..messages {
        list.push(match i % 3 {
            1 => json!({"role": "user", "content": [
                {"type": "text", "text": format!("Step {i}: read the next file and say what it does.")}]}),
            2 => json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": format!("call_{i}"), "type": "function",
                 "function": {"name": "read_file", "arguments": format!("{{\"path\":\"src/{i}.rs\"}}")}}]}),
            _ => json!({"role": "tool", "tool_call_id": format!("call_{}", i - 1), "content": file}),
        });
    }
    list
}

/// A chat body just under 1 MiB (so it is held by default) that no agent sends: `nested`, a list of
/// nested arrays instead of messages; `numbers`, a list of numbers; `numbers_in_message`, one message
/// whose content is a list of numbers.
pub fn hostile_chat(kind: &str) -> String {
    let (item, message) = match kind {
        "nested" => ("[[[[[[[[0]]]]]]]]", false),
        "numbers" => ("0", false),
        _ => ("0", true),
    };
    let items = vec![item; ((1 << 20) - 128) / (item.len() + 1)].join(",");
    match message {
        false => format!(r#"{{"model":"m","messages":[{items}]}}"#),
        true => format!(r#"{{"model":"m","messages":[{{"role":"user","content":[{items}]}}]}}"#),
    }
}
