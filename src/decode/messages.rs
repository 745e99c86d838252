//! The conversation a request carries: its message list, read from the body the proxy held, as one
//! digest per prefix (`prefixes[j]` covers messages `0..=j`). No text is kept: only SHA-256 digests of
//! each message's canonical content, so two requests are compared by what they say, not by their bytes.
//!
//! Clients re-serialise the history they send back (key order, spacing, `null` fields, a string content
//! turned into text parts), and agent frameworks move markers between turns. The canonical form
//! therefore drops what does not change what a message says:
//! - object keys are sorted; `null`, `""`, `[]` and `{}` values are left out;
//! - `cache_control` (Anthropic prompt-cache markers, moved to the last message each turn) is left out;
//! - reasoning (`reasoning_content`, `reasoning`, `thinking`, Anthropic `thinking` and
//!   `redacted_thinking` parts, Responses `reasoning` items) is left out: servers and clients differ on
//!   whether an answer's reasoning is sent back;
//! - a content that is a list of text parts only is the same as the string of their text;
//! - Responses items lose their server-made `id` and `status` (a client may send an output item back
//!   as it came, or rebuild it).
//!
//! Which list: chat and Ollama `messages`; Anthropic `system` (as the first message) and `messages`;
//! Responses `instructions` (likewise) and `input` (a string is one user message).

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::decode::dialect::MAX_RESPONSE_ID;
use crate::record::api::Api;
use crate::record::conversations::MessageList;

/// Whether requests to `api` carry a message list.
pub fn has_messages(api: Api) -> bool {
    matches!(
        api,
        Api::Chat | Api::Messages | Api::Responses | Api::Ollama
    )
}

/// The message list of a request body to `api`; `None` when the body is not JSON, has no list, or the
/// API carries none (text completions, TGI, llama.cpp's `/completion`, Ollama's `/api/generate`).
pub fn read(api: Api, body: &[u8]) -> Option<MessageList> {
    if !has_messages(api) {
        return None;
    }
    // Only the fields that hold the list are kept; the rest (tools, sampling) is skipped unread.
    let request: Request = serde_json::from_slice(body).ok()?;
    let system = match api {
        Api::Messages => request.system,
        Api::Responses => request.instructions,
        _ => None,
    };
    let system = system
        .filter(|s| !is_empty(s))
        .map(|content| serde_json::json!({"role": "system", "content": content}));
    let list = match api {
        Api::Responses => request.input?,
        _ => request.messages?,
    };
    let one;
    let items: &[Value] = match &list {
        Value::Array(items) => items,
        Value::String(text) if api == Api::Responses => {
            one = [serde_json::json!({"role": "user", "content": text})];
            &one
        }
        _ => return None,
    };
    let responses = api == Api::Responses;
    // A conversation stays on one API: the same words sent to another are another conversation.
    let mut hasher = Sha256::new();
    hasher.update(api.as_str());
    let mut prefixes = Vec::with_capacity(items.len() + 1);
    let mut canonical = Vec::new();
    for message in system.iter().chain(items) {
        if responses && message.get("type").and_then(Value::as_str) == Some("reasoning") {
            continue;
        }
        canonical.clear();
        encode(message, responses, true, &mut canonical);
        hasher.update((canonical.len() as u64).to_le_bytes());
        hasher.update(&canonical);
        let digest = hasher.clone().finalize();
        let mut prefix = [0; 16];
        prefix.copy_from_slice(&digest[..16]);
        prefixes.push(prefix);
    }
    let previous_response = match api {
        Api::Responses => request.previous_response_id,
        _ => None,
    };
    let previous_response =
        previous_response.filter(|id| !id.is_empty() && id.len() <= MAX_RESPONSE_ID);
    (!prefixes.is_empty()).then_some(MessageList {
        prefixes,
        previous_response,
    })
}

/// The fields of a request body that hold its message list.
#[derive(serde::Deserialize)]
struct Request {
    #[serde(default)]
    messages: Option<Value>,
    #[serde(default)]
    system: Option<Value>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    instructions: Option<Value>,
    #[serde(default)]
    previous_response_id: Option<String>,
}

/// Keys left out wherever they stand.
const DROPPED: [&str; 5] = [
    "cache_control",
    "reasoning_content",
    "reasoning",
    "thinking",
    "signature",
];
/// Content parts that are reasoning.
const REASONING_PARTS: [&str; 2] = ["thinking", "redacted_thinking"];
/// Content parts that are plain text, in each API's spelling.
const TEXT_PARTS: [&str; 3] = ["text", "input_text", "output_text"];

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

