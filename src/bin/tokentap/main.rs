//! The `tokentap` command: parses the command line, loads the config and hands over to the library.
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod allocator;
mod demo;
mod fleet;
mod slo_objects;
mod top;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokentap::config::{self, Config};

/// A transparent measuring reverse proxy for LLM inference servers: forwards every byte unchanged and
/// exports TTFT, ITL, TPOT, E2E and SLO goodput on a Prometheus endpoint.
///
/// Without a subcommand it runs the proxy; each subcommand takes only its own options (`tokentap
/// SUBCOMMAND --help`).
#[derive(Parser, Debug)]
#[command(name = "tokentap", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    proxy: ProxyArgs,
}

/// What the proxy (and the demo's proxy) is told on the command line; flags override the config file.
#[derive(clap::Args, Debug, Default)]
struct ProxyArgs {
    /// YAML config file (see config/tokentap.yaml); flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address the proxy listens on [default: 0.0.0.0:8080].
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// The inference server to forward to, http:// or https:// [default: http://127.0.0.1:8000].
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
    /// Address of the /metrics, /healthz and /readyz endpoints and the live page [default: 0.0.0.0:9464].
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Serve the live page (/ and /api/v1/live) on the metrics port: true or false [default: true].
    #[arg(long, value_name = "BOOL")]
    ui: Option<bool>,
}

/// The demo's options: its own model server stands in for `--upstream`.
#[derive(clap::Args, Debug)]
struct DemoArgs {
    /// Stop sending after this long (e.g. "30s", "5m") and stop once the requests in flight have
    /// finished (at most 30 s more); runs until Ctrl-C when absent.
    #[arg(long, value_name = "DURATION")]
    duration: Option<String>,
    /// YAML config file, written over the demo's own settings: its keys replace the demo's, a section
    /// key by key (`slo: {ttft: 1s}` keeps the demo's other ceilings).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address the proxy listens on [default: 127.0.0.1:8080, loopback only].
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Address of the metrics port and the live page [default: 127.0.0.1:9464, loopback only].
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Serve the live page: true or false [default: true].
    #[arg(long, value_name = "BOOL")]
    ui: Option<bool>,
}

