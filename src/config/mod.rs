//! tokentap's configuration (every key is in docs/configuration.md, which a test holds to the types):
//! the types the rest of the proxy reads, their defaults, loading a file, and the semantic checks in
//! [`Config::validate`].
//!
//! Each key is declared once, as a field of its type: the types derive `Deserialize` themselves
//! (`deny_unknown_fields`, defaults from their [`Default`]), with the value syntaxes (durations, sizes,
//! the upstream URL, socket addresses) as serde helpers in `values`, which also parses and formats
//! them and is re-exported here. `section` reads a section so that a key written without a value takes
//! its default; `yaml` is the only module that touches serde_yaml, and names the key of an error as a
//! dotted path (`slo.models.llama-3.1-70b.ttft`). Sections with checks of their own have their own
//! file: `limits` (`timeouts:`, `limits:`), `admission` (`model_list:`), `records` (`request_log:`,
//! `tenants:`), `slo` (the SLO kinds and `slo:`), `ui`, `conversations`, `traces`, `otlp_metrics`, `tls` (`listen_tls:`), `capture`. `config/tokentap.yaml` is the annotated example.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod admission;
mod budgets;
mod capture;
mod conversations;
mod limits;
mod lines;
mod otlp_metrics;
mod problems;
mod records;
mod section;
mod slo;
mod tls;
mod traces;
mod ui;
mod values;
mod words;
mod yaml;

#[cfg(test)]
mod tests;

pub use admission::ModelList;
pub use budgets::{BudgetLimits, Budgets};
pub use capture::Capture;
pub use conversations::Conversations;
pub use limits::{Limits, Timeouts};
pub use otlp_metrics::{OtlpMetrics, Temporality};
pub use problems::{line_of, Problem, MAX_PROBLEMS};
pub use records::{RecordPath, RequestLog, TenantFrom, Tenants};
pub use slo::{ByKind, Ceilings, Slo, SloKind};
pub use tls::ListenTls;
pub use traces::{Compression, Headers, Sample, Traces};
pub use ui::{prometheus_base, Ui};
pub use values::{format_duration, parse_duration, parse_size, parse_upstream};

use section::{named, optional_section, section};
use values::POSITIVE;

/// Whether this binary was built with the `tokenizer` cargo feature: without it, `tokenizers` and
/// `tokenizer_dirs` are refused.
pub const TOKENIZER_FEATURE: bool = cfg!(feature = "tokenizer");

/// Why a tokenizer key is refused by a binary built without the `tokenizer` feature.
pub const WITHOUT_TOKENIZER_FEATURE: &str = "this tokentap was built without the `tokenizer` \
     feature; rebuild it with its default features (`cargo build --release`)";

