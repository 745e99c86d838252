//! Asking the upstream which models it serves, in the background: `GET /v1/models` (OpenAI-compatible
//! servers, vLLM, SGLang, TGI, llama.cpp, Ollama's compatibility layer), else Ollama's `/api/tags`, at
//! start and every `model_list.refresh`, the answer pushed into `record::served` where label admission
//! reads it.
//!
//! The list decides which model names may take a `model` label place, so a client cannot fill them with
//! made-up names an upstream answers anyway. It is fetched off the request path, on a connection of its
//! own (TLS as the proxy's, the upstream's path prefix put before the path, `model_list.api_key_file`'s
//! token as a bearer token when set), the whole answer within 10 s and at most 8 MiB; entries whose name
//! no real model has are skipped.
//!
//! Admission fails closed. Until the first answer that says what the upstream serves, no name but the
//! configured ones takes a place (`record::served` is pending from [`ModelList::new`] on). A list, once
//! read, stays until the upstream answers another one or says it has none: an answer that cannot be read
//! (a 5xx, 429 or other status, a body that is not a list, a timeout, no connection) keeps it and is
//! logged once, and while no list ever came the upstream is asked again every 5 s. Only an upstream that
//! says it has no list (404, 405, 410 or 501 on both paths, or an empty list), twice in a row 5 s apart
//! (one could be a server starting or a router between backends), lists nothing, and admission falls
//! back to a name's first 2xx answer. A refusal (401, 403) is a list that cannot be read once a list was
//! seen; before that it counts as no list, with a warning naming `model_list.api_key_file` (else a server
//! that wants a token would never give a name a label). A name the list lacks that the upstream answers
//! 2xx anyway (an adapter loaded since) asks for the list again, no sooner than 5 s after the last fetch.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;
use tower_service::Service;

use crate::config::Config;
use crate::proxy::upstream::{roots, TlsSetupError};
use crate::record::served::{ListState, ServedModel, ServedModels};

/// The largest list read; a larger answer is not a model list.
const MAX_LIST_BYTES: usize = 8 << 20;
/// The whole answer (connect, head and body) must come within this.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// While the upstream never gave a list, and at least between two fetches asked for by a 2xx.
const RETRY: Duration = Duration::from_secs(5);
/// Entries read from one list, at most.
const MAX_ENTRIES: usize = 100_000;
/// The paths asked, in order: the first that answers a list wins.
const PATHS: [&str; 2] = ["/v1/models", "/api/tags"];
/// The statuses that say a path has no list (rather than that it could not give it now).
const NO_LIST: [StatusCode; 4] = [
    StatusCode::NOT_FOUND,
    StatusCode::METHOD_NOT_ALLOWED,
    StatusCode::GONE,
    StatusCode::NOT_IMPLEMENTED,
];
/// Rounds in a row that must say "no list" before the upstream lists nothing.
const NO_LIST_ROUNDS: u32 = 2;

