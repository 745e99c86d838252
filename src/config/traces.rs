//! `traces:`: one span per finished request, exported with OTLP/HTTP (docs/tracing.md): where to, with
//! which headers, how spans are sampled at the end, and the bounds of the queue that keeps the export
//! off every request's way. Absent by default: without it tokentap draws no ids, builds no span and
//! leaves `traceparent` alone.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::section::section;
use super::{format_duration, invalid, values, ConfigError};

/// Headers sent with every OTLP export (`traces.headers`, `otlp_metrics.headers`): credentials, so
/// only their names are ever shown.
#[derive(Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Headers(pub BTreeMap<String, String>);

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// `traces:`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Traces {
    /// Required: the collector's OTLP/HTTP base URL; spans are posted to `{endpoint}/v1/traces` (a URL
    /// that already ends in `/v1/traces` is used as it is).
    pub endpoint: String,
    /// Headers sent with every export (an API key, a tenant): their values are never logged.
    pub headers: Headers,
    /// How long one export may take, connecting included; then its spans are dropped and counted.
    #[serde(with = "values::duration")]
    pub timeout: Duration,
    /// `gzip` or `none`: the body's `Content-Encoding`.
    pub compression: Compression,
    /// The resource's `service.name`.
    pub service_name: String,
    /// Which finished requests become spans.
    #[serde(deserialize_with = "section")]
    pub sample: Sample,
    /// Rewrite (or add) `traceparent` on the request sent upstream, so the server's span is the
    /// proxy span's child: the one exception to forwarding a request's bytes unchanged.
    pub propagate: bool,
    /// Spans waiting for the exporter; beyond them a span is dropped and counted.
    pub queue: usize,
    /// The most spans one export carries.
    pub batch: usize,
    /// The longest a span waits for its batch to fill before the batch is sent.
    #[serde(with = "values::duration")]
    pub interval: Duration,
}

/// The body's encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    Gzip,
    None,
}

/// `traces.sample`: decided when a request has ended, each rule on its own.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Sample {
    /// The share of all requests, chosen by trace id (as OpenTelemetry's `TraceIdRatioBased`), so
    /// replicas keep the same traces.
    pub ratio: f64,
    /// Every request whose `traceparent` says its caller samples the trace (flag `01`).
    pub parent: bool,
    /// Every request that missed an SLO ceiling.
    pub slo_misses: bool,
    /// Every request that failed: an outcome other than `ok`, or a status of 500 or more.
    pub failures: bool,
}

impl Default for Sample {
    fn default() -> Self {
        Sample {
            ratio: 1.0,
            parent: true,
            slo_misses: true,
            failures: true,
        }
    }
}

impl Default for Traces {
    fn default() -> Self {
        Traces {
            endpoint: String::new(),
            headers: Headers::default(),
            timeout: Duration::from_secs(5),
            compression: Compression::Gzip,
            service_name: "tokentap".to_owned(),
            sample: Sample::default(),
            propagate: false,
            queue: 2048,
            batch: 512,
            interval: Duration::from_secs(1),
        }
    }
}

/// Headers tokentap sets itself on an export.
const OWN_HEADERS: [&str; 5] = [
    "content-type",
    "content-encoding",
    "content-length",
    "host",
    "transfer-encoding",
];

impl Traces {
    const MAX_QUEUE: usize = 1 << 20;

    /// The URL spans are posted to: `{endpoint}/v1/traces`, or the endpoint itself when it names that path.
    pub fn export_url(&self) -> Result<http::Uri, String> {
        otlp_url(&self.endpoint, "traces")
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        check_otlp(
            "traces",
            &self.endpoint,
            &self.headers,
            self.timeout,
            &self.service_name,
        )?;
        if !(Duration::from_millis(1)..=Duration::from_secs(60)).contains(&self.interval) {
            let value = format_duration(self.interval);
            let reason = "must be between 1ms and 1m";
            return Err(invalid("traces.interval", "duration", &value, reason));
        }
        let ratio = self.sample.ratio;
        if !(0.0..=1.0).contains(&ratio) {
            let reason = "must be between 0 and 1 (0.01: one request in a hundred)";
            return Err(invalid(
                "traces.sample.ratio",
                "ratio",
                &ratio.to_string(),
                reason,
            ));
        }
        if !(1..=Self::MAX_QUEUE).contains(&self.queue) {
            let value = self.queue.to_string();
            let reason = "must be between 1 and 1048576";
            return Err(invalid("traces.queue", "value", &value, reason));
        }
        if !(1..=self.queue).contains(&self.batch) {
            let value = self.batch.to_string();
            let reason = format!("must be between 1 and traces.queue ({})", self.queue);
            return Err(invalid("traces.batch", "value", &value, reason));
        }
        Ok(())
    }
}

const ENDPOINT_EXAMPLE: &str = "e.g. \"http://otel-collector:4318\"";

/// The URL an OTLP/HTTP export of `signal` (`traces`, `metrics`) is posted to: `{endpoint}/v1/{signal}`,
/// or the endpoint itself when it names that path (as `OTEL_EXPORTER_OTLP_ENDPOINT` and its
/// per-signal forms are read).
pub(super) fn otlp_url(endpoint: &str, signal: &str) -> Result<http::Uri, String> {
    let bad = |reason: &str| format!("{reason} ({ENDPOINT_EXAMPLE})");
    let base = endpoint.trim_end_matches('/');
    let path = format!("/v1/{signal}");
    let url = match base.ends_with(&path) {
        true => base.to_owned(),
        false => format!("{base}{path}"),
    };
    let uri: http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(bad("must start with http:// or https://"));
    }
    match uri.authority() {
        Some(a) if a.as_str().contains('@') => Err(bad(
            "must not contain credentials (user:password@): use `headers`",
        )),
        Some(a) if !a.host().is_empty() => match uri.query() {
            Some(_) => Err(bad("must not contain a query")),
            None => Ok(uri),
        },
        _ => Err(bad("missing host")),
    }
}