fn part_type(part: &Value) -> Option<&str> {
    part.get("type").and_then(Value::as_str)
}

/// Writes `value`'s canonical form (see the module's documentation); `top`: a message itself.
fn encode(value: &Value, responses: bool, top: bool, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map
                .keys()
                .filter(|k| !DROPPED.contains(&k.as_str()))
                .filter(|k| !(top && responses && matches!(k.as_str(), "id" | "status")))
                .collect();
            keys.sort();
            out.push(b'{');
            let mut first = true;
            for key in keys {
                let v = &map[key];
                if key == "content" {
                    if has_content(v) {
                        comma(&mut first, out);
                        string(key, out);
                        out.push(b':');
                        encode_content(v, responses, out);
                    }
                    continue;
                }
                if is_empty(v) {
                    continue;
                }
                comma(&mut first, out);
                string(key, out);
                out.push(b':');
                encode(v, responses, false, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            let mut first = true;
            for item in items.iter().filter(|i| !is_empty(i)) {
                comma(&mut first, out);
                encode(item, responses, false, out);
            }
            out.push(b']');
        }
        other => {
            let _ = serde_json::to_writer(&mut *out, other);
        }
    }
}

fn is_reasoning(part: &Value) -> bool {
    part_type(part).is_some_and(|t| REASONING_PARTS.contains(&t))
}

fn is_text(part: &Value) -> bool {
    part_type(part).is_some_and(|t| TEXT_PARTS.contains(&t))
        && part.get("text").is_some_and(Value::is_string)
}

/// Whether a message's content says anything once reasoning parts are left out.
fn has_content(value: &Value) -> bool {
    match value {
        Value::Array(parts) => {
            let mut kept = parts.iter().filter(|p| !is_reasoning(p));
            match kept.clone().all(is_text) {
                // Compared as the string of their text: nothing when it is empty.
                true => kept.any(|p| p.get("text").and_then(Value::as_str) != Some("")),
                false => kept.any(|p| !is_empty(p)),
            }
        }
        other => !is_empty(other),
    }
}

/// A message's content as compared: reasoning parts left out, text parts only as their string.
fn encode_content(value: &Value, responses: bool, out: &mut Vec<u8>) {
    let Value::Array(parts) = value else {
        return encode(value, responses, false, out);
    };
    let kept = || parts.iter().filter(|p| !is_reasoning(p));
    if kept().all(is_text) {
        let text: String = kept()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        return string(&text, out);
    }
    out.push(b'[');
    let mut first = true;
    for part in kept().filter(|p| !is_empty(p)) {
        comma(&mut first, out);
        encode(part, responses, false, out);
    }
    out.push(b']');
}

fn comma(first: &mut bool, out: &mut Vec<u8>) {
    if !*first {
        out.push(b',');
    }
    *first = false;
}

