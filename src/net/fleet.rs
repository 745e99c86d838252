//! The fleet's figures, read from Prometheus: what `tokentap top --prometheus URL` prints and the live
//! page's fleet table shows (`ui.prometheus`). Where the rest of the live page is the replica that
//! serves it, these are every replica at once, through Prometheus' HTTP API (`/api/v1/query`) and the
//! shipped recording rules (deploy/prometheus/rules), which sum the replicas' histograms and counters
//! per model before any quantile or ratio is taken: the fleet's figures, not an average of replicas'.
//!
//! Each answer is read up to [`MAX_BODY`] and parsed into the few fields the table shows (never a JSON
//! tree of the whole answer: 16 MiB of samples made +565 MiB of one), at most [`MAX_MODELS`] rows are
//! kept, and a round of queries runs within [`TIMEOUT`]. For the page, a
//! [`FleetPage`] asks at most once per [`FleetPage::EVERY`] however many browsers refresh, and keeps a
//! failure as long as a result, so a page left open on a Prometheus that is down does not hammer it.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::prometheus_base;
use crate::logging::printable::printable as shown;

/// What Prometheus (or the URL given) said, safe to print ([`shown`]).
fn printable(text: &str) -> String {
    shown(text).into_owned()
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum FleetError {
    #[error("{0}: not an http:// URL of a Prometheus server")]
    Url(String),
    #[error("{url}: {error}")]
    Fetch { url: String, error: String },
}

/// How long one round of queries may take, first head to last byte.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read: a vector of a thousand models is about 150 KiB.
const MAX_BODY: usize = 4 << 20;
/// The most models one answer gives the table; a Prometheus with more is cut there (in name order).
pub const MAX_MODELS: usize = 1000;

/// How a column's values read.
#[derive(Clone, Copy, PartialEq, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Seconds,
    PerSecond,
    Share,
}

/// A column: its header, the recorded series (per model) it shows, and its unit.
#[derive(Debug, Serialize)]
pub struct Column {
    pub header: &'static str,
    pub record: &'static str,
    pub unit: Unit,
}

pub const COLUMNS: [Column; 11] = [
    Column {
        header: "REQ/S",
        record: "model:tokentap_requests:rate1m",
        unit: Unit::PerSecond,
    },
    Column {
        header: "TTFT50",
        record: "model:tokentap_time_to_first_token_seconds:p50_rate5m",
        unit: Unit::Seconds,
    },
    Column {
        header: "TTFT99",
        record: "model:tokentap_time_to_first_token_seconds:p99_rate5m",
        unit: Unit::Seconds,
    },
    Column {
        header: "ITL50",
        record: "model:tokentap_inter_token_latency_seconds:p50_rate5m",
        unit: Unit::Seconds,
    },
    Column {
        header: "TPOT50",
        record: "model:tokentap_time_per_output_token_seconds:p50_rate5m",
        unit: Unit::Seconds,
    },
    Column {
        header: "E2E50",
        record: "model:tokentap_e2e_request_latency_seconds:p50_rate5m",
        unit: Unit::Seconds,
    },
    Column {
        header: "IN/S",
        record: "model:tokentap_input_tokens:rate1m",
        unit: Unit::PerSecond,
    },
    Column {
        header: "OUT/S",
        record: "model:tokentap_output_tokens:rate1m",
        unit: Unit::PerSecond,
    },
    Column {
        header: "GOODPUT",
        record: "model:tokentap_goodput:ratio_rate5m",
        unit: Unit::Share,
    },
    Column {
        header: "FAILED",
        record: "model:tokentap_requests_failed:ratio_rate5m",
        unit: Unit::Share,
    },
    Column {
        header: "CANCEL",
        record: "model:tokentap_requests_cancelled:ratio_rate5m",
        unit: Unit::Share,
    },
];

/// The fleet-wide figures outside the per-model rules.
pub const UP: &str = "count(up{job=\"tokentap\"} == 1)";
pub const TARGETS: &str = "count(up{job=\"tokentap\"})";
pub const IN_FLIGHT: &str = "sum(tokentap_requests_in_flight)";

