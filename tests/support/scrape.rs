//! The Prometheus text format, read back: one scrape of tokentap's `/metrics` as samples to look up.

use std::collections::HashMap;
use tokentap::record::metrics::family;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokentap::Running;

use super::client::client;

pub async fn scrape(proxy: &Running) -> Metrics {
    let response = client()
        .request(
            http::Request::get(format!("http://{}/metrics", proxy.metrics_addr()))
                .body(Full::new(Bytes::new()))
                .expect("request"),
        )
        .await
        .expect("scrape");
    let text = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .to_vec(),
    )
    .expect("utf-8 exposition");
    Metrics::parse(&text)
}

/// Waits (at most 10 s) until tokentap holds the upstream's model list of `n` names.
pub async fn listed(proxy: &Running, n: f64) {
    for _ in 0..200 {
        if scrape(proxy).await.get(family::MODELS_LISTED.name, &[]) == n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("tokentap did not list {n} models within 10 s");
}

/// The samples of one scrape: (name, labels) → value.
pub struct Metrics {
    pub text: String,
    samples: Vec<(String, HashMap<String, String>, f64)>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut samples = Vec::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let (series, value) = line.rsplit_once(' ').expect("sample line");
            let value: f64 = value.parse().expect("sample value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let rest = rest.trim_end_matches('}');
                    let labels = rest
                        .split("\",")
                        .filter(|kv| !kv.is_empty())
                        .filter_map(|kv| kv.split_once('='))
                        .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
                        .collect();
                    (name.to_owned(), labels)
                }
                None => (series.to_owned(), HashMap::new()),
            };
            samples.push((name, labels, value));
        }
        Metrics {
            text: text.to_owned(),
            samples,
        }
    }

    /// Sum of every sample of `name` whose labels include all of `labels`.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| *v)
            .sum()
    }

    /// `tokentap_requests_total` for one model, status and outcome (summed over the other labels).
    pub fn requests(&self, model: &str, status: &str, outcome: &str) -> f64 {
        let labels = [("model", model), ("status", status), ("outcome", outcome)];
        self.get(family::REQUESTS.name, &labels)
    }

    /// `tokentap_requests_total` for one status and outcome, over every model.
    pub fn requests_with(&self, status: &str, outcome: &str) -> f64 {
        let labels = [("status", status), ("outcome", outcome)];
        self.get(family::REQUESTS.name, &labels)
    }

    /// The values `label` takes on the samples of `name`, sorted, each once.
    pub fn label_values(&self, name: &str, label: &str) -> Vec<String> {
        let mut values: Vec<String> = (self.samples.iter())
            .filter(|(n, _, _)| n == name)
            .filter_map(|(_, l, _)| l.get(label).cloned())
            .collect();
        values.sort();
        values.dedup();
        values
    }

    pub fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.samples.iter().any(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
    }
}
