//! tokentap's configuration (every key is listed in config/tokentap.yaml and docs/configuration.md): the types the
//! rest of the proxy reads, their documented defaults, loading a file, and the semantic checks in
//! [`Config::validate`].
//!
//! The work is split by job: `values` parses and formats the value syntaxes (durations, sizes,
//! the upstream URL, socket addresses) and is re-exported here, so `config::parse_duration` and
//! friends keep their paths; `yaml` is the only module that touches serde_yaml, turning a document
//! into a [`Config`] with errors that name their key as a dotted path
//! (`slo.models.llama-3.1-70b.ttft`). Sections with checks of their own have their own file: `limits`
//! (`timeouts:`, `limits:`), `admission` (`model_list:`), `records` (`request_log:`, `tenants:`), `ui`.
//! `config/tokentap.yaml` is the annotated example.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod admission;
mod limits;
mod records;
mod ui;
mod values;
mod yaml;

#[cfg(test)]
mod tests;

pub use admission::ModelList;
pub use limits::{Limits, Timeouts};
pub use records::{RecordPath, RequestLog, TenantFrom, Tenants};
pub use ui::Ui;
pub use values::{format_duration, parse_duration, parse_size, parse_upstream};

use values::POSITIVE;

/// Whether this binary was built with the `tokenizer` cargo feature: without it, `tokenizers` and
/// `tokenizer_dirs` are refused.
pub const TOKENIZER_FEATURE: bool = cfg!(feature = "tokenizer");

/// Why a tokenizer key is refused by a binary built without the `tokenizer` feature.
pub const WITHOUT_TOKENIZER_FEATURE: &str = "this tokentap was built without the `tokenizer` \
     feature; rebuild it with its default features (`cargo build --release`)";

/// The whole configuration. [`Default`] gives the documented defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub listen: SocketAddr,
    /// Normalised by [`parse_upstream`]: path "/" or a prefix without trailing '/'.
    pub upstream: http::Uri,
    pub metrics_listen: SocketAddr,
    /// PEM bundle that replaces the system roots for an https upstream.
    pub upstream_ca_file: Option<PathBuf>,
    /// Distinct `model` label values before the rest count as `other`.
    pub max_models: usize,
    /// Which names may take one of those places (`model_list:`).
    pub model_list: ModelList,
    pub timeouts: Timeouts,
    pub limits: Limits,
    /// After SIGTERM/SIGINT, how long in-flight requests may run on before they are cut.
    pub shutdown_grace: Duration,
    pub metering: Metering,
    pub metrics: MetricsOptions,
    pub buckets: Buckets,
    pub slo: Slo,
    /// A local HuggingFace `tokenizer.json` per model name, to count output tokens when the server
    /// reports no usage (needs the `tokenizer` cargo feature).
    pub tokenizers: BTreeMap<String, PathBuf>,
    /// Search roots where a served model's tokenizer.json is discovered by its name; `None`: the
    /// HuggingFace hub cache of the environment; empty: discovery off.
    pub tokenizer_dirs: Option<Vec<PathBuf>>,
    /// One JSON record per finished request (`request_log:`); `None`: off.
    pub request_log: Option<RequestLog>,
    /// The `tenant` label (`tenants:`); `None`: no such label.
    pub tenants: Option<Tenants>,
    pub ui: Ui,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Metering {
    /// Bound on one SSE line/event; a longer one stops metering (never forwarding) of that stream.
    pub max_event_bytes: usize,
    /// How far into a request body to look for `"model"`.
    pub model_scan_bytes: usize,
}

/// How the exported series are kept bounded over time.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsOptions {
    /// A `model` label value with no request for this long is removed from every family and frees its
    /// place under `max_models`; `None`: never.
    pub model_idle: Option<Duration>,
    /// The most series the configuration may allow (its computed series limit); above it tokentap
    /// refuses to start.
    pub max_series: u64,
    /// The `Host` names the metrics port answers (lowercase, without a port); empty: any. `/healthz` and
    /// `/readyz` answer every host.
    pub allowed_hosts: Vec<String>,
}