/// What one round of queries found.
#[derive(Debug, Default, PartialEq)]
pub struct Fleet {
    pub up: Option<f64>,
    pub targets: Option<f64>,
    pub in_flight: Option<f64>,
    /// Each model's value of each column (`None`: no sample, or not a number, such as 0/0).
    pub models: BTreeMap<String, Vec<Option<f64>>>,
}

/// A Prometheus to read the fleet's figures from.
#[derive(Clone)]
pub struct Prometheus {
    base: String,
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl Prometheus {
    /// The Prometheus at `base` (`http://prometheus:9090`, a path prefix kept): an `http://` URL.
    pub fn new(base: &str) -> Result<Prometheus, FleetError> {
        let base = prometheus_base(base).map_err(|_| FleetError::Url(printable(base)))?;
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        Ok(Prometheus {
            base: base.to_owned(),
            client,
        })
    }

    /// The URL given, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// One round of queries: the targets up, the requests in flight, and each column per model.
    pub async fn fleet(&self) -> Result<Fleet, FleetError> {
        let round = async {
            let single = |answer: Vec<(String, f64)>| answer.first().map(|(_, v)| *v);
            let mut fleet = Fleet {
                up: single(self.query(UP).await?),
                targets: single(self.query(TARGETS).await?),
                in_flight: single(self.query(IN_FLIGHT).await?),
                models: BTreeMap::new(),
            };
            for (i, column) in COLUMNS.iter().enumerate() {
                for (model, value) in self.query(column.record).await? {
                    let row = fleet
                        .models
                        .entry(model)
                        .or_insert_with(|| vec![None; COLUMNS.len()]);
                    row[i] = value.is_finite().then_some(value);
                }
            }
            Ok(fleet)
        };
        tokio::time::timeout(TIMEOUT, round)
            .await
            .unwrap_or_else(|_| {
                Err(FleetError::Fetch {
                    url: printable(&self.base),
                    error: format!("no whole answer within {} s", TIMEOUT.as_secs()),
                })
            })
    }

    /// One instant query; its samples as (the `model` label, value).
    async fn query(&self, expr: &str) -> Result<Vec<(String, f64)>, FleetError> {
        let base = &self.base;
        let fail = |error: String| FleetError::Fetch {
            url: printable(&format!("{base}/api/v1/query?query={expr}")),
            error: printable(&error),
        };
        let url = format!("{base}/api/v1/query?query={}", encode(expr));
        let uri: http::Uri = url.parse().map_err(|_| FleetError::Url(printable(base)))?;
        let response = self
            .client
            .get(uri)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| fail(e.to_string()))?
            .to_bytes();
        samples(&body).map_err(|e| fail(format!("{status}: {e}")))
    }
}

/// An instant query's answer (Prometheus' HTTP API): only the fields the table reads; every other
/// field and label is skipped unread.
#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    data: Option<Data>,
}

#[derive(Deserialize)]
struct Data {
    result: Vec<Sample>,
}

#[derive(Deserialize)]
struct Sample {
    #[serde(default)]
    metric: Labels,
    /// `[time, "value"]`.
    value: (serde::de::IgnoredAny, String),
}

#[derive(Deserialize, Default)]
struct Labels {
    #[serde(default)]
    model: Option<String>,
}

/// The samples of an instant query's answer (`resultType` `vector`): the `model` label (empty when
/// the series has none) and the value (`NaN` for a value that is not a number), the first
/// [`MAX_MODELS`] in name order.
pub fn samples(answer: &[u8]) -> Result<Vec<(String, f64)>, String> {
    let answer: Answer =
        serde_json::from_slice(answer).map_err(|e| format!("not Prometheus' API answer: {e}"))?;
    if answer.status != "success" {
        let error = answer.error.as_deref().unwrap_or("no error text");
        return Err(format!("Prometheus answered an error: {error}"));
    }
    let result = answer
        .data
        .ok_or("no data.result vector in the answer")?
        .result;
    let mut samples: Vec<(String, f64)> = result
        .into_iter()
        .map(|sample| {
            let value = sample.value.1.parse().unwrap_or(f64::NAN);
            (sample.metric.model.unwrap_or_default(), value)
        })
        .collect();
    if samples.len() > MAX_MODELS {
        samples.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        samples.truncate(MAX_MODELS);
    }
    Ok(samples)
}

