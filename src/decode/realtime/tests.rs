use proptest::prelude::*;

use super::*;

fn owned(event: Event<'_>) -> Event<'static> {
    let own = |c: Option<Cow<'_, str>>| c.map(|c| Cow::Owned(c.into_owned()));
    match event {
        Event::Session { model, protocol } => Event::Session {
            model: own(model),
            protocol,
        },
        Event::Created { response } => Event::Created {
            response: own(response),
        },
        Event::Output {
            response,
            empty,
            tool,
        } => Event::Output {
            response: own(response),
            empty,
            tool,
        },
        Event::Done {
            response,
            status,
            usage,
        } => Event::Done {
            response: own(response),
            status: own(status),
            usage,
        },
        Event::Create => Event::Create,
        Event::Commit { last } => Event::Commit { last },
        Event::Committed => Event::Committed,
        Event::Error { ends_response } => Event::Error { ends_response },
        Event::Other => Event::Other,
    }
}

/// What the streaming reader makes of `text` fed in pieces of `piece` bytes.
fn streamed(from_client: bool, text: &[u8], piece: usize) -> Option<Event<'static>> {
    let mut reader = MessageReader::new();
    reader.begin();
    for chunk in text.chunks(piece.max(1)) {
        reader.feed(chunk);
    }
    let fields = reader.end()?;
    meaning(from_client, fields).map(owned)
}

/// `text` read by the streaming reader in pieces of several sizes, each held to the serde reference.
fn read(from_client: bool, text: &[u8]) -> Option<Event<'static>> {
    let reference = wire::read(from_client, text).map(owned);
    for piece in [text.len(), 1, 2, 3, 7, 64] {
        assert_eq!(
            streamed(from_client, text, piece),
            reference,
            "{} in pieces of {piece}",
            String::from_utf8_lossy(text)
        );
    }
    reference
}

fn server(text: &str) -> Option<Event<'static>> {
    read(false, text.as_bytes())
}

#[test]
fn vllms_events_are_read() {
    let created = r#"{"type":"session.created","id":"sess-888aee0ee5405235","created":1796619707}"#;
    assert_eq!(
        server(created),
        Some(Event::Session {
            model: None,
            protocol: Some(Protocol::Vllm)
        })
    );
    let update = br#"{"type": "session.update", "model": "tiny-qwen3-asr"}"#;
    assert_eq!(
        read(true, update),
        Some(Event::Session {
            model: Some("tiny-qwen3-asr".into()),
            protocol: None
        })
    );
    let commit = br#"{"type": "input_audio_buffer.commit", "final": true}"#;
    assert_eq!(read(true, commit), Some(Event::Commit { last: true }));
    let delta = r#"{"type":"transcription.delta","delta":"ari"}"#;
    assert_eq!(
        server(delta),
        Some(Event::Output {
            response: None,
            empty: false,
            tool: false
        })
    );
    let done = r#"{"type":"transcription.done","text":"x","usage":{"prompt_tokens":26,"total_tokens":90,"completion_tokens":64,"prompt_tokens_details":null,"completion_tokens_details":null}}"#;
    let Some(Event::Done { usage, .. }) = server(done) else {
        panic!("done");
    };
    assert_eq!((usage.input, usage.output), (Some(26), Some(64)));
    let refused = r#"{"type":"error","error":"Model not validated.","code":"model_not_validated"}"#;
    assert_eq!(
        server(refused),
        Some(Event::Error {
            ends_response: true
        })
    );
    let bad_audio = r#"{"type":"error","error":"x","code":"invalid_audio"}"#;
    assert_eq!(
        server(bad_audio),
        Some(Event::Error {
            ends_response: false
        })
    );
    assert_eq!(read(false, b"not json"), None);
}