/// The fetcher: started with the proxy when `model_list.enabled`, stopped with it.
pub struct ModelList {
    tcp: HttpConnector,
    /// For an `https://` upstream: the proxy's TLS settings and the server's name.
    tls: Option<(TlsConnector, ServerName<'static>)>,
    upstream: Uri,
    /// The upstream's path prefix ("" for none).
    prefix: String,
    authorization: Option<HeaderValue>,
    refresh: Duration,
    served: Arc<ServedModels>,
}

/// What one round of asking found.
#[derive(Debug, PartialEq)]
enum Fetched {
    List(Vec<ServedModel>),
    /// Every path said it has no list ([`NO_LIST`], or an empty list): why, per path.
    Nothing(String),
    /// No path gave a list, one refused the fetcher (401, 403) and the others have none.
    Refused(String),
    /// A path's answer could not be read, or the upstream could not be asked.
    Failed(String),
}

#[derive(Deserialize)]
struct OpenAiList {
    data: Vec<OpenAiModel>,
}

#[derive(Deserialize)]
struct OpenAiModel {
    id: String,
    #[serde(default)]
    root: Option<String>,
}

#[derive(Deserialize)]
struct OllamaTags {
    models: Vec<OllamaModel>,
}

#[derive(Deserialize)]
struct OllamaModel {
    name: String,
}

/// What the rounds so far said, for the next one's decision.
#[derive(Default)]
struct Rounds {
    /// The last list or trouble logged, so that each is logged once.
    said: String,
    /// Rounds in a row that said there is no list.
    no_list: u32,
}

impl Rounds {
    /// Acts on one round's answer: pushes a list into `served`, or no list once the upstream said so
    /// [`NO_LIST_ROUNDS`] times in a row (anything else leaves admission as it is), logs what changed
    /// once, and says how long until the next round.
    fn take(&mut self, fetched: Fetched, served: &ServedModels, refresh: Duration) -> Duration {
        let state = served.state();
        let fetched = match fetched {
            // Once a list was seen, a refusal is a list that cannot be read, not no list.
            Fetched::Refused(why) if state == ListState::Listed => Fetched::Failed(why),
            fetched => fetched,
        };
        self.no_list = match fetched {
            Fetched::Nothing(_) | Fetched::Refused(_) => self.no_list.saturating_add(1),
            Fetched::List(_) | Fetched::Failed(_) => 0,
        };
        match fetched {
            Fetched::List(models) => {
                let names: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
                if self.first(format!("{names:?}")) {
                    let shown: Vec<&str> = names.iter().take(20).copied().collect();
                    tracing::info!(count = names.len(), models = ?shown, "the upstream's model list: these names take model labels");
                }
                served.set(models);
                refresh
            }
            Fetched::Nothing(why) | Fetched::Refused(why) if self.no_list < NO_LIST_ROUNDS => {
                tracing::debug!(%why, "the upstream gave no model list; asked again before it is taken to have none");
                RETRY.min(refresh)
            }
            Fetched::Nothing(why) => {
                if self.first(why.clone()) {
                    tracing::warn!(%why, "the upstream lists no models: a model name takes a label on its first 2xx answer (docs/metrics.md: which model names take a label)");
                }
                served.set(Vec::new());
                refresh
            }
            Fetched::Refused(why) => {
                if self.first(why.clone()) {
                    tracing::warn!(%why, "the upstream refuses its model list without a token (set model_list.api_key_file): until it gives one, a model name takes a label on its first 2xx answer");
                }
                served.set(Vec::new());
                refresh
            }
            Fetched::Failed(why) => {
                match (self.first(why.clone()), state) {
                    (true, ListState::Listed) => {
                        tracing::warn!(%why, "the upstream's model list could not be read; the last one stays")
                    }
                    (true, ListState::Pending) => {
                        tracing::warn!(%why, "the upstream's model list could not be read: until it is, no model name but the configured ones takes a label (model_list.names; model_list.enabled: false admits on the first 2xx)")
                    }
                    _ => {
                        tracing::debug!(%why, "the upstream's model list could not be read; admission stays as it is")
                    }
                }
                match state {
                    ListState::Listed => refresh,
                    ListState::Pending | ListState::Unlisted => RETRY,
                }
            }
        }
    }

