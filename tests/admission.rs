//! Who may take a label place. Model labels come from the upstream's own list: a name the upstream
//! lists (`GET /v1/models`, or Ollama's `/api/tags`) takes a `model` place on its first request; a name
//! it does not list never does, however the upstream answers it. An upstream that answers 2xx to any
//! name (a gateway, TGI) can no longer be used to fill the places with junk. Only an upstream that lists
//! nothing falls back to admitting a name on its first 2xx. Tenant labels, with `tenants.allow`, go to
//! the listed values only: made-up bearer tokens or header values take none.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::*;
use tokentap::record::metrics::family;
use tokentap::Running;

const CHAT: &str = "/v1/chat/completions";

/// The name a request's body asks for.
pub(crate) fn requested_model(request: &RecordedRequest) -> String {
    let body = String::from_utf8_lossy(&request.body);
    body.split("\"model\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("")
        .to_owned()
}

/// A streamed answer that names `model`, as a gateway answering any name echoes it.
pub(crate) fn stream_naming(model: &str) -> Vec<Step> {
    let event = format!("data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"{model}\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"a\"}},\"finish_reason\":null}}]}}\n\n");
    vec![
        sse_head(),
        chunk(event.as_bytes()),
        chunk(DONE.as_bytes()),
        last_chunk(),
    ]
}

pub(crate) const LIST: &str = r#"{"object":"list","data":[{"id":"real-model","object":"model","created":1,"owned_by":"vllm","root":"/models/Real-Model-8B","parent":null,"max_model_len":8192},{"id":"real-lora","object":"model","root":"/adapters/real-lora","parent":"real-model"}]}"#;

/// Lists `real-model` and `real-lora`, and answers every chat request 200 whatever its name.
fn answers_anything(request: &RecordedRequest) -> Vec<Step> {
    if request.request_line().starts_with("GET /v1/models ") {
        return vec![json_response(200, "OK", LIST)];
    }
    stream_naming(&requested_model(request))
}

pub(crate) fn label_values(m: &Metrics, family: &str) -> BTreeSet<String> {
    values_of(m, family, "model")
}

fn values_of(m: &Metrics, family: &str, label: &str) -> BTreeSet<String> {
    let needle = format!("{label}=\"");
    m.text
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter_map(|l| l.split(needle.as_str()).nth(1))
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// Sends `names` requests, each for a made-up name of its own (`junk-{first + i}`), eight at a time;
/// the upstream answers each 200.
pub(crate) async fn flood_from(proxy: &Running, first: usize, names: usize) {
    let client = client();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let client = client.clone();
        let requests: Vec<_> = (worker..names)
            .step_by(8)
            .map(|i| post(proxy, CHAT, &chat_request(&format!("junk-{}", first + i))))
            .collect();
        tasks.spawn(async move {
            for request in requests {
                assert_eq!(send(&client, request).await.status, 200);
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("flood worker");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_junk_flood_against_an_upstream_that_answers_anything_leaves_the_real_model_its_label() {
    let upstream = upstream(answers_anything).await;
    let proxy = proxy(&upstream.url(), "model_list: {enabled: true}\n").await;
    listed(&proxy, 2.0).await;
    flood_from(&proxy, 0, 300).await;
    let client = client();
    for name in ["real-model", "real-lora"] {
        let got = send(&client, post(&proxy, CHAT, &chat_request(name))).await;
        assert_eq!((got.status, got.end), (200, Ok(())));
    }
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let models = label_values(&m, family::REQUESTS.name);
    println!(
        "model labels after 300 junk names: {} values: {models:?}",
        models.len()
    );
    let want: BTreeSet<String> = ["real-model", "real-lora", "unadmitted"]
        .map(str::to_owned)
        .into();
    assert_eq!(models, want);
    let real = [("model", "real-model"), ("status", "200")];
    assert_eq!(m.get(family::REQUESTS.name, &real), 1.0);
    assert_eq!(
        m.get(family::REQUESTS.name, &[("model", "unadmitted")]),
        300.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_says_twice_it_lists_nothing_admits_a_name_on_its_first_2xx() {
    // 404 on both paths, as a server without a list; a 404 for a name it does not serve.
    let upstream = upstream(|request: &RecordedRequest| {
        let model = requested_model(request);
        if request.request_line().starts_with("GET ") || model != "served" {
            let body = r#"{"error":{"message":"not found"}}"#;
            return vec![json_response(404, "Not Found", body)];
        }
        stream_naming(&model)
    })
    .await;
    let proxy = proxy(&upstream.url(), "model_list: {enabled: true}\n").await;
    // Both paths asked once, neither a list: not yet taken as no list (a server starting, a router
    // between backends), so the name is still pending, and the upstream is asked again 5 s later.
    for _ in 0..200 {
        if asked(&upstream, "GET /api/tags ") > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client = client();
    assert_eq!(
        send(&client, post(&proxy, CHAT, &chat_request("served")))
            .await
            .status,
        200
    );
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    assert_eq!(m.get(family::MODELS_LISTED.name, &[]), -1.0, "pending");
    assert_eq!(
        m.get(family::REQUESTS.name, &[("model", "unadmitted")]),
        1.0
    );
    // The second round says it again: from now on a name takes a place on its first 2xx.
    listed(&proxy, 0.0).await;
    for name in ["junk", "served"] {
        send(&client, post(&proxy, CHAT, &chat_request(name))).await;
    }
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let models = label_values(&m, family::REQUESTS.name);
    assert_eq!(models, ["served", "unadmitted"].map(str::to_owned).into());
    assert_eq!(m.get(family::REQUESTS.name, &[("model", "served")]), 1.0);
    assert_eq!(asked(&upstream, "GET /api/tags "), 2);
}

/// How many requests whose line starts with `line` the upstream has had.
pub(crate) fn asked(upstream: &Upstream, line: &str) -> usize {
    let requests = upstream.requests();
    requests
        .iter()
        .filter(|r| r.request_line().starts_with(line))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollamas_tags_are_read_and_a_name_without_its_latest_tag_is_the_listed_model() {
    let upstream = upstream(|request: &RecordedRequest| {
        let line = request.request_line();
        if line.starts_with("GET /v1/models ") {
            return vec![json_response(404, "Not Found", "404 page not found")];
        }
        if line.starts_with("GET /api/tags ") {
            let tags = r#"{"models":[{"name":"llama3:latest","model":"llama3:latest","size":1}]}"#;
            return vec![json_response(200, "OK", tags)];
        }
        let model = requested_model(request);
        let line = format!("{{\"model\":\"{model}\",\"message\":{{\"role\":\"assistant\",\"content\":\"hi\"}},\"done\":true,\"eval_count\":1}}\n");
        vec![json_response(200, "OK", &line)]
    })
    .await;
    let proxy = proxy(&upstream.url(), "model_list: {enabled: true}\n").await;
    listed(&proxy, 1.0).await;
    let client = client();
    for name in ["llama3", "made-up"] {
        let body = format!("{{\"model\":\"{name}\",\"messages\":[],\"stream\":false}}");
        assert_eq!(
            send(&client, post(&proxy, "/api/chat", &body)).await.status,
            200
        );
    }
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let models = label_values(&m, family::REQUESTS.name);
    assert_eq!(models, ["llama3", "unadmitted"].map(str::to_owned).into());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_alias_is_counted_as_the_listed_model_that_answered() {
    // As TGI: any name in the request, the served model's id in the answer.
    let upstream = upstream(|request: &RecordedRequest| {
        if request.request_line().starts_with("GET /v1/models ") {
            return vec![json_response(200, "OK", LIST)];
        }
        stream_naming("real-model")
    })
    .await;
    let proxy = proxy(&upstream.url(), "model_list: {enabled: true}\n").await;
    listed(&proxy, 2.0).await;
    let got = send(&client(), post(&proxy, CHAT, &chat_request("tgi"))).await;
    assert_eq!(got.status, 200);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let models = label_values(&m, family::REQUESTS.name);
    assert_eq!(models, ["real-model"].map(str::to_owned).into());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_is_asked_under_the_prefix_with_the_configured_token_and_asked_again_for_a_new_adapter(
) {
    let token_file =
        std::env::temp_dir().join(format!("tokentap-list-token-{}", std::process::id()));
    std::fs::write(&token_file, "sk-list-token\n").expect("token file");
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = asked.clone();
    let upstream = upstream(move |request: &RecordedRequest| {
        if request.request_line().starts_with("GET /openai/v1/models ") {
            if request.header("authorization") != ["Bearer sk-list-token"] {
                return vec![json_response(401, "Unauthorized", "{}")];
            }
            // The adapter appears from the second list on.
            let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let list = match n {
                0 => r#"{"data":[{"id":"base"}]}"#,
                _ => r#"{"data":[{"id":"base"},{"id":"new-adapter","root":"/adapters/new"}]}"#,
            };
            return vec![json_response(200, "OK", list)];
        }
        stream_naming(&requested_model(request))
    })
    .await;
    let yaml = format!(
        "model_list: {{enabled: true, refresh: 1h, api_key_file: {}}}\n",
        token_file.display()
    );
    let proxy = proxy(&format!("{}/openai", upstream.url()), &yaml).await;
    listed(&proxy, 1.0).await;
    let client = client();
    // Not listed yet: unadmitted, and the 2xx asks for the list again (at most every 5 s).
    let got = send(&client, post(&proxy, CHAT, &chat_request("new-adapter"))).await;
    assert_eq!(got.status, 200);
    listed(&proxy, 2.0).await;
    let got = send(&client, post(&proxy, CHAT, &chat_request("new-adapter"))).await;
    assert_eq!(got.status, 200);
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let adapter = [("model", "new-adapter")];
    assert_eq!(m.get(family::REQUESTS.name, &adapter), 1.0);
    assert_eq!(
        m.get(family::REQUESTS.name, &[("model", "unadmitted")]),
        1.0
    );
    let _ = std::fs::remove_file(&token_file);
}

/// Sends one request for `model` with `header` set to `value`.
async fn request_with(proxy: &Running, header: &str, value: &str) -> u16 {
    let mut request = post(proxy, CHAT, &chat_request("m"));
    let value = http::HeaderValue::from_str(value).expect("header value");
    request.headers_mut().insert(
        http::HeaderName::from_bytes(header.as_bytes()).expect("name"),
        value,
    );
    send(&client(), request).await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_allowlist_made_up_tenants_take_no_place_whatever_the_upstream_answers() {
    // An upstream that authenticates no token (vLLM without --api-key) answers every request 200.
    let upstream = upstream(|_| ok_stream()).await;
    let key = "Yx3Qm0v8pH2wN5rT7sK9dL4fJ6gB1cZ+aE0uI2oR8yA=";
    let real = "sk-the-real-customer";
    let tag = tokentap::tap::identity::bearer_tag(key, real).expect("a tag");
    for allow in [None, Some(&tag)] {
        let allowlist = allow.map_or(String::new(), |t| format!(", allow: [{t}]"));
        let yaml = format!(
            "max_models: 4\ntenants: {{bearer_hash: true, hash_key: \"{key}\", max: 16{allowlist}}}\n"
        );
        let proxy = proxy(&upstream.url(), &yaml).await;
        for i in 0..16 {
            let status =
                request_with(&proxy, "authorization", &format!("Bearer made-up-{i}")).await;
            assert_eq!(status, 200);
        }
        assert_eq!(
            request_with(&proxy, "authorization", &format!("Bearer {real}")).await,
            200
        );
        settle(&proxy).await;
        let m = scrape(&proxy).await;
        let tenants = values_of(&m, family::REQUESTS.name, "tenant");
        println!("allowlist {allow:?}: {} tenant values", tenants.len());
        match allow {
            // Without one, 16 made-up tokens took all 16 places and the real customer is `other`.
            None => {
                assert_eq!(tenants.len(), 17);
                assert!(tenants.contains("other") && !tenants.contains(&tag));
            }
            Some(tag) => assert_eq!(
                tenants,
                [tag.as_str(), "unadmitted"].map(str::to_owned).into()
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_of_an_https_upstream_is_read_with_the_proxys_tls_settings() {
    let upstream = upstream_with(answers_anything, Some(tls_acceptor())).await;
    let url = format!("https://127.0.0.1:{}", upstream.addr.port());
    let yaml = format!("model_list: {{enabled: true}}\nupstream_ca_file: {TLS_DIR}/ca.pem\n");
    let proxy = proxy(&url, &yaml).await;
    listed(&proxy, 2.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_in_the_config_takes_its_place_beside_the_listed_ones() {
    // The upstream lists real-model and real-lora; the config names a third model the list omits (an
    // alias a router resolves, say). It takes its label; junk still does not.
    let upstream = upstream(answers_anything).await;
    let yaml = "model_list: {enabled: true, names: [configured-model]}\n";
    let proxy = proxy(&upstream.url(), yaml).await;
    listed(&proxy, 2.0).await;
    let client = client();
    for name in ["configured-model", "real-model", "junk-1", "junk-2"] {
        let got = send(&client, post(&proxy, CHAT, &chat_request(name))).await;
        assert_eq!((got.status, got.end), (200, Ok(())), "{name}");
    }
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let models = label_values(&m, family::REQUESTS.name);
    let want: BTreeSet<String> = ["configured-model", "real-model", "unadmitted"]
        .map(str::to_owned)
        .into();
    assert_eq!(models, want);
    let configured = [("model", "configured-model"), ("status", "200")];
    assert_eq!(m.get(family::REQUESTS.name, &configured), 1.0);
    assert_eq!(
        m.get(family::REQUESTS.name, &[("model", "unadmitted")]),
        2.0
    );
}
