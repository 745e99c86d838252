//! `tokentap top --prometheus URL`: the fleet's figures as a terminal table, without Grafana. Where
//! `tokentap top` reads one replica's live page, this reads every replica at once through Prometheus'
//! HTTP API (`/api/v1/query`): the shipped recording rules (deploy/prometheus/rules), which already sum
//! the replicas' histograms and counters per model before any quantile or ratio is taken, so the
//! figures are the fleet's, not an average of replicas'. One line a model; above it, the targets up
//! and the requests in flight.
//!
//! Everything printed that Prometheus sent (model names, error text) is cleaned of control characters
//! first; answers are read up to [`MAX_BODY`] and within [`TIMEOUT`] each.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokentap::report::render::printable;

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("{0}: not an http:// URL of a Prometheus server")]
    Url(String),
    #[error("{url}: {error}")]
    Fetch { url: String, error: String },
}

/// How long one query may take, head to last byte.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read (a vector of a few hundred models is a few hundred KiB).
const MAX_BODY: usize = 16 << 20;
/// Between tables: the recording rules are evaluated every `evaluation_interval` (15 s in
/// deploy/prometheus/prometheus.yml), so a faster redraw shows nothing new.
const PAUSE: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, PartialEq, Debug)]
enum Unit {
    Seconds,
    PerSecond,
    Share,
}

/// A column: its header and the recorded series (per model) it shows.
struct Column {
    header: &'static str,
    record: &'static str,
    unit: Unit,
}

