//! Many replicas, proven: three tokentap replicas (in-process, each with its own port, metrics and
//! record file) in front of one scripted upstream, one load spread unevenly over them, and a real
//! Prometheus (Debian's `prometheus`) scraping all three with deploy/prometheus's rules. What PromQL
//! says of the fleet is what the union of the three replicas' records says:
//!
//! - **Exactly, over the cumulative series** (no `rate()`): requests, goodput and each ceiling's misses
//!   per model are the records' counts; the goodput ratio and every ceiling's attainment follow; the p99
//!   TTFT of `histogram_quantile` over the three replicas' summed buckets is the one the records'
//!   TTFTs give in the same buckets, and the records' own nearest-rank p99 lies in the bucket it
//!   interpolates in ("at bucket edges"). No replica alone has the union's figures: it is a sum.
//! - **The shipped recording rules** (goodput ratio, TTFT miss ratio, p99 TTFT, requests/s, all
//!   `rate(...[5m])`) evaluated over the fleet: `rate()` extrapolates each replica's increase to the
//!   window by a factor that depends on when its scrapes fell, the same for every series of one
//!   replica (the priming load makes it so, as in tests/prometheus.rs) and different between replicas.
//!   So the rules give the union of the measured load's records with each replica's records weighted
//!   by its factor, which the test reads from Prometheus (its request counter's `increase` over its
//!   own request count); to 1e-9. The rules' expressions are read from the rule file and evaluated at
//!   one instant in the past, so no scrape can land between the rules and the check.
//!
//! Then `tokentap top --prometheus` (the binary) shows the fleet from that Prometheus: both models,
//! the three targets up, and the recording rules' goodput ratio; and so does a fourth tokentap's live
//! page (`ui.prometheus` set to it), on `/api/v1/fleet`.
//!
//! Skipped, with a message, only when `prometheus` is not on PATH; `.ci/run` installs it and sets
//! TOKENTAP_REQUIRE_PROMETHEUS=1, which turns the skip into a failure.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use support::*;
use tokentap::Running;

const CHAT: &str = "/v1/chat/completions";
const MODELS: [&str; 2] = ["m1", "m2"];
const REPLICAS: usize = 3;
/// Requests per load.
const REQUESTS: usize = 60;
/// Between request starts.
const PACE: Duration = Duration::from_millis(25);
/// TTFT buckets 0.1, 0.2 (the ceiling), 0.3, 1; ITL ceiling 150 ms.
const CONFIG: &str =
    "slo: {ttft: 200ms, itl: 150ms}\nbuckets: {ttft: [0.1, 0.3, 1]}\nmax_models: 4\n";
const TTFT_BOUNDS: [f64; 4] = [0.1, 0.2, 0.3, 1.0];

/// Request `n`: every fourth has its first token after 330 ms (over the TTFT ceiling, in the bucket
/// (0.3, 1]), every fifth stalls 250 ms between two tokens (over the ITL ceiling); the others have
/// their first token after 20 ms and tokens 10 ms apart. Wide margins: a busy machine cannot move a
/// request to another bucket or verdict.
fn script(n: usize) -> Vec<Step> {
    let first = if n % 4 == 3 { 330 } else { 20 };
    let mut steps = vec![
        sse_head(),
        chunk(ROLE_CHUNK.as_bytes()),
        Step::Sleep(ms(first)),
    ];
    for i in 0..5 {
        if i > 0 {
            steps.push(Step::Sleep(ms(if n % 5 == 2 && i == 2 { 250 } else { 10 })));
        }
        steps.push(chunk(content_chunk(&format!("t{i}")).as_bytes()));
    }
    steps.push(chunk(usage_chunk(10, 5).as_bytes()));
    steps.push(chunk(DONE.as_bytes()));
    steps.push(last_chunk());
    steps
}

/// Which replica request `n` goes to: unevenly, so each replica sees another mix.
fn replica(n: usize) -> usize {
    [0, 0, 1, 1, 2, 2, 2][n % 7]
}

