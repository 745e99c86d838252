//! A real Prometheus (Debian's `prometheus` binary) on loopback, for the tests that read tokentap's
//! figures back through PromQL: its own temporary directory, deploy/prometheus's recording and alert
//! rules loaded, scraping the given metrics ports every second, killed and removed on drop; and the
//! HTTP API's instant queries.

use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use serde_json::Value;

use super::client::{body_bytes, client};
use super::HANG;

/// True when `prometheus` runs; false (with a message) when it is not installed, unless CI requires it.
pub fn prometheus_installed(test: &str) -> bool {
    match Command::new("prometheus").arg("--version").output() {
        Ok(out) if out.status.success() => true,
        Ok(out) => panic!("`prometheus --version` failed: {out:?}"),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if std::env::var_os("TOKENTAP_REQUIRE_PROMETHEUS").is_some() {
                panic!("TOKENTAP_REQUIRE_PROMETHEUS is set but `prometheus` is not on PATH");
            }
            eprintln!(
                "SKIPPED {test}: `prometheus` is not on PATH \
                 (Debian: apt-get install prometheus; .ci/run does)"
            );
            false
        }
        Err(err) => panic!("running `prometheus --version`: {err}"),
    }
}

/// A Prometheus server on 127.0.0.1 with its own temporary directory, killed and removed on drop.
pub struct Prometheus {
    child: Child,
    dir: PathBuf,
    pub addr: String,
}

impl Prometheus {
    /// Starts Prometheus scraping tokentap's metrics port at each of `target_ports` (job `tokentap`).
    pub fn start(target_ports: &[u16]) -> Prometheus {
        Prometheus::with_features(target_ports, &[])
    }

    /// [`Prometheus::start`] with `--enable-feature` flags (`exemplar-storage`, `native-histograms`).
    pub fn with_features(target_ports: &[u16], features: &[&str]) -> Prometheus {
        super::assert_held("Prometheus::start");
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "tokentap-prometheus-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let targets: Vec<String> = target_ports
            .iter()
            .map(|port| format!("'127.0.0.1:{port}'"))
            .collect();
        let targets = targets.join(", ");
        let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/rules");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n  - {}\n\
             scrape_configs:\n  - job_name: tokentap\n    static_configs:\n      - targets: [{targets}]\n",
            rules.join("tokentap-recording.yml").display(),
            rules.join("tokentap-alerts.yml").display(),
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("write config");
        // A free port: bind :0, read it, release it. Prometheus binds it a moment later.
        let port = StdListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("log file");
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .args(features.iter().map(|f| format!("--enable-feature={f}")))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        Prometheus {
            child,
            dir,
            addr: format!("127.0.0.1:{port}"),
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    pub async fn get(&self, path_and_query: &str) -> Value {
        let request = http::Request::get(format!("http://{}{path_and_query}", self.addr))
            .body(Full::new(Bytes::new()))
            .expect("request");
        let response = tokio::time::timeout(HANG, client().request(request))
            .await
            .expect("prometheus answers")
            .expect("prometheus response");
        let body = body_bytes(response).await;
        serde_json::from_slice(&body).expect("prometheus JSON")
    }

    /// An instant query; the values of the vector it returns, with their labels.
    pub async fn query(&self, expr: &str) -> Vec<(Value, f64)> {
        self.query_path(
            &format!("/api/v1/query?query={}", percent_encode(expr)),
            expr,
        )
        .await
    }

    /// An instant query evaluated at `time` (seconds since the epoch).
    pub async fn query_at(&self, expr: &str, time: f64) -> Vec<(Value, f64)> {
        let path = format!(
            "/api/v1/query?query={}&time={time:.3}",
            percent_encode(expr)
        );
        self.query_path(&path, expr).await
    }

    async fn query_path(&self, path: &str, expr: &str) -> Vec<(Value, f64)> {
        let answer = self.get(path).await;
        assert_eq!(answer["status"], "success", "{expr}: {answer}");
        answer["data"]["result"]
            .as_array()
            .expect("vector")
            .iter()
            .map(|s| {
                let value = s["value"][1].as_str().expect("value").parse().expect("f64");
                (s["metric"].clone(), value)
            })
            .collect()
    }

    /// `/api/v1/query_exemplars` over the last hour: each series' labels and its exemplars' labels
    /// and values.
    pub async fn exemplars(&self, expr: &str) -> Vec<(Value, Vec<(Value, f64)>)> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let path = format!(
            "/api/v1/query_exemplars?query={}&start={:.3}&end={:.3}",
            percent_encode(expr),
            now - 3600.0,
            now + 60.0
        );
        let answer = self.get(&path).await;
        assert_eq!(answer["status"], "success", "{expr}: {answer}");
        let series = answer["data"].as_array().cloned().unwrap_or_default();
        series
            .iter()
            .map(|s| {
                let kept = s["exemplars"].as_array().cloned().unwrap_or_default();
                let kept = kept
                    .iter()
                    .map(|e| {
                        let value = e["value"].as_str().expect("value").parse().expect("f64");
                        (e["labels"].clone(), value)
                    })
                    .collect();
                (s["seriesLabels"].clone(), kept)
            })
            .collect()
    }

    /// A recorded per-model series: exactly one, labelled model="m" and nothing else.
    pub async fn query_model(&self, record: &str) -> f64 {
        let result = self.query(record).await;
        assert_eq!(result.len(), 1, "{record}: {result:?}");
        let (labels, value) = &result[0];
        assert_eq!(
            labels,
            &serde_json::json!({"__name__": record, "model": "m"}),
            "{record}: labels"
        );
        *value
    }

    /// Waits (at most [`HANG`]) until `expr` returns one sample for which `done` holds.
    pub async fn wait_until(&mut self, what: &str, expr: &str, done: impl Fn(f64) -> bool) {
        let deadline = Instant::now() + HANG;
        let mut last = None;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("prometheus exited ({status}):\n{}", self.log());
            }
            if self.ready().await {
                let result = self.query(expr).await;
                if let [(_, value)] = result.as_slice() {
                    if done(*value) {
                        return;
                    }
                }
                last = Some(result);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "waited {HANG:?} for {what} ({expr}); last answer {last:?}\nprometheus log:\n{}",
            self.log()
        );
    }

    pub async fn ready(&self) -> bool {
        let request = http::Request::get(format!("http://{}/-/ready", self.addr))
            .body(Full::new(Bytes::new()))
            .expect("request");
        matches!(
            tokio::time::timeout(Duration::from_secs(2), client().request(request)).await,
            Ok(Ok(response)) if response.status() == 200
        )
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