/// Histogram boundaries in seconds (`output_tokens_per_second`: tokens/s).
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    pub ttft: Vec<f64>,
    /// Inter-token latency and max inter-token gap.
    pub itl: Vec<f64>,
    pub tpot: Vec<f64>,
    /// E2E latency and token generation time.
    pub e2e: Vec<f64>,
    pub output_tokens_per_second: Vec<f64>,
}

/// One set of SLO ceilings; `None` = not applied.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Ceilings {
    pub ttft: Option<Duration>,
    pub tpot: Option<Duration>,
    pub itl: Option<Duration>,
    pub e2e: Option<Duration>,
    /// The time to the first answer-bearing output (reasoning excluded) of a stream.
    pub time_to_first_answer: Option<Duration>,
}

/// Default ceilings (directly under `slo:` in YAML), per-model overrides (`slo.models`) and
/// per-tenant overrides (`tenants.slo`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slo {
    pub default: Ceilings,
    pub models: BTreeMap<String, Ceilings>,
    pub tenants: BTreeMap<String, Ceilings>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SloKind {
    Ttft,
    Tpot,
    Itl,
    E2e,
    TimeToFirstAnswer,
}

/// Each error's Display is complete on its own (it already includes any I/O cause).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// YAML syntax, unknown key, wrong type: the parser's message, with dotted path and position.
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
    /// Any of the above, found in a file.
    #[error("{}: {error}", path.display())]
    InFile {
        path: PathBuf,
        error: Box<ConfigError>,
    },
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

impl SloKind {
    pub const ALL: [SloKind; 5] = [
        SloKind::Ttft,
        SloKind::Tpot,
        SloKind::Itl,
        SloKind::E2e,
        SloKind::TimeToFirstAnswer,
    ];

    /// The YAML key and the `slo` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SloKind::Ttft => "ttft",
            SloKind::Tpot => "tpot",
            SloKind::Itl => "itl",
            SloKind::E2e => "e2e",
            SloKind::TimeToFirstAnswer => "time_to_first_answer",
        }
    }
}

impl fmt::Display for SloKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Ceilings {
    /// These ceilings with each one `overrides` sets replacing its own.
    fn under(mut self, overrides: Option<&Ceilings>) -> Ceilings {
        if let Some(o) = overrides {
            self.ttft = o.ttft.or(self.ttft);
            self.tpot = o.tpot.or(self.tpot);
            self.itl = o.itl.or(self.itl);
            self.e2e = o.e2e.or(self.e2e);
            self.time_to_first_answer = o.time_to_first_answer.or(self.time_to_first_answer);
        }
        self
    }

    pub fn get(&self, kind: SloKind) -> Option<Duration> {
        match kind {
            SloKind::Ttft => self.ttft,
            SloKind::Tpot => self.tpot,
            SloKind::Itl => self.itl,
            SloKind::E2e => self.e2e,
            SloKind::TimeToFirstAnswer => self.time_to_first_answer,
        }
    }
}

impl Slo {
    /// A model's overrides merged field by field over the default; other models get the default.
    pub fn ceilings_for(&self, model: &str) -> Ceilings {
        self.default.under(self.models.get(model))
    }

    /// The ceilings of a request of `model` from `tenant` (its label value): the tenant's overrides
    /// merged field by field over the model's, which are merged over the default. A tenant's ceiling
    /// wins over its model's: the tenant's contract is what its requests are judged by.
    pub fn ceilings_for_request(&self, model: &str, tenant: Option<&str>) -> Ceilings {
        let tenant = tenant.and_then(|t| self.tenants.get(t));
        self.ceilings_for(model).under(tenant)
    }

