//! Exact output-token counts from a tokenizer when the server sends no usage: configured, or discovered
//! from the model's name under `tokenizer_dirs` (built with the `tokenizer` feature, the default). The
//! test tokenizer splits words and punctuation, so the expected counts can be read off the streamed text.
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

/// An `n` = 2 stream interleaves the choices' chunks (vLLM sends one choice per chunk); the tokenizer
/// counts each choice's text on its own: "hello world" (2) + "the quick fox" (3) = 5, where the chunks
/// run together ("hello worthe quldick fox") would give 4, as many as the output chunks.
#[tokio::test(start_paused = true)]
async fn several_choices_are_tokenized_each_on_its_own() {
    let upstream = upstream(|_| {
        let mut steps = vec![sse_head()];
        for (choice, text) in [(0, "hello wor"), (1, "the qu"), (0, "ld"), (1, "ick fox")] {
            let event = format!(
                "data: {{\"model\":\"m\",\"choices\":[{{\"index\":{choice},\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n"
            );
            steps.push(Step::Sleep(ms(10)));
            steps.push(chunk(event.as_bytes()));
        }
        steps.push(chunk(DONE.as_bytes()));
        steps.push(last_chunk());
        steps
    })
    .await;
    let proxy = proxy(&upstream.url(), &format!("tokenizers:\n  m: {WORDS}\n")).await;
    let request = r#"{"model":"m","n":2,"messages":[],"stream":true}"#;
    let got = send(&client(), post(&proxy, "/v1/chat/completions", request)).await;
    assert_eq!(got.end, Ok(()));
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(
        m.get("tokentap_output_tokens_total", &[("model", "m")]),
        5.0
    );
    let source = [("model", "m"), ("token_source", "tokenizer")];
    assert_eq!(m.get("tokentap_output_token_source_total", &source), 1.0);
}

/// Scratch search roots, removed when dropped.
struct Roots(std::path::PathBuf);

impl Roots {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tokentap-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let words = std::fs::read(WORDS).expect("test tokenizer");
        for file in [
            "models/llama/tokenizer.json",
            "hub/models--org--words/snapshots/0123abc/tokenizer.json",
            "outside/tokenizer.json",
        ] {
            let path = dir.join(file);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, &words).expect("write");
        }
        std::fs::create_dir_all(dir.join("hub/models--org--words/refs")).expect("refs");
        std::fs::write(dir.join("hub/models--org--words/refs/main"), "0123abc").expect("ref");
        Roots(dir)
    }
}

impl Drop for Roots {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Real time: the tokenizer loads on a thread of its own, outside the paused clock.
#[tokio::test]
async fn a_discovered_tokenizer_counts_streams_without_usage_once_it_has_loaded() {
    let roots = Roots::new("discovery");
    let upstream = upstream(stream).await;
    let (models, hub) = (roots.0.join("models"), roots.0.join("hub"));
    let yaml = format!(
        "tokenizer_dirs: [{}, {}]\n",
        models.display(),
        hub.display()
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    let absolute = format!("{}/llama", models.display());
    let escape = format!("{}/../outside", models.display());
    // A hub cache repository id, a model directory by its absolute path (vLLM's name for
    // `--model /models/llama`) and by its name under the root; then names that try to leave the roots.
    for model in ["org/words", &absolute, "llama", "../outside", &escape] {
        let by_model = |source| [("model", model), ("token_source", source)];
        let mut rounds = 0;
        loop {
            let got = send(
                &client(),
                post(&proxy, "/v1/chat/completions", &chat_request(model)),
            )
            .await;
            assert_eq!(got.end, Ok(()));
            settle(&proxy).await;
            rounds += 1;
            let m = scrape(&proxy).await;
            let (counted, chunked) = (
                m.get("tokentap_output_token_source_total", &by_model("tokenizer")),
                m.get("tokentap_output_token_source_total", &by_model("chunks")),
            );
            assert_eq!(counted + chunked, f64::from(rounds), "{model}");
            let tokens = m.get("tokentap_output_tokens_total", &[("model", model)]);
            // Exact: 7 tokens by the tokenizer, 3 by chunks (the look-up's first response and any
            // that passed before the load finished).
            assert_eq!(tokens, 7.0 * counted + 3.0 * chunked, "{model}");
            if model.contains("..") {
                assert_eq!(counted, 0.0, "{model} was looked up outside the roots");
                if rounds == 5 {
                    break;
                }
            } else {
                assert!(
                    rounds > 1 || chunked == 1.0,
                    "{model}: the first response waited for a load"
                );
                if counted > 0.0 {
                    break;
                }
                assert!(
                    rounds < 200,
                    "{model}: the discovered tokenizer never counted"
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}