    /// Whether `what` differs from what was logged last; it is then the last.
    fn first(&mut self, what: String) -> bool {
        let first = self.said != what;
        self.said = what;
        first
    }
}

/// The models of a `/v1/models` or `/api/tags` answer; `None` if it is neither.
fn parse(body: &[u8]) -> Option<Vec<ServedModel>> {
    let entries: Vec<ServedModel> = match serde_json::from_slice::<OpenAiList>(body) {
        Ok(list) => list
            .data
            .into_iter()
            .map(|m| ServedModel {
                id: m.id,
                root: m.root,
            })
            .collect(),
        Err(_) => serde_json::from_slice::<OllamaTags>(body)
            .ok()?
            .models
            .into_iter()
            .map(|m| ServedModel {
                id: m.name,
                root: None,
            })
            .collect(),
    };
    // A name no real model has would be counted as `other` anyway; it must not take a place.
    let usable = |m: &ServedModel| {
        !m.id.is_empty() && m.id.len() <= 200 && !m.id.chars().any(char::is_control)
    };
    Some(
        entries
            .into_iter()
            .filter(usable)
            .take(MAX_ENTRIES)
            .collect(),
    )
}

impl ModelList {
    /// The fetcher for `config`'s upstream, pushing into `served`. Loads TLS roots for an `https://`
    /// upstream and reads `model_list.api_key_file`.
    pub fn new(config: &Config, served: Arc<ServedModels>) -> Result<Self, ModelListError> {
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(config.timeouts.connect));
        let upstream = config.upstream.clone();
        let tls = match upstream.scheme_str() {
            Some("https") => {
                let roots = roots(config.upstream_ca_file.as_deref())?;
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let tls = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(TlsSetupError::from)?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                let host = upstream.host().unwrap_or_default();
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let name = ServerName::try_from(host.to_owned())
                    .map_err(|e| ModelListError::ServerName(e.to_string()))?;
                Some((TlsConnector::from(Arc::new(tls)), name))
            }
            _ => None,
        };
        let authorization = match config.model_list.api_key()? {
            Some(token) => {
                let value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| ModelListError::Token)?;
                Some(value)
            }
            None => None,
        };
        served.ask();
        Ok(ModelList {
            tcp,
            tls,
            prefix: upstream.path().trim_end_matches('/').to_owned(),
            upstream,
            authorization,
            refresh: config.model_list.refresh,
            served,
        })
    }

    /// Fetches the list now and every `refresh` (or sooner, see the module), for ever: the caller
    /// aborts the task.
    pub async fn run(self) {
        let mut rounds = Rounds::default();
        loop {
            let started = tokio::time::Instant::now();
            let fetched = self.fetch().await;
            let next = rounds.take(fetched, &self.served, self.refresh);
            // A wish for a refresh brings the next round forward, to no sooner than 5 s after this
            // one began; it never puts it off.
            let due = tokio::time::Instant::now() + next;
            tokio::select! {
                () = tokio::time::sleep_until(due) => {}
                () = self.served.refresh_wanted() => {
                    tokio::time::sleep_until(due.min(started + RETRY)).await;
                }
            }
        }
    }

    async fn fetch(&self) -> Fetched {
        let (mut none, mut refused, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for path in PATHS {
            match self.get(path).await {
                Ok((status, body)) if status.is_success() => match parse(&body) {
                    Some(models) if !models.is_empty() => return Fetched::List(models),
                    Some(_) => none.push(format!("{path}: an empty list")),
                    None => failed.push(format!("{path}: {status}, not a model list")),
                },
                Ok((status, _)) if NO_LIST.contains(&status) => {
                    none.push(format!("{path}: {status}"))
                }
                Ok((StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, _)) => refused.push(format!(
                    "{path}: refused without a token (set model_list.api_key_file)"
                )),
                Ok((status, _)) => failed.push(format!("{path}: {status}")),
                Err(error) => return Fetched::Failed(format!("{path}: {error}")),
            }
        }
        let why = |parts: Vec<String>| parts.join("; ");
        match (failed.is_empty(), refused.is_empty()) {
            (false, _) => Fetched::Failed(why([failed, refused, none].concat())),
            (true, false) => Fetched::Refused(why([refused, none].concat())),
            (true, true) => Fetched::Nothing(why(none)),
        }
    }

    /// GETs `path` under the upstream's prefix on a connection of its own: the status and the whole
    /// body, bounded in size, all within [`FETCH_TIMEOUT`].
    async fn get(&self, path: &str) -> Result<(StatusCode, Bytes), String> {
        let target = format!("{}{path}", self.prefix);
        let host = self.upstream.authority().map_or("", |a| a.as_str());
        let mut request = Request::get(target)
            .header(header::HOST, host)
            .header(header::ACCEPT, "application/json")
            .header(header::CONNECTION, "close");
        if let Some(token) = &self.authorization {
            request = request.header(header::AUTHORIZATION, token.clone());
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let exchange = async {
            let mut tcp = self.tcp.clone();
            std::future::poll_fn(|cx| tcp.poll_ready(cx))
                .await
                .map_err(|e| e.to_string())?;
            let socket = tcp
                .call(self.upstream.clone())
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            match &self.tls {
                None => exchange(socket, request).await,
                Some((tls, name)) => {
                    let stream = tls.connect(name.clone(), socket).await;
                    exchange(stream.map_err(|e| e.to_string())?, request).await
                }
            }
        };
        match tokio::time::timeout(FETCH_TIMEOUT, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("no whole answer within {FETCH_TIMEOUT:?}")),
        }
    }
}

/// Sends `request` on `io` with HTTP/1.1 and reads the answer whole, at most [`MAX_LIST_BYTES`].
async fn exchange<S>(io: S, request: Request<Empty<Bytes>>) -> Result<(StatusCode, Bytes), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    // The connection ends with the answer (`Connection: close`), or when this fetch is dropped.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body = Limited::new(response.into_body(), MAX_LIST_BYTES);
    let body = body.collect().await.map_err(|e| e.to_string())?;
    Ok((status, body.to_bytes()))
}