/// The whole configuration. [`Default`] gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    #[serde(with = "values::address")]
    pub listen: SocketAddr,
    /// TLS on `listen` (`listen_tls:`); `None`: plain TCP.
    #[serde(deserialize_with = "optional_section")]
    pub listen_tls: Option<ListenTls>,
    /// Normalised by [`parse_upstream`]: path "/" or a prefix without trailing '/'.
    #[serde(with = "values::upstream")]
    pub upstream: http::Uri,
    #[serde(with = "values::address")]
    pub metrics_listen: SocketAddr,
    /// PEM bundle that replaces the system roots for an https upstream.
    pub upstream_ca_file: Option<PathBuf>,
    /// Distinct `model` label values before the rest count as `other`.
    pub max_models: usize,
    /// Which names may take one of those places (`model_list:`).
    #[serde(deserialize_with = "section")]
    pub model_list: ModelList,
    #[serde(deserialize_with = "section")]
    pub timeouts: Timeouts,
    #[serde(deserialize_with = "section")]
    pub limits: Limits,
    /// What clients may make tokentap hold and inflate on their behalf (`budgets:`).
    #[serde(deserialize_with = "section")]
    pub budgets: Budgets,
    /// After SIGTERM/SIGINT, how long in-flight requests may run on before they are cut.
    #[serde(with = "values::duration")]
    pub shutdown_grace: Duration,
    /// The log's filter (`info`, `warn`, `info,tokentap=debug`: `RUST_LOG`'s syntax); `None`:
    /// `RUST_LOG`, else `info`. A reload applies it.
    pub log_level: Option<String>,
    #[serde(deserialize_with = "section")]
    pub metering: Metering,
    #[serde(deserialize_with = "section")]
    pub metrics: MetricsOptions,
    #[serde(deserialize_with = "section")]
    pub buckets: Buckets,
    #[serde(deserialize_with = "section")]
    pub slo: Slo,
    /// A local HuggingFace `tokenizer.json` per model name, to count output tokens when the server
    /// reports no usage (needs the `tokenizer` cargo feature).
    #[serde(deserialize_with = "named")]
    pub tokenizers: BTreeMap<String, PathBuf>,
    /// Search roots where a served model's tokenizer.json is discovered by its name; `None`: the
    /// HuggingFace hub cache of the environment; empty: discovery off.
    pub tokenizer_dirs: Option<Vec<PathBuf>>,
    /// One JSON record per finished request (`request_log:`); `None`: off.
    #[serde(deserialize_with = "optional_section")]
    pub request_log: Option<RequestLog>,
    /// The `tenant` label (`tenants:`); `None`: no such label.
    #[serde(deserialize_with = "optional_section")]
    pub tenants: Option<Tenants>,
    #[serde(deserialize_with = "section")]
    pub ui: Ui,
    /// Recognising conversations from the wire (`conversations:`).
    #[serde(deserialize_with = "section")]
    pub conversations: Conversations,
    /// One span per finished request, exported with OTLP/HTTP (`traces:`); `None`: off.
    #[serde(deserialize_with = "optional_section")]
    pub traces: Option<Traces>,
    /// The GenAI server metrics and tokentap's own pushed with OTLP/HTTP (`otlp_metrics:`); `None`: off.
    #[serde(deserialize_with = "optional_section")]
    pub otlp_metrics: Option<OtlpMetrics>,
    /// `tokentap capture`: the interface and ports it reads, and its bounds (`capture:`).
    #[serde(deserialize_with = "section")]
    pub capture: Capture,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Metering {
    /// Bound on one SSE line/event; a longer one stops metering (never forwarding) of that stream.
    #[serde(with = "values::size")]
    pub max_event_bytes: usize,
    /// How far into a request body to look for `"model"`.
    #[serde(with = "values::size")]
    pub model_scan_bytes: usize,
}

/// How the exported series are kept bounded over time.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsOptions {
    /// A `model` label value with no request for this long is removed from every family and frees its
    /// place under `max_models`; `None`: never.
    #[serde(with = "values::idle")]
    pub model_idle: Option<Duration>,
    /// The most series the configuration may allow (its computed series limit); above it tokentap
    /// refuses to start.
    pub max_series: u64,
    /// The `Host` names the metrics port answers (lowercase, without a port); empty: any. `/healthz` and
    /// `/readyz` answer every host.
    #[serde(deserialize_with = "values::lowercase")]
    pub allowed_hosts: Vec<String>,
    /// `POST /-/reload` on the metrics port reloads the config, as SIGHUP does (off: that port
    /// answers anyone who reaches it).
    pub enable_reload: bool,
}

/// Histogram boundaries in seconds (`output_tokens_per_second`: tokens/s).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Buckets {
    pub ttft: Vec<f64>,
    /// Inter-token latency and max inter-token gap.
    pub itl: Vec<f64>,
    pub tpot: Vec<f64>,
    /// E2E latency and token generation time.
    pub e2e: Vec<f64>,
    pub output_tokens_per_second: Vec<f64>,
}

/// Each error's Display is complete on its own (it already includes any I/O cause).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// YAML syntax, a wrong type: the parser's message in plain words, naming the key.
    #[error("{0}")]
    Syntax(String),
    /// A bad value: `{key}: invalid {what} "{value}": {reason}`.
    #[error("{key}: invalid {what} {value:?}: {reason}")]
    Invalid {
        key: String,
        what: &'static str,
        value: String,
        reason: String,
    },
    /// A key its section does not have (`section` empty: the top level), the keys it has, and what
    /// may have been meant (a near name, the section it belongs to).
    #[error("{key}: not a key {}{hint}; the keys there are: {}", where_(section), known.join(", "))]
    UnknownKey {
        key: String,
        section: String,
        known: Vec<String>,
        hint: String,
    },
    /// Every problem found in a document, each with its line.
    #[error("{}", describe_problems(.0))]
    Problems(Vec<Problem>),
    /// Any of the above, found in a file.
    #[error("{}", in_file(path, error))]
    InFile {
        path: PathBuf,
        error: Box<ConfigError>,
    },
}

