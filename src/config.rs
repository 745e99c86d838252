//! tokentap's YAML configuration: defaults, loading and validation (SPEC §4, §6).
//!
//! The only module that touches serde_yaml. The file is read into private `Raw*` structs (every
//! key optional, unknown keys rejected at every level, durations/sizes/addresses kept as text) and
//! then converted, so each error names its key as a dotted path (`slo.models.llama-3.1-70b.ttft`)
//! and the bad value. `config/tokentap.yaml` is the annotated example.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{Deserializer, Error as _, MapAccess, Visitor};
use serde::Deserialize;

const DURATION_SYNTAX: &str =
    "expected a number followed by us, ms, s, m or h (e.g. \"250ms\", \"1.5s\", \"2m\")";
const SIZE_SYNTAX: &str = "expected a whole number of bytes, optionally followed by B, KiB, MiB, \
                           GiB, KB, MB or GB (e.g. \"262144\", \"256KiB\", \"8MiB\")";
const POSITIVE: &str = "must be greater than zero";
const TOO_LARGE: &str = "the number is too large";
const URL_EXAMPLE: &str = "e.g. \"http://127.0.0.1:8000\" or \"https://api.example.com/openai\"";

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
    pub timeouts: Timeouts,
    pub metering: Metering,
    pub buckets: Buckets,
    pub slo: Slo,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Timeouts {
    /// Upstream TCP (+TLS) connect.
    pub connect: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Metering {
    /// Bound on one SSE line/event; a longer one stops metering (never forwarding) of that stream.
    pub max_event_bytes: usize,
    /// How far into a request body to look for `"model"`.
    pub model_scan_bytes: usize,
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
}

/// Default ceilings (directly under `slo:` in YAML) and per-model overrides (`slo.models`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slo {
    pub default: Ceilings,
    pub models: BTreeMap<String, Ceilings>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SloKind {
    Ttft,
    Tpot,
    Itl,
    E2e,
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
    pub const ALL: [SloKind; 4] = [SloKind::Ttft, SloKind::Tpot, SloKind::Itl, SloKind::E2e];

    /// The YAML key and the `slo` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SloKind::Ttft => "ttft",
            SloKind::Tpot => "tpot",
            SloKind::Itl => "itl",
            SloKind::E2e => "e2e",
        }
    }
}

impl fmt::Display for SloKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Ceilings {
    pub fn get(&self, kind: SloKind) -> Option<Duration> {
        match kind {
            SloKind::Ttft => self.ttft,
            SloKind::Tpot => self.tpot,
            SloKind::Itl => self.itl,
            SloKind::E2e => self.e2e,
        }
    }
}

impl Slo {
    /// A model's overrides merged field by field over the default; other models get the default.
    pub fn ceilings_for(&self, model: &str) -> Ceilings {
        let mut c = self.default;
        if let Some(m) = self.models.get(model) {
            c.ttft = m.ttft.or(c.ttft);
            c.tpot = m.tpot.or(c.tpot);
            c.itl = m.itl.or(c.itl);
            c.e2e = m.e2e.or(c.e2e);
        }
        c
    }

    /// Every configured ceiling of `kind` (default and all models) in seconds, sorted, deduplicated.
    pub fn boundaries(&self, kind: SloKind) -> Vec<f64> {
        let all = std::iter::once(&self.default).chain(self.models.values());
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
            timeouts: Timeouts {
                connect: Duration::from_secs(10),
            },
            metering: Metering {
                max_event_bytes: 256 << 10,
                model_scan_bytes: 8 << 20,
            },
            buckets: Buckets::default(),
            slo: Slo::default(),
        }
    }
}

