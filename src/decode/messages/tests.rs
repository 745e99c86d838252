use std::sync::atomic::AtomicBool;

use super::*;

/// Reads `body` whole, its request never ending.
fn lease() -> crate::govern::Lease {
    let governor = crate::govern::Governor::with_defaults();
    governor.lease(crate::govern::Budget::MessageLists, &Default::default())
}

fn read(api: Api, body: &[u8]) -> Result<Option<MessageList>, Unread> {
    super::read(api, body, &AtomicBool::new(false), &mut lease())
}

/// The list of `body`, which has one.
fn list(api: Api, body: &str) -> Vec<Digest> {
    read(api, body.as_bytes())
        .expect("read")
        .expect("a list")
        .prefixes
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
            &format!(r#"{{"messages":[{{"role":"tool","tool_call_id":"{id}","content":"x"}}]}}"#),
        )
    };
    assert_ne!(call("call_1"), call("call_2"));
}

#[test]
fn anthropic_system_and_thinking_blocks() {
    let first = r#"{"model":"m","system":"Be brief.","messages":[{"role":"user","content":"hi"}]}"#;
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
    let read_as = |api| {
        read(api, body)
            .ok()
            .flatten()
            .and_then(|l| l.previous_response)
    };
    assert_eq!(read_as(Api::Responses).as_deref(), Some("resp_1"));
    let chat = br#"{"previous_response_id":"resp_1","messages":[{"role":"user","content":"x"}]}"#;
    assert_eq!(
        read(Api::Chat, chat).unwrap().unwrap().previous_response,
        None
    );
    let long = format!(
        r#"{{"previous_response_id":"{}","input":"x"}}"#,
        "r".repeat(200)
    );
    assert_eq!(
        read(Api::Responses, long.as_bytes())
            .unwrap()
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
        (Api::Chat, r#"{"model":"m"}"#),
        (Api::Chat, r#"{"messages":[]}"#),
        (Api::Chat, r#"{"messages":"hi"}"#),
        (
            Api::Chat,
            r#"{"messages":null,"input":[{"role":"user","content":"hi"}]}"#,
        ),
        (
            Api::Completions,
            r#"{"prompt":"hi","messages":[{"role":"user","content":"hi"}]}"#,
        ),
        (Api::Generate, r#"{"inputs":"hi"}"#),
    ] {
        assert_eq!(read(api, body.as_bytes()), Ok(None), "{api:?} {body}");
    }
    let hi = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    assert!(matches!(read(Api::Ollama, hi), Ok(Some(_))));
    assert_ne!(
        read(Api::Ollama, hi),
        read(Api::Chat, hi),
        "another API, another conversation"
    );
}

/// `{"model":"m","messages":[` `items` `]}` read as chat.
fn chat(items: &str) -> Result<Option<MessageList>, Unread> {
    read(
        Api::Chat,
        format!(r#"{{"model":"m","messages":[{items}],"stream":true}}"#).as_bytes(),
    )
}

#[test]
fn a_body_that_is_not_one_json_object_is_not_json() {
    let hi = r#"{"role":"user","content":"hi"}"#;
    assert!(matches!(chat(hi), Ok(Some(_))));
    for body in [
        "not json".to_owned(),
        format!(r#"[{hi}]"#),
        format!(r#"{{"messages":[{hi}]}} x"#),
        format!(r#"{{"messages":[{hi}]"#),
        format!(r#"{{"messages":[{hi},]}}"#),
        format!(r#"{{"messages":[{hi}],}}"#),
        format!(r#"{{"messages":[{hi}],"messages":[{hi}]}}"#),
        format!(r#"{{"messages":[{hi}],"tools":[1,}}"#),
        r#"{"messages":[{"role":"user","content":"a\qb"}]}"#.to_owned(),
        r#"{"messages":[{"role":"user","content":01}]}"#.to_owned(),
    ] {
        assert_eq!(
            read(Api::Chat, body.as_bytes()),
            Err(Unread::NotJson),
            "{body}"
        );
    }
    let mut latin1 = format!(r#"{{"messages":[{hi}],"x":"é"}}"#).into_bytes();
    latin1.retain(|&b| b != 0xC3);
    assert_eq!(read(Api::Chat, &latin1), Err(Unread::NotJson));
}

#[test]
fn only_objects_with_a_role_are_messages() {
    for item in [
        "1",
        r#""hi""#,
        "null",
        "[]",
        r#"[{"role":"user","content":"hi"}]"#,
        r#"{"content":"hi"}"#,
        r#"{"role":1,"content":"hi"}"#,
        r#"{"role":"","content":"hi"}"#,
        r#"{"type":"message","content":"hi"}"#,
    ] {
        let items = format!(r#"{{"role":"user","content":"a"}},{item}"#);
        assert_eq!(chat(&items), Err(Unread::NotAMessage), "{item}");
    }
    // A Responses item: a role, or a type.
    let responses = |items: &str| {
        read(
            Api::Responses,
            format!(r#"{{"model":"m","input":[{items}]}}"#).as_bytes(),
        )
    };
    let call = r#"{"type":"custom_tool_call_output","call_id":"c","output":"ok"}"#;
    assert!(matches!(responses(call), Ok(Some(_))));
    assert_eq!(
        responses(r#"{"call_id":"c","output":"ok"}"#),
        Err(Unread::NotAMessage)
    );
    assert_eq!(responses("[1,2]"), Err(Unread::NotAMessage));
}

#[test]
fn strings_compare_by_value_and_numbers_as_written() {
    let say = |content: &str| chat(&format!(r#"{{"role":"user","content":{content}}}"#));
    assert_eq!(say(r#""Hi "you"""#), say(r#""Hi "you"""#));
    assert_eq!(
        chat(r#"{"role":"user","content":"x"}"#),
        chat(r#"{"role":"user","content":"x"}"#),
        "a key with escapes is the same key"
    );
    assert_ne!(say("[1]"), say("[1.0]"));
    assert_ne!(say(r#""1""#), say("1"), "a string is not a number");
    assert_ne!(say("true"), say("false"));
    assert_ne!(
        say(r#"[{"type":"image","n":[1,2]}]"#),
        say(r#"[{"type":"image","n":[12]}]"#)
    );
}

/// `depth` arrays nested in a message's content (at depth 4: the body's object, `messages`, the
/// message, its content), around a number.
fn nested(depth: usize) -> String {
    let inner = format!("{}1{}", "[".repeat(depth - 4), "]".repeat(depth - 4));
    format!(r#"{{"role":"user","content":[{inner}]}}"#)
}

#[test]
fn nesting_is_followed_to_its_bound_and_no_further() {
    let at = MAX_DEPTH as usize;
    assert!(matches!(chat(&nested(at)), Ok(Some(_))));
    assert_eq!(chat(&nested(at + 1)), Err(Unread::TooDeep));
    // Far past it: given up at the bound, not read to the end (no stack, no allocation a level).
    assert_eq!(chat(&nested(200_000)), Err(Unread::TooDeep));
    // Outside the list, values are skipped with the dialects' bound (128), and deeper is malformed.
    let tools = |depth: usize| {
        let body = format!(
            r#"{{"tools":{}{},"messages":[{{"role":"user","content":"hi"}}]}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        read(Api::Chat, body.as_bytes())
    };
    assert!(matches!(tools(100), Ok(Some(_))));
    assert_eq!(tools(200_000), Err(Unread::NotJson));
}

#[test]
fn more_messages_than_the_bound_are_too_many() {
    let hi = r#"{"role":"user","content":"hi"}"#;
    let list = |n: usize| chat(&vec![hi; n].join(","));
    let read = list(MAX_MESSAGES).unwrap().unwrap();
    assert_eq!(read.prefixes.len(), MAX_MESSAGES);
    assert_eq!(list(MAX_MESSAGES + 1), Err(Unread::TooMany));
}

#[test]
fn a_message_larger_than_the_bound_is_too_large() {
    let say = |text: &str| chat(&format!(r#"{{"role":"user","content":"{text}"}}"#));
    // The message's canonical form: its text, its role and their keys, 5 bytes a token more.
    let fits = MAX_MESSAGE_BYTES - 4 * 5 - "content".len() - "role".len() - "user".len();
    assert!(matches!(say(&"x".repeat(fits)), Ok(Some(_))));
    assert_eq!(say(&"x".repeat(fits + 1)), Err(Unread::TooLarge));
    // Small values, many of them: the canonical form outgrows the body.
    let numbers = vec!["0"; 400_000].join(",");
    assert_eq!(
        chat(&format!(r#"{{"role":"user","content":[{numbers}]}}"#)),
        Err(Unread::TooLarge)
    );
    // The bound is a message's: many large messages are read.
    let half = "y".repeat(MAX_MESSAGE_BYTES / 2);
    let two =
        format!(r#"{{"role":"user","content":"{half}"}},{{"role":"user","content":"{half}"}}"#);
    assert_eq!(chat(&two).unwrap().unwrap().prefixes.len(), 2);
}

#[test]
fn junk_lists_are_given_up_at_their_first_item() {
    for item in ["[[[[[[[[0]]]]]]]]", "0"] {
        let items = vec![item; (1 << 20) / (item.len() + 1)].join(",");
        assert_eq!(chat(&items), Err(Unread::NotAMessage), "{item}");
    }
}

#[test]
fn a_read_stops_once_its_request_ended() {
    let hi = r#"{"role":"user","content":"hi"}"#;
    let body = format!(r#"{{"messages":[{}]}}"#, vec![hi; 5_000].join(","));
    let stop = AtomicBool::new(true);
    assert_eq!(
        super::read(Api::Chat, body.as_bytes(), &stop, &mut lease()),
        Err(Unread::Late)
    );
}

#[test]
fn where_one_message_ends_is_part_of_every_prefix() {
    // The same members, cut into two messages at another place: no prefix may be equal.
    let one = list(
        Api::Chat,
        r#"{"messages":[{"role":"user","content":"a","name":"x"},{"role":"user","content":"b"}]}"#,
    );
    let other = list(
        Api::Chat,
        r#"{"messages":[{"role":"user","content":"a"},{"name":"x","role":"user","content":"b"}]}"#,
    );
    assert_eq!((one.len(), other.len()), (2, 2));
    assert_ne!(one[0], other[0]);
    assert_ne!(one[1], other[1]);
}

#[test]
fn a_system_prompt_is_the_first_message_wherever_it_stands_in_the_body() {
    let before = r#"{"system":"Be brief.","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}"#;
    let after = r#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}],"system":"Be brief."}"#;
    let without =
        r#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}"#;
    let (before, after) = (list(Api::Messages, before), list(Api::Messages, after));
    assert_eq!(before, after);
    assert_eq!(before.len(), 3, "the system prompt and two messages");
    let without = list(Api::Messages, without);
    assert!(
        without.iter().all(|prefix| !before.contains(prefix)),
        "a list with a system prompt shares no prefix with the same list without it"
    );
    let other = list(
        Api::Messages,
        r#"{"system":"Be long.","messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_ne!(other[..], before[..2]);
}
