//! The files under deploy/ agree with the binary and with each other: every metric a rule or a dashboard
//! panel queries is one tokentap really exports (read off a live scrape) or one a recording rule
//! records; the dashboard's queries parse as PromQL; the PrometheusRule object carries exactly the rule
//! files' groups; the Kubernetes manifests' ports, probes, selectors and embedded configs fit tokentap;
//! the compose file mounts files that exist.

use crate::support;

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;
use support::*;
use tokentap::record::metrics::family;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(path: &str) -> Yaml {
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml_documents(path: &str) -> Vec<Yaml> {
    serde_yaml::Deserializer::from_str(&read(path))
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{path}: {e}")))
        .filter(|doc: &Yaml| !doc.is_null())
        .collect()
}

const RULE_FILES: [&str; 2] = [
    "deploy/prometheus/rules/tokentap-recording.yml",
    "deploy/prometheus/rules/tokentap-alerts.yml",
];

/// The one document of `kind` in `file`'s `docs`.
fn one<'a>(docs: &'a [Yaml], kind: &str, file: &str) -> &'a Yaml {
    let mut of_kind = docs.iter().filter(|d| d["kind"] == kind);
    match (of_kind.next(), of_kind.next()) {
        (Some(doc), None) => doc,
        _ => panic!("{file}: one {kind}"),
    }
}

/// The tokentap config a manifest's ConfigMap embeds, checked as tokentap checks it.
fn embedded_config(docs: &[Yaml], file: &str) -> tokentap::Config {
    let config_map = one(docs, "ConfigMap", file);
    tokentap::Config::from_yaml_str(str_of(&config_map["data"]["tokentap.yaml"]))
        .unwrap_or_else(|e| panic!("{file}: embedded tokentap.yaml: {e}"))
}

fn rule_groups() -> Vec<Yaml> {
    RULE_FILES
        .iter()
        .flat_map(|f| yaml(f)["groups"].as_sequence().expect("groups").clone())
        .collect()
}

fn rules() -> Vec<Yaml> {
    rule_groups()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules").clone())
        .collect()
}

fn str_of(v: &Yaml) -> &str {
    v.as_str().unwrap_or_default()
}

/// Names of series recorded by the recording rules.
fn recorded() -> HashSet<String> {
    rules()
        .iter()
        .filter_map(|r| r["record"].as_str().map(str::to_owned))
        .collect()
}

/// The identifiers in a PromQL expression that name tokentap series (metric or recorded names).
fn tokentap_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut in_string = None;
    let mut word = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if let Some(quote) = in_string {
            if c == quote {
                in_string = None;
            }
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if word.contains("tokentap") {
            names.insert(std::mem::take(&mut word));
        }
        word.clear();
        if c == '"' || c == '\'' || c == '`' {
            in_string = Some(c);
        }
    }
    names
}