    /// Every configured ceiling of `kind` (default, models and tenants) in seconds, sorted,
    /// deduplicated.
    pub fn boundaries(&self, kind: SloKind) -> Vec<f64> {
        let all = std::iter::once(&self.default)
            .chain(self.models.values())
            .chain(self.tenants.values());
        let mut v: Vec<f64> = all
            .filter_map(|c| Some(c.get(kind)?.as_secs_f64()))
            .collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
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
            upstream: http::Uri::from_static("http://127.0.0.1:8000/"),
            metrics_listen: SocketAddr::from(([0, 0, 0, 0], 9464)),
            upstream_ca_file: None,
            max_models: 100,
            model_list: ModelList::default(),
            timeouts: Timeouts {
                connect: Duration::from_secs(10),
                response_headers: Duration::from_secs(600),
                idle: Duration::from_secs(600),
                client_header_read: Duration::from_secs(30),
                client_idle: Duration::from_secs(660),
                request_body_idle: Duration::from_secs(60),
                upstream_idle: Duration::from_millis(1500),
                metrics_send: Duration::from_secs(60),
            },
            limits: Limits {
                max_request_header_bytes: 64 << 10,
                max_request_body_bytes: 64 << 20,
                max_connections: 10_000,
                max_upstream_connections: 1024,
                max_concurrent_streams: 128,
                max_upstream_per_connection: None,
                hold_request_body_bytes: 1 << 20,
                max_held_request_bytes: 64 << 20,
                max_metrics_connections: 64,
            },
            shutdown_grace: Duration::from_secs(30),
            metering: Metering {
                max_event_bytes: 256 << 10,
                model_scan_bytes: 8 << 20,
            },
            metrics: MetricsOptions {
                model_idle: Some(Duration::from_secs(3600)),
                max_series: MetricsOptions::DEFAULT_MAX_SERIES,
                allowed_hosts: Vec::new(),
            },
            buckets: Buckets::default(),
            slo: Slo::default(),
            tokenizers: BTreeMap::new(),
            tokenizer_dirs: None,
            request_log: None,
            tenants: None,
            ui: Ui {
                enabled: true,
                interval: Duration::from_secs(5),
                history: Duration::from_secs(30 * 60),
                window: Duration::from_secs(60),
                max_models: 10,
            },
        }
    }
}

impl MetricsOptions {
    /// The default series budget: well above the default configuration's limit (about 337,000), and
    /// what one Prometheus server can take from one target without a second thought.
    pub const DEFAULT_MAX_SERIES: u64 = 500_000;
}

impl Config {
    /// Parses and validates a YAML document; an empty (or comment-only) document gives the defaults.
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigError> {
        let config = yaml::parse(text)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads, parses and validates a file; every error names the file.
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

    /// Every semantic check; run it again after command-line overrides.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.listen == self.metrics_listen && self.listen.port() != 0 {
            let (value, reason) = (self.metrics_listen.to_string(), "must differ from listen");
            return Err(invalid("metrics_listen", "address", &value, reason));
        }
        parse_upstream(&self.upstream.to_string())?;
        if let Some(path) = &self.upstream_ca_file {
            check_readable_file("upstream_ca_file", path)?;
        }
        if self.max_models == 0 {
            return Err(invalid("max_models", "value", "0", "must be at least 1"));
        }
        self.model_list.validate()?;
        let t = &self.timeouts;
        positive("timeouts.connect", t.connect)?;
        positive("timeouts.response_headers", t.response_headers)?;
        positive("timeouts.idle", t.idle)?;
        positive("timeouts.client_header_read", t.client_header_read)?;
        positive("timeouts.client_idle", t.client_idle)?;
        positive("timeouts.request_body_idle", t.request_body_idle)?;
        positive("timeouts.upstream_idle", t.upstream_idle)?;
        positive("timeouts.metrics_send", t.metrics_send)?;
        positive("shutdown_grace", self.shutdown_grace)?;
        self.limits.validate()?;
        self.ui.validate()?;
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
            for kind in SloKind::ALL {
                if let Some(d) = ceilings.get(kind) {
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

fn positive(key: &str, d: Duration) -> Result<(), ConfigError> {
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