impl ConfigError {
    /// The problems this error holds, each with its line.
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Problems(problems) => problems,
            ConfigError::InFile { error, .. } => error.problems(),
            _ => &[],
        }
    }

    /// The error for a terminal (`check-config`): several problems one a line, under a line that
    /// counts them; else as [`Display`](std::fmt::Display) says it.
    pub fn report(&self) -> String {
        match self {
            ConfigError::InFile { path, error } if error.problems().len() > 1 => {
                problems::report(path, error.problems())
            }
            error => error.to_string(),
        }
    }
}

fn where_(section: &str) -> String {
    match section {
        "" => "at the top level".to_owned(),
        section => format!("of `{section}:`"),
    }
}

fn describe_problems(problems: &[Problem]) -> String {
    match problems {
        [problem] => problem.to_string(),
        problems => {
            let each: Vec<String> = problems.iter().map(Problem::to_string).collect();
            format!("{} problems: {}", problems.len(), each.join("; "))
        }
    }
}

fn in_file(path: &Path, error: &ConfigError) -> String {
    match error {
        ConfigError::Problems(problems) => problems::describe(path, problems),
        error => format!("{}: {error}", path.display()),
    }
}

fn invalid(key: &str, what: &'static str, value: &str, reason: impl Into<String>) -> ConfigError {
    let (key, value, reason) = (key.to_owned(), value.to_owned(), reason.into());
    ConfigError::Invalid {
        key,
        what,
        value,
        reason,
    }
}

impl Default for Buckets {
    fn default() -> Self {
        let itl = vec![
            0.001, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.025, 0.03, 0.04,
            0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
        ];
        let ttft = vec![
            0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0,
            3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0,
        ];
        let e2e = vec![
            0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
            90.0, 120.0, 180.0, 300.0, 600.0,
        ];
        let output_tokens_per_second = vec![
            1.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 75.0, 100.0, 125.0, 150.0,
            200.0, 300.0, 500.0, 1000.0, 2000.0,
        ];
        Buckets {
            ttft,
            tpot: itl.clone(),
            itl,
            e2e,
            output_tokens_per_second,
        }
    }
}

impl Buckets {
    fn named(&self) -> [(&'static str, &[f64]); 5] {
        let (t, i, p, e) = (&self.ttft, &self.itl, &self.tpot, &self.e2e);
        let o = &self.output_tokens_per_second;
        [
            ("ttft", t),
            ("itl", i),
            ("tpot", p),
            ("e2e", e),
            ("output_tokens_per_second", o),
        ]
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            listen_tls: None,
            upstream: http::Uri::from_static("http://127.0.0.1:8000/"),
            metrics_listen: SocketAddr::from(([0, 0, 0, 0], 9464)),
            upstream_ca_file: None,
            max_models: 1000,
            model_list: ModelList::default(),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            budgets: Budgets::default(),
            shutdown_grace: Duration::from_secs(30),
            log_level: None,
            metering: Metering::default(),
            metrics: MetricsOptions::default(),
            buckets: Buckets::default(),
            slo: Slo::default(),
            tokenizers: BTreeMap::new(),
            tokenizer_dirs: None,
            request_log: None,
            tenants: None,
            ui: Ui::default(),
            conversations: Conversations::default(),
            traces: None,
            otlp_metrics: None,
            capture: Capture::default(),
        }
    }
}

impl Default for Metering {
    fn default() -> Self {
        Metering {
            max_event_bytes: 256 << 10,
            model_scan_bytes: 8 << 20,
        }
    }
}

impl Default for MetricsOptions {
    fn default() -> Self {
        MetricsOptions {
            model_idle: Some(Duration::from_secs(3600)),
            max_series: MetricsOptions::DEFAULT_MAX_SERIES,
            allowed_hosts: Vec::new(),
            enable_reload: false,
        }
    }
}