/// Every metric name tokentap exports, read off the `# TYPE` lines of a live scrape after traffic that
/// creates every family (a request that misses an SLO, and one whose stream cannot be metered).
async fn exported_names() -> HashSet<String> {
    let upstream = upstream(|request| {
        if request.body.windows(7).any(|w| w == b"garbage") {
            vec![sse_head(), chunk(b"data: {not json\n\n"), last_chunk()]
        } else {
            // Reasoning first, then the answer, then vLLM's usage with cached tokens and its
            // per-request metrics: every family of the "inside the TTFT" rules exists; a tool call
            // for the agents' rules.
            let call = chat_delta(r#"{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]}"#);
            let reasoning = "data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n";
            let usage = "data: {\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":2}},\"metrics\":{\"queue_time_ms\":1.0,\"time_to_first_token_ms\":2.0,\"generation_time_ms\":5.0}}\n\n";
            vec![
                sse_head(),
                chunk(ROLE_CHUNK.as_bytes()),
                Step::Sleep(ms(30)),
                chunk(reasoning.as_bytes()),
                chunk(content_chunk("a").as_bytes()),
                chunk(content_chunk("b").as_bytes()),
                chunk(call.as_bytes()),
                chunk(usage.as_bytes()),
                chunk(DONE.as_bytes()),
                last_chunk(),
            ]
        }
    })
    .await;
    let proxy = proxy(&upstream.url(), "slo:\n  ttft: 10ms\n").await;
    let client = client();
    for model in ["m", "garbage"] {
        let got = send(
            &client,
            post(&proxy, "/v1/chat/completions", &chat_request(model)),
        )
        .await;
        assert_eq!(got.status, 200);
    }
    settle(&proxy).await;
    let metrics = scrape(&proxy).await;
    let mut names = HashSet::new();
    for line in metrics.text.lines() {
        let mut parts = line.split_whitespace();
        if let (Some("#"), Some("TYPE"), Some(name), Some(kind)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        {
            names.insert(name.to_owned());
            if kind == "histogram" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
        }
    }
    for family in [
        family::TTFT.name,
        family::TIME_TO_FIRST_ANSWER.name,
        family::TIME_TO_FIRST_TOOL_CALL.name,
        family::REASONING_TIME.name,
        family::CACHED_INPUT_TOKENS.name,
        family::OUTSIDE_SERVER.name,
        family::SLO_VIOLATIONS.name,
        family::METERING_SKIPPED.name,
        family::IN_FLIGHT.name,
    ] {
        assert!(names.contains(family), "{family} missing from the scrape");
    }
    // A session's families appear with its first WebSocket session, which this traffic has none of
    // (tests/realtime.rs scrapes them): they are held to their rows.
    for family in [&family::SESSIONS, &family::SESSIONS_IN_FLIGHT] {
        names.insert(family.name.to_owned());
    }
    names
}

fn dashboard() -> Json {
    serde_json::from_str(&read("deploy/grafana/tokentap-dashboard.json")).expect("dashboard JSON")
}

/// (where, expr) of every query in the dashboard: panel targets and template variables.
fn dashboard_queries() -> Vec<(String, String)> {
    let dashboard = dashboard();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr").to_owned();
            queries.push((format!("panel {:?}", panel["title"]), expr));
        }
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        if let Some(q) = var["query"]["query"].as_str() {
            queries.push((format!("variable {}", var["name"]), q.to_owned()));
        }
    }
    queries
}

/// The selectors and queries of the SLO objects `tokentap slo-objects` made (deploy/kubernetes/).
fn slo_object_queries() -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for slo in yaml_documents("deploy/kubernetes/pyrra-slos.yaml") {
        let ratio = &slo["spec"]["indicator"]["ratio"];
        for side in ["errors", "total"] {
            let place = format!("Pyrra {} {side}", str_of(&slo["metadata"]["name"]));
            queries.push((place, str_of(&ratio[side]["metric"]).to_owned()));
        }
    }
    let sloth = yaml("deploy/kubernetes/sloth-slos.yaml");
    for slo in sloth["spec"]["slos"].as_sequence().into_iter().flatten() {
        for side in ["errorQuery", "totalQuery"] {
            let place = format!("Sloth {} {side}", str_of(&slo["name"]));
            queries.push((place, str_of(&slo["sli"]["events"][side]).to_owned()));
        }
    }
    assert!(queries.len() >= 20, "{queries:?}");
    queries
}

#[tokio::test(start_paused = true)]
async fn rules_and_dashboard_query_only_series_that_exist() {
    let exported = exported_names().await;
    let recorded = recorded();
    let mut queries: Vec<(String, String)> = rules()
        .iter()
        .map(|r| {
            let name = r["record"].as_str().or(r["alert"].as_str()).unwrap_or("?");
            (format!("rule {name}"), str_of(&r["expr"]).to_owned())
        })
        .collect();
    queries.extend(dashboard_queries());
    queries.extend(slo_object_queries());
    assert!(queries.len() > 50, "only {} queries found", queries.len());
    for (place, expr) in &queries {
        let names = tokentap_names(expr);
        if !place.contains("TokentapTarget") && !expr.starts_with("vector(") {
            assert!(
                !names.is_empty(),
                "{place}: queries no tokentap series: {expr}"
            );
        }
        for name in names {
            assert!(
                exported.contains(&name) || recorded.contains(&name),
                "{place}: `{name}` is neither exported by tokentap nor recorded by a rule"
            );
        }
    }
}