/// The capture's options; flags override the config file's `capture:`.
#[derive(clap::Args, Debug)]
struct CaptureArgs {
    /// YAML config file (its `capture:` section, and everything the meter reads); flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The interface to read packets from [default: lo].
    #[arg(long, value_name = "NAME")]
    interface: Option<String>,
    /// The model server's TCP port, once per port [default: the port of the config's upstream, 8000].
    #[arg(long = "port", value_name = "PORT")]
    ports: Vec<u16>,
    /// Address of the /metrics, /healthz and /readyz endpoints and the live page [default: 0.0.0.0:9464].
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Read this capture file (pcap, as tcpdump -w writes it) instead of an interface, write what it
    /// meters to the config's request_log and traces, print a summary and exit.
    #[arg(long, value_name = "FILE")]
    read: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Meter the model server's traffic from its packets instead of in its path: reads an interface
    /// (AF_PACKET, needs CAP_NET_RAW) for the server's port and exports the same metrics, records and
    /// spans as the proxy, marked captured (docs/deploy.md, "Capture mode").
    Capture(CaptureArgs),
    /// Start an embedded OpenAI-compatible model server, tokentap in front of it, and a trickle of traffic.
    Demo(DemoArgs),
    /// The live page's figures as a terminal table, redrawn every snapshot (reads /api/v1/live);
    /// with --prometheus, the whole fleet's from Prometheus' recording rules.
    Top {
        /// tokentap's metrics port.
        #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:9464")]
        url: String,
        /// Read every replica at once through this Prometheus (its HTTP API and tokentap's recording
        /// rules, deploy/prometheus/rules) instead of one tokentap's metrics port; the windows are
        /// the rules' (5m, 1m for rates).
        #[arg(long, value_name = "URL", conflicts_with_all = ["url", "window"])]
        prometheus: Option<String>,
        /// The trailing window of the figures (e.g. "5m"); tokentap's ui.window when absent.
        #[arg(long, value_name = "DURATION")]
        window: Option<String>,
        /// Print one table and exit.
        #[arg(long)]
        once: bool,
        /// How long one whole answer (head and body) may take.
        #[arg(long, value_name = "DURATION", default_value = "10s")]
        timeout: String,
    },
    /// Summarise request records (`request_log:`) like aiperf summarises a benchmark: counts,
    /// throughputs, TTFT, ITL, TPOT, E2E, goodput and outcomes (docs/report.md).
    Report(ReportArgs),
    /// Validate a config file and exit non-zero if it is invalid.
    CheckConfig {
        /// The YAML file to check.
        file: PathBuf,
    },
    /// Print the config's SLO ceilings as Pyrra ServiceLevelObjectives (or a Sloth
    /// PrometheusServiceLevel) on tokentap's own counters, for `kubectl apply` (docs/deploy.md).
    SloObjects {
        /// The YAML config whose `slo:` ceilings (default and per model) become objects.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// pyrra (one ServiceLevelObjective per ceiling) or sloth (one PrometheusServiceLevel).
        #[arg(long, value_name = "FORMAT", default_value = "pyrra")]
        format: String,
        /// The objective: the percentage of judged requests within their ceiling.
        #[arg(long, value_name = "PERCENT", default_value = "99")]
        target: String,
        /// Pyrra's window (Sloth's comes from its own configuration).
        #[arg(long, value_name = "DURATION", default_value = "30d")]
        window: String,
    },
    /// Print the tenant tag (`t-` and 12 hex digits) that the config's `tenants.bearer_hash` and
    /// `tenants.hash_key` give the bearer token read from stdin, for `tenants.allow`.
    TenantTag {
        /// The YAML config file with `tenants: {bearer_hash: true, hash_key: …}`.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
struct ReportArgs {
    /// Judge with this config's `slo:` ceilings, per-model overrides included (`--slo` wins).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Record files, plain or gzipped; - for stdin. With --compare, the "before" set.
    #[arg(value_name = "FILE", required = true)]
    files: Vec<String>,
    /// Compare with these record files (the "after" set): `tokentap report A... --compare B...`.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    compare: Vec<String>,
    /// One section per model, tenant, api or turn (at most 1,000; the rest under "other").
    #[arg(long, value_name = "model|tenant|api|turn")]
    by: Option<String>,
    /// Only requests that started at or after this time: RFC 3339 or a duration back from now ("1h").
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// Only requests that started before this time: RFC 3339 or a duration back from now.
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
    /// table (default), markdown or json.
    #[arg(long, value_name = "FORMAT", default_value = "table")]
    format: String,
    /// What-if SLO ceilings, e.g. ttft=300ms,tpot=40ms: goodput and attainment judged again with them
    /// (with --config and no --slo: the config's `slo:`, per-model overrides included).
    #[arg(long, value_name = "CEILINGS")]
    slo: Option<String>,
    /// Fail on a malformed line or a record of another version instead of skipping it.
    #[arg(long)]
    strict: bool,
    /// Progress on stderr every million lines, even when stderr is not a terminal.
    #[arg(long)]
    progress: bool,
    /// List the N slowest requests (start, id, model, tenant, prompt length, figures).
    #[arg(long, value_name = "N", default_value_t = 0)]
    slowest: usize,
    /// The figure --slowest ranks by: ttft (default), time_to_first_answer,
    /// time_to_first_tool_call, max_gap, tpot or e2e.
    #[arg(long, value_name = "FIGURE", default_value = "ttft")]
    slowest_by: String,
}

/// The capture's config: the file (or the defaults) with the command line's overrides, validated.
fn capture_config(args: &CaptureArgs) -> Result<Config, String> {
    let mut config = match &args.config {
        Some(path) => Config::load(path).map_err(|e| e.to_string())?,
        None => Config::default(),
    };
    if let Some(interface) = &args.interface {
        config.capture.interface = interface.clone();
    }
    if !args.ports.is_empty() {
        config.capture.ports = args.ports.clone();
    }
    if let Some(metrics_listen) = args.metrics_listen {
        config.metrics_listen = metrics_listen;
    }
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}

/// The report's options; `--config` gives its `slo:` as the ceilings to judge by (`--slo` wins).
fn report_options(args: &ReportArgs) -> Result<tokentap::report::Options, String> {
    use tokentap::report::{query, Format, Options};
    let slo = match (&args.slo, &args.config) {
        (Some(text), _) => Some(query::parse_slo(text)?),
        (None, Some(path)) => Some(Config::load(path).map_err(|e| e.to_string())?.slo),
        (None, None) => None,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs_f64();
    let time = |flag: &str, text: &Option<String>| {
        text.as_deref()
            .map(|t| query::parse_time(flag, t, now))
            .transpose()
    };
    Ok(Options {
        files: args.files.clone(),
        compare: args.compare.clone(),
        by: args.by.as_deref().map(query::By::parse).transpose()?,
        window: query::Window {
            since: time("--since", &args.since)?,
            until: time("--until", &args.until)?,
        },
        format: Format::parse(&args.format)?,
        slo,
        strict: args.strict,
        progress: args.progress,
        slowest: args.slowest,
        slowest_by: tokentap::report::slowest::SlowBy::parse(&args.slowest_by)?,
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let log = tokentap::logging::init();
    let result = execute(cli);
    // Writes out what the log still holds before the process exits.
    drop(log);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            // Not `eprintln!`: it panics when stderr is gone, and the exit status says it anyway.
            let _ = writeln!(std::io::stderr(), "tokentap: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The config file with the command line's overrides, validated; without a file, the defaults (the
/// demo's own settings for the demo, which a file is written over: `Config::load_over`).
fn load(proxy: &ProxyArgs, demo: bool) -> Result<Config, String> {
    let mut config = match (&proxy.config, demo) {
        (Some(path), false) => Config::load(path),
        (Some(path), true) => Config::load_over(path, &demo::default_config()),
        (None, false) => Ok(Config::default()),
        (None, true) => Ok(demo::default_config()),
    }
    .map_err(|e| e.to_string())?;
    if let Some(listen) = proxy.listen {
        config.listen = listen;
    }
    if let Some(upstream) = &proxy.upstream {
        config.upstream =
            config::parse_upstream(upstream).map_err(|e| format!("--upstream: {e}"))?;
    }
    if let Some(metrics_listen) = proxy.metrics_listen {
        config.metrics_listen = metrics_listen;
    }
    if let Some(ui) = proxy.ui {
        config.ui.enabled = ui;
    }
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}

/// Runs `future` to its end on a new runtime, then lets the runtime go without waiting for blocking
/// work no one waits for any more (a tokenizer still loading, a list reader of a request gone): once
/// the shutdown is done, the process exits.
fn block_on<F: std::future::Future>(future: F) -> Result<F::Output, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    let out = runtime.block_on(future);
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    Ok(out)
}

fn execute(cli: Cli) -> Result<(), String> {
    match &cli.command {
        Some(Command::CheckConfig { file }) => check_config(file),
        Some(Command::SloObjects {
            config: path,
            format,
            target,
            window,
        }) => {
            let config = Config::load(path).map_err(|e| e.to_string())?;
            let format = slo_objects::Format::parse(format)?;
            let objective = slo_objects::Objective::parse(target, window)?;
            let source = path.display().to_string();
            print!(
                "{}",
                slo_objects::render(&config, format, &objective, &source)
            );
            Ok(())
        }
        Some(Command::TenantTag { config: path }) => tenant_tag(path),
        Some(Command::Top {
            url,
            prometheus,
            window,
            once,
            timeout,
        }) => {
            let timeout = config::parse_duration(timeout).map_err(|e| format!("--timeout: {e}"))?;
            block_on(async {
                match prometheus {
                    Some(prometheus) => fleet::run(prometheus, *once)
                        .await
                        .map_err(|e| e.to_string()),
                    None => top::run(url, window.as_deref(), *once, timeout)
                        .await
                        .map_err(|e| e.to_string()),
                }
            })?
        }
        Some(Command::Capture(args)) => capture(args),
        Some(Command::Report(args)) => {
            let options = report_options(args)?;
            let (mut out, mut warn) = (std::io::stdout().lock(), std::io::stderr());
            tokentap::report::run(&options, &mut out, &mut warn)
        }
        Some(Command::Demo(demo)) => demo_run(demo),
        None => serve(cli.proxy),
    }
}

/// `tokentap check-config FILE`: the file read and the plan start makes prepared (`app/plan.rs`),
/// stopped short of binding; what it found said.
fn check_config(file: &Path) -> Result<(), String> {
    let config = Config::load(file).map_err(|e| e.report())?;
    // The plan start makes, stopped short of binding: refused in start's words, on its line.
    let prepared = tokentap::app::plan::prepare(&config).map_err(|e| {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        match e.key().and_then(|key| config::line_of(&text, key)) {
            Some(line) => format!("{}:{line}: {e}", file.display()),
            None => format!("{}: {e}", file.display()),
        }
    })?;
    let (tokenizers, certificates) = (&prepared.tokenizers, &prepared.certificates);
    let bound = prepared.metrics.bound();
    println!(
        "{}: ok (upstream {}, listen {}, metrics {}, {} per-model SLO override(s), {} tokenizer(s))",
        file.display(),
        config.upstream,
        config.listen,
        config.metrics_listen,
        config.slo.models.len(),
        config.tokenizers.len()
    );
    if let (Some(files), Some(certificates)) = (&config.listen_tls, &certificates) {
        println!(
            "listen_tls: {} ({} certificate(s) in the chain) with the key in {}",
            files.cert_file.display(),
            certificates.chain_len(),
            files.key_file.display()
        );
    }
    println!("series bound: {}", bound.describe());
    for line in tokenizers.report() {
        println!("{line}");
    }
    Ok(())
}

/// `tokentap tenant-tag --config FILE`: the tag `tenants.bearer_hash` gives the token on stdin.
fn tenant_tag(path: &Path) -> Result<(), String> {
    let config = Config::load(path).map_err(|e| e.to_string())?;
    let key = match &config.tenants {
        Some(t) if t.bearer_hash => t.hash_key.clone(),
        _ => {
            return Err(format!(
                "tenant-tag: {} has no `tenants: {{bearer_hash: true}}`",
                path.display()
            ))
        }
    };
    let key = key.ok_or_else(|| {
        format!("tenant-tag: {} sets no tenants.hash_key: without one each process draws its own key, and a tag cannot be known beforehand", path.display())
    })?;
    let mut token = String::new();
    std::io::stdin()
        .read_line(&mut token)
        .map_err(|e| format!("tenant-tag: reading the token from stdin: {e}"))?;
    let tag = tokentap::tap::identity::bearer_tag(&key, token.trim())
        .ok_or("tenant-tag: no token on stdin")?;
    println!("{tag}");
    Ok(())
}

/// `tokentap capture`: a capture file read once, or the interface metered until stopped.
fn capture(args: &CaptureArgs) -> Result<(), String> {
    let config = capture_config(args)?;
    if let Some(file) = &args.read {
        let read = block_on(tokentap::app::read_capture_file(&config, file))?
            .map_err(|e| e.to_string())?;
        let unmetered: Vec<String> = read
            .unmetered
            .iter()
            .map(|(why, n)| format!("{why}={n}"))
            .collect();
        println!(
            "{}: {} packets read; not metered: {}",
            file.display(),
            read.packets,
            match unmetered.is_empty() {
                true => "none".to_owned(),
                false => unmetered.join(", "),
            }
        );
        return Ok(());
    }
    allocator::return_freed_memory();
    let source: tokentap::Source = {
        let (config, interface, ports, metrics_listen) = (
            args.config.clone(),
            args.interface.clone(),
            args.ports.clone(),
            args.metrics_listen,
        );
        std::sync::Arc::new(move || {
            capture_config(&CaptureArgs {
                config: config.clone(),
                interface: interface.clone(),
                ports: ports.clone(),
                metrics_listen,
                read: None,
            })
        })
    };
    block_on(tokentap::app::run_capture(&config, source))?.map_err(|e| e.to_string())
}

/// `tokentap demo`: the scripted model server with tokentap in front of it.
fn demo_run(demo: &DemoArgs) -> Result<(), String> {
    let duration = demo
        .duration
        .as_deref()
        .map(|d| config::parse_duration(d).map_err(|e| format!("--duration: {e}")))
        .transpose()?;
    let proxy = ProxyArgs {
        config: demo.config.clone(),
        listen: demo.listen,
        upstream: None,
        metrics_listen: demo.metrics_listen,
        ui: demo.ui,
    };
    let config = load(&proxy, true)?;
    allocator::return_freed_memory();
    block_on(demo::run(config, duration))?.map_err(|e| e.to_string())
}

/// `tokentap`: the proxy, reloading its file (with the same flags over it) on SIGHUP.
fn serve(proxy: ProxyArgs) -> Result<(), String> {
    let config = load(&proxy, false)?;
    allocator::return_freed_memory();
    // A reload reads the file again with the same flags over it, as at start.
    let ProxyArgs {
        config: file,
        listen,
        upstream,
        metrics_listen,
        ui,
    } = proxy;
    let source: tokentap::Source = std::sync::Arc::new(move || {
        let flags = ProxyArgs {
            config: file.clone(),
            listen,
            upstream: upstream.clone(),
            metrics_listen,
            ui,
        };
        load(&flags, false)
    });
    block_on(tokentap::run(&config, source))?.map_err(|e| e.to_string())
}