fn model(n: usize) -> &'static str {
    MODELS[(n / 3) % 2]
}

/// Sends the load, each request to its replica, and checks each ended cleanly.
async fn drive(replicas: &[Running]) {
    let client = client();
    let mut tasks = Vec::new();
    for n in 0..REQUESTS {
        let body = format!(
            "{{\"model\":\"{}\",\"stream\":true,\"seed\":{n},\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}",
            model(n)
        );
        let request = post(&replicas[replica(n)], CHAT, &body);
        let client = client.clone();
        tasks.push(tokio::spawn(async move { send(&client, request).await }));
        tokio::time::sleep(PACE).await;
    }
    for task in tasks {
        let got = task.await.expect("request task");
        assert_eq!((got.status, got.end), (200, Ok(())));
    }
    for proxy in replicas {
        settle(proxy).await;
    }
}

/// What a set of records says, per model.
#[derive(Debug, Default, Clone)]
struct Tally {
    requests: f64,
    good: f64,
    missed: BTreeMap<String, f64>,
    ttfts: Vec<f64>,
}

impl Tally {
    fn add(&mut self, record: &Value) {
        self.requests += 1.0;
        self.good += f64::from(u8::from(record["goodput"] == true));
        for slo in record["slo_missed"].as_array().into_iter().flatten() {
            *self
                .missed
                .entry(slo.as_str().unwrap_or("").to_owned())
                .or_default() += 1.0;
        }
        if let Some(ttft) = record["ttft_s"].as_f64() {
            self.ttfts.push(ttft);
        }
    }

    fn missed(&self, slo: &str) -> f64 {
        self.missed.get(slo).copied().unwrap_or(0.0)
    }

    /// Cumulative counts at each TTFT bound and +Inf, as the histogram's `_bucket` series count.
    fn buckets(&self) -> Vec<f64> {
        let mut counts: Vec<f64> = TTFT_BOUNDS
            .iter()
            .map(|&le| self.ttfts.iter().filter(|&&t| t <= le).count() as f64)
            .collect();
        counts.push(self.ttfts.len() as f64);
        counts
    }
}

fn tallies<'a>(records: impl Iterator<Item = &'a Value>) -> BTreeMap<String, Tally> {
    let mut by_model: BTreeMap<String, Tally> = BTreeMap::new();
    for record in records {
        let model = record["model"].as_str().expect("model").to_owned();
        by_model.entry(model).or_default().add(record);
    }
    by_model
}

/// Prometheus' `histogram_quantile` (bucketQuantile) over cumulative counts at TTFT_BOUNDS and +Inf.
fn histogram_quantile(q: f64, cumulative: &[f64]) -> f64 {
    let total = cumulative[cumulative.len() - 1];
    let rank = q * total;
    let finite = &cumulative[..cumulative.len() - 1];
    let Some(b) = finite.iter().position(|&c| c >= rank) else {
        return TTFT_BOUNDS[TTFT_BOUNDS.len() - 1];
    };
    let (start, below) = match b {
        0 => (0.0, 0.0),
        _ => (TTFT_BOUNDS[b - 1], cumulative[b - 1]),
    };
    start + (TTFT_BOUNDS[b] - start) * ((rank - below) / (cumulative[b] - below))
}

/// The nearest-rank `q` quantile (the value at rank ⌈q·n⌉).
fn nearest_rank(q: f64, values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
    sorted[rank - 1]
}

/// The value of `result` whose `label` is `value`.
fn by_label(result: &[(Value, f64)], label: &str, value: &str) -> f64 {
    result
        .iter()
        .find(|(labels, _)| labels[label] == value)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no {label}={value} in {result:?}"))
}