#[test]
fn openais_ga_and_beta_events_are_read() {
    let update =
        br#"{"type": "session.update", "session": {"type": "realtime", "model": "gpt-realtime"}}"#;
    assert!(
        matches!(read(true, update), Some(Event::Session { model: Some(m), .. }) if m == "gpt-realtime")
    );
    for kind in OUTPUT {
        let text = format!(r#"{{"type":"{kind}","response_id":"resp_1","delta":"AAAA"}}"#);
        assert!(
            matches!(server(&text), Some(Event::Output { response: Some(r), empty: false, tool: false }) if r == "resp_1"),
            "{kind}"
        );
    }
    let done = r#"{"type":"response.done","response":{"id":"resp_1","status":"cancelled","usage":{"total_tokens":158,"input_tokens":118,"output_tokens":40,"input_token_details":{"text_tokens":118,"audio_tokens":0,"cached_tokens":64},"output_token_details":{"text_tokens":9,"audio_tokens":31}}}}"#;
    let Some(Event::Done {
        response,
        status,
        usage,
    }) = server(done)
    else {
        panic!("done");
    };
    assert_eq!(
        (response.as_deref(), status.as_deref()),
        (Some("resp_1"), Some("cancelled"))
    );
    assert_eq!(
        usage,
        Usage {
            input: Some(118),
            output: Some(40),
            input_text: Some(118),
            input_audio: Some(0),
            cached_input: Some(64),
            output_text: Some(9),
            output_audio: Some(31),
        }
    );
    let args = r#"{"type":"response.function_call_arguments.delta","response_id":"r","delta":"{"}"#;
    assert!(matches!(
        server(args),
        Some(Event::Output { tool: true, .. })
    ));
    assert_eq!(
        read(true, br#"{"type":"response.create"}"#),
        Some(Event::Create)
    );
    assert_eq!(
        server(r#"{"type":"input_audio_buffer.committed","item_id":"i"}"#),
        Some(Event::Committed)
    );
}

/// Every message of the realtime captures, read both ways.
#[test]
fn every_captured_message_reads_as_serde_json_reads_it() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/realtime");
    let mut read_messages = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".jsonl") || name.ends_with(".frames.jsonl") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let line: serde_json::Value = serde_json::from_str(line).unwrap();
            let from_client = line["dir"] == "c2s";
            let text = serde_json::to_vec(&line["event"]).unwrap();
            assert!(read(from_client, &text).is_some(), "{name}");
            read_messages += 1;
        }
    }
    assert!(read_messages > 100, "{read_messages}");
}

#[test]
fn a_megabyte_delta_is_read_and_passed_over() {
    let audio = "QUFB".repeat(1 << 18);
    let text =
        format!(r#"{{"type":"response.output_audio.delta","delta":"{audio}","response_id":"r1"}}"#);
    let event = read(false, text.as_bytes());
    assert_eq!(
        event,
        Some(Event::Output {
            response: Some("r1".into()),
            empty: false,
            tool: false
        })
    );
    assert!(std::mem::size_of::<MessageReader>() < 4096);
}

#[test]
fn known_fields_of_the_wrong_type_or_twice_refuse_the_message() {
    for bad in [
        r#"{"type":1}"#,
        r#"{"type":"x","type":"y"}"#,
        r#"{"type":"response.done","response":{"usage":{"output_tokens":-1}}}"#,
        r#"{"type":"response.done","response":{"usage":{"output_tokens":2.0}}}"#,
        r#"{"type":"response.done","response":{"usage":{"output_tokens":"2"}}}"#,
        r#"{"type":"response.done","response":"r"}"#,
        r#"{"type":"input_audio_buffer.commit","final":"yes"}"#,
        r#"{"type":"transcription.delta","delta":{"a":1}}"#,
        r#"{"type":"session.created","id":1,"id":2}"#,
        r#"["type"]"#,
    ] {
        assert_eq!(read(false, bad.as_bytes()), None, "{bad}");
    }
    for good in [
        r#"{"type":"response.done","response":null,"usage":{"completion_tokens":3,"x":[{"output_tokens":"n"}]}}"#,
        r#"{"type":"transcription.delta","delta":null,"other":{"type":1},"other":2}"#,
        r#"{"type":"session.created","session":{"model":null,"x":{"model":1}}}"#,
    ] {
        assert!(read(false, good.as_bytes()).is_some(), "{good}");
    }
}

fn mutated() -> impl Strategy<Value = Vec<u8>> {
    crate::decode::json::edited(&[
        r#"{"type":"response.output_audio.delta","response_id":"resp_1","delta":"AAAA","item_id":"i"}"#,
        r#"{"type":"response.done","response":{"id":"r","status":"completed","usage":{"input_tokens":3,"output_tokens":9,"input_token_details":{"audio_tokens":2,"cached_tokens":1},"output_token_details":{"text_tokens":4}}}}"#,
        r#"{"type":"session.update","session":{"model":"m\u00e9"},"final":true,"x":null}"#,
        r#"{"type":"transcription.done","text":"x","usage":{"prompt_tokens":26,"completion_tokens":64}}"#,
        r#"{"type":"session.created","id":"sess-1","created":1}"#,
        r#"{"type":"error","code":"processing_error","error":"x"}"#,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    #[test]
    fn a_mutated_message_reads_as_serde_json_reads_it_or_is_refused(text in mutated(), client in any::<bool>()) {
        let reference = wire::read(client, &text).map(owned);
        let got = streamed(client, &text, 5);
        // The streaming reader checks every byte of the message as a JSON value: where it refuses a
        // text serde_json reads (bad UTF-8 or a lone surrogate in a field the reference passes over
        // without checking), it reads nothing rather than something else.
        if got.is_some() || serde_json::from_slice::<serde_json::Value>(&text).is_ok() {
            prop_assert_eq!(got, reference, "{:?}", String::from_utf8_lossy(&text));
        }
    }
}