/// The keys every OTLP/HTTP exporter's section has (`traces:`, `otlp_metrics:`), checked under
/// `section`'s name: the endpoint, the headers (never shown), the timeout and the service name.
pub(super) fn check_otlp(
    section: &str, endpoint: &str, headers: &Headers, timeout: Duration, service_name: &str,
) -> Result<(), ConfigError> {
    let key = |k: &str| format!("{section}.{k}");
    if endpoint.is_empty() {
        let reason = format!("{section} needs an `endpoint`: the collector's OTLP/HTTP URL, e.g. http://otel-collector:4318");
        return Err(invalid(&key("endpoint"), "URL", "", reason));
    }
    let signal = if section == "traces" {
        "traces"
    } else {
        "metrics"
    };
    if let Err(reason) = otlp_url(endpoint, signal) {
        let shown = match endpoint.contains('@') {
            true => "(not shown)",
            false => endpoint,
        };
        return Err(invalid(&key("endpoint"), "URL", shown, reason));
    }
    for (name, value) in &headers.0 {
        let key = key(&format!("headers.{name}"));
        let lower = name.to_ascii_lowercase();
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            let reason = "must be a header name such as authorization";
            return Err(invalid(&key, "header name", name, reason));
        }
        if OWN_HEADERS.contains(&lower.as_str()) {
            let reason = "is set by tokentap itself";
            return Err(invalid(&key, "header name", name, reason));
        }
        if http::HeaderValue::from_str(value).is_err() {
            let reason = "must be visible ASCII text (the value is not shown)";
            return Err(invalid(&key, "header value", "(not shown)", reason));
        }
    }
    if !(Duration::from_millis(1)..=Duration::from_secs(60)).contains(&timeout) {
        let value = format_duration(timeout);
        let reason = "must be between 1ms and 1m";
        return Err(invalid(&key("timeout"), "duration", &value, reason));
    }
    if service_name.is_empty()
        || service_name.len() > 256
        || service_name.chars().any(char::is_control)
    {
        let reason = "must be 1 to 256 bytes without control characters";
        return Err(invalid(&key("service_name"), "name", service_name, reason));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    fn err(yaml: &str) -> String {
        match Config::from_yaml_str(yaml) {
            Ok(_) => String::new(),
            Err(_) => crate::config::tests::err(yaml),
        }
    }

    #[test]
    fn off_by_default_and_each_key_with_its_default() {
        assert_eq!(Config::default().traces, None);
        let config = Config::from_yaml_str("traces: {endpoint: http://collector:4318}").unwrap();
        let traces = config.traces.unwrap();
        assert_eq!(
            traces,
            super::Traces {
                endpoint: "http://collector:4318".into(),
                ..super::Traces::default()
            }
        );
        assert_eq!(
            traces.export_url().unwrap().to_string(),
            "http://collector:4318/v1/traces"
        );
        let named = super::Traces {
            endpoint: "https://otlp.example.com/otlp/v1/traces/".into(),
            ..super::Traces::default()
        };
        assert_eq!(
            named.export_url().unwrap().to_string(),
            "https://otlp.example.com/otlp/v1/traces"
        );
    }

    #[test]
    fn a_bad_value_is_named_with_its_key_and_a_secret_is_never_shown() {
        for (yaml, want) in [
            ("traces: {}", "traces.endpoint: invalid URL \"\": traces needs an `endpoint`"),
            ("traces: {endpoint: grpc://c:4317}", "traces.endpoint: invalid URL \"grpc://c:4317\": must start with http:// or https://"),
            ("traces: {endpoint: 'http://c:4318?x=1'}", "traces.endpoint: invalid URL \"http://c:4318?x=1\": must not contain a query"),
            ("traces: {endpoint: http://c, sample: {ratio: 1.5}}", "traces.sample.ratio: invalid ratio \"1.5\": must be between 0 and 1"),
            ("traces: {endpoint: http://c, timeout: 2m}", "traces.timeout: invalid duration \"120s\": must be between 1ms and 1m"),
            ("traces: {endpoint: http://c, queue: 0}", "traces.queue: invalid value \"0\": must be between 1 and 1048576"),
            ("traces: {endpoint: http://c, queue: 10, batch: 11}", "traces.batch: invalid value \"11\": must be between 1 and traces.queue (10)"),
            ("traces: {endpoint: http://c, headers: {host: x}}", "traces.headers.host: invalid header name \"host\": is set by tokentap itself"),
            ("traces: {endpoint: http://c, compression: zstd}", "traces.compression: must be "),
            ("traces: {endpoint: http://c, sample: {rate: 1}}", "traces.sample.rate: not a key of `traces.sample:`"),
        ] {
            let got = err(yaml);
            assert!(got.starts_with(want), "{yaml}: {got}");
        }
        let secret =
            err("traces: {endpoint: http://c, headers: {authorization: \"Bearer sk-123\\n\"}}");
        assert!(
            secret
                .starts_with("traces.headers.authorization: invalid header value \"(not shown)\""),
            "{secret}"
        );
        assert!(!secret.contains("sk-123"), "{secret}");
        let userinfo = err("traces: {endpoint: 'http://user:sk-123@c:4318'}");
        assert!(
            userinfo.contains("(not shown)") && !userinfo.contains("sk-123"),
            "{userinfo}"
        );
        let config = Config::from_yaml_str(
            "traces: {endpoint: http://c, headers: {authorization: Bearer sk-123}}",
        )
        .unwrap();
        assert!(!format!("{config:?}").contains("sk-123"));
    }
}
