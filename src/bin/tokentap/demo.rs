//! `tokentap demo`: a first look without a model server. It starts an embedded OpenAI-compatible server
//! (`tokentap::scripted`, each answer a script drawn at random) that streams tokens the way vLLM does (a role-only chunk at once, then tokens after a varying prefill
//! delay, varying inter-token gaps with the odd stall, a usage chunk and `[DONE]`), tokentap in front of it
//! on the usual ports, and a few clients that send a trickle of chat and completion requests through it.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{header, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

use tokentap::config::{Ceilings, Config, SloKind};
use tokentap::scripted::{json_response, Chunks, RecordedRequest, Scripted, Step};

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

/// The demo's config: defaults plus SLO ceilings that some demo requests miss, so goodput is interesting.
pub fn default_config() -> Config {
    let mut config = Config::default();
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
    let running = tokentap::start(&config).await?;
    let proxy = running.proxy_addr();
    let metrics = running.metrics_addr();
    let shown = |addr: SocketAddr| {
        if addr.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        } else {
            addr
        }
    };
    // A closed stdout (`tokentap demo | head`) must not stop the demo: print what can be printed.
    let _ = writeln!(
        std::io::stdout().lock(),
        "{live}tokentap demo\n  embedded model server  http://{upstream}\n  proxy                  http://{proxy}   (clients point here)\n  metrics                http://{m}/metrics\n\nTry:\n  curl -s http://{m}/metrics | grep -E 'tokentap_(requests_total|goodput|time_to_first_token_seconds_count)'\n  curl -N http://{p}/v1/chat/completions -H 'content-type: application/json' \\\n    -d '{{\"model\":\"demo-llama-8b\",\"stream\":true,\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'\n\nA few demo clients are sending requests; one log line per finished request follows. Ctrl-C stops.\n",
        m = shown(metrics),
        p = shown(proxy),
        live = match config.ui.enabled {
            true => format!("live page: http://{}/   (open it in a browser)\n\n", shown(metrics)),
            false => String::new(),
        },
    );
    for worker in 0..3 {
        tokio::spawn(client_loop(shown(proxy), worker));
    }
    // Stops on Ctrl-C or SIGTERM (as `docker stop` sends), or after `duration`.
    let signal = tokentap::net::signals::shutdown_signal();
    tokentap::net::signals::ignore_hangups();
    match duration {
        Some(duration) => tokio::select! {
            _ = tokio::time::sleep(duration) => {},
            _ = signal => {},
        },
        None => signal.await,
    }
    drop(running);
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

/// One demo client: sends a request, reads the answer (or now and then walks away mid-stream), pauses.
async fn client_loop(proxy: SocketAddr, worker: u64) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut rng = Rng::seeded();
    tokio::time::sleep(Duration::from_millis(worker * 300)).await;
    loop {
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
                let walk_away_after = (rng.range(0, 100) < 5).then(|| rng.range(1, 10));
                let mut body = response.into_body();
                let mut frames = 0;
                while let Some(Ok(_)) = body.frame().await {
                    frames += 1;
                    if walk_away_after.is_some_and(|n| frames >= n) {
                        break;
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.range(200, 1500))).await;
    }
}