#[test]
fn dashboard_is_importable_and_has_the_promised_panels() {
    let dashboard = dashboard();
    assert_eq!(dashboard["uid"], "tokentap-overview");
    let vars: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(vars, ["datasource", "model", "traces"]);
    let panels = dashboard["panels"].as_array().expect("panels");
    let ids: HashSet<u64> = panels.iter().filter_map(|p| p["id"].as_u64()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids must be unique");
    // The heatmaps sit in a row that Grafana repeats for every selected model.
    let repeated: Vec<&Json> = panels.iter().filter(|p| p["repeat"] == "model").collect();
    assert_eq!(repeated.len(), 1);
    assert_eq!(repeated[0]["type"], "row");
    let titles: Vec<&str> = panels.iter().filter_map(|p| p["title"].as_str()).collect();
    for wanted in [
        "TTFT p50 / p90 / p99 by model",
        "TTFT heatmap: $model",
        "ITL p50 / p90 / p99 by model",
        "ITL heatmap: $model",
        "TPOT p50 / p90 / p99 by model",
        "TPOT heatmap: $model",
        "Tokens/s by model",
        "Requests/s and goodput/s by model",
        "Goodput ratio vs target",
        "SLO violations by kind",
        "In flight by API",
        "Outcomes",
        "tokentap's own delay per frame",
    ] {
        assert!(titles.contains(&wanted), "no panel {wanted:?}");
    }
    // The model variable filters every panel whose series have a model label.
    for (place, expr) in dashboard_queries() {
        let has_model_label = !expr.contains(family::IN_FLIGHT.name)
            && !expr.contains("metering_skipped")
            && !expr.contains("forwarding_delay")
            && !expr.contains(family::SESSIONS_IN_FLIGHT.name)
            && !expr.contains("goodput_ratio:target")
            && place.starts_with("panel");
        assert_eq!(
            expr.contains("model=~\"$model\""),
            has_model_label,
            "{place}: {expr}"
        );
    }
}

/// promtool parses the dashboard's queries (Grafana's variables replaced by values), as recording rules.
#[test]
fn dashboard_queries_parse_as_promql() {
    if Command::new("promtool").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("TOKENTAP_REQUIRE_PROMETHEUS").is_none(),
            "TOKENTAP_REQUIRE_PROMETHEUS is set but promtool is not on PATH"
        );
        eprintln!("SKIPPED dashboard_queries_parse_as_promql: `promtool` is not on PATH");
        return;
    }
    let mut file = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (_, expr)) in dashboard_queries().iter().enumerate() {
        let expr = expr
            .replace("$__rate_interval", "1m")
            .replace("$model", ".*")
            .replace(
                "label_values(tokentap_requests_total, model)",
                family::REQUESTS.name,
            );
        file.push_str(&format!(
            "      - record: dashboard:query:{i}\n        expr: {}\n",
            serde_json::to_string(&expr).expect("quote")
        ));
    }
    let path = std::env::temp_dir().join(format!("tokentap-dashboard-{}.yml", std::process::id()));
    std::fs::write(&path, file).expect("write");
    let out = Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&path)
        .output()
        .expect("promtool");
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn prometheusrule_object_carries_exactly_the_rule_files() {
    let object = yaml("deploy/kubernetes/prometheusrule.yaml");
    assert_eq!(object["kind"], "PrometheusRule");
    assert_eq!(
        object["spec"]["groups"],
        Yaml::Sequence(rule_groups()),
        "deploy/kubernetes/prometheusrule.yaml differs from deploy/prometheus/rules: run python3 deploy/generate.py"
    );
}