#[derive(Debug, thiserror::Error)]
pub enum ModelListError {
    #[error("model_list: upstream TLS: {0}")]
    Tls(#[from] TlsSetupError),
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("model_list.api_key_file: the token is not a valid header value")]
    Token,
    #[error("model_list: the upstream's host cannot be a TLS server name: {0}")]
    ServerName(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(models: &[ServedModel]) -> Vec<(&str, Option<&str>)> {
        models
            .iter()
            .map(|m| (m.id.as_str(), m.root.as_deref()))
            .collect()
    }

    #[test]
    fn every_servers_list_is_read_with_its_ids_and_roots() {
        // vLLM: a base model and a LoRA adapter, each with its root.
        let vllm = br#"{"object":"list","data":[{"id":"llama","object":"model","created":1,"owned_by":"vllm","root":"/models/Llama-3.1-8B","parent":null,"max_model_len":8192,"permission":[{}]},{"id":"sql-lora","object":"model","root":"/adapters/sql","parent":"llama"}]}"#;
        let vllm = parse(vllm).unwrap();
        assert_eq!(
            ids(&vllm),
            [
                ("llama", Some("/models/Llama-3.1-8B")),
                ("sql-lora", Some("/adapters/sql"))
            ]
        );
        // TGI and SGLang: OpenAI's shape; llama.cpp adds a `models` array beside `data`.
        let tgi = br#"{"object":"list","data":[{"id":"meta-llama/Llama-3.1-8B-Instruct","object":"model","created":0,"owned_by":"meta-llama/Llama-3.1-8B-Instruct"}]}"#;
        assert_eq!(
            ids(&parse(tgi).unwrap()),
            [("meta-llama/Llama-3.1-8B-Instruct", None)]
        );
        let llamacpp = br#"{"models":[{"name":"m.gguf","model":"m.gguf"}],"object":"list","data":[{"id":"m.gguf","object":"model","owned_by":"llamacpp","meta":{"n_vocab":32000}}]}"#;
        assert_eq!(ids(&parse(llamacpp).unwrap()), [("m.gguf", None)]);
        // Ollama's /api/tags.
        let ollama = br#"{"models":[{"name":"llama3:latest","model":"llama3:latest","size":4661224676,"details":{"family":"llama"}},{"name":"qwen2:7b","model":"qwen2:7b"}]}"#;
        assert_eq!(
            ids(&parse(ollama).unwrap()),
            [("llama3:latest", None), ("qwen2:7b", None)]
        );
        assert_eq!(parse(br#"{"object":"list","data":[]}"#), Some(Vec::new()));
    }

    #[test]
    fn a_real_vllm_list_gives_the_served_name_and_the_models_directory() {
        // vLLM 0.32's own answer (tests/fixtures/vllm/README.md), with --served-model-name tiny-llama.
        let real = include_bytes!("../../tests/fixtures/vllm/models.json");
        let models = parse(real).expect("a list");
        assert_eq!(
            ids(&models),
            [("tiny-llama", Some("/tmp/real22/tiny-llama"))]
        );
    }

    fn one(id: &str) -> Vec<ServedModel> {
        vec![ServedModel {
            id: id.into(),
            root: None,
        }]
    }

    /// The state after each of `answers`, and the wait before the next round, from a fetcher's start.
    fn after(answers: Vec<Fetched>) -> Vec<(ListState, Duration)> {
        let gauge = prometheus::IntGauge::new("listed", "test").unwrap();
        let served = ServedModels::new(std::iter::empty(), gauge);
        served.ask();
        let mut rounds = Rounds::default();
        let refresh = Duration::from_secs(60);
        answers
            .into_iter()
            .map(|fetched| {
                let next = rounds.take(fetched, &served, refresh);
                (served.state(), next)
            })
            .collect()
    }

    #[test]
    fn a_list_stays_until_another_comes_or_no_list_is_said_twice_in_a_row() {
        use Fetched::*;
        use ListState::*;
        let (minute, retry) = (Duration::from_secs(60), RETRY);
        let failed = || Failed("/v1/models: 503 Service Unavailable".into());
        let nothing = || Nothing("/v1/models: 404 Not Found; /api/tags: 404 Not Found".into());
        let refused = || Refused("/v1/models: refused".into());
        assert_eq!(
            after(vec![failed(), nothing(), failed(), nothing(), nothing()]),
            [
                (Pending, retry),
                (Pending, retry),
                (Pending, retry),
                (Pending, retry),
                (Unlisted, minute)
            ],
            "pending until no list is said twice in a row"
        );
        assert_eq!(
            after(vec![
                List(one("a")),
                failed(),
                refused(),
                refused(),
                nothing()
            ]),
            [
                (Listed, minute),
                (Listed, minute),
                (Listed, minute),
                (Listed, minute),
                (Listed, retry)
            ],
            "a refusal once a list was seen is a list that cannot be read"
        );
        assert_eq!(
            after(vec![List(one("a")), nothing(), nothing(), List(one("b"))]),
            [
                (Listed, minute),
                (Listed, retry),
                (Unlisted, minute),
                (Listed, minute)
            ]
        );
        assert_eq!(
            after(vec![refused(), refused(), failed()]),
            [(Pending, retry), (Unlisted, minute), (Unlisted, retry)],
            "refused before any list: no list, with a warning"
        );
    }

    #[test]
    fn what_is_not_a_list_is_not_read_as_one_and_names_no_model_has_are_skipped() {
        for body in [
            &b"<html>not found</html>"[..],
            b"{}",
            b"[]",
            b"{\"data\":{}}",
            b"",
        ] {
            assert_eq!(parse(body), None, "{body:?}");
        }
        let odd = format!(
            r#"{{"data":[{{"id":""}},{{"id":"a\nb"}},{{"id":"{}"}},{{"id":"ok"}}]}}"#,
            "x".repeat(201)
        );
        assert_eq!(ids(&parse(odd.as_bytes()).unwrap()), [("ok", None)]);
    }
}