fn string(s: &str, out: &mut Vec<u8>) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::conversations::Digest;

    fn list(api: Api, body: &str) -> Vec<Digest> {
        read(api, body.as_bytes()).expect("a list").prefixes
    }

    #[test]
    fn a_re_serialised_history_has_the_same_digests() {
        let sent = r#"{"model":"m","messages":[
            {"role":"system","content":"Be brief."},
            {"role":"user","content":"Weather in Paris?"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
            {"role":"tool","tool_call_id":"call_1","content":"18C"}]}"#;
        // The SDK's round trip: other key order, nulls and empty lists added, text as parts, the
        // reasoning the server streamed sent back, a cache marker.
        let again = r#"{"messages":[{"content":[{"type":"text","text":"Be brief."}],"role":"system"},
            {"role":"user","content":[{"type":"text","text":"Weather "},{"type":"text","text":"in Paris?"}],"cache_control":{"type":"ephemeral"}},
            {"tool_calls":[{"type":"function","id":"call_1","function":{"arguments":"{\"city\":\"Paris\"}","name":"get_weather"}}],"role":"assistant","refusal":null,"annotations":[],"reasoning_content":"The user wants weather."},
            {"content":"18C","tool_call_id":"call_1","role":"tool"}],"model":"m","stream":true}"#;
        assert_eq!(list(Api::Chat, sent), list(Api::Chat, again));
        assert_eq!(list(Api::Chat, sent).len(), 4);
    }

    #[test]
    fn what_a_message_says_changes_its_digest_and_every_later_prefix() {
        let a = list(
            Api::Chat,
            r#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}"#,
        );
        let b = list(
            Api::Chat,
            r#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hullo"}]}"#,
        );
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        let role = list(
            Api::Chat,
            r#"{"messages":[{"role":"system","content":"hi"}]}"#,
        );
        assert_ne!(role[0], a[0], "the role is part of what a message says");
        let call = |id: &str| {
            list(
                Api::Chat,
                &format!(
                    r#"{{"messages":[{{"role":"tool","tool_call_id":"{id}","content":"x"}}]}}"#
                ),
            )
        };
        assert_ne!(call("call_1"), call("call_2"));
    }

    #[test]
    fn anthropic_system_and_thinking_blocks() {
        let first =
            r#"{"model":"m","system":"Be brief.","messages":[{"role":"user","content":"hi"}]}"#;
        let next = r#"{"model":"m","system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"messages":[
            {"role":"user","content":[{"type":"text","text":"hi"}]},
            {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"EqQ"},{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]}]}"#;
        let (first, next) = (list(Api::Messages, first), list(Api::Messages, next));
        assert_eq!(first.len(), 2, "the system prompt and the user message");
        assert_eq!(next[..2], first[..]);
        let without_thinking = r#"{"model":"m","system":"Be brief.","messages":[
            {"role":"user","content":"hi"},
            {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]}]}"#;
        assert_eq!(next, list(Api::Messages, without_thinking));
    }

    #[test]
    fn responses_input_items_as_sent_back_or_rebuilt() {
        let first = r#"{"model":"m","instructions":"Be brief.","input":"Weather?"}"#;
        let echoed = r#"{"model":"m","instructions":"Be brief.","input":[
            {"role":"user","content":[{"type":"input_text","text":"Weather?"}]},
            {"type":"reasoning","id":"rs_1","summary":[]},
            {"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":"{}","status":"completed"},
            {"type":"function_call_output","call_id":"call_1","output":"18C"}]}"#;
        let rebuilt = r#"{"model":"m","instructions":"Be brief.","input":[
            {"role":"user","content":"Weather?"},
            {"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"},
            {"type":"function_call_output","call_id":"call_1","output":"18C"}]}"#;
        let (first, echoed) = (list(Api::Responses, first), list(Api::Responses, echoed));
        assert_eq!(echoed[..2], first[..]);
        assert_eq!(echoed, list(Api::Responses, rebuilt));
    }

    #[test]
    fn responses_previous_response_id_is_kept_and_only_there() {
        let body = br#"{"model":"m","previous_response_id":"resp_1","input":[{"role":"user","content":"and?"}]}"#;
        let read_as = |api| read(api, body).and_then(|l| l.previous_response);
        assert_eq!(read_as(Api::Responses).as_deref(), Some("resp_1"));
        let chat =
            br#"{"previous_response_id":"resp_1","messages":[{"role":"user","content":"x"}]}"#;
        assert_eq!(read(Api::Chat, chat).unwrap().previous_response, None);
        let long = format!(
            r#"{{"previous_response_id":"{}","input":"x"}}"#,
            "r".repeat(200)
        );
        assert_eq!(
            read(Api::Responses, long.as_bytes())
                .unwrap()
                .previous_response,
            None
        );
    }

    #[test]
    fn an_empty_content_is_no_content_in_any_spelling() {
        let say = |content: &str| {
            list(
                Api::Chat,
                &format!(r#"{{"messages":[{{"role":"assistant","content":{content}}}]}}"#),
            )
        };
        let none = say("null");
        for content in [
            "\"\"",
            "[]",
            r#"[{"type":"text","text":""}]"#,
            r#"[{"type":"thinking","thinking":"x"}]"#,
        ] {
            assert_eq!(say(content), none, "{content}");
        }
        assert_ne!(
            say(r#"[{"type":"image_url","image_url":{"url":"x"}}]"#),
            none
        );
    }

    #[test]
    fn bodies_without_a_list_have_none() {
        for (api, body) in [
            (Api::Chat, "not json"),
            (Api::Chat, r#"{"model":"m"}"#),
            (Api::Chat, r#"{"messages":[]}"#),
            (Api::Chat, r#"{"messages":"hi"}"#),
            (
                Api::Completions,
                r#"{"prompt":"hi","messages":[{"role":"user","content":"hi"}]}"#,
            ),
            (Api::Generate, r#"{"inputs":"hi"}"#),
        ] {
            assert_eq!(read(api, body.as_bytes()), None, "{api:?} {body}");
        }
        let hi = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        assert!(read(Api::Ollama, hi).is_some());
        assert_ne!(
            read(Api::Ollama, hi),
            read(Api::Chat, hi),
            "another API, another conversation"
        );
    }
}