impl Config {
    /// Parses and validates a YAML document; an empty (or comment-only) document gives the defaults.
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigError> {
        let raw = serde_yaml::from_str::<Option<RawConfig>>(text);
        let raw = raw.map_err(|e| ConfigError::Syntax(e.to_string()))?;
        let config = raw.unwrap_or_default().into_config()?;
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
        positive("timeouts.connect", self.timeouts.connect)?;
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
            .map(|(n, c)| (format!("slo.models.{n}"), c));
        for (prefix, ceilings) in std::iter::once(("slo".into(), &self.slo.default)).chain(models) {
            for kind in SloKind::ALL {
                if let Some(d) = ceilings.get(kind) {
                    positive(&format!("{prefix}.{kind}"), d)?;
                }
            }
        }
        Ok(())
    }
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

/// Parses and normalises an upstream URL (also used for `--upstream`): http or https, a host, an
/// optional path prefix (returned without trailing '/'; path "/" when there is none), no query,
/// no fragment, no `user:password@` (a message never echoes the password).
pub fn parse_upstream(text: &str) -> Result<http::Uri, ConfigError> {
    let shown = redact_userinfo(text);
    let bad = |reason: String| invalid("upstream", "upstream URL", &shown, reason);
    if text.contains('#') {
        return Err(bad("must not contain a fragment (#...)".into()));
    }
    let uri = text.parse::<http::Uri>();
    let uri = uri.map_err(|e| bad(format!("{e} ({URL_EXAMPLE})")))?;
    let scheme = match uri.scheme_str() {
        Some(s @ ("http" | "https")) => s.to_owned(),
        _ => {
            return Err(bad(format!(
                "must start with http:// or https:// ({URL_EXAMPLE})"
            )))
        }
    };
    let authority = match uri.authority() {
        Some(a) if !a.host().is_empty() => a.clone(),
        _ => return Err(bad(format!("missing host ({URL_EXAMPLE})"))),
    };
    if authority.as_str().contains('@') {
        return Err(bad("must not contain credentials (user:password@)".into()));
    }
    if uri.query().is_some() {
        return Err(bad(
            "must not contain a query (?...), only a path prefix".into()
        ));
    }
    let prefix = uri.path().trim_end_matches('/');
    let path = if prefix.is_empty() { "/" } else { prefix };
    let normalised = format!("{scheme}://{authority}{path}").parse();
    normalised.map_err(|e: http::uri::InvalidUri| bad(e.to_string()))
}

/// Replaces a `user:password@` in the authority with `***@`.
fn redact_userinfo(text: &str) -> String {
    let start = text.find("://").map_or(0, |i| i + 3);
    let end = text[start..]
        .find(['/', '?', '#'])
        .map_or(text.len(), |i| start + i);
    match text[start..end].rfind('@') {
        Some(at) => format!("{}***{}", &text[..start], &text[start + at..]),
        None => text.to_owned(),
    }
}

/// Parses a duration: a decimal number immediately followed by `us`, `ms`, `s`, `m` or `h`
/// ("500us", "250ms", "1.5s", "2m"). No sign, exponent, bare number or whitespace (so "10 ms" is
/// rejected: one spelling, as in Prometheus and Go). "0s" parses; config keys require > 0.
/// Digits beyond nanosecond resolution are truncated. On error returns the reason.
pub fn parse_duration(text: &str) -> Result<Duration, &'static str> {
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .ok_or(DURATION_SYNTAX)?;
    let (number, unit) = text.split_at(split);
    let unit_nanos: u128 = match unit {
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(DURATION_SYNTAX),
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, "0"));
    if int.is_empty() || frac.is_empty() || frac.contains('.') {
        return Err(DURATION_SYNTAX);
    }
    let frac = &frac[..frac.len().min(18)];
    let whole: u128 = int.parse().map_err(|_| TOO_LARGE)?;
    let part: u128 = frac.parse().map_err(|_| DURATION_SYNTAX)?;
    let part = part * unit_nanos / 10u128.pow(frac.len() as u32);
    let nanos = whole
        .checked_mul(unit_nanos)
        .and_then(|n| n.checked_add(part));
    let nanos = nanos.ok_or(TOO_LARGE)?;
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| TOO_LARGE)?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// Formats a duration exactly, in the config syntax: "250ms", "1.5s", "60s", "500us", "0s".
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    let (per_unit, digits, unit) = match nanos {
        0 => return "0s".to_owned(),
        1_000_000_000.. => (1_000_000_000, 9, "s"),
        1_000_000.. => (1_000_000, 6, "ms"),
        _ => (1_000, 3, "us"),
    };
    let (whole, frac) = (nanos / per_unit, nanos % per_unit);
    if frac == 0 {
        return format!("{whole}{unit}");
    }
    let frac = format!("{frac:0digits$}");
    format!("{whole}.{}{unit}", frac.trim_end_matches('0'))
}