#[test]
fn every_rule_is_named_and_every_alert_tells_on_call_what_and_where() {
    let all = rules();
    assert!(all.len() >= 40);
    let mut seen = HashSet::new();
    for rule in &all {
        if let Some(alert) = rule["alert"].as_str() {
            assert!(seen.insert(alert.to_owned()), "alert {alert} defined twice");
            let severity = str_of(&rule["labels"]["severity"]);
            assert!(
                ["critical", "warning", "info"].contains(&severity),
                "{alert}: severity {severity:?}"
            );
            let summary = str_of(&rule["annotations"]["summary"]);
            let description = str_of(&rule["annotations"]["description"]);
            assert!(summary.len() > 20, "{alert}: summary too short");
            assert!(description.len() > 150, "{alert}: description too short");
        } else {
            let record = str_of(&rule["record"]);
            assert_eq!(
                record.split(':').count(),
                3,
                "{record}: not level:metric:ops"
            );
        }
    }
    for alert in [
        "TokentapGoodputBudgetBurnFast",
        "TokentapGoodputBudgetBurnSlow",
        "TokentapTTFTAboveSLO",
        "TokentapITLAboveSLO",
        "TokentapTokenStreamStalls",
        "TokentapUpstreamErrors",
        "TokentapClientCancellations",
        "TokentapTargetDown",
    ] {
        assert!(seen.contains(alert), "no alert {alert}");
    }
}

/// Ports, probes, selectors and embedded configs of the Kubernetes manifests fit tokentap.
#[test]
fn kubernetes_manifests_fit_tokentap() {
    let monitor = yaml("deploy/kubernetes/servicemonitor.yaml");
    let job_label = str_of(&monitor["spec"]["jobLabel"]).to_owned();
    let monitor_port = str_of(&monitor["spec"]["endpoints"][0]["port"]).to_owned();
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");

    for file in [
        "deploy/kubernetes/standalone.yaml",
        "deploy/kubernetes/sidecar.yaml",
    ] {
        let docs = yaml_documents(file);
        let kind = |k: &str| -> Vec<&Yaml> { docs.iter().filter(|d| d["kind"] == k).collect() };
        let config = embedded_config(&docs, file);
        let deployment = one(&docs, "Deployment", file);
        let pod = &deployment["spec"]["template"];
        let pod_labels = &pod["metadata"]["labels"];
        assert_eq!(
            &deployment["spec"]["selector"]["matchLabels"], pod_labels,
            "{file}"
        );
        assert!(
            pod["spec"]["terminationGracePeriodSeconds"]
                .as_u64()
                .unwrap_or(30)
                > 30,
            "{file}: tokentap drains for up to 30 s; the grace period must be longer"
        );
        let containers = pod["spec"]["containers"].as_sequence().expect("containers");
        let tokentap = containers
            .iter()
            .find(|c| c["name"] == "tokentap")
            .unwrap_or_else(|| panic!("{file}: no tokentap container"));
        let port = |name: &str| {
            tokentap["ports"]
                .as_sequence()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == name)
                .and_then(|p| p["containerPort"].as_u64())
                .unwrap_or_else(|| panic!("{file}: no container port {name}"))
        };
        assert_eq!(port("proxy"), u64::from(config.listen.port()), "{file}");
        assert_eq!(
            port("metrics"),
            u64::from(config.metrics_listen.port()),
            "{file}"
        );
        for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
            assert_eq!(tokentap[probe]["httpGet"]["path"], path, "{file} {probe}");
            assert_eq!(
                tokentap[probe]["httpGet"]["port"], "metrics",
                "{file} {probe}"
            );
        }
        assert!(
            tokentap["resources"]["requests"]["memory"].is_string(),
            "{file}"
        );
        assert!(
            tokentap["resources"]["limits"]["memory"].is_string(),
            "{file}"
        );
        let mount = &tokentap["volumeMounts"][0];
        assert_eq!(mount["mountPath"], "/etc/tokentap", "{file}");
        assert_eq!(
            tokentap["args"],
            serde_yaml::from_str::<Yaml>("[--config, /etc/tokentap/tokentap.yaml]").expect("yaml"),
            "{file}"
        );

        let [service] = kind("Service")[..] else {
            panic!("{file}: one Service")
        };
        assert_eq!(
            &service["spec"]["selector"], pod_labels,
            "{file}: Service selector"
        );
        assert_eq!(
            str_of(&service["metadata"]["labels"][job_label.as_str()]),
            "tokentap",
            "{file}: the ServiceMonitor's jobLabel must give job=\"tokentap\""
        );
        let service_ports = service["spec"]["ports"].as_sequence().expect("ports");
        assert!(
            service_ports
                .iter()
                .any(|p| p["name"] == monitor_port.as_str() && p["targetPort"] == "metrics"),
            "{file}: the Service has no port {monitor_port} for the ServiceMonitor"
        );
        assert!(
            service_ports.iter().any(|p| p["targetPort"] == "proxy"),
            "{file}: client traffic must enter through tokentap"
        );
        let [budget] = kind("PodDisruptionBudget")[..] else {
            panic!("{file}: one PodDisruptionBudget")
        };
        assert_eq!(
            &budget["spec"]["selector"]["matchLabels"], pod_labels,
            "{file}"
        );
    }
}

