//! `tokentap demo`: a first look without a model server. It starts an embedded OpenAI-compatible server
//! (`tokentap::scripted`, each answer a script drawn at random) that streams tokens the way vLLM does (a role-only chunk at once, then tokens after a varying prefill
//! delay, varying inter-token gaps with the odd stall, a usage chunk and `[DONE]`), tokentap in front of it
//! on the usual ports of loopback (never every interface: it is a first try on a laptop), writing a
//! record per request to a file it names first (so `tokentap report FILE` works right after), and a few
//! clients that send a trickle of chat and completion requests through it. `--duration` stops the
//! clients and lets the requests in flight finish (at most [`FINISH`]) before it stops.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{header, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

use tokentap::config::{Ceilings, Config, RecordPath, RequestLog, SloKind};
use tokentap::scripted::{json_response, Chunks, RecordedRequest, Scripted, Step};
use tokio::sync::watch;

/// The models the demo server pretends to serve: name, base TTFT, base inter-token gap.
const MODELS: [(&str, Duration, Duration); 2] = [
    (
        "demo-llama-8b",
        Duration::from_millis(120),
        Duration::from_millis(18),
    ),
    (
        "demo-qwen-32b",
        Duration::from_millis(350),
        Duration::from_millis(45),
    ),
];

const WORDS: [&str; 16] = [
    " the",
    " model",
    " streams",
    " tokens",
    " while",
    " tokentap",
    " measures",
    " every",
    " gap",
    ",",
    " and",
    " latency",
    " stays",
    " visible",
    ".",
    " Prometheus",
];

/// How long `--duration` waits for the requests in flight when it runs out (the demo's longest
/// stream, 120 tokens with stalls, takes about 10 s).
pub const FINISH: Duration = Duration::from_secs(30);

/// Where the demo writes its records, unless its `--config` names another `request_log`.
pub fn records_path() -> PathBuf {
    std::env::temp_dir().join("tokentap-demo.jsonl")
}

/// The demo's config: defaults on loopback (the production defaults listen on every interface), a
/// record per request in [`records_path`], and SLO ceilings that some demo requests miss, so goodput
/// is interesting. `demo --config FILE` writes the file over it (`Config::load_over`).
pub fn default_config() -> Config {
    let mut config = Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
        metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
        request_log: Some(RequestLog {
            path: RecordPath::File(records_path()),
            ..RequestLog::default()
        }),
        ..Config::default()
    };
    config.slo.default = Ceilings::default()
        .with(SloKind::Ttft, Duration::from_millis(500))
        .with(SloKind::Tpot, Duration::from_millis(50))
        .with(SloKind::Itl, Duration::from_millis(250))
        .with(SloKind::E2e, Duration::from_secs(20));
    config.slo.models.insert(
        "demo-qwen-32b".to_owned(),
        Ceilings::default().with(SloKind::Ttft, Duration::from_secs(1)),
    );
    // The demo's models exist nowhere on disk (its server sends usage): no tokenizer to look for.
    config.tokenizer_dirs = Some(Vec::new());
    config
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("starting the embedded model server: {0}")]
    Upstream(std::io::Error),
    #[error(transparent)]
    Start(#[from] tokentap::StartError),
    #[error("emptying the demo's record file {}: {error}", records_path().display())]
    Records { error: std::io::Error },
}

/// What the demo's clients did: requests answered, and those they walked away from on purpose.
#[derive(Default)]
struct Tally {
    answered: AtomicU64,
    left: AtomicU64,
}

