//! deploy/kubernetes/sidecar.yaml finds the model's tokenizer: tokentap mounts, read-only and at the
//! model server's own path, the volume the model server downloads the model into, and its embedded
//! config's `tokenizer_dirs` points where the server's HuggingFace hub cache lands in that volume
//! ($HF_HOME/hub). The server serves the model under an alias (`--served-model-name`), found under no
//! root by that name: tokentap takes the model from the server's own list (`GET /v1/models`, whose
//! `root` is the `--model` the server was started with). Then the proof: a scratch directory laid out
//! as vLLM fills that volume (the hub layout, `refs/main` and a snapshot with a tokenizer.json),
//! a scripted upstream that lists the alias with its root as vLLM does, tokentap started in-process
//! with the sidecar's own config (only its addresses, the upstream and the volume's place on this
//! machine changed), and streams without usage for the served name get counted by that tokenizer,
//! not by chunks.
#![cfg(feature = "tokenizer")]

use crate::support;

use std::path::{Path, PathBuf};

use serde_yaml::Value as Yaml;
use support::*;
use tokentap::record::metrics::family;

const SIDECAR: &str = "deploy/kubernetes/sidecar.yaml";
/// A tokenizer that splits words and punctuation (tests/tokenizer.rs).
const WORDS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/tokenizer/words.json"
);

fn documents() -> Vec<Yaml> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SIDECAR);
    let text = std::fs::read_to_string(path).expect("sidecar.yaml");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("a YAML document"))
        .filter(|doc: &Yaml| !doc.is_null())
        .collect()
}

fn str_of(v: &Yaml) -> &str {
    v.as_str().unwrap_or_default()
}

/// Where `container` mounts `volume`, and whether read-only.
fn mount(container: &Yaml, volume: &str) -> Option<(PathBuf, bool)> {
    container["volumeMounts"]
        .as_sequence()?
        .iter()
        .find(|m| m["name"] == volume)
        .map(|m| {
            (
                PathBuf::from(str_of(&m["mountPath"])),
                m["readOnly"] == true,
            )
        })
}

