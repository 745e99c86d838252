//! `otlp_metrics:`: the GenAI server metrics and tokentap's own figures pushed with OTLP/HTTP to a
//! collector every `interval` (docs/tracing.md, "Metrics over OTLP"), beside the Prometheus page.
//! Absent by default. The endpoint, headers, timeout and service name are read and checked as
//! `traces:` reads its own (`traces.rs`), so a collector that takes one takes the other.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::traces::{check_otlp, otlp_url, Headers};
use super::{format_duration, invalid, values, Compression, ConfigError};

/// `otlp_metrics:`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpMetrics {
    /// Required: the collector's OTLP/HTTP base URL; metrics are posted to `{endpoint}/v1/metrics` (a
    /// URL that already ends in `/v1/metrics` is used as it is).
    pub endpoint: String,
    /// Headers sent with every export (an API key, a tenant): their values are never logged.
    pub headers: Headers,
    /// How long one export may take, connecting included; then it is dropped and counted.
    #[serde(with = "values::duration")]
    pub timeout: Duration,
    /// `gzip` or `none`: the body's `Content-Encoding`.
    pub compression: Compression,
    /// The resource's `service.name`.
    pub service_name: String,
    /// How often the metrics are exported.
    #[serde(with = "values::duration")]
    pub interval: Duration,
    /// `cumulative` (every export carries the totals since the series began) or `delta` (what changed
    /// since the last export the collector accepted).
    pub temporality: Temporality,
}

/// How an export's values relate to the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Temporality {
    Cumulative,
    Delta,
}

impl Default for OtlpMetrics {
    fn default() -> Self {
        OtlpMetrics {
            endpoint: String::new(),
            headers: Headers::default(),
            timeout: Duration::from_secs(5),
            compression: Compression::Gzip,
            service_name: "tokentap".to_owned(),
            interval: Duration::from_secs(60),
            temporality: Temporality::Cumulative,
        }
    }
}

impl OtlpMetrics {
    /// The URL metrics are posted to: `{endpoint}/v1/metrics`, or the endpoint itself when it names
    /// that path.
    pub fn export_url(&self) -> Result<http::Uri, String> {
        otlp_url(&self.endpoint, "metrics")
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let (endpoint, headers) = (&self.endpoint, &self.headers);
        check_otlp(
            "otlp_metrics",
            endpoint,
            headers,
            self.timeout,
            &self.service_name,
        )?;
        if !(Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&self.interval) {
            let value = format_duration(self.interval);
            let reason = "must be between 10ms and 1h";
            return Err(invalid("otlp_metrics.interval", "duration", &value, reason));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    #[test]
    fn off_by_default_checked_as_traces_is_and_posted_to_v1_metrics() {
        assert_eq!(Config::default().otlp_metrics, None);
        let config = Config::from_yaml_str("otlp_metrics: {endpoint: http://c:4318}").unwrap();
        let metrics = config.otlp_metrics.unwrap();
        assert_eq!(metrics.temporality, Temporality::Cumulative);
        assert_eq!(metrics.interval, Duration::from_secs(60));
        assert_eq!(
            metrics.export_url().unwrap().to_string(),
            "http://c:4318/v1/metrics"
        );
        for (yaml, want) in [
            ("otlp_metrics: {}", "otlp_metrics.endpoint: invalid URL \"\": otlp_metrics needs an `endpoint`"),
            ("otlp_metrics: {endpoint: 'ftp://c'}", "otlp_metrics.endpoint: invalid URL \"ftp://c\": must start with http:// or https://"),
            ("otlp_metrics: {endpoint: http://c, interval: 2h}", "otlp_metrics.interval: invalid duration \"7200s\": must be between 10ms and 1h"),
            ("otlp_metrics: {endpoint: http://c, temporality: gauge}", "otlp_metrics.temporality: must be `cumulative` or `delta`, not `gauge`"),
            ("otlp_metrics: {endpoint: http://c, headers: {Content-Type: x}}", "otlp_metrics.headers.Content-Type: invalid header name \"Content-Type\": is set by tokentap itself"),
        ] {
            let got = Config::from_yaml_str(yaml).map(|_| ()).unwrap_err().to_string();
            assert!(got.contains(want), "{yaml}: {got}");
        }
    }
}