/// The recording rules' expressions by the name they record, with the recorded series a rule reads
/// replaced by their own expressions, so every one evaluates on raw series alone.
fn rule_expressions() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/prometheus/rules/tokentap-recording.yml");
    let text = std::fs::read_to_string(path).expect("rules");
    let rules: serde_yaml::Value = serde_yaml::from_str(&text).expect("rules YAML");
    let mut expressions = BTreeMap::new();
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let record = rule["record"].as_str().expect("record").to_owned();
            let expr = rule["expr"].as_str().expect("expr").trim().to_owned();
            expressions.insert(record, expr);
        }
    }
    let inner: Vec<(String, String)> = expressions
        .iter()
        .filter(|(name, _)| name.starts_with("model_le:"))
        .map(|(n, e)| (n.clone(), e.clone()))
        .collect();
    for expr in expressions.values_mut() {
        for (name, inner_expr) in &inner {
            *expr = expr.replace(name.as_str(), &format!("({inner_expr})"));
        }
    }
    expressions
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
        "{what}: PromQL {got}, records {want}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_add_up_in_promql_to_the_union_of_their_records() {
    let _slot = slot();
    if !prometheus_installed("three_replicas_*") {
        return;
    }
    let upstream = upstream(|request| script(seed(request))).await;
    let mut replicas = Vec::new();
    let mut files: Vec<PathBuf> = Vec::new();
    for r in 0..REPLICAS {
        let path =
            std::env::temp_dir().join(format!("tokentap-replica-{r}-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let yaml = format!("{CONFIG}request_log: {{path: {}}}\n", path.display());
        replicas.push(proxy(&upstream.url(), &yaml).await);
        files.push(path);
    }
    let per_replica: Vec<usize> = (0..REPLICAS)
        .map(|r| (0..REQUESTS).filter(|&n| replica(n) == r).count())
        .collect();

    drive(&replicas).await; // priming (module comment)
    let ports: Vec<u16> = replicas.iter().map(|p| p.metrics_addr().port()).collect();
    let mut prom = Prometheus::start(&ports);
    prom.wait_until(
        "the first scrapes have the priming load",
        "sum(tokentap_requests_total)",
        |v| v == REQUESTS as f64,
    )
    .await;
    drive(&replicas).await; // the measured load
    prom.wait_until(
        "the scrapes have the measured load",
        "sum(tokentap_requests_total)",
        |v| v == 2.0 * REQUESTS as f64,
    )
    .await;
    // An instant every scrape before it has been written: the last scrape that saw the measured
    // load is at least 2 s before it, and no scrape that started before it is still in flight.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let at = now() - 2.0;

    let all: Vec<Vec<Value>> = (0..REPLICAS)
        .map(|r| read_json_records(&files[r], 2 * per_replica[r]))
        .collect();
    let union = tallies(all.iter().flatten());
    assert_eq!(
        union.keys().collect::<Vec<_>>(),
        MODELS.iter().collect::<Vec<_>>()
    );

    // Exact, over the cumulative series of the three replicas.
    let requests = prom
        .query_at("sum by (model) (tokentap_requests_total)", at)
        .await;
    let good = prom
        .query_at("sum by (model) (tokentap_goodput_requests_total)", at)
        .await;
    let p99 = prom
        .query_at(
            "histogram_quantile(0.99, sum by (le, model) (tokentap_time_to_first_token_seconds_bucket))",
            at,
        )
        .await;
    for (model, tally) in &union {
        assert_eq!(
            by_label(&requests, "model", model),
            tally.requests,
            "{model}"
        );
        assert_eq!(
            by_label(&good, "model", model),
            tally.good,
            "{model} goodput"
        );
        for slo in ["ttft", "itl"] {
            let missed = prom
                .query_at(
                    &format!(
                        "sum(tokentap_slo_violations_total{{model=\"{model}\",slo=\"{slo}\"}})"
                    ),
                    at,
                )
                .await;
            assert_eq!(missed[0].1, tally.missed(slo), "{model} {slo} misses");
            assert!(tally.missed(slo) > 0.0, "the load misses {slo}");
        }
        let promql = by_label(&p99, "model", model);
        close(
            &format!("{model} p99 TTFT"),
            promql,
            histogram_quantile(0.99, &tally.buckets()),
        );
        let exact = nearest_rank(0.99, &tally.ttfts);
        let edge = TTFT_BOUNDS
            .iter()
            .position(|&le| promql <= le)
            .expect("a finite bucket");
        let lower = if edge == 0 {
            0.0
        } else {
            TTFT_BOUNDS[edge - 1]
        };
        assert!(
            lower < exact && exact <= TTFT_BOUNDS[edge],
            "{model}: the records' p99 {exact} lies in the bucket ({lower}, {}] of PromQL's {promql}",
            TTFT_BOUNDS[edge]
        );
    }
    // No replica alone gives the fleet's goodput ratio: the figures above are a sum.
    let ratios = prom
        .query_at(
            "sum by (instance) (tokentap_goodput_requests_total) / sum by (instance) (tokentap_requests_total)",
            at,
        )
        .await;
    let fleet: f64 = union.values().map(|t| t.good).sum::<f64>()
        / union.values().map(|t| t.requests).sum::<f64>();
    assert_eq!(ratios.len(), REPLICAS);
    assert!(
        ratios.iter().all(|(_, r)| (r - fleet).abs() > 1e-6),
        "{ratios:?} vs {fleet}"
    );

    // The recording rules over the measured load: the union with each replica weighted by its rate()
    // extrapolation factor.
    let measured: Vec<BTreeMap<String, Tally>> = (0..REPLICAS)
        .map(|r| tallies(all[r][per_replica[r]..].iter()))
        .collect();
    let increases = prom
        .query_at(
            "sum by (instance, model) (increase(tokentap_requests_total[5m]))",
            at,
        )
        .await;
    let mut factor = [0.0; REPLICAS];
    for (r, port) in ports.iter().enumerate() {
        let instance = format!("127.0.0.1:{port}");
        let mut factors = Vec::new();
        for (model, tally) in &measured[r] {
            let increase = increases
                .iter()
                .find(|(l, _)| l["instance"] == instance.as_str() && l["model"] == model.as_str())
                .map(|(_, v)| *v)
                .expect("an increase per replica and model");
            factors.push(increase / tally.requests);
        }
        factor[r] = factors[0];
        for f in &factors {
            close(
                &format!("replica {r}: one factor for every series"),
                *f,
                factor[r],
            );
        }
        assert!(
            (1.0..1.5).contains(&factor[r]),
            "replica {r}: factor {}",
            factor[r]
        );
    }
    let weighted = |model: &str, of: &dyn Fn(&Tally) -> f64| -> f64 {
        (0..REPLICAS)
            .map(|r| measured[r].get(model).map_or(0.0, |t| factor[r] * of(t)))
            .sum()
    };
    let rules = rule_expressions();
    let mut rows = Vec::new();
    for model in MODELS {
        let rule = |name: &str| {
            let expr = rules[name].clone();
            let prom = &prom;
            async move { by_label(&prom.query_at(&expr, at).await, "model", model) }
        };
        let goodput = rule("model:tokentap_goodput:ratio_rate5m").await;
        let want = weighted(model, &|t| t.good) / weighted(model, &|t| t.requests);
        close(&format!("{model} goodput ratio rule"), goodput, want);
        let ttft_misses = rule("model:tokentap_slo_violations_ttft:ratio_rate5m").await;
        let want_misses = (weighted(model, &|t| t.missed("ttft"))
            / weighted(model, &|t| t.ttfts.len() as f64))
        .min(1.0);
        close(
            &format!("{model} TTFT miss ratio rule"),
            ttft_misses,
            want_misses,
        );
        let p99 = rule("model:tokentap_time_to_first_token_seconds:p99_rate5m").await;
        let buckets: Vec<f64> = (0..=TTFT_BOUNDS.len())
            .map(|i| weighted(model, &|t| t.buckets()[i]))
            .collect();
        close(
            &format!("{model} p99 TTFT rule"),
            p99,
            histogram_quantile(0.99, &buckets),
        );
        let rate = rule("model:tokentap_requests:rate5m").await;
        close(
            &format!("{model} requests/s rule"),
            rate,
            weighted(model, &|t| t.requests) / 300.0,
        );
        let unweighted = {
            let t: Vec<&Tally> = measured.iter().filter_map(|m| m.get(model)).collect();
            t.iter().map(|t| t.good).sum::<f64>() / t.iter().map(|t| t.requests).sum::<f64>()
        };
        rows.push(format!(
            "{model}: goodput ratio {goodput:.6} (records unweighted {unweighted:.6}), TTFT misses {ttft_misses:.6}, p99 TTFT {p99:.6}"
        ));
    }

    // The fleet view from this Prometheus: `tokentap top --prometheus`.
    let top = std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args([
            "top",
            "--prometheus",
            &format!("http://{}", prom.addr),
            "--once",
        ])
        .output()
        .expect("tokentap top");
    let table = String::from_utf8_lossy(&top.stdout);
    assert!(top.status.success(), "{top:?}");
    assert!(table.contains("3/3 targets up"), "{table}");
    for model in MODELS {
        let line = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(model))
            .unwrap_or_else(|| panic!("no line for {model}:\n{table}"));
        // GOODPUT, the ninth figure: the rule's latest value (it moves a little with every
        // evaluation, as each replica's extrapolation does: a point either side).
        let shown: f64 = line
            .split_whitespace()
            .nth(9)
            .and_then(|c| c.strip_suffix('%'))
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no goodput in {line}"));
        let rule = prom
            .query(&format!(
                "model:tokentap_goodput:ratio_rate5m{{model=\"{model}\"}}"
            ))
            .await;
        assert!(
            (shown / 100.0 - rule[0].1).abs() < 0.01,
            "{model}: top shows {shown}%, the rule {}",
            rule[0].1
        );
    }
    // The same fleet on a live page: a tokentap whose `ui.prometheus` is this Prometheus serves
    // the rules' figures at /api/v1/fleet (it is not scraped itself: still three targets).
    let yaml = format!("{CONFIG}ui: {{prometheus: http://{}}}\n", prom.addr);
    let page = proxy(&upstream.url(), &yaml).await;
    let addr = page.metrics_addr();
    let get = format!("GET /api/v1/fleet HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    let answer = raw_exchange(addr, get.as_bytes()).await;
    let (_, body) = raw_split(&answer);
    assert_eq!(
        raw_status(&answer),
        200,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let fleet: Value = serde_json::from_slice(&body).expect("the fleet's JSON");
    assert_eq!(
        (fleet["up"].as_f64(), fleet["targets"].as_f64()),
        (Some(3.0), Some(3.0))
    );
    let columns = fleet["columns"].as_array().expect("columns");
    let goodput = columns
        .iter()
        .position(|c| c["record"] == "model:tokentap_goodput:ratio_rate5m")
        .expect("a goodput column");
    let shown: BTreeMap<&str, f64> = fleet["models"]
        .as_array()
        .expect("models")
        .iter()
        .filter_map(|m| Some((m["model"].as_str()?, m["values"][goodput].as_f64()?)))
        .collect();
    assert_eq!(shown.keys().copied().collect::<Vec<_>>(), MODELS, "{fleet}");
    for model in MODELS {
        let rule = prom
            .query(&format!(
                "model:tokentap_goodput:ratio_rate5m{{model=\"{model}\"}}"
            ))
            .await;
        assert!(
            (shown[model] - rule[0].1).abs() < 0.01,
            "{model}: the page shows {}, the rule {}",
            shown[model],
            rule[0].1
        );
    }
    eprintln!("replicas: factors {factor:?}; {}\n{table}", rows.join("; "));
    for path in files {
        let _ = std::fs::remove_file(path);
    }
}