/// Runs the demo until Ctrl-C, or for `duration` when given.
pub async fn run(mut config: Config, duration: Option<Duration>) -> Result<(), DemoError> {
    let upstream = spawn_model_server(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(DemoError::Upstream)?;
    config.upstream = format!("http://{upstream}").parse().map_err(|_| {
        DemoError::Upstream(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "bad embedded address",
        ))
    })?;
    let records = match config.request_log.as_ref().map(|log| &log.path) {
        Some(RecordPath::File(path)) => Some(path.clone()),
        _ => None,
    };
    // The demo's own file holds this run's records only (a file the config names is appended to).
    if records.as_ref() == Some(&records_path()) {
        std::fs::File::create(records_path()).map_err(|error| DemoError::Records { error })?;
    }
    let running = Arc::new(tokentap::start(&config).await?);
    let proxy = running.proxy_addr();
    let metrics = running.metrics_addr();
    let shown = |addr: SocketAddr| {
        if addr.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        } else {
            addr
        }
    };
    let records_line = match &records {
        Some(path) => format!(
            "  records                {}   (tokentap report {0})\n",
            path.display()
        ),
        None => String::new(),
    };
    // A closed stdout (`tokentap demo | head`) must not stop the demo: print what can be printed.
    let _ = writeln!(
        std::io::stdout().lock(),
        "{live}tokentap demo\n  embedded model server  http://{upstream}\n  proxy                  http://{proxy}   (clients point here)\n  metrics                http://{m}/metrics\n{records_line}\nTry:\n  curl -s http://{m}/metrics | grep -E 'tokentap_(requests_total|goodput|time_to_first_token_seconds_count)'\n  curl -N http://{p}/v1/chat/completions -H 'content-type: application/json' \\\n    -d '{{\"model\":\"demo-llama-8b\",\"stream\":true,\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'\n\nA few demo clients are sending requests; one log line per finished request follows. Ctrl-C stops.\n",
        m = shown(metrics),
        p = shown(proxy),
        live = match config.ui.enabled {
            true => format!("live page: http://{}/   (open it in a browser)\n\n", shown(metrics)),
            false => String::new(),
        },
    );
    let (stop, stopped) = watch::channel(false);
    let tally = Arc::new(Tally::default());
    let mut clients = tokio::task::JoinSet::new();
    for worker in 0..3 {
        let (stopped, tally) = (stopped.clone(), tally.clone());
        clients.spawn(client_loop(shown(proxy), worker, stopped, tally));
    }
    // Stops on Ctrl-C or SIGTERM (as `docker stop` sends) at once, or after `duration` once the
    // requests in flight have finished.
    let signal = tokentap::net::signals::shutdown_signal();
    tokentap::net::signals::ignore_hangups();
    let ran_out = match duration {
        Some(duration) => tokio::select! {
            _ = tokio::time::sleep(duration) => true,
            _ = signal => false,
        },
        None => {
            signal.await;
            false
        }
    };
    let _ = stop.send(true);
    if ran_out {
        let finished = async { while clients.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(FINISH, finished).await;
    }
    clients.abort_all();
    running.shutdown().await;
    let flushed = running.clone();
    let _ =
        tokio::task::spawn_blocking(move || flushed.flush_records(Duration::from_secs(2))).await;
    drop(running);
    if let Some(path) = &records {
        let (answered, left) = (
            tally.answered.load(Ordering::Relaxed),
            tally.left.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            std::io::stdout().lock(),
            "\ntokentap demo stopped: {answered} requests answered, {left} of them left mid-stream by their client on purpose (outcome \"cancelled\").\nTheir records: {}\n  tokentap report {0}",
            path.display()
        );
    }
    Ok(())
}

/// A small xorshift generator: the demo needs variety, not statistics.
struct Rng(u64);

impl Rng {
    fn seeded() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng(nanos ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [lo, hi).
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }

    /// `base` scaled by a factor in [lo_pct, hi_pct] percent.
    fn scale(&mut self, base: Duration, lo_pct: u64, hi_pct: u64) -> Duration {
        base * self.range(lo_pct, hi_pct + 1) as u32 / 100
    }
}

/// Binds the embedded OpenAI-compatible server (a scripted server that keeps no log: the demo runs for
/// hours) and serves it in the background.
pub async fn spawn_model_server(addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let server = Scripted::new(answer).forgetful().bind(addr).await?;
    Ok(server.addr)
}

#[derive(Deserialize, Default)]
struct GenerationRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

fn json(status: u16, reason: &str, value: serde_json::Value) -> Vec<Step> {
    vec![json_response(status, reason, &value.to_string())]
}