/// A query's text percent-encoded for the URL (every byte but RFC 3986's unreserved ones).
pub fn encode(expr: &str) -> String {
    expr.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The JSON of `GET /api/v1/fleet` (docs/live.md, "The fleet").
#[derive(Serialize)]
struct FleetJson<'a> {
    version: u32,
    prometheus: &'a str,
    /// When the round of queries ended, Unix seconds.
    fetched_at: f64,
    up: Option<f64>,
    targets: Option<f64>,
    in_flight: Option<f64>,
    columns: &'a [Column],
    models: Vec<ModelRow<'a>>,
}

#[derive(Serialize)]
struct ModelRow<'a> {
    model: &'a str,
    values: &'a [Option<f64>],
}

/// The fleet as the live page reads it.
pub fn to_json(prometheus: &str, fleet: &Fleet, fetched_at: SystemTime) -> Bytes {
    let json = FleetJson {
        version: 1,
        prometheus,
        fetched_at: fetched_at
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        up: fleet.up,
        targets: fleet.targets,
        in_flight: fleet.in_flight,
        columns: &COLUMNS,
        models: fleet
            .models
            .iter()
            .map(|(model, values)| ModelRow { model, values })
            .collect(),
    };
    // A struct of strings, numbers and options: serializing it cannot fail.
    Bytes::from(serde_json::to_vec(&json).unwrap_or_default())
}

/// The live page's fleet table behind `ui.prometheus`: one round of queries at a time, and at most one
/// per [`FleetPage::EVERY`], shared by every browser that asks; a failure is kept as long.
pub struct FleetPage {
    prometheus: Prometheus,
    last: Mutex<Option<(Instant, Result<Bytes, FleetError>)>>,
}

impl FleetPage {
    /// How long one answer is served: the recording rules change once per evaluation interval
    /// (15 s in deploy/prometheus/prometheus.yml), so asking more often shows nothing new.
    pub const EVERY: Duration = Duration::from_secs(5);

    pub fn new(prometheus: Prometheus) -> FleetPage {
        FleetPage {
            prometheus,
            last: Mutex::new(None),
        }
    }