/// A stream without usage: 3 chunks carrying 7 tokens of the test tokenizer.
fn stream() -> Vec<Step> {
    let mut steps = vec![sse_head(), chunk(ROLE_CHUNK.as_bytes())];
    for text in ["hello world", ", the quick", " brown fox"] {
        steps.push(chunk(content_chunk(text).as_bytes()));
    }
    steps.push(chunk(DONE.as_bytes()));
    steps.push(last_chunk());
    steps
}

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn the_sidecar_counts_with_the_tokenizer_the_model_server_downloaded() {
    let docs = documents();
    let config_map = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .expect("a ConfigMap");
    let embedded = str_of(&config_map["data"]["tokentap.yaml"]);
    let mut config = tokentap::Config::from_yaml_str(embedded).expect("the embedded config");
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let containers = pod["containers"].as_sequence().expect("containers");
    let tokentap = containers
        .iter()
        .find(|c| c["name"] == "tokentap")
        .expect("tokentap");
    let server = containers
        .iter()
        .find(|c| c["name"] != "tokentap")
        .expect("a model server");

    // The volume both mount: the server writes it, tokentap only reads it.
    let shared = pod["volumes"]
        .as_sequence()
        .expect("volumes")
        .iter()
        .map(|v| str_of(&v["name"]).to_owned())
        .find(|name| mount(server, name).is_some() && mount(tokentap, name).is_some())
        .expect("a volume the model server and tokentap both mount");
    let (server_at, _) = mount(server, &shared).expect("server mount");
    let (tokentap_at, read_only) = mount(tokentap, &shared).expect("tokentap mount");
    assert!(
        read_only,
        "tokentap mounts the model server's {shared} read-only"
    );

    // The server's hub cache ($HF_HOME/hub), inside the volume, is a root tokentap searches.
    let env = server["env"].as_sequence().expect("the server's env");
    let hf_home = env
        .iter()
        .find(|e| e["name"] == "HF_HOME")
        .map(|e| PathBuf::from(str_of(&e["value"])))
        .expect("HF_HOME, so the cache lands in the volume");
    let inside = hf_home
        .join("hub")
        .strip_prefix(&server_at)
        .expect("HF_HOME lies in the shared volume")
        .to_owned();
    let roots = config.tokenizer_dirs.clone().expect("tokenizer_dirs");
    assert!(
        roots.contains(&tokentap_at.join(&inside)),
        "{roots:?} lacks {}",
        tokentap_at.join(&inside).display()
    );

    // The name the server serves, and the `root` its model list gives it: the `--model` argument.
    let args: Vec<&str> = server["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .map(str_of)
        .collect();
    let after = |flag: &str| {
        args.iter()
            .position(|a| *a == flag)
            .map(|i| args[i + 1].to_owned())
    };
    let model = after("--model").expect("--model");
    let served = after("--served-model-name").unwrap_or_else(|| model.clone());
    let from_root = config.model_list.enabled && config.model_list.tokenizer_from_root;
    assert!(
        served == model || config.tokenizers.contains_key(&served) || from_root,
        "{served} is found under no root, and the model list is not asked"
    );
    if model.starts_with('/') {
        // A directory: the root names it as the server sees it, so tokentap must see it there too.
        assert_eq!(
            server_at, tokentap_at,
            "a --model directory read at another path"
        );
    }

    // The volume as vLLM fills it, here: the hub cache for a hub id, else the model's directory.
    let volume =
        Scratch(std::env::temp_dir().join(format!("tokentap-sidecar-{}", std::process::id())));
    let here = |path: &Path| match path.strip_prefix(&tokentap_at) {
        Ok(rest) => volume.0.join(rest),
        Err(_) => path.to_owned(),
    };
    let (model_dir, listed_root) = match model.starts_with('/') {
        true => {
            let dir = here(Path::new(&model));
            (dir.clone(), dir.display().to_string())
        }
        false => {
            let repo = volume
                .0
                .join(&inside)
                .join(format!("models--{}", model.replace('/', "--")));
            std::fs::create_dir_all(repo.join("refs")).expect("refs");
            std::fs::write(repo.join("refs/main"), "0a1b2c3").expect("refs/main");
            (repo.join("snapshots/0a1b2c3"), model.clone())
        }
    };
    std::fs::create_dir_all(&model_dir).expect("model dir");
    std::fs::copy(WORDS, model_dir.join("tokenizer.json")).expect("tokenizer.json");

    // vLLM's list: the served name with its root (tests/fixtures/vllm/models.json).
    let list = format!(
        r#"{{"object":"list","data":[{{"id":{},"object":"model","root":{},"parent":null}}]}}"#,
        serde_json::to_string(&served).expect("json"),
        serde_json::to_string(&listed_root).expect("json")
    );
    let upstream =
        upstream(
            move |request| match request.request_line().starts_with("GET /v1/models ") {
                true => vec![json_response(200, "OK", &list)],
                false => stream(),
            },
        )
        .await;
    config.listen = "127.0.0.1:0".parse().expect("addr");
    config.metrics_listen = "127.0.0.1:0".parse().expect("addr");
    config.upstream = tokentap::config::parse_upstream(&upstream.url()).expect("upstream");
    config.tokenizer_dirs = Some(roots.iter().map(|root| here(root)).collect());
    let proxy = tokentap::start(&config).await.expect("start tokentap");
    listed(&proxy, 1.0).await;
    let by = |source| [("model", served.as_str()), ("token_source", source)];
    // The first response of the model starts its look-up (chunks); once loaded, the tokenizer counts.
    for (round, source) in [(1, "chunks"), (2, "tokenizer")] {
        let got = send(
            &client(),
            post(&proxy, "/v1/chat/completions", &chat_request(&served)),
        )
        .await;
        assert_eq!((got.status, got.end), (200, Ok(())));
        settle(&proxy).await;
        assert!(proxy.settle_tokenizers(std::time::Duration::from_secs(10)));
        let m = scrape(&proxy).await;
        assert_eq!(
            m.get(family::TOKEN_SOURCE.name, &by(source)),
            1.0,
            "round {round}: the tokenizer in {} did not count",
            model_dir.display()
        );
    }
    let tokens = scrape(&proxy)
        .await
        .get(family::OUTPUT_TOKENS.name, &[("model", served.as_str())]);
    assert_eq!(tokens, 3.0 + 7.0, "exact counts once loaded");
}
