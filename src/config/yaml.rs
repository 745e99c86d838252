//! The YAML side of the configuration, and the only module that touches serde_yaml (so the file
//! format could be swapped without touching the rest). A document is read into private `Raw*`
//! structs (every key optional, unknown keys rejected at every level, durations/sizes/addresses
//! kept as text) and then converted over [`Config::default`], so each error names its key as a
//! dotted path (`slo.models.llama-3.1-70b.ttft`) and the bad value.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::de::{Deserializer, Error as _, MapAccess, Visitor};
use serde::Deserialize;

use super::values::{address_at, duration_at, idle_at, parse_upstream, size_at};
use super::{
    invalid, Buckets, Ceilings, Config, ConfigError, ModelList, RecordPath, RequestLog, TenantFrom,
    Tenants,
};

/// Parses a YAML document into a [`Config`] (not yet validated); an empty (or comment-only)
/// document gives the defaults. YAML syntax errors, unknown keys and wrong types come back as
/// [`ConfigError::Syntax`] with serde_yaml's path and position.
pub(super) fn parse(text: &str) -> Result<Config, ConfigError> {
    let raw = serde_yaml::from_str::<Option<RawConfig>>(text);
    let raw = raw.map_err(|e| ConfigError::Syntax(e.to_string()))?;
    raw.unwrap_or_default().into_config()
}

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

/// A map keyed by model name (`slo.models`, `tokenizers`) that rejects a repeated model name instead
/// of silently keeping the last.
struct Models<T>(BTreeMap<String, T>);

impl<T> Default for Models<T> {
    fn default() -> Self {
        Models(BTreeMap::new())
    }
}

/// What a [`Models`] map holds, for its error message.
trait Described {
    const EXPECTING: &'static str;
}

impl Described for RawCeilings {
    const EXPECTING: &'static str = "a mapping from model name to SLO ceilings";
}

impl Described for PathBuf {
    const EXPECTING: &'static str = "a mapping from model name to a tokenizer.json path";
}