/// Parses a size: whole bytes ("262144"), optionally directly followed by `B`, `KiB`, `MiB`,
/// `GiB` (powers of 1024) or `KB`, `MB`, `GB` (powers of 1000). On error returns the reason.
pub fn parse_size(text: &str) -> Result<u64, &'static str> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let multiplier: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(SIZE_SYNTAX),
    };
    if number.is_empty() {
        return Err(SIZE_SYNTAX);
    }
    let bytes = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier));
    bytes.ok_or(TOO_LARGE)
}

// ---- the YAML side -------------------------------------------------------------------------

/// A string or number kept as text, so its conversion error can name the key and the value (and
/// say e.g. that `0.5` lacks a unit). Other types are rejected by serde_yaml, with path and position.
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_owned()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(format!("{v:?}"))) // "1000.0", never taken for whole bytes
            }
        }
        d.deserialize_any(V)
    }
}

impl Scalar {
    fn duration(&self, key: &str) -> Result<Duration, ConfigError> {
        match parse_duration(&self.0) {
            Ok(d) if d.is_zero() => Err(invalid(key, "duration", &self.0, POSITIVE)),
            parsed => parsed.map_err(|reason| invalid(key, "duration", &self.0, reason)),
        }
    }

    fn size(&self, key: &str) -> Result<usize, ConfigError> {
        let bytes = parse_size(&self.0).map_err(|reason| invalid(key, "size", &self.0, reason))?;
        usize::try_from(bytes).map_err(|_| invalid(key, "size", &self.0, TOO_LARGE))
    }

    fn address(&self, key: &str) -> Result<SocketAddr, ConfigError> {
        let reason = "expected IP:PORT, e.g. \"0.0.0.0:8080\" or \"[::]:8080\" (no host names)";
        let addr = self.0.parse();
        addr.map_err(|_| invalid(key, "address", &self.0, reason))
    }
}

/// `slo.models`: a map that rejects a repeated model name instead of silently keeping the last.
#[derive(Default)]
struct Models(BTreeMap<String, RawCeilings>);

