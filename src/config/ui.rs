//! `ui:`: the live page on the metrics port, its snapshots' pace and reach, and their checks.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{format_duration, invalid, values, ConfigError};

/// The live page on the metrics port (`/` and `/api/v1/live`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Ui {
    /// Serve the page and its JSON; `false`: both answer 404 and no snapshots are taken.
    pub enabled: bool,
    /// Time between two snapshots of the series.
    #[serde(with = "values::duration")]
    pub interval: Duration,
    /// How far back the page's history reaches (`history / interval` snapshots are kept).
    #[serde(with = "values::duration")]
    pub history: Duration,
    /// The trailing window the page's figures cover by default (`?window=` overrides it).
    #[serde(with = "values::duration")]
    pub window: Duration,
    /// Models kept in the history (the most requested ones), and as many (model, tenant) pairs.
    pub max_models: usize,
    /// A Prometheus that scrapes the fleet (with the shipped recording rules): the page then shows the
    /// fleet's table from it, beside this replica's charts. `None`: no fleet table.
    pub prometheus: Option<String>,
}

impl Default for Ui {
    fn default() -> Self {
        Ui {
            enabled: true,
            interval: Duration::from_secs(5),
            history: Duration::from_secs(30 * 60),
            window: Duration::from_secs(60),
            max_models: 10,
            prometheus: None,
        }
    }
}

impl Ui {
    /// The most snapshots `history` may hold, whatever `interval`.
    pub const MAX_POINTS: usize = 8640;
    pub const MAX_MODELS: usize = 100;

    /// Snapshots kept: `history / interval`, at least 2.
    pub fn points(&self) -> usize {
        let n = self.history.as_millis() / self.interval.as_millis().max(1);
        usize::try_from(n)
            .unwrap_or(Self::MAX_POINTS)
            .clamp(2, Self::MAX_POINTS)
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let interval = format_duration(self.interval);
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&self.interval) {
            let reason = "must be between 1s and 1m";
            return Err(invalid("ui.interval", "duration", &interval, reason));
        }
        let history = format_duration(self.history);
        let points = self.history.as_millis() / self.interval.as_millis();
        if self.history < self.interval * 2 || points > Self::MAX_POINTS as u128 {
            let reason = format!(
                "must hold between 2 and {} snapshots of ui.interval ({interval})",
                Self::MAX_POINTS
            );
            return Err(invalid("ui.history", "duration", &history, reason));
        }
        if self.window < self.interval || self.window > self.history {
            let window = format_duration(self.window);
            let reason =
                format!("must be between ui.interval ({interval}) and ui.history ({history})");
            return Err(invalid("ui.window", "duration", &window, reason));
        }
        if !(1..=Self::MAX_MODELS).contains(&self.max_models) {
            let value = self.max_models.to_string();
            let reason = "must be between 1 and 100";
            return Err(invalid("ui.max_models", "value", &value, reason));
        }
        if let Some(url) = &self.prometheus {
            if let Err(reason) = prometheus_base(url) {
                return Err(invalid("ui.prometheus", "URL", url, reason));
            }
        }
        Ok(())
    }
}

/// The base URL of a Prometheus (`http://prometheus:9090`, a path prefix kept), without a trailing `/`:
/// plain `http://` with a host, as Prometheus serves its API inside a cluster.
pub fn prometheus_base(url: &str) -> Result<&str, &'static str> {
    let base = url.trim_end_matches('/');
    match format!("{base}/api/v1/query").parse::<http::Uri>() {
        Ok(uri)
            if uri.scheme_str() == Some("http") && uri.host().is_some_and(|h| !h.is_empty()) =>
        {
            Ok(base)
        }
        _ => Err("must be an http:// URL of a Prometheus server"),
    }
}