#[test]
fn compose_mounts_files_that_exist_and_the_image_matches_the_docs() {
    let compose = yaml("deploy/compose/docker-compose.yml");
    let dir = repo("deploy/compose");
    for (name, service) in compose["services"].as_mapping().expect("services") {
        for volume in service["volumes"].as_sequence().into_iter().flatten() {
            let source = str_of(volume).split(':').next().unwrap_or_default();
            if source.starts_with('.') {
                assert!(
                    dir.join(source).exists(),
                    "{name:?} mounts missing {source}"
                );
            }
        }
    }
    assert!(dir.join("../grafana/tokentap-dashboard.json").exists());
    let prometheus = yaml("deploy/compose/prometheus.yml");
    assert_eq!(
        prometheus["scrape_configs"][0]["static_configs"][0]["targets"][0],
        "tokentap:9464"
    );

    // The Dockerfile exposes tokentap's default ports and reads the documented config path.
    let dockerfile = read("Dockerfile");
    let defaults = tokentap::Config::default();
    let expose = format!(
        "EXPOSE {} {}",
        defaults.listen.port(),
        defaults.metrics_listen.port()
    );
    assert!(dockerfile.contains(&expose), "Dockerfile lacks `{expose}`");
    assert!(dockerfile.contains("COPY config/tokentap.yaml /etc/tokentap/tokentap.yaml"));
    assert!(dockerfile.contains("CMD [\"--config\", \"/etc/tokentap/tokentap.yaml\"]"));
    assert!(dockerfile.contains("cargo build --release --locked"));
    assert!(dockerfile.contains("USER 65532"));
}