impl<'de> Deserialize<'de> for Models {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Models;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping from model name to SLO ceilings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Models, A::Error> {
                let mut models = BTreeMap::new();
                while let Some(name) = map.next_key::<String>()? {
                    let ceilings = map.next_value::<Option<RawCeilings>>()?;
                    if models.contains_key(&name) {
                        return Err(A::Error::custom(format!("model `{name}` appears twice")));
                    }
                    models.insert(name, ceilings.unwrap_or_default());
                }
                Ok(Models(models))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawConfig {
    listen: Option<Scalar>,
    upstream: Option<Scalar>,
    metrics_listen: Option<Scalar>,
    upstream_ca_file: Option<PathBuf>,
    max_models: Option<usize>,
    timeouts: Option<RawTimeouts>,
    metering: Option<RawMetering>,
    buckets: Option<RawBuckets>,
    slo: Option<RawSlo>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawTimeouts {
    connect: Option<Scalar>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawMetering {
    max_event_bytes: Option<Scalar>,
    model_scan_bytes: Option<Scalar>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawBuckets {
    ttft: Option<Vec<f64>>,
    itl: Option<Vec<f64>>,
    tpot: Option<Vec<f64>>,
    e2e: Option<Vec<f64>>,
    output_tokens_per_second: Option<Vec<f64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawSlo {
    ttft: Option<Scalar>,
    tpot: Option<Scalar>,
    itl: Option<Scalar>,
    e2e: Option<Scalar>,
    models: Option<Models>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawCeilings {
    ttft: Option<Scalar>,
    tpot: Option<Scalar>,
    itl: Option<Scalar>,
    e2e: Option<Scalar>,
}

impl RawCeilings {
    fn convert(&self, prefix: &str) -> Result<Ceilings, ConfigError> {
        let get = |v: &Option<Scalar>, kind: &str| match v {
            Some(s) => s.duration(&format!("{prefix}.{kind}")).map(Some),
            None => Ok(None),
        };
        let (ttft, tpot) = (get(&self.ttft, "ttft")?, get(&self.tpot, "tpot")?);
        let (itl, e2e) = (get(&self.itl, "itl")?, get(&self.e2e, "e2e")?);
        Ok(Ceilings {
            ttft,
            tpot,
            itl,
            e2e,
        })
    }
}

impl RawConfig {
    fn into_config(self) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        if let Some(s) = &self.listen {
            c.listen = s.address("listen")?;
        }
        if let Some(s) = &self.upstream {
            c.upstream = parse_upstream(&s.0)?;
        }
        if let Some(s) = &self.metrics_listen {
            c.metrics_listen = s.address("metrics_listen")?;
        }
        c.upstream_ca_file = self.upstream_ca_file;
        c.max_models = self.max_models.unwrap_or(c.max_models);
        if let Some(s) = self.timeouts.and_then(|t| t.connect) {
            c.timeouts.connect = s.duration("timeouts.connect")?;
        }
        let metering = self.metering.unwrap_or_default();
        if let Some(s) = &metering.max_event_bytes {
            c.metering.max_event_bytes = s.size("metering.max_event_bytes")?;
        }
        if let Some(s) = &metering.model_scan_bytes {
            c.metering.model_scan_bytes = s.size("metering.model_scan_bytes")?;
        }
        let (b, d) = (self.buckets.unwrap_or_default(), Buckets::default());
        c.buckets = Buckets {
            ttft: b.ttft.unwrap_or(d.ttft),
            itl: b.itl.unwrap_or(d.itl),
            tpot: b.tpot.unwrap_or(d.tpot),
            e2e: b.e2e.unwrap_or(d.e2e),
            output_tokens_per_second: b
                .output_tokens_per_second
                .unwrap_or(d.output_tokens_per_second),
        };
        let slo = self.slo.unwrap_or_default();
        let (ttft, tpot, itl, e2e) = (slo.ttft, slo.tpot, slo.itl, slo.e2e);
        c.slo.default = RawCeilings {
            ttft,
            tpot,
            itl,
            e2e,
        }
        .convert("slo")?;
        for (name, raw) in slo.models.unwrap_or_default().0 {
            let ceilings = raw.convert(&format!("slo.models.{name}"))?;
            c.slo.models.insert(name, ceilings);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = "
listen: 127.0.0.1:18080
upstream: https://api.example.com/openai/
metrics_listen: '[::1]:19464'
max_models: 7
timeouts: {connect: 2.5s}
metering: {max_event_bytes: 1MiB, model_scan_bytes: 65536}
buckets: {ttft: [0.1, 1, 10], itl: [0.01, 0.1], tpot: [0.02], e2e: [1, 60], output_tokens_per_second: [10, 100]}
slo:
  ttft: 500ms
  tpot: 50ms
  itl: 250ms
  e2e: 60s
  models:
    llama-3.1-70b:
      ttft: 1s
";

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    fn all(c: Ceilings) -> [Option<Duration>; 4] {
        SloKind::ALL.map(|k| c.get(k))
    }

    fn err(yaml: &str) -> String {
        match Config::from_yaml_str(yaml) {
            Ok(c) => panic!("expected an error for {yaml:?}, got {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// Non-empty lines of a table, split at " | ".
    fn rows(table: &str) -> impl Iterator<Item = Vec<&str>> {
        table
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.trim().split(" | ").collect())
    }

    #[test]
    fn full_example_parses_to_the_given_values() {
        let c = Config::from_yaml_str(FULL).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:18080");
        assert_eq!(c.upstream.to_string(), "https://api.example.com/openai");
        assert_eq!(c.metrics_listen.to_string(), "[::1]:19464");
        assert_eq!((c.upstream_ca_file, c.max_models), (None, 7));
        assert_eq!(Some(c.timeouts.connect), ms(2500));
        let m = c.metering;
        assert_eq!((m.max_event_bytes, m.model_scan_bytes), (1 << 20, 65536));
        let b = c.buckets;
        assert_eq!(
            (b.ttft, b.itl, b.tpot),
            (vec![0.1, 1.0, 10.0], vec![0.01, 0.1], vec![0.02])
        );
        assert_eq!(
            (b.e2e, b.output_tokens_per_second),
            (vec![1.0, 60.0], vec![10.0, 100.0])
        );
        assert_eq!(all(c.slo.default), [ms(500), ms(50), ms(250), ms(60_000)]);
        assert_eq!(c.slo.models.keys().collect::<Vec<_>>(), ["llama-3.1-70b"]);
        assert_eq!(
            all(c.slo.models["llama-3.1-70b"]),
            [ms(1000), None, None, None]
        );
    }

    #[test]
    fn empty_document_gives_the_defaults() {
        for text in [
            "",
            "\n",
            "# only a comment\n",
            "~",
            "---\n",
            "timeouts:\nslo:\n",
        ] {
            assert_eq!(
                Config::from_yaml_str(text).unwrap(),
                Config::default(),
                "{text:?}"
            );
        }
        let d = Config::default();
        assert_eq!(d.upstream, parse_upstream("http://127.0.0.1:8000").unwrap());
        assert_eq!(
            format!("{} {}", d.listen, d.metrics_listen),
            "0.0.0.0:8080 0.0.0.0:9464"
        );
        assert_eq!((d.max_models, Some(d.timeouts.connect)), (100, ms(10_000)));
        let m = d.metering;
        assert_eq!((m.max_event_bytes, m.model_scan_bytes), (262_144, 8 << 20));
        assert_eq!(d.slo, Slo::default());
    }

    #[test]
    fn every_default_bucket_list_passes_validation() {
        Config::default().validate().unwrap();
        for (name, list) in Buckets::default().named() {
            check_buckets(name, list).unwrap();
            assert!(list.len() > 15, "{name}");
        }
    }

    #[test]
    fn example_config_file_parses_and_shows_the_defaults() {
        let c = Config::from_yaml_str(include_str!("../config/tokentap.yaml")).unwrap();
        let d = Config::default();
        assert_eq!(
            Config {
                slo: d.slo.clone(),
                ..c.clone()
            },
            d,
            "all but slo are defaults"
        );
        assert_eq!(all(c.slo.default), [ms(500), ms(50), ms(250), ms(60_000)]);
        assert_eq!(c.slo.ceilings_for("llama-3.1-70b").ttft, ms(1000));
    }

    #[test]
    fn per_model_override_merges_field_by_field_over_the_default() {
        let slo = Config::from_yaml_str(FULL).unwrap().slo;
        let llama = slo.ceilings_for("llama-3.1-70b");
        assert_eq!(all(llama), [ms(1000), ms(50), ms(250), ms(60_000)]);
        assert_eq!(slo.ceilings_for("some-other-model"), slo.default);
        let only_model = Config::from_yaml_str("slo: {models: {m: {itl: 1s}}}").unwrap();
        assert_eq!(
            all(only_model.slo.ceilings_for("m")),
            [None, None, ms(1000), None]
        );
        assert_eq!(only_model.slo.ceilings_for("x"), Ceilings::default());
        assert_eq!(
            SloKind::ALL.map(SloKind::as_str),
            ["ttft", "tpot", "itl", "e2e"]
        );
    }

    #[test]
    fn boundaries_collect_every_ceiling_sorted_and_deduplicated() {
        let yaml = "slo: {ttft: 500ms, models: {a: {ttft: 2s}, b: {ttft: 0.5s, e2e: 1m}, c: {ttft: 100ms}}}";
        let slo = Config::from_yaml_str(yaml).unwrap().slo;
        assert_eq!(slo.boundaries(SloKind::Ttft), [0.1, 0.5, 2.0]);
        assert_eq!(slo.boundaries(SloKind::E2e), [60.0]);
        assert!(slo.boundaries(SloKind::Itl).is_empty());
    }

    #[test]
    fn unknown_key_at_top_level_is_named() {
        let want = "unknown field `lisen`, expected one of `listen`, `upstream`, `metrics_listen`, \
             `upstream_ca_file`, `max_models`, `timeouts`, `metering`, `buckets`, `slo` at line 2 column 1";
        assert_eq!(err("listen: 0.0.0.0:1\nlisen: 0.0.0.0:2\n"), want);
    }

    #[test]
    fn unknown_key_under_slo_is_named_with_its_path() {
        let want = "slo: unknown field `p99`, expected one of `ttft`, `tpot`, `itl`, `e2e`, `models` at line 3 column 3";
        assert_eq!(err("slo:\n  ttft: 1s\n  p99: 2s\n"), want);
    }

    #[test]
    fn unknown_key_under_a_model_override_is_named_with_its_path() {
        let want = "slo.models.llama-3.1-70b: unknown field `ttf`, expected one of `ttft`, `tpot`, `itl`, `e2e` at line 4 column 7";
        assert_eq!(
            err("slo:\n  models:\n    llama-3.1-70b:\n      ttf: 1s\n"),
            want
        );
    }

    #[test]
    fn wrong_yaml_types_keep_the_parsers_path_and_position() {
        let table = r#"
            max_models: many | max_models: invalid type: string "many", expected usize at line 1 column 13
            buckets: {itl: [0.1, fast]} | buckets.itl[1]: invalid type: string "fast", expected f64 at line 1 column 22
            timeouts: {connect: true} | timeouts.connect: invalid type: boolean `true`, expected a string or a number at line 1 column 21
            slo: {models: {a: {}, a: {}}} | slo.models: model `a` appears twice at line 1 column 15
            listen: [1] | listen: invalid type: sequence, expected a string or a number at line 1 column 9
        "#;
        for row in rows(table) {
            assert_eq!(err(row[0]), row[1]);
        }
    }

    #[test]
    fn bad_values_give_errors_naming_the_key_and_the_value() {
        let table = "
            slo: {models: {llama-3.1-70b: {ttft: 1 second}}} | slo.models.llama-3.1-70b.ttft | 1 second
            timeouts: {connect: 5} | timeouts.connect | 5
            slo: {ttft: 0.5} | slo.ttft | 0.5
            slo: {itl: -1} | slo.itl | -1
            metering: {max_event_bytes: 1.5} | metering.max_event_bytes | 1.5
            metering: {model_scan_bytes: 1e6} | metering.model_scan_bytes | 1000000.0
            metering: {max_event_bytes: 256kb} | metering.max_event_bytes | 256kb
            metering: {max_event_bytes: 100MiB} | metering.max_event_bytes | 104857600
            metering: {model_scan_bytes: 1000} | metering.model_scan_bytes | 1000
            slo: {tpot: 0ms} | slo.tpot | 0ms
            timeouts: {connect: 0s} | timeouts.connect | 0s
            buckets: {ttft: [0.1, 0.5, 0.5]} | buckets.ttft[2] | 0.5
            buckets: {e2e: [0, 1]} | buckets.e2e[0] | 0
            buckets: {itl: [0.1, .inf]} | buckets.itl[1] | inf
            buckets: {tpot: []} | buckets.tpot | []
            upstream: ftp://x | upstream | ftp://x
            upstream: http://x/v1?key=1 | upstream | http://x/v1?key=1
            upstream: 127.0.0.1:8000 | upstream | 127.0.0.1:8000
            listen: nonsense | listen | nonsense
            metrics_listen: localhost:9464 | metrics_listen | localhost:9464
            metrics_listen: 0.0.0.0:8080 | metrics_listen | 0.0.0.0:8080
            max_models: 0 | max_models | 0
            upstream_ca_file: /nonexistent/ca.pem | upstream_ca_file | /nonexistent/ca.pem
            upstream_ca_file: / | upstream_ca_file | /
        ";
        for row in rows(table) {
            let (msg, key, value) = (err(row[0]), row[1], row[2]);
            let named = msg.starts_with(&format!("{key}: invalid "));
            assert!(named && msg.contains(&format!("{value:?}")), "{msg}");
        }
        assert_eq!(
            err("slo: {models: {llama-3.1-70b: {ttft: 1 second}}}"),
            "slo.models.llama-3.1-70b.ttft: invalid duration \"1 second\": expected a number \
             followed by us, ms, s, m or h (e.g. \"250ms\", \"1.5s\", \"2m\")"
        );
        let want = "buckets.ttft[2]: invalid bucket boundary \"0.5\": boundaries must be strictly increasing, but the one before is 0.5";
        assert_eq!(err("buckets: {ttft: [0.1, 0.5, 0.5]}"), want);
    }

    #[test]
    fn validate_catches_values_set_in_code() {
        let mut c = Config::default();
        c.slo.models.insert(
            "m".into(),
            Ceilings {
                e2e: ms(0),
                ..Ceilings::default()
            },
        );
        let msg = c.validate().unwrap_err().to_string();
        assert_eq!(
            msg,
            "slo.models.m.e2e: invalid duration \"0s\": must be greater than zero"
        );
        let c = Config {
            upstream: http::Uri::from_static("ftp://x/"),
            ..Config::default()
        };
        let msg = c.validate().unwrap_err().to_string();
        assert!(msg.starts_with("upstream: invalid upstream URL"));
        let path = std::env::temp_dir().join(format!("tokentap-ca-{}.pem", std::process::id()));
        std::fs::write(&path, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let c = Config {
            upstream_ca_file: Some(path.clone()),
            ..Config::default()
        };
        let result = c.validate();
        std::fs::remove_file(&path).unwrap();
        result.unwrap();
    }

    #[test]
    fn upstream_is_normalised_and_checked() {
        let table = "
            http://127.0.0.1:8000 | http://127.0.0.1:8000/
            http://127.0.0.1:8000/ | http://127.0.0.1:8000/
            https://api.example.com/openai/ | https://api.example.com/openai
            https://api.example.com/a/b// | https://api.example.com/a/b
            http://[::1]:8000 | http://[::1]:8000/
        ";
        for row in rows(table) {
            assert_eq!(parse_upstream(row[0]).unwrap().to_string(), row[1]);
        }
        for bad in [
            "",
            "ftp://x",
            "x",
            "http://x/a#top",
            "http://x/?",
            "http:///a",
            "http://x y",
        ] {
            assert!(parse_upstream(bad).is_err(), "{bad:?}");
        }
        let msg = parse_upstream("https://user:secret@api.example.com/v1").unwrap_err();
        let want = "upstream: invalid upstream URL \"https://***@api.example.com/v1\": must not contain credentials (user:password@)";
        assert_eq!(msg.to_string(), want);
    }

    #[test]
    fn duration_parsing_table() {
        let table = "
            500us | 500000 | 0.5us | 500 | 250ms | 250000000 | 12.5ms | 12500000
            1.5s | 1500000000 | 0.001s | 1000000 | 2m | 120000000000 | 0.5h | 1800000000000
            0s | 0 | 007s | 7000000000 | 1.0000000015s | 1000000001
        ";
        for row in rows(table) {
            for pair in row.chunks(2) {
                let want = Duration::from_nanos(pair[1].parse().unwrap());
                assert_eq!(parse_duration(pair[0]), Ok(want), "{pair:?}");
            }
        }
        // Whitespace is rejected on purpose ("10 ms"): one spelling, as in Go and Prometheus.
        let bad = [
            "", "5", "1.5", "-1s", "+1s", "1.5.2s", "10 ms", " 1s", "1s ", ".5s", "5.s",
        ];
        for text in bad
            .into_iter()
            .chain(["1e3s", "5S", "5sec", "1m30s", "ms", "5ns", "1,5s"])
        {
            assert_eq!(parse_duration(text), Err(DURATION_SYNTAX), "{text:?}");
        }
        assert_eq!(parse_duration("99999999999999999999999h"), Err(TOO_LARGE));
    }

    #[test]
    fn format_duration_is_exact_and_round_trips() {
        let table = "
            250000000 | 250ms | 1500000000 | 1.5s | 60000000000 | 60s | 500000 | 500us
            12500000 | 12.5ms | 100 | 0.1us | 1000000001 | 1.000000001s | 0 | 0s
        ";
        for row in rows(table) {
            for pair in row.chunks(2) {
                let d = Duration::from_nanos(pair[0].parse().unwrap());
                assert_eq!(
                    (format_duration(d).as_str(), parse_duration(pair[1])),
                    (pair[1], Ok(d))
                );
            }
        }
    }

    #[test]
    fn size_parsing_table() {
        let table = "
            0 | 0 | 262144 | 262144 | 512B | 512 | 256KiB | 262144 | 8MiB | 8388608
            1GiB | 1073741824 | 1KB | 1000 | 2MB | 2000000 | 1GB | 1000000000
        ";
        for row in rows(table) {
            for pair in row.chunks(2) {
                assert_eq!(
                    parse_size(pair[0]),
                    Ok(pair[1].parse().unwrap()),
                    "{pair:?}"
                );
            }
        }
        for text in [
            "", "KiB", "-1", "1.5MiB", "256 KiB", "256kib", "256K", "1TiB", "0x10",
        ] {
            assert_eq!(parse_size(text), Err(SIZE_SYNTAX), "{text:?}");
        }
        assert_eq!(parse_size("99999999999GiB"), Err(TOO_LARGE));
    }

    #[test]
    fn load_names_the_file() {
        let missing = Config::load(Path::new("/nonexistent/tokentap.yaml")).unwrap_err();
        let msg = missing.to_string();
        assert!(
            msg.starts_with("cannot read config file /nonexistent/tokentap.yaml: "),
            "{msg}"
        );
        let path = std::env::temp_dir().join(format!("tokentap-cfg-{}.yaml", std::process::id()));
        std::fs::write(&path, "slo:\n  e2e: soon\n").unwrap();
        let bad = Config::load(&path).map_err(|e| e.to_string());
        std::fs::write(&path, "max_models: 3\n").unwrap();
        let good = Config::load(&path)
            .map(|c| c.max_models)
            .map_err(|e| e.to_string());
        std::fs::remove_file(&path).unwrap();
        let want = format!("{}: slo.e2e: invalid duration \"soon\": ", path.display());
        assert_eq!(
            (bad, good),
            (Err(format!("{want}{DURATION_SYNTAX}")), Ok(3))
        );
    }
}
