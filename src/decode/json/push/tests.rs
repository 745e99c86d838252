use proptest::prelude::*;

use super::*;

/// The tokens of `text` fed in pieces of `piece` bytes, as text again (captured values only), or
/// `None` when it was refused.
fn read(text: &[u8], piece: usize) -> Option<String> {
    let mut push = Push::new();
    let mut shown = String::new();
    let mut out = |token: Token<'_>| {
        let value = |v: Option<&[u8]>| {
            v.map_or("…".to_owned(), |v| {
                serde_json::to_string(std::str::from_utf8(v).unwrap()).unwrap()
            })
        };
        shown.push_str(&match token {
            Token::ObjectStart => "{".into(),
            Token::ObjectEnd => "}".into(),
            Token::ArrayStart => "[".into(),
            Token::ArrayEnd => "]".into(),
            Token::Key(k) => format!("{}:", value(k)),
            Token::Str { value: v, empty } => {
                assert_eq!(empty, v.is_some_and(<[u8]>::is_empty));
                value(v)
            }
            Token::Number(n) => n.map_or("…".into(), |n| String::from_utf8(n.to_vec()).unwrap()),
            Token::Bool(b) => b.to_string(),
            Token::Null => "null".into(),
        });
        shown.push(' ');
    };
    for chunk in text.chunks(piece.max(1)) {
        push.feed(chunk, &mut out).ok()?;
    }
    push.end(&mut out).ok()?;
    Some(shown)
}

fn serde_reads(text: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(text).is_ok()
}

/// Reads `text` at every piece size and split, and holds its verdict to serde_json's.
fn agree(text: &[u8]) -> Option<String> {
    let whole = read(text, text.len());
    assert_eq!(
        whole.is_some(),
        serde_reads(text),
        "{:?}: push {whole:?}",
        String::from_utf8_lossy(text)
    );
    for piece in 1..=text.len().min(9) {
        assert_eq!(read(text, piece), whole, "piece {piece}");
    }
    for split in 0..text.len() {
        let mut push = Push::new();
        let mut ok = push.feed(&text[..split], &mut |_| {}).is_ok();
        ok &= push.feed(&text[split..], &mut |_| {}).is_ok();
        ok &= push.end(&mut |_| {}).is_ok();
        assert_eq!(ok, whole.is_some(), "split at {split}");
    }
    whole
}

#[test]
fn tokens_come_in_order_with_their_values_unescaped() {
    let text = br#" {"type":"a\u0062c","n":[1,-2.5e3,0,true,false,null],"o":{},"s":"\ud83d\ude00\n\"","e":""} "#;
    assert_eq!(
        agree(text).unwrap(),
        r#"{ "type": "abc" "n": [ 1 -2.5e3 0 true false null ] "o": { } "s": "😀\n\"" "e": "" } "#
    );
    assert_eq!(agree(b"12").unwrap(), "12 ");
    assert_eq!(agree(b"\"x\"").unwrap(), "\"x\" ");
}

#[test]
fn a_long_value_is_read_without_being_kept() {
    let long = "A".repeat(CAPTURE + 1);
    let text = format!(
        r#"{{"delta":"{long}","k{long}":1,"n":{}}}"#,
        "9".repeat(CAPTURE + 1)
    );
    let shown = read(text.as_bytes(), 7).unwrap();
    assert_eq!(shown, r#"{ "delta": … …: 1 "n": … } "#);
    let exact = "B".repeat(CAPTURE);
    let shown = read(format!(r#"["{exact}"]"#).as_bytes(), 3).unwrap();
    assert!(shown.contains(&exact));
    let mut push = Push::new();
    let mut empties = vec![];
    let text = format!(r#"["","{long}"]"#);
    push.feed(text.as_bytes(), &mut |t| {
        if let Token::Str { empty, .. } = t {
            empties.push(empty)
        }
    })
    .unwrap();
    assert_eq!(
        empties,
        [true, false],
        "empty is exact for a long value too"
    );
}

#[test]
fn what_serde_json_refuses_is_refused() {
    for bad in [
        &b""[..],
        b" ",
        b"{",
        b"{}}",
        b"[1,]",
        b"{\"a\":1,}",
        b"{\"a\" 1}",
        b"{1:2}",
        b"[1 2]",
        b"[}",
        b"{]",
        b"01",
        b"-",
        b"1.",
        b"1e",
        b"1e+",
        b".5",
        b"+1",
        b"tru",
        b"nul",
        b"truex",
        b"\"\\x\"",
        b"\"\\u12G4\"",
        b"\"\\ud800\"",
        b"\"\\ud800\\n\"",
        b"\"\\ud800\\u0041\"",
        b"\"\\udc00\"",
        b"\"a\x01\"",
        b"\"\xff\"",
        b"\"\xe2\x82\"",
        b"\"\xed\xa0\x80\"",
        b"{} {}",
        b"1 2",
        b"\"a\"x",
    ] {
        assert_eq!(agree(bad), None, "{:?}", String::from_utf8_lossy(bad));
    }
    for good in [
        &b"-0"[..],
        b"0.5e-3",
        b"1E+2",
        b"\"\xe2\x82\xac\"",
        b"\"\\/\\b\\f\\r\\t\"",
        b"[[],[{}]]",
        b"{\"a\":{\"a\":{\"a\":1}}}",
    ] {
        assert!(agree(good).is_some(), "{:?}", String::from_utf8_lossy(good));
    }
}

#[test]
fn nesting_stops_where_serde_json_stops() {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert!(agree(deep(MAX_DEPTH).as_bytes()).is_some());
    assert!(agree(deep(MAX_DEPTH + 1).as_bytes()).is_none());
}

#[test]
fn a_refused_text_stays_refused() {
    let mut push = Push::new();
    assert!(push.feed(b"[}", &mut |_| {}).is_err());
    assert!(push.feed(b"]", &mut |_| {}).is_err());
    assert!(push.end(&mut |_| {}).is_err());
}

fn mutated() -> impl Strategy<Value = Vec<u8>> {
    edited(&[
        r#"{"type":"response.output_audio.delta","response_id":"resp_1","delta":"AAAA","n":[1,2.5]}"#,
        r#"{"type":"response.done","response":{"id":"r","status":"completed","usage":{"input_tokens":3,"output_tokens":9,"input_token_details":{"audio_tokens":2}}}}"#,
        r#"{"type":"session.update","session":{"model":"m\u00e9"},"final":true,"x":null}"#,
        r#"["\ud83d\ude00",-0.0e+1,"\\\"",{}]"#,
    ])
}

/// Up to three edits of one of `seeds`: a byte inserted, deleted or replaced (the differential tests'
/// inputs here and in `decode/realtime`).
pub(crate) fn edited(seeds: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    (
        0..seeds.len(),
        proptest::collection::vec((any::<u16>(), any::<u8>(), 0u8..3), 0..4),
    )
        .prop_map(move |(seed, edits)| {
            let mut text = seeds[seed].as_bytes().to_vec();
            for (at, byte, how) in edits {
                let at = usize::from(at) % (text.len() + 1);
                match how {
                    0 => text.insert(at, byte),
                    1 if at < text.len() => {
                        text.remove(at);
                    }
                    _ if at < text.len() => text[at] = byte,
                    _ => text.push(byte),
                }
            }
            text
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn any_mutation_is_read_or_refused_as_serde_json_does(text in mutated()) {
        let whole = read(&text, text.len());
        prop_assert_eq!(whole.is_some(), serde_reads(&text), "{:?}", String::from_utf8_lossy(&text));
        prop_assert_eq!(read(&text, 3), whole);
    }
}
