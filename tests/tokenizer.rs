//! Exact output-token counts from a tokenizer when the server sends no usage: configured, or discovered
//! from the model's name under `tokenizer_dirs` (built with the `tokenizer` feature, the default). The
//! test tokenizer splits words and punctuation, so the expected counts can be read off the streamed text.
#![cfg(feature = "tokenizer")]

use crate::support;

use support::*;
use tokentap::record::metrics::family;

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
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, &by_request), 2.0 * 7.0);
    let source = [("api", "chat"), ("token_source", "tokenizer")];
    assert_eq!(m.get(family::TOKEN_SOURCE.name, &source), 2.0);
    // TPOT uses N = 7: (t_end − t_first) / 6 = 20 ms / 6 per request.
    let tpot = m.get(&family::TPOT.sum(), &by_request);
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
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, &[("model", "m")]), 11.0);
    let usage = [("model", "m"), ("token_source", "usage")];
    assert_eq!(m.get(family::TOKEN_SOURCE.name, &usage), 1.0);
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
    assert_eq!(m.get(family::OUTPUT_TOKENS.name, &[("model", "m")]), 5.0);
    let source = [("model", "m"), ("token_source", "tokenizer")];
    assert_eq!(m.get(family::TOKEN_SOURCE.name, &source), 1.0);
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
                m.get(family::TOKEN_SOURCE.name, &by_model("tokenizer")),
                m.get(family::TOKEN_SOURCE.name, &by_model("chunks")),
            );
            assert_eq!(counted + chunked, f64::from(rounds), "{model}");
            let tokens = m.get(family::OUTPUT_TOKENS.name, &[("model", model)]);
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

/// The served name of a model started from a directory (`--model DIR --served-model-name llama-8b`).
const ALIAS: &str = "llama-8b";

/// A model's files as the upstream's list names them, in a scratch directory removed when dropped:
/// `llama/` with a tokenizer.json, `config-only/` without one, `a-file` (not a directory).
struct ModelDirs(std::path::PathBuf);

impl ModelDirs {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tokentap-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("llama")).expect("mkdir");
        std::fs::create_dir_all(dir.join("config-only")).expect("mkdir");
        std::fs::copy(WORDS, dir.join("llama/tokenizer.json")).expect("tokenizer.json");
        std::fs::write(dir.join("config-only/config.json"), "{}").expect("config.json");
        std::fs::write(dir.join("a-file"), "{}").expect("a file");
        ModelDirs(dir)
    }

    fn at(&self, relative: &str) -> String {
        self.0.join(relative).display().to_string()
    }
}

impl Drop for ModelDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// vLLM's `/v1/models` answer for `--served-model-name llama-8b`: `root` is the `--model` it was
/// started with.
fn vllm_list(root: &str) -> String {
    let root = serde_json::to_string(root).expect("json string");
    format!(
        r#"{{"object":"list","data":[{{"id":"{ALIAS}","object":"model","created":1,"owned_by":"vllm","root":{root},"parent":null,"max_model_len":512,"permission":[{{}}]}}]}}"#
    )
}