/// Every field a record can carry, each set (a default record leaves the optional ones out).
fn record_fields() -> BTreeSet<String> {
    use tokentap::record::request_record::{RequestRecord, ServerRecord};
    let record = RequestRecord {
        client_request_id: Some(String::new()),
        tenant: Some(String::new()),
        conversation: Some(String::new()),
        turn: Some(1),
        think_s: Some(0.0),
        status: Some(200),
        ttft_s: Some(0.0),
        time_to_first_answer_s: Some(0.0),
        time_to_first_tool_call_s: Some(0.0),
        reasoning_s: Some(0.0),
        tpot_s: Some(0.0),
        generation_s: Some(0.0),
        output_tokens_per_s: Some(0.0),
        time_to_response_head_s: Some(0.0),
        output_tokens: Some(0),
        output_tokens_source: Some(String::new()),
        input_tokens: Some(0),
        cached_input_tokens: Some(0),
        reasoning_tokens: Some(0),
        max_gap_s: Some(0.0),
        itl_p50_s: Some(0.0),
        itl_p99_s: Some(0.0),
        slo_missed: vec![String::new()],
        server: Some(ServerRecord::default()),
        ttft_outside_server_s: Some(0.0),
        gaps_s: Some(Vec::new()),
        trace_id: Some(String::new()),
        span_id: Some(String::new()),
        ..RequestRecord::default()
    };
    let record = serde_json::to_value(record).expect("record");
    record
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// deploy/vector: the reader parses the records' own field names (as a record serializes them) and
/// tails the path the config example names; the Loki sink labels streams only with fields of bounded
/// values; the ClickHouse sink writes the parsed records, without Loki's timestamp, to the table
/// deploy/clickhouse/schema.sql creates.
#[test]
fn the_vector_example_reads_record_fields_and_labels_only_bounded_ones() {
    let config = yaml("deploy/vector/tokentap-records.yaml");
    assert!(
        config["sinks"].is_null(),
        "the sinks are files of their own"
    );
    let fields = record_fields();
    let loki = yaml("deploy/vector/loki.yaml");
    let sink = &loki["sinks"]["loki"];
    assert_eq!(str_of(&sink["type"]), "loki");
    assert_eq!(str_of(&sink["inputs"][0]), "tokentap_parsed");
    let labels = sink["labels"].as_mapping().expect("labels");
    let bounded = ["model", "api", "outcome"];
    for (name, value) in labels {
        let value = str_of(value);
        if let Some(field) = value
            .strip_prefix("{{ ")
            .and_then(|v| v.strip_suffix(" }}"))
        {
            assert!(fields.contains(field), "{field} is not a record field");
            assert!(
                bounded.contains(&field),
                "{field} is not bounded: no Loki label"
            );
            assert_eq!(str_of(name), field);
        }
    }
    let remap = &config["transforms"]["tokentap_parsed"];
    assert_eq!(str_of(&remap["inputs"][0]), "tokentap_records");
    let source = str_of(&remap["source"]);
    for read in ["v", "start"] {
        assert!(
            source.contains(&format!(".{read}")) && fields.contains(read),
            "{read}"
        );
    }
    assert!(source.contains(&format!(
        ".v != {}",
        tokentap::record::request_record::RECORD_VERSION
    )));
    let include = str_of(&config["sources"]["tokentap_records"]["include"][0]);
    let example = read("config/tokentap.yaml");
    let path = include.trim_end_matches('*');
    assert!(
        example.contains(&format!("path: {path}")),
        "config/tokentap.yaml names {path}"
    );

    let clickhouse = yaml("deploy/vector/clickhouse.yaml");
    let sink = &clickhouse["sinks"]["clickhouse"];
    assert_eq!(str_of(&sink["type"]), "clickhouse");
    assert_eq!(str_of(&sink["inputs"][0]), "tokentap_parsed");
    let table = format!("{}.{}", str_of(&sink["database"]), str_of(&sink["table"]));
    assert_eq!(table, "tokentap.requests");
    assert_eq!(
        sink["skip_unknown_fields"], true,
        "a new record field must not stop the shipping"
    );
    assert_eq!(sink["encoding"]["except_fields"][0], "timestamp");
    assert!(read("deploy/clickhouse/schema.sql")
        .contains(&format!("CREATE TABLE IF NOT EXISTS {table}")));
}

/// deploy/clickhouse/schema.sql has a column for every field of a record, named as the field, and
/// nothing else (tests/clickhouse.rs runs its SQL).
#[test]
fn the_clickhouse_table_has_a_column_for_every_record_field() {
    let schema = read("deploy/clickhouse/schema.sql");
    let table = schema
        .split("CREATE TABLE IF NOT EXISTS tokentap.requests")
        .nth(1)
        .and_then(|rest| rest.split("\nENGINE").next())
        .expect("the table");
    // A column is a line `    name Type...` at the first level of the parentheses.
    let columns: BTreeSet<String> = table
        .lines()
        .filter(|line| line.starts_with("    ") && !line.starts_with("     "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|word| !word.starts_with("--"))
        .map(str::to_owned)
        .collect();
    assert_eq!(columns, record_fields());
}

/// The capture sidecar reads the model server's own port with only `NET_RAW`, a read-only root and no
/// escalation, and the Service sends clients to the model server, not to tokentap.
#[test]
fn the_capture_sidecar_reads_the_servers_port_with_only_net_raw() {
    let file = "deploy/kubernetes/capture-sidecar.yaml";
    let docs = yaml_documents(file);
    let config = embedded_config(&docs, file);
    let deployment = one(&docs, "Deployment", file);
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .expect("containers");
    let named = |name: &str| {
        containers
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{file}: no {name} container"))
    };
    let (server, tokentap) = (named("vllm"), named("tokentap"));
    let model_port = server["ports"][0]["containerPort"]
        .as_u64()
        .expect("the server's port");
    let ports = config.capture.ports_of(&config.upstream);
    assert_eq!(
        ports,
        vec![model_port as u16],
        "{file}: capture.ports is the server's port"
    );
    assert_eq!(tokentap["args"][0], "capture", "{file}");
    let security = &tokentap["securityContext"];
    assert_eq!(
        security["capabilities"]["add"],
        serde_yaml::from_str::<Yaml>("[NET_RAW]").unwrap()
    );
    assert_eq!(
        security["capabilities"]["drop"],
        serde_yaml::from_str::<Yaml>("[ALL]").unwrap()
    );
    assert_eq!(security["readOnlyRootFilesystem"], Yaml::Bool(true));
    assert_eq!(security["allowPrivilegeEscalation"], Yaml::Bool(false));
    let service = one(&docs, "Service", file);
    let http = service["spec"]["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "http")
        .expect("the clients' port");
    assert_eq!(
        http["targetPort"], server["ports"][0]["name"],
        "{file}: clients reach the server itself"
    );
}

/// The gateway definition for the public benchmark (deploy/benchmarking/tokentap): its config template,
/// with the harness's ports filled in, is a config tokentap takes, listening where the harness drives it
/// and forwarding to the mock; the launch runs the binary its build step puts in place, on that config.
#[test]
fn the_public_benchmarks_gateway_definition_fits_tokentap() {
    let dir = "deploy/benchmarking/tokentap";
    let template = read(&format!("{dir}/config.gen.yaml.tmpl"));
    let text = template
        .replace("{GW_PORT}", "8080")
        .replace("{MOCK_PORT}", "9000");
    let config = tokentap::Config::from_yaml_str(&text)
        .unwrap_or_else(|e| panic!("{dir}/config.gen.yaml.tmpl: {e}"));
    assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.upstream.to_string(), "http://127.0.0.1:9000/");
    assert!(config.metrics_listen.ip().is_loopback());

    let definition: Json = serde_json::from_str(&read(&format!("{dir}/definition.json")))
        .unwrap_or_else(|e| panic!("{dir}/definition.json: {e}"));
    assert_eq!(definition["port"], 8080);
    assert_eq!(definition["path"], "/v1/chat/completions");
    let files = definition["config_files"].as_array().expect("config_files");
    assert!(files
        .iter()
        .any(|f| f["template"] == "config.gen.yaml.tmpl" && f["output"] == "config.gen.yaml"));
    let launch = &definition["launch"];
    assert_eq!(launch["binary"][0], "bin/tokentap");
    assert_eq!(launch["args"][1], "{GW_DIR}/config.gen.yaml");
    let build = read(&format!(
        "{dir}/{}",
        launch["build"].as_str().expect("launch.build")
    ));
    assert!(build.contains(r#"cp "$SRC/target/release/tokentap" "$GW_DIR/bin/tokentap""#));
}