const COLUMNS: [Column; 11] = [
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
const UP: &str = "count(up{job=\"tokentap\"} == 1)";
const TARGETS: &str = "count(up{job=\"tokentap\"})";
const IN_FLIGHT: &str = "sum(tokentap_requests_in_flight)";

/// What one round of queries found.
#[derive(Debug, Default, PartialEq)]
pub struct Fleet {
    pub up: Option<f64>,
    pub targets: Option<f64>,
    pub in_flight: Option<f64>,
    /// Each model's value of each column (`None`: no sample, or not a number, such as 0/0).
    pub models: BTreeMap<String, Vec<Option<f64>>>,
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

/// Shows the fleet's figures from the Prometheus at `base` (e.g. `http://prometheus:9090`, or with
/// a path prefix), once or every [`PAUSE`]. The windows are the recording rules' (`--window` is
/// refused with `--prometheus` on the command line).
pub async fn run(base: &str, once: bool) -> Result<(), FleetError> {
    let base = base.trim_end_matches('/');
    let probe: http::Uri = format!("{base}/api/v1/query")
        .parse()
        .map_err(|_| FleetError::Url(clean(base)))?;
    if probe.scheme_str() != Some("http") {
        return Err(FleetError::Url(clean(base)));
    }
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    loop {
        let fleet = gather(&client, base).await?;
        let table = render(base, &fleet);
        let mut out = std::io::stdout().lock();
        let clear = if once { "" } else { "\x1b[H\x1b[2J" };
        if write!(out, "{clear}{table}")
            .and_then(|()| out.flush())
            .is_err()
            || once
        {
            return Ok(());
        }
        drop(out);
        tokio::time::sleep(PAUSE).await;
    }
}

async fn gather(client: &HttpClient, base: &str) -> Result<Fleet, FleetError> {
    let single = |answer: Vec<(String, f64)>| answer.first().map(|(_, v)| *v);
    let mut fleet = Fleet {
        up: single(query(client, base, UP).await?),
        targets: single(query(client, base, TARGETS).await?),
        in_flight: single(query(client, base, IN_FLIGHT).await?),
        models: BTreeMap::new(),
    };
    for (i, column) in COLUMNS.iter().enumerate() {
        for (model, value) in query(client, base, column.record).await? {
            let row = fleet
                .models
                .entry(model)
                .or_insert_with(|| vec![None; COLUMNS.len()]);
            row[i] = value.is_finite().then_some(value);
        }
    }
    Ok(fleet)
}

/// One instant query; its samples as (the `model` label, value).
async fn query(
    client: &HttpClient,
    base: &str,
    expr: &str,
) -> Result<Vec<(String, f64)>, FleetError> {
    let url = format!("{base}/api/v1/query?query={}", encode(expr));
    let fail = |error: String| FleetError::Fetch {
        url: clean(&format!("{base}/api/v1/query?query={expr}")),
        error: clean(&error),
    };
    let uri: http::Uri = url.parse().map_err(|_| FleetError::Url(clean(base)))?;
    let body = tokio::time::timeout(TIMEOUT, async {
        let response = client.get(uri).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok::<_, String>((status, body))
    })
    .await
    .map_err(|_| fail(format!("no whole answer within {} s", TIMEOUT.as_secs())))?
    .map_err(fail)?;
    let (status, body) = body;
    let answer: Value = serde_json::from_slice(&body)
        .map_err(|e| fail(format!("{status}: not Prometheus' API answer: {e}")))?;
    samples(&answer).map_err(|e| fail(format!("{status}: {e}")))
}

/// The samples of an instant query's answer (`resultType` `vector`): the `model` label (empty when
/// the series has none) and the value (`NaN` for a value that is not a number).
pub fn samples(answer: &Value) -> Result<Vec<(String, f64)>, String> {
    if answer["status"] != "success" {
        let error = answer["error"].as_str().unwrap_or("no error text");
        return Err(format!("Prometheus answered an error: {error}"));
    }
    let result = answer["data"]["result"]
        .as_array()
        .ok_or("no data.result vector in the answer")?;
    Ok(result
        .iter()
        .map(|sample| {
            let model = sample["metric"]["model"].as_str().unwrap_or("");
            let value = sample["value"][1].as_str().and_then(|v| v.parse().ok());
            (model.to_owned(), value.unwrap_or(f64::NAN))
        })
        .collect())
}

/// `text` with every control character (an escape sequence a label could carry) shown as `?`.
/// What Prometheus (or the URL given) said, made safe to print: see [`printable`].
fn clean(text: &str) -> String {
    printable(text).into_owned()
}

fn encode(expr: &str) -> String {
    expr.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn cell(value: Option<f64>, unit: Unit) -> String {
    match (value, unit) {
        (None, _) => "-".into(),
        (Some(s), Unit::Seconds) if s >= 1.0 => format!("{s:.2}s"),
        (Some(s), Unit::Seconds) => format!("{:.0}ms", s * 1000.0),
        (Some(v), Unit::PerSecond) => format!("{v:.2}"),
        (Some(v), Unit::Share) => format!("{:.1}%", v * 100.0),
    }
}

/// The table: a header line, then one line a model with its figures.
pub fn render(base: &str, fleet: &Fleet) -> String {
    let mut out = String::new();
    let count = |v: Option<f64>| v.map_or("?".to_owned(), |v| format!("{v:.0}"));
    let _ = writeln!(
        out,
        "tokentap top · fleet from {} · {}/{} targets up · {} in flight · recording rules (5m, rates 1m)\n",
        clean(base),
        count(fleet.up),
        count(fleet.targets),
        count(fleet.in_flight),
    );
    let _ = write!(out, "{:<28}", "MODEL");
    for column in &COLUMNS {
        let _ = write!(out, " {:>8}", column.header);
    }
    out.push('\n');
    for (model, values) in &fleet.models {
        let mut name = clean(model);
        if name.is_empty() {
            name = "(no model label)".into();
        }
        if name.chars().count() > 28 {
            name = name.chars().take(27).collect::<String>() + "…";
        }
        let _ = write!(out, "{name:<28}");
        for (column, value) in COLUMNS.iter().zip(values) {
            let _ = write!(out, " {:>8}", cell(*value, column.unit));
        }
        out.push('\n');
    }
    if fleet.models.is_empty() {
        out.push_str(
            "(no recorded figures yet: are the recording rules loaded, and tokentap scraped?)\n",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vector(samples: &[(&str, &str)]) -> Value {
        let result: Vec<Value> = samples
            .iter()
            .map(|(model, v)| json!({"metric": {"model": model}, "value": [1764752442.5, v]}))
            .collect();
        json!({"status": "success", "data": {"resultType": "vector", "result": result}})
    }

    #[test]
    fn samples_are_read_from_an_instant_vector_and_errors_are_said() {
        let answer = vector(&[("llama", "0.75"), ("qwen", "NaN")]);
        let got = samples(&answer).expect("samples");
        assert_eq!(got[0], ("llama".to_owned(), 0.75));
        assert!(got[1].1.is_nan());
        let error = json!({"status": "error", "errorType": "bad_data", "error": "parse error"});
        assert_eq!(
            samples(&error),
            Err("Prometheus answered an error: parse error".to_owned())
        );
        assert!(samples(&json!({"status": "success"})).is_err());
    }

    #[test]
    fn the_table_has_a_line_a_model_with_each_rule_in_its_column() {
        let mut models = BTreeMap::new();
        let mut row = vec![None; COLUMNS.len()];
        row[0] = Some(2.5); // requests/s
        row[2] = Some(0.972); // p99 TTFT
        row[5] = Some(1.25); // p50 E2E
        row[8] = Some(0.75); // goodput ratio
        models.insert("llama\x1b[2J".to_owned(), row);
        let fleet = Fleet {
            up: Some(3.0),
            targets: Some(3.0),
            in_flight: Some(4.0),
            models,
        };
        let table = render("http://prometheus:9090", &fleet);
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[0].contains("fleet from http://prometheus:9090 · 3/3 targets up · 4 in flight"),
            "{table}"
        );
        assert!(
            lines[2].starts_with("MODEL ") && lines[2].contains("GOODPUT"),
            "{table}"
        );
        let cells: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "llama\\u{1b}[2J",
                "2.50",
                "-",
                "972ms",
                "-",
                "-",
                "1.25s",
                "-",
                "-",
                "75.0%",
                "-",
                "-"
            ],
            "{table}"
        );
        assert!(
            !table.contains('\x1b'),
            "no escape sequence from a label reaches the terminal"
        );
        let empty = render("http://p", &Fleet::default());
        assert!(empty.contains("?/? targets up") && empty.contains("(no recorded figures yet"));
    }

    #[test]
    fn every_column_is_a_shipped_recording_rule() {
        let rules = include_str!("../../../deploy/prometheus/rules/tokentap-recording.yml");
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
}