/// Lists `llama-8b` with `root` (404 on the list paths while `root` is `None`), and streams the
/// 7-token answer without usage to every other request.
fn listing(
    root: std::sync::Arc<std::sync::Mutex<Option<String>>>,
) -> impl Fn(&RecordedRequest) -> Vec<Step> + Send + Sync + 'static {
    move |request| {
        let line = request.request_line();
        if line.starts_with("GET /v1/models ") || line.starts_with("GET /api/tags ") {
            return match root.lock().expect("root").as_deref() {
                Some(root) => vec![json_response(200, "OK", &vllm_list(root))],
                None => vec![json_response(404, "Not Found", r#"{"error":"none"}"#)],
            };
        }
        stream(request)
    }
}

/// Sends one request for `llama-8b` and returns (tokenizer-counted, chunk-counted, output tokens) so far.
async fn one_more(proxy: &tokentap::Running) -> (f64, f64, f64) {
    let got = send(
        &client(),
        post(proxy, "/v1/chat/completions", &chat_request(ALIAS)),
    )
    .await;
    assert_eq!((got.status, got.end), (200, Ok(())));
    settle(proxy).await;
    let m = scrape(proxy).await;
    let by = |source| [("model", ALIAS), ("token_source", source)];
    (
        m.get(family::TOKEN_SOURCE.name, &by("tokenizer")),
        m.get(family::TOKEN_SOURCE.name, &by("chunks")),
        m.get(family::OUTPUT_TOKENS.name, &[("model", ALIAS)]),
    )
}

const SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

/// vLLM started as `--model DIR --served-model-name llama-8b`: no tokenizer_dirs, nothing by that
/// name anywhere, but the upstream's list says where the model is, and tokentap reads its tokenizer
/// there. The first request starts the look-up (chunks, as any discovery); the next one is exact.
#[tokio::test]
async fn a_model_the_upstream_lists_with_its_directory_is_counted_by_its_tokenizer() {
    let dirs = ModelDirs::new("listed-root");
    let root = std::sync::Arc::new(std::sync::Mutex::new(Some(dirs.at("llama"))));
    let upstream = upstream(listing(root)).await;
    let proxy = proxy(
        &upstream.url(),
        "tokenizer_dirs: []\nmodel_list: {enabled: true}\n",
    )
    .await;
    listed(&proxy, 1.0).await;
    assert_eq!(one_more(&proxy).await, (0.0, 1.0, 3.0));
    assert!(proxy.settle_tokenizers(SETTLE));
    // 7 tokens by the tokenizer where the chunks say 3.
    assert_eq!(one_more(&proxy).await, (1.0, 1.0, 3.0 + 7.0));
}

/// The list came after the first requests (the model server was still loading): those counted
/// chunks, the name was looked up and not found; the list's arrival looks it up again by itself, and
/// the next request is counted by the tokenizer.
#[tokio::test]
async fn a_list_that_comes_after_the_first_requests_is_used_from_the_next_one() {
    let dirs = ModelDirs::new("late-list");
    let root = std::sync::Arc::new(std::sync::Mutex::new(None));
    let upstream = upstream(listing(root.clone())).await;
    let yaml = "tokenizer_dirs: []\nmodel_list: {refresh: 1s}\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    // Said twice (404 on both paths): no list, so the name takes its label on its 2xx.
    listed(&proxy, 0.0).await;
    assert_eq!(one_more(&proxy).await, (0.0, 1.0, 3.0));
    assert!(proxy.settle_tokenizers(SETTLE));
    assert_eq!(one_more(&proxy).await, (0.0, 2.0, 6.0));
    *root.lock().expect("root") = Some(dirs.at("llama"));
    listed(&proxy, 1.0).await;
    assert!(proxy.settle_tokenizers(SETTLE));
    assert_eq!(one_more(&proxy).await, (1.0, 2.0, 6.0 + 7.0));
}

/// What a list's root may be that gives no tokenizer: each leaves the model counting chunks (and
/// says why in one log line per look-up, not per request). And with `tokenizer_from_root: false` a
/// good root is not read at all.
#[tokio::test]
async fn roots_that_give_no_tokenizer_and_the_switch_off_count_chunks() {
    let dirs = ModelDirs::new("bad-roots");
    let cases = [
        (dirs.at("config-only"), "{enabled: true}"), // no tokenizer.json
        (dirs.at("a-file"), "{enabled: true}"),      // not a directory
        (dirs.at("absent"), "{enabled: true}"),      // not on this machine
        (
            "meta-llama/Llama-3.1-8B-Instruct".to_owned(),
            "{enabled: true}",
        ), // a hub id, no roots
        (
            format!("{}/../llama", dirs.at("config-only")),
            "{enabled: true}",
        ), // not a plain path
        (dirs.at("llama"), "{tokenizer_from_root: false}"),
    ];
    for (root, model_list) in cases {
        let shared = std::sync::Arc::new(std::sync::Mutex::new(Some(root.clone())));
        let upstream = upstream(listing(shared)).await;
        let yaml = format!("tokenizer_dirs: []\nmodel_list: {model_list}\n");
        let proxy = proxy(&upstream.url(), &yaml).await;
        listed(&proxy, 1.0).await;
        assert_eq!(one_more(&proxy).await, (0.0, 1.0, 3.0), "{root}");
        assert!(proxy.settle_tokenizers(SETTLE));
        assert_eq!(one_more(&proxy).await, (0.0, 2.0, 6.0), "{root}");
    }
}

/// vLLM started from a hub id with an alias (`--model org/words --served-model-name llama-8b`): the
/// list's root is the hub id, found in the hub cache under tokenizer_dirs as the name would be.
#[tokio::test]
async fn a_hub_id_root_is_found_in_the_hub_cache() {
    let roots = Roots::new("hub-root");
    let listed_root = std::sync::Arc::new(std::sync::Mutex::new(Some("org/words".to_owned())));
    let upstream = upstream(listing(listed_root)).await;
    let yaml = format!(
        "tokenizer_dirs: [{}]\nmodel_list: {{enabled: true}}\n",
        roots.0.join("hub").display()
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    listed(&proxy, 1.0).await;
    assert_eq!(one_more(&proxy).await, (0.0, 1.0, 3.0));
    assert!(proxy.settle_tokenizers(SETTLE));
    assert_eq!(one_more(&proxy).await, (1.0, 1.0, 3.0 + 7.0));
}