impl<'de, T: Deserialize<'de> + Default + Described> Deserialize<'de> for Models<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Default + Described> Visitor<'de> for V<T> {
            type Value = Models<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::EXPECTING)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Models<T>, A::Error> {
                let mut models = BTreeMap::new();
                while let Some(name) = map.next_key::<String>()? {
                    let value = map.next_value::<Option<T>>()?;
                    if models.contains_key(&name) {
                        return Err(A::Error::custom(format!("model `{name}` appears twice")));
                    }
                    models.insert(name, value.unwrap_or_default());
                }
                Ok(Models(models))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
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
    model_list: Option<RawModelList>,
    timeouts: Option<RawTimeouts>,
    limits: Option<RawLimits>,
    shutdown_grace: Option<Scalar>,
    metering: Option<RawMetering>,
    metrics: Option<RawMetrics>,
    buckets: Option<RawBuckets>,
    slo: Option<RawSlo>,
    tokenizers: Option<Models<PathBuf>>,
    tokenizer_dirs: Option<Vec<PathBuf>>,
    request_log: Option<RawRequestLog>,
    tenants: Option<RawTenants>,
    ui: Option<RawUi>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawModelList {
    enabled: Option<bool>,
    refresh: Option<Scalar>,
    names: Option<Vec<String>>,
    api_key_file: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawRequestLog {
    path: Option<PathBuf>,
    gaps: Option<bool>,
    max_gaps: Option<usize>,
    queue: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawTenants {
    header: Option<String>,
    bearer_hash: Option<bool>,
    hash_key: Option<String>,
    max: Option<usize>,
    allow: Option<Vec<String>>,
    slo: Option<Models<RawCeilings>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawUi {
    enabled: Option<bool>,
    interval: Option<Scalar>,
    history: Option<Scalar>,
    window: Option<Scalar>,
    max_models: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawTimeouts {
    connect: Option<Scalar>,
    response_headers: Option<Scalar>,
    idle: Option<Scalar>,
    client_header_read: Option<Scalar>,
    client_idle: Option<Scalar>,
    request_body_idle: Option<Scalar>,
    upstream_idle: Option<Scalar>,
    metrics_send: Option<Scalar>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawLimits {
    max_request_header_bytes: Option<Scalar>,
    max_request_body_bytes: Option<Scalar>,
    max_connections: Option<usize>,
    max_upstream_connections: Option<usize>,
    max_concurrent_streams: Option<u32>,
    max_upstream_per_connection: Option<usize>,
    hold_request_body_bytes: Option<Scalar>,
    max_held_request_bytes: Option<Scalar>,
    max_metrics_connections: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawMetering {
    max_event_bytes: Option<Scalar>,
    model_scan_bytes: Option<Scalar>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawMetrics {
    model_idle: Option<Scalar>,
    max_series: Option<u64>,
    allowed_hosts: Option<Vec<String>>,
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
    time_to_first_answer: Option<Scalar>,
    models: Option<Models<RawCeilings>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, expecting = "a mapping")]
struct RawCeilings {
    ttft: Option<Scalar>,
    tpot: Option<Scalar>,
    itl: Option<Scalar>,
    e2e: Option<Scalar>,
    time_to_first_answer: Option<Scalar>,
}

impl RawCeilings {
    fn convert(&self, prefix: &str) -> Result<Ceilings, ConfigError> {
        let get = |v: &Option<Scalar>, kind: &str| match v {
            Some(s) => duration_at(&format!("{prefix}.{kind}"), &s.0).map(Some),
            None => Ok(None),
        };
        let (ttft, tpot) = (get(&self.ttft, "ttft")?, get(&self.tpot, "tpot")?);
        let (itl, e2e) = (get(&self.itl, "itl")?, get(&self.e2e, "e2e")?);
        let time_to_first_answer = get(&self.time_to_first_answer, "time_to_first_answer")?;
        Ok(Ceilings {
            ttft,
            tpot,
            itl,
            e2e,
            time_to_first_answer,
        })
    }
}

impl RawConfig {
    fn into_config(self) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        if let Some(s) = &self.listen {
            c.listen = address_at("listen", &s.0)?;
        }
        if let Some(s) = &self.upstream {
            c.upstream = parse_upstream(&s.0)?;
        }
        if let Some(s) = &self.metrics_listen {
            c.metrics_listen = address_at("metrics_listen", &s.0)?;
        }
        c.upstream_ca_file = self.upstream_ca_file;
        c.max_models = self.max_models.unwrap_or(c.max_models);
        if let Some(raw) = self.model_list {
            let d = ModelList::default();
            c.model_list = ModelList {
                enabled: raw.enabled.unwrap_or(d.enabled),
                refresh: match &raw.refresh {
                    Some(s) => duration_at("model_list.refresh", &s.0)?,
                    None => d.refresh,
                },
                names: raw.names.unwrap_or(d.names),
                api_key_file: raw.api_key_file,
            };
        }
        let t = self.timeouts.unwrap_or_default();
        let timeouts = [
            (&t.connect, "connect", &mut c.timeouts.connect),
            (
                &t.response_headers,
                "response_headers",
                &mut c.timeouts.response_headers,
            ),
            (&t.idle, "idle", &mut c.timeouts.idle),
            (
                &t.client_header_read,
                "client_header_read",
                &mut c.timeouts.client_header_read,
            ),
            (&t.client_idle, "client_idle", &mut c.timeouts.client_idle),
            (
                &t.request_body_idle,
                "request_body_idle",
                &mut c.timeouts.request_body_idle,
            ),
            (
                &t.upstream_idle,
                "upstream_idle",
                &mut c.timeouts.upstream_idle,
            ),
            (
                &t.metrics_send,
                "metrics_send",
                &mut c.timeouts.metrics_send,
            ),
        ];
        for (raw, key, slot) in timeouts {
            if let Some(s) = raw {
                *slot = duration_at(&format!("timeouts.{key}"), &s.0)?;
            }
        }
        let limits = self.limits.unwrap_or_default();
        if let Some(s) = &limits.max_request_header_bytes {
            let key = "limits.max_request_header_bytes";
            c.limits.max_request_header_bytes = size_at(key, &s.0)?;
        }
        if let Some(s) = &limits.max_request_body_bytes {
            let key = "limits.max_request_body_bytes";
            c.limits.max_request_body_bytes = size_at(key, &s.0)? as u64;
        }
        c.limits.max_connections = limits.max_connections.unwrap_or(c.limits.max_connections);
        let l = &mut c.limits;
        l.max_upstream_connections = limits
            .max_upstream_connections
            .unwrap_or(l.max_upstream_connections);
        l.max_concurrent_streams = limits
            .max_concurrent_streams
            .unwrap_or(l.max_concurrent_streams);
        l.max_upstream_per_connection = limits.max_upstream_per_connection;
        if let Some(s) = &limits.hold_request_body_bytes {
            l.hold_request_body_bytes = size_at("limits.hold_request_body_bytes", &s.0)? as u64;
        }
        if let Some(s) = &limits.max_held_request_bytes {
            l.max_held_request_bytes = size_at("limits.max_held_request_bytes", &s.0)? as u64;
        }
        l.max_metrics_connections = limits
            .max_metrics_connections
            .unwrap_or(l.max_metrics_connections);
        if let Some(s) = &self.shutdown_grace {
            c.shutdown_grace = duration_at("shutdown_grace", &s.0)?;
        }
        let metering = self.metering.unwrap_or_default();
        if let Some(s) = &metering.max_event_bytes {
            c.metering.max_event_bytes = size_at("metering.max_event_bytes", &s.0)?;
        }
        if let Some(s) = &metering.model_scan_bytes {
            c.metering.model_scan_bytes = size_at("metering.model_scan_bytes", &s.0)?;
        }
        let metrics = self.metrics.unwrap_or_default();
        if let Some(s) = metrics.model_idle {
            c.metrics.model_idle = idle_at("metrics.model_idle", &s.0)?;
        }
        c.metrics.max_series = metrics.max_series.unwrap_or(c.metrics.max_series);
        if let Some(hosts) = metrics.allowed_hosts {
            c.metrics.allowed_hosts = hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
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
            time_to_first_answer: slo.time_to_first_answer,
        }
        .convert("slo")?;
        for (name, raw) in slo.models.unwrap_or_default().0 {
            let ceilings = raw.convert(&format!("slo.models.{name}"))?;
            c.slo.models.insert(name, ceilings);
        }
        c.tokenizers = self.tokenizers.unwrap_or_default().0;
        c.tokenizer_dirs = self.tokenizer_dirs;
        c.request_log = self.request_log.map(RawRequestLog::convert).transpose()?;
        if let Some(raw) = self.tenants {
            for (name, ceilings) in raw.slo.unwrap_or_default().0 {
                let ceilings = ceilings.convert(&format!("tenants.slo.{name}"))?;
                c.slo.tenants.insert(name, ceilings);
            }
            let from = match (raw.header, raw.bearer_hash.unwrap_or(false)) {
                (Some(header), false) => TenantFrom::Header(header.to_ascii_lowercase()),
                (None, true) => TenantFrom::BearerHash,
                (Some(header), true) => {
                    let reason = "set either `header` or `bearer_hash: true`, not both";
                    return Err(invalid("tenants.header", "value", &header, reason));
                }
                (None, false) => {
                    let reason = "say where the tenant comes from: `header: x-tenant-id` or `bearer_hash: true`";
                    return Err(invalid("tenants", "value", "{}", reason));
                }
            };
            c.tenants = Some(Tenants {
                from,
                max: raw.max.unwrap_or(Tenants::DEFAULT_MAX),
                hash_key: raw.hash_key,
                allow: raw.allow.unwrap_or_default(),
            });
        }
        let ui = self.ui.unwrap_or_default();
        c.ui.enabled = ui.enabled.unwrap_or(c.ui.enabled);
        c.ui.max_models = ui.max_models.unwrap_or(c.ui.max_models);
        let durations = [
            (&ui.interval, "interval", &mut c.ui.interval),
            (&ui.history, "history", &mut c.ui.history),
            (&ui.window, "window", &mut c.ui.window),
        ];
        for (raw, key, slot) in durations {
            if let Some(s) = raw {
                *slot = duration_at(&format!("ui.{key}"), &s.0)?;
            }
        }
        Ok(c)
    }
}

impl RawRequestLog {
    fn convert(self) -> Result<RequestLog, ConfigError> {
        let path = match self.path {
            Some(p) if p.as_os_str() == "-" => RecordPath::Stdout,
            Some(p) => RecordPath::File(p),
            None => {
                let reason = "request_log needs a `path`: a file, or \"-\" for standard output";
                return Err(invalid("request_log.path", "path", "", reason));
            }
        };
        let mut log = RequestLog::new(path);
        log.gaps = self.gaps.unwrap_or(log.gaps);
        log.max_gaps = self.max_gaps.unwrap_or(log.max_gaps);
        log.queue = self.queue.unwrap_or(log.queue);
        Ok(log)
    }
}