impl MetricsOptions {
    /// The default series budget: what one Prometheus server can take from one target without a second
    /// thought; the names the upstream serves share what the families counted up front leave of it, a
    /// (model, API) pair at a time (docs/metrics.md, "The series bound").
    pub const DEFAULT_MAX_SERIES: u64 = 750_000;
}

impl Config {
    /// Parses and validates a YAML document; an empty (or comment-only) document gives the defaults.
    /// The error holds every problem found ([`ConfigError::Problems`]), each with its line.
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigError> {
        problems::check(text).map_err(ConfigError::Problems)
    }

    /// Reads, parses and validates a file; every error names the file, and each problem its line.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let in_file = |error| ConfigError::InFile {
            path: path.to_owned(),
            error: Box::new(error),
        };
        match std::fs::read_to_string(path) {
            Ok(text) => Config::from_yaml_str(&text).map_err(in_file),
            Err(error) => Err(ConfigError::Read {
                path: path.to_owned(),
                error,
            }),
        }
    }

    /// Reads `path` written over `base` (the demo's own settings under a user's file): each key the file
    /// writes replaces `base`'s, a section key by key, and what it leaves out keeps `base`'s value. The
    /// file's own problems come first, each with its line, as [`Config::load`] gives them.
    pub fn load_over(path: &Path, base: &Config) -> Result<Config, ConfigError> {
        Config::load(path)?;
        let in_file = |error| ConfigError::InFile {
            path: path.to_owned(),
            error: Box::new(error),
        };
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        let document = yaml::Document::parse(&text).map_err(|found| in_file(found.error))?;
        let config = document
            .over(base)
            .read()
            .map_err(|found| in_file(found.error))?;
        config.validate().map_err(in_file)?;
        Ok(config)
    }

    /// Every semantic check; run it again after command-line overrides.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // Values set in code (flags, tests) pass the file's syntax too: a zero timeout, say.
        yaml::reread(self)?;
        if self.listen == self.metrics_listen && self.listen.port() != 0 {
            let (value, reason) = (self.metrics_listen.to_string(), "must differ from listen");
            return Err(invalid("metrics_listen", "address", &value, reason));
        }
        if let Some(tls) = &self.listen_tls {
            tls.validate()?;
        }
        parse_upstream(&self.upstream.to_string())?;
        if let Some(path) = &self.upstream_ca_file {
            check_readable_file("upstream_ca_file", path)?;
        }
        if let Some(level) = &self.log_level {
            if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(level) {
                let reason = format!("{e} (RUST_LOG's syntax: info, warn, info,tokentap=debug)");
                return Err(invalid("log_level", "filter", level, reason));
            }
        }
        if self.max_models == 0 {
            return Err(invalid("max_models", "value", "0", "must be at least 1"));
        }
        self.model_list.validate()?;
        self.limits.validate()?;
        self.budgets.validate(self.limits.held_body_bytes())?;
        self.ui.validate()?;
        self.conversations.validate()?;
        self.capture.validate()?;
        let m = &self.metering;
        if !(1 << 10..=64 << 20).contains(&m.max_event_bytes) {
            let (key, value) = ("metering.max_event_bytes", m.max_event_bytes.to_string());
            let reason = "must be between 1KiB and 64MiB (1024 to 67108864 bytes)";
            return Err(invalid(key, "size", &value, reason));
        }
        if m.model_scan_bytes < 1 << 10 {
            let (key, value) = ("metering.model_scan_bytes", m.model_scan_bytes.to_string());
            let reason = "must be at least 1KiB (1024 bytes)";
            return Err(invalid(key, "size", &value, reason));
        }
        for (name, list) in self.buckets.named() {
            check_buckets(&format!("buckets.{name}"), list)?;
        }
        let models = self
            .slo
            .models
            .iter()
            .map(|(n, c)| (format!("slo.models.{n}"), c))
            .chain(
                self.slo
                    .tenants
                    .iter()
                    .map(|(n, c)| (format!("tenants.slo.{n}"), c)),
            );
        for (prefix, ceilings) in std::iter::once(("slo".into(), &self.slo.default)).chain(models) {
            for (kind, ceiling) in ceilings.iter() {
                if let Some(d) = *ceiling {
                    positive(&format!("{prefix}.{kind}"), d)?;
                }
            }
        }
        if self.metrics.max_series == 0 {
            return Err(invalid(
                "metrics.max_series",
                "value",
                "0",
                "must be at least 1",
            ));
        }
        for (i, host) in self.metrics.allowed_hosts.iter().enumerate() {
            check_host(&format!("metrics.allowed_hosts[{i}]"), host)?;
        }
        if let Some(log) = &self.request_log {
            log.validate()?;
        }
        if let Some(traces) = &self.traces {
            traces.validate()?;
        }
        if let Some(metrics) = &self.otlp_metrics {
            metrics.validate()?;
        }
        if let Some(tenants) = &self.tenants {
            tenants.validate()?;
        } else if !self.slo.tenants.is_empty() {
            let reason =
                "per-tenant ceilings need a tenant: set tenants.header or tenants.bearer_hash";
            return Err(invalid("tenants.slo", "value", "…", reason));
        }
        for (model, path) in &self.tokenizers {
            let key = format!("tokenizers.{model}");
            if model.is_empty() {
                return Err(invalid("tokenizers", "model name", "", "must not be empty"));
            }
            if !TOKENIZER_FEATURE {
                let value = path.display().to_string();
                let reason = WITHOUT_TOKENIZER_FEATURE;
                return Err(invalid(&key, "tokenizer file", &value, reason));
            }
            check_readable_file(&key, path)?;
        }
        for (i, dir) in self.tokenizer_dirs.iter().flatten().enumerate() {
            let (key, value) = (format!("tokenizer_dirs[{i}]"), dir.display().to_string());
            let bad = |reason: &str| invalid(&key, "directory", &value, reason);
            if !TOKENIZER_FEATURE {
                return Err(bad(WITHOUT_TOKENIZER_FEATURE));
            }
            if !dir.is_absolute() {
                return Err(bad("must be an absolute path"));
            }
            if value.split('/').any(|s| s == "." || s == "..") {
                return Err(bad("must not contain . or .. segments"));
            }
        }
        Ok(())
    }
}