/// The demo server's script for one request: the model list, a streamed or whole answer, or an error.
fn answer(request: &RecordedRequest) -> Vec<Step> {
    let chat = match (request.method(), request.path()) {
        ("GET", "/v1/models") => {
            let data: Vec<_> = MODELS
                .iter()
                .map(|(id, ..)| serde_json::json!({"id": id, "object": "model"}))
                .collect();
            return json(
                200,
                "OK",
                serde_json::json!({"object": "list", "data": data}),
            );
        }
        ("POST", "/v1/chat/completions") => true,
        ("POST", "/v1/completions") => false,
        (_, path) => {
            return json(
                404,
                "Not Found",
                serde_json::json!({"error": {"message": format!("no route {path}"), "type": "not_found"}}),
            )
        }
    };
    let Ok(req) = serde_json::from_slice::<GenerationRequest>(&request.body) else {
        return json(
            400,
            "Bad Request",
            serde_json::json!({"error": {"message": "body is not a generation request", "type": "invalid_request_error"}}),
        );
    };
    let model = req.model.clone().unwrap_or_else(|| MODELS[0].0.to_owned());
    let (_, base_ttft, base_itl) = MODELS
        .iter()
        .find(|(name, ..)| *name == model)
        .copied()
        .unwrap_or(MODELS[0]);
    let mut rng = Rng::seeded();
    let tokens = req.max_tokens.unwrap_or(rng.range(24, 96)).clamp(1, 4096);
    let prompt_tokens = (request.body.len() as u64 / 4).max(1);
    // Now and then a queueing spike, as a busy server shows.
    let ttft = if rng.range(0, 100) < 8 {
        rng.scale(base_ttft, 300, 600)
    } else {
        rng.scale(base_ttft, 50, 180)
    };
    // The pause before each token: the prefill, then gaps with the odd stall.
    let mut pauses = Vec::with_capacity(tokens as usize);
    pauses.push(ttft);
    for _ in 1..tokens {
        let gap = if rng.range(0, 1000) < 6 {
            rng.scale(base_itl, 800, 1500)
        } else {
            rng.scale(base_itl, 60, 150)
        };
        pauses.push(gap);
    }
    let id = format!("demo-{:x}", rng.next());
    let chunks = match chat {
        true => Chunks::chat(&id, &model),
        false => Chunks::completion(&id, &model),
    };
    if req.stream {
        let usage = req
            .stream_options
            .is_some_and(|o| o.include_usage)
            .then_some((prompt_tokens, tokens));
        let texts = pauses.into_iter().map(|pause| {
            (
                pause,
                WORDS[(rng.next() % WORDS.len() as u64) as usize].to_owned(),
            )
        });
        return chunks.stream(texts, usage);
    }
    let text: String = (0..tokens)
        .map(|i| WORDS[i as usize % WORDS.len()])
        .collect();
    let choice = match chat {
        true => {
            serde_json::json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"})
        }
        false => serde_json::json!({"index": 0, "text": text, "finish_reason": "length"}),
    };
    let body = serde_json::json!({"id": id, "object": if chat { "chat.completion" } else { "text_completion" },
        "model": model, "choices": [choice],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": tokens, "total_tokens": prompt_tokens + tokens}});
    let mut steps = vec![Step::Sleep(pauses.iter().sum())];
    steps.extend(json(200, "OK", body));
    steps
}

/// One demo client: sends a request, reads the answer (or now and then walks away mid-stream), pauses;
/// once `stopped`, it sends no more (the request it is reading runs to its end).
async fn client_loop(
    proxy: SocketAddr, worker: u64, mut stopped: watch::Receiver<bool>, tally: Arc<Tally>,
) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut rng = Rng::seeded();
    let pause = |stopped: &mut watch::Receiver<bool>, pause: Duration| {
        let mut stopped = stopped.clone();
        async move {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {},
                _ = stopped.wait_for(|stop| *stop) => {},
            }
        }
    };
    pause(&mut stopped, Duration::from_millis(worker * 300)).await;
    while !*stopped.borrow() {
        let (model, ..) = MODELS[rng.range(0, 10) as usize / 7];
        let stream = rng.range(0, 100) < 85;
        let chat = rng.range(0, 100) < 80;
        let max_tokens = rng.range(16, 120);
        let (path, body) = if chat {
            (
                "/v1/chat/completions",
                serde_json::json!({"model": model, "stream": stream, "max_tokens": max_tokens,
                "stream_options": {"include_usage": true},
                "messages": [{"role": "user", "content": "Tell me about latency."}]}),
            )
        } else {
            (
                "/v1/completions",
                serde_json::json!({"model": model, "stream": stream, "max_tokens": max_tokens,
                "prompt": "Latency is"}),
            )
        };
        let request = Request::post(format!("http://{proxy}{path}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())));
        if let Ok(request) = request {
            if let Ok(response) = client.request(request).await {
                tally.answered.fetch_add(1, Ordering::Relaxed);
                // Only from a stream, before its last token: a whole JSON body has been read by then.
                let walk_away_after = (stream && rng.range(0, 100) < 5).then(|| rng.range(1, 10));
                let mut body = response.into_body();
                let mut frames = 0;
                while let Some(Ok(_)) = body.frame().await {
                    frames += 1;
                    if walk_away_after.is_some_and(|n| frames >= n) {
                        tally.left.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }
        pause(&mut stopped, Duration::from_millis(rng.range(200, 1500))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_listens_on_loopback_only_and_records_to_the_file_it_names() {
        let demo = default_config();
        assert!(demo.listen.ip().is_loopback() && demo.metrics_listen.ip().is_loopback());
        assert_eq!(
            (demo.listen.port(), demo.metrics_listen.port()),
            (8080, 9464)
        );
        let path = demo.request_log.map(|log| log.path);
        assert_eq!(path, Some(RecordPath::File(records_path())));
        // The proxy's own defaults are unchanged: every interface, no records.
        let proxy = Config::default();
        assert!(proxy.listen.ip().is_unspecified() && proxy.metrics_listen.ip().is_unspecified());
        assert_eq!(proxy.request_log, None);
    }

    #[test]
    fn a_config_file_adds_to_the_demos_settings_and_keeps_its_ceilings() {
        let path =
            std::env::temp_dir().join(format!("tokentap-demo-over-{}.yaml", std::process::id()));
        std::fs::write(&path, "slo: {ttft: 2s}\nui: {enabled: false}\n").expect("write");
        let config = Config::load_over(&path, &default_config());
        let _ = std::fs::remove_file(&path);
        let config = config.expect("config");
        let ceiling = |model: &str, kind| config.slo.ceilings_for(model)[kind];
        assert_eq!(
            ceiling("demo-llama-8b", SloKind::Ttft),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            ceiling("demo-llama-8b", SloKind::Tpot),
            Some(Duration::from_millis(50))
        );
        assert_eq!(
            ceiling("demo-qwen-32b", SloKind::Ttft),
            Some(Duration::from_secs(1))
        );
        assert!(!config.ui.enabled && config.listen.ip().is_loopback());
        assert_eq!(config.request_log, default_config().request_log);
    }
}
