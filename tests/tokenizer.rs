//! Exact output-token counts from a configured tokenizer when the server sends no usage (built only with
//! the `tokenizer` feature; `.ci/run` runs it). The test tokenizer splits words and punctuation, so the
//! expected counts can be read off the streamed text.
#![cfg(feature = "tokenizer")]

mod support;

use support::*;

const WORDS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/tokenizer/words.json"
);

/// A chat stream without usage: 3 output chunks carrying 7 words and punctuation marks.
fn stream(_: &RecordedRequest) -> Vec<Step> {
    let mut steps = vec![sse_head(), chunk(ROLE_CHUNK.as_bytes())];
    for text in ["hello world", ", the quick", " brown fox"] {
        steps.push(Step::Sleep(ms(10)));
        steps.push(chunk(content_chunk(text).as_bytes()));
    }
    steps.push(chunk(DONE.as_bytes()));
    steps.push(last_chunk());
    steps
}

#[tokio::test(start_paused = true)]
async fn configured_tokenizer_counts_streamed_text_when_there_is_no_usage() {
    let upstream = upstream(stream).await;
    let yaml = format!("tokenizers:\n  m: {WORDS}\n");
    let proxy = proxy(&upstream.url(), &yaml).await;
    // Once with the model in the request, once named only by the response (its chunks say "m").
    for request in [
        chat_request("m"),
        r#"{"messages":[],"stream":true}"#.to_owned(),
    ] {
        let got = send(&client(), post(&proxy, "/v1/chat/completions", &request)).await;
        assert_eq!(got.end, Ok(()));
    }
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let by_request = [("model", "m"), ("api", "chat")];
    assert_eq!(
        m.get("tokentap_output_tokens_total", &by_request),
        2.0 * 7.0
    );
    let source = [("api", "chat"), ("token_source", "tokenizer")];
    assert_eq!(m.get("tokentap_output_token_source_total", &source), 2.0);
    // TPOT uses N = 7: (t_end − t_first) / 6 = 20 ms / 6 per request.
    let tpot = m.get("tokentap_time_per_output_token_seconds_sum", &by_request);
    assert!((tpot - 2.0 * 0.020 / 6.0).abs() < 1e-9, "TPOT {tpot}");
}

#[tokio::test(start_paused = true)]
async fn usage_wins_over_the_tokenizer() {
    let upstream = upstream(|_| {
        let mut steps = vec![sse_head(), chunk(content_chunk("hello world").as_bytes())];
        steps.push(chunk(usage_chunk(3, 11).as_bytes()));
        steps.push(last_chunk());
        steps
    })
    .await;
    let proxy = proxy(&upstream.url(), &format!("tokenizers:\n  m: {WORDS}\n")).await;
    send(
        &client(),
        post(&proxy, "/v1/chat/completions", &chat_request("m")),
    )
    .await;
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(
        m.get("tokentap_output_tokens_total", &[("model", "m")]),
        11.0
    );
    let usage = [("model", "m"), ("token_source", "usage")];
    assert_eq!(m.get("tokentap_output_token_source_total", &usage), 1.0);
}