/// A `Host` name as `metrics.allowed_hosts` lists it: a DNS name or an IP address, without a port.
fn check_host(key: &str, host: &str) -> Result<(), ConfigError> {
    let ip = host.trim_start_matches('[').trim_end_matches(']');
    if ip.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    let name = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_';
    if host.is_empty() || host.len() > 253 || !host.chars().all(name) {
        let reason = "must be a host name or an IP address, without a port (e.g. localhost, 10.0.0.5, tokentap.example.com)";
        return Err(invalid(key, "host", host, reason));
    }
    Ok(())
}

pub(super) fn positive(key: &str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() {
        return Err(invalid(key, "duration", &format_duration(d), POSITIVE));
    }
    Ok(())
}

fn check_readable_file(key: &str, path: &Path) -> Result<(), ConfigError> {
    let bad = |reason: String| invalid(key, "path", &path.display().to_string(), reason);
    match std::fs::metadata(path).and_then(|m| std::fs::File::open(path).map(|_| m)) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(bad("not a regular file".into())),
        Err(e) => Err(bad(format!("cannot read it: {e}"))),
    }
}

fn check_buckets(key: &str, list: &[f64]) -> Result<(), ConfigError> {
    if list.is_empty() {
        return Err(invalid(key, "bucket list", "[]", "must not be empty"));
    }
    for (i, &b) in list.iter().enumerate() {
        let (key, value) = (format!("{key}[{i}]"), b.to_string());
        let bad = |reason: String| invalid(&key, "bucket boundary", &value, reason);
        if !b.is_finite() || b <= 0.0 {
            return Err(bad("must be a finite number greater than zero".into()));
        }
        if let Some(&p) = list[..i].last().filter(|&&p| b <= p) {
            let reason =
                format!("boundaries must be strictly increasing, but the one before is {p}");
            return Err(bad(reason));
        }
    }
    Ok(())
}