    /// The fleet's JSON, from the last round if it is younger than [`FleetPage::EVERY`], else from a
    /// new one (those who ask meanwhile wait for it, bounded by [`TIMEOUT`]).
    pub async fn answer(&self) -> Result<Bytes, FleetError> {
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = last.as_ref() {
            if at.elapsed() < Self::EVERY {
                return answer.clone();
            }
        }
        let answer = self
            .prometheus
            .fleet()
            .await
            .map(|fleet| to_json(self.prometheus.base(), &fleet, SystemTime::now()));
        if let Err(err) = &answer {
            tracing::warn!(%err, "the live page's fleet table: Prometheus did not answer");
        }
        *last = Some((Instant::now(), answer.clone()));
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn vector(samples: &[(&str, &str)]) -> Vec<u8> {
        let result: Vec<Value> = samples
            .iter()
            .map(|(model, v)| json!({"metric": {"model": model, "job": "tokentap"}, "value": [1764752442.5, v]}))
            .collect();
        let answer =
            json!({"status": "success", "data": {"resultType": "vector", "result": result}});
        answer.to_string().into_bytes()
    }

    #[test]
    fn samples_are_read_from_an_instant_vector_and_errors_are_said() {
        let answer = vector(&[("llama", "0.75"), ("qwen", "NaN")]);
        let got = samples(&answer).expect("samples");
        assert_eq!(got[0], ("llama".to_owned(), 0.75));
        assert!(got[1].1.is_nan());
        let unlabelled =
            br#"{"status":"success","data":{"result":[{"metric":{},"value":[1,"3"]}]}}"#;
        assert_eq!(samples(unlabelled), Ok(vec![(String::new(), 3.0)]));
        let error = json!({"status": "error", "errorType": "bad_data", "error": "parse error"});
        assert_eq!(
            samples(error.to_string().as_bytes()),
            Err("Prometheus answered an error: parse error".to_owned())
        );
        assert!(samples(br#"{"status": "success"}"#).is_err());
        assert!(samples(b"<html>").is_err());
    }

    #[test]
    fn an_answer_with_more_models_than_the_table_keeps_the_first_in_name_order() {
        let names: Vec<String> = (0..MAX_MODELS + 500)
            .rev()
            .map(|i| format!("m{i:05}"))
            .collect();
        let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
        let got = samples(&vector(&many)).expect("samples");
        assert_eq!(got.len(), MAX_MODELS);
        assert_eq!(got[0].0, "m00000");
        assert_eq!(got[MAX_MODELS - 1].0, format!("m{:05}", MAX_MODELS - 1));
    }

    #[test]
    fn every_column_is_a_shipped_recording_rule() {
        let rules = include_str!("../../deploy/prometheus/rules/tokentap-recording.yml");
        for column in &COLUMNS {
            assert!(
                rules.contains(&format!("record: {}\n", column.record)),
                "{} is not recorded by deploy/prometheus/rules",
                column.record
            );
        }
    }

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(
            encode(UP),
            "count%28up%7Bjob%3D%22tokentap%22%7D%20%3D%3D%201%29"
        );
    }

    #[test]
    fn only_an_http_url_with_a_host_is_a_prometheus() {
        assert!(Prometheus::new("http://prometheus:9090/").is_ok());
        assert_eq!(
            Prometheus::new("http://p/prefix/").map(|p| p.base().to_owned()),
            Ok("http://p/prefix".to_owned())
        );
        for bad in [
            "https://p:9090",
            "prometheus:9090",
            "",
            "http://",
            "ftp://x",
        ] {
            assert!(
                matches!(Prometheus::new(bad), Err(FleetError::Url(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_json_has_the_columns_and_a_row_a_model_with_its_label_as_sent() {
        let mut models = BTreeMap::new();
        let mut row = vec![None; COLUMNS.len()];
        row[0] = Some(2.5);
        row[8] = Some(0.75);
        models.insert("llama\u{1b}[2J</script>".to_owned(), row);
        let fleet = Fleet {
            up: Some(3.0),
            targets: Some(3.0),
            in_flight: None,
            models,
        };
        let json = to_json(
            "http://p:9090",
            &fleet,
            UNIX_EPOCH + Duration::from_secs(10),
        );
        let v: Value = serde_json::from_slice(&json).expect("json");
        assert_eq!(v["version"], 1);
        assert_eq!(v["prometheus"], "http://p:9090");
        assert_eq!(v["fetched_at"], 10.0);
        assert_eq!(
            (v["up"].clone(), v["in_flight"].clone()),
            (json!(3.0), Value::Null)
        );
        assert_eq!(v["columns"].as_array().map(Vec::len), Some(COLUMNS.len()));
        assert_eq!(v["columns"][8]["header"], "GOODPUT");
        assert_eq!(v["columns"][8]["unit"], "share");
        assert_eq!(v["columns"][1]["unit"], "seconds");
        // The page writes names as text nodes; the JSON carries them as they came.
        assert_eq!(v["models"][0]["model"], "llama\u{1b}[2J</script>");
        assert_eq!(v["models"][0]["values"][0], 2.5);
        assert_eq!(v["models"][0]["values"][1], Value::Null);
    }

    #[tokio::test]
    async fn a_prometheus_that_is_not_there_is_asked_once_per_interval_and_said() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("port");
        let page =
            FleetPage::new(Prometheus::new(&format!("http://127.0.0.1:{port}")).expect("url"));
        let first = page.answer().await;
        let Err(FleetError::Fetch { url, .. }) = &first else {
            panic!("{first:?}");
        };
        assert!(url.contains("/api/v1/query?query=count(up"), "{url}");
        let at = page.last.lock().await.as_ref().map(|(at, _)| *at);
        assert_eq!(page.answer().await, first);
        let again = page.last.lock().await.as_ref().map(|(at, _)| *at);
        assert_eq!(at, again, "the failure was kept, not asked again");
    }
}
