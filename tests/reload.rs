//! Reloading the config without a restart (docs/operations.md, "Reload without a restart"): 200
//! streams in flight while the ceilings, the tenants and the request_log change finish under the
//! config they started with and every later request under the new one; a broken file and one that
//! changes `listen` change nothing; `POST /-/reload` is off until enabled; the binary reloads on a
//! real SIGHUP, its log level included.
//!
//! The in-process tests reload as SIGHUP does: the running tokentap reads its file again
//! (`Running::reload`, the call the SIGHUP handler makes).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use tokentap::scripted::*;
use tokentap::{Config, Reloaded, Running};

use crate::support::{self, *};

/// The config file of a test's tokentap, in front of `upstream`: loopback ports, no model list, then
/// `extra`.
pub(crate) fn yaml(upstream: &str, extra: &str) -> String {
    format!(
        "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {upstream}\nmodel_list: {{enabled: false}}\n{extra}"
    )
}

/// tokentap started from the file `path` holding `text`, reloading from that file as the binary does.
pub(crate) async fn start_from(path: &Path, text: &str) -> Running {
    std::fs::write(path, text).expect("write config");
    let config = Config::load(path).expect("test config");
    let running = tokentap::start(&config).await.expect("start tokentap");
    let file = path.to_owned();
    running.reload_from(Arc::new(move || {
        Config::load(&file).map_err(|e| e.to_string())
    }));
    running
}

/// Rewrites the file and reloads it, as an operator's edit and SIGHUP do.
pub(crate) async fn reload(running: &Running, path: &Path, text: &str) -> Reloaded {
    std::fs::write(path, text).expect("write config");
    running.reload().await
}

pub(crate) fn config_file(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "tokentap-reload-{name}-{}.yaml",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    path
}

fn streamed(running: &Running, tenant: &str, team: &str) -> http::Request<Full<Bytes>> {
    let mut request = post(running, "/v1/chat/completions", &chat_request("m"));
    let headers = request.headers_mut();
    headers.insert("x-tenant", tenant.parse().expect("header"));
    headers.insert("x-team", team.parse().expect("header"));
    request
}

pub(crate) fn reloads(m: &Metrics, result: &str) -> f64 {
    m.get("tokentap_config_reloads_total", &[("result", result)])
}

fn violations(m: &Metrics, slo: &str) -> f64 {
    m.get(
        "tokentap_slo_violations_total",
        &[("model", "m"), ("api", "chat"), ("slo", slo)],
    )
}

fn ttft_edges(m: &Metrics) -> Vec<String> {
    m.label_values("tokentap_time_to_first_token_seconds_bucket", "le")
}

/// Waits (bounded) until `n` requests are in flight.
async fn in_flight(running: &Running, n: i64) {
    for _ in 0..500 {
        if running.in_flight() >= n {
            return;
        }
        tokio::time::sleep(ms(10)).await;
    }
    panic!("{} in flight, not {n}", running.in_flight());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_streams_in_flight_are_judged_by_the_ceilings_they_started_with() {
    // Each stream's first token comes at once, its second 20 ms later, its last 1.5 s after that: a
    // longest gap within the first ITL ceiling (9 s), past the second (1.234 s). The reload comes
    // between the second token and the last.
    let upstream = support::upstream(|_| {
        vec![
            sse_head(),
            chunk(ROLE_CHUNK.as_bytes()),
            chunk(content_chunk("a").as_bytes()),
            Step::Sleep(ms(20)),
            chunk(content_chunk("b").as_bytes()),
            Step::Sleep(ms(1500)),
            chunk(content_chunk("late").as_bytes()),
            chunk(DONE.as_bytes()),
            last_chunk(),
        ]
    })
    .await;
    let (path, records, records_after) = (
        config_file("inflight"),
        support::temp_file("reload-inflight"),
        support::temp_file("reload-inflight-after"),
    );
    let before = yaml(
        &upstream.url(),
        &format!(
            "max_models: 4\nslo: {{ttft: 9s, itl: 9s}}\ntenants: {{header: x-tenant}}\nrequest_log: {{path: {}}}\n",
            records.display()
        ),
    );
    let running = start_from(&path, &before).await;
    let m = scrape(&running).await;
    assert_eq!(reloads(&m, "success"), 0.0);
    assert!(m.get("tokentap_config_last_reload_success_timestamp_seconds", &[]) > 1.7e9);

    let client = client();
    let mut streams = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let (client, request) = (client.clone(), streamed(&running, "acme", "blue"));
        streams.spawn(async move { send(&client, request).await });
    }
    in_flight(&running, 200).await;
    // Every stream has had its first gap (so its ITL series is resolved) before the reload.
    tokio::time::sleep(ms(300)).await;
    let after = yaml(
        &upstream.url(),
        &format!(
            "max_models: 4\nslo: {{ttft: 123ms, itl: 1234ms}}\ntenants: {{header: x-team}}\nrequest_log: {{path: {}}}\nlog_level: warn\n",
            records_after.display()
        ),
    );
    let reloaded = reload(&running, &path, &after).await;
    let Reloaded::Applied {
        changed,
        rebucketed,
        reopened: false,
        certificates: false,
    } = &reloaded
    else {
        panic!("{reloaded:?}");
    };
    assert_eq!(
        changed,
        &["log_level", "request_log.path", "slo", "tenants.header"]
    );
    assert!(
        rebucketed.contains(&"tokentap_time_to_first_token_seconds"),
        "{rebucketed:?}"
    );
    assert!(
        running.in_flight() >= 190,
        "the reload came while the streams were in flight"
    );

    let mut answered = 0;
    while let Some(received) = streams.join_next().await {
        let received = received.expect("stream task");
        assert_eq!(received.status, 200);
        assert!(received.end.is_ok(), "{:?}", received.end);
        assert!(String::from_utf8_lossy(&received.body).contains("late"));
        answered += 1;
    }
    assert_eq!(answered, 200);
    for _ in 0..20 {
        let (client, request) = (client.clone(), streamed(&running, "acme", "blue"));
        streams.spawn(async move { send(&client, request).await });
    }
    while let Some(received) = streams.join_next().await {
        assert_eq!(received.expect("stream task").status, 200);
    }
    settle(&running).await;

    let m = scrape(&running).await;
    assert_eq!(reloads(&m, "success"), 1.0);
    // Judged by the ceiling each started with: the 200 met 9 s, the 20 missed 1.234 s.
    assert_eq!(violations(&m, "itl"), 20.0);
    assert_eq!(violations(&m, "ttft"), 0.0);
    let goodput = |tenant| {
        m.get(
            "tokentap_goodput_requests_total",
            &[("model", "m"), ("api", "chat"), ("tenant", tenant)],
        )
    };
    assert_eq!((goodput("acme"), goodput("blue")), (200.0, 0.0));
    // Each request's tenant as read at its admission: x-tenant before the reload, x-team after.
    let requests = |tenant| {
        m.get(
            "tokentap_requests_total",
            &[
                ("model", "m"),
                ("api", "chat"),
                ("status", "200"),
                ("outcome", "ok"),
                ("tenant", tenant),
            ],
        )
    };
    assert_eq!((requests("acme"), requests("blue")), (200.0, 20.0));
    // The new ceilings are bucket boundaries and the old ones are gone; the families whose edges
    // changed carried their counts over (nothing reset): the 200 first tokens before the reload and
    // the 20 after it, the 200 first gaps before it, the in-flight streams' 200 last gaps after it (in
    // the new family: they were resolved before the reload) and the 20 later streams' 40.
    let edges = ttft_edges(&m);
    assert!(edges.contains(&"0.123".to_owned()), "{edges:?}");
    assert!(!edges.contains(&"9".to_owned()), "{edges:?}");
    let itl_edges = m.label_values("tokentap_inter_token_latency_seconds_bucket", "le");
    assert!(itl_edges.contains(&"1.234".to_owned()), "{itl_edges:?}");
    assert!(!itl_edges.contains(&"9".to_owned()), "{itl_edges:?}");
    let count = |name| m.get(name, &[("model", "m"), ("api", "chat")]);
    assert_eq!(count("tokentap_time_to_first_token_seconds_count"), 220.0);
    assert_eq!(count("tokentap_inter_token_latency_seconds_count"), 440.0);
    // The new edge 0.123 carries the old edge below it (0.1): the buckets stay cumulative.
    let ttft_at = |le| {
        let labels = [("model", "m"), ("api", "chat"), ("le", le)];
        m.get("tokentap_time_to_first_token_seconds_bucket", &labels)
    };
    let (at, under, above) = (ttft_at("0.1"), ttft_at("0.123"), ttft_at("0.15"));
    assert!(at <= under && under <= above && ttft_at("+Inf") == 220.0);
    let gap = |le| {
        let labels = [("model", "m"), ("api", "chat"), ("le", le)];
        m.get("tokentap_max_inter_token_gap_seconds_bucket", &labels)
    };
    assert_eq!((gap("1.234"), gap("+Inf")), (0.0, 220.0));

    // The records: the 200 in the old file, none missed; the 20 in the new one, each missing itl.
    let old = read_json_records(&records, 200);
    assert_eq!(old.len(), 200);
    let met = |r: &serde_json::Value| r.get("slo_missed").is_none() && r["goodput"] == true;
    assert!(old.iter().all(met));
    assert!(old.iter().all(|r| r["tenant"] == "acme"));
    let new = read_json_records(&records_after, 20);
    assert_eq!(new.len(), 20);
    let missed = |r: &serde_json::Value| r["slo_missed"] == serde_json::json!(["itl"]);
    assert!(new.iter().all(|r| missed(r) && r["goodput"] == false));
    assert!(new.iter().all(|r| r["tenant"] == "blue"));
    for file in [path, records, records_after] {
        let _ = std::fs::remove_file(file);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_or_a_changed_listen_changes_nothing() {
    let upstream = support::upstream(|_| content_stream(2, ms(1))).await;
    let path = config_file("refused");
    let text = yaml(&upstream.url(), "slo: {ttft: 1ms}\n");
    let running = start_from(&path, &text).await;
    let stamp = |m: &Metrics| m.get("tokentap_config_last_reload_success_timestamp_seconds", &[]);
    let started = stamp(&scrape(&running).await);

    let broken = reload(&running, &path, &format!("{text}slo: {{ttft: 1 second}}\n")).await;
    assert!(
        matches!(&broken, Reloaded::Failed(why) if why.contains("slo")),
        "{broken:?}"
    );
    let typo = reload(&running, &path, &text.replace("slo:", "sloo:")).await;
    assert!(
        matches!(&typo, Reloaded::Failed(why) if why.contains("sloo")),
        "{typo:?}"
    );
    let moved = text.replace(
        "listen: 127.0.0.1:0\nmetrics",
        "listen: 127.0.0.1:1\nmetrics",
    );
    let listen = reload(
        &running,
        &path,
        &format!("{moved}tenants: {{header: x-t}}\n"),
    )
    .await;
    assert_eq!(
        listen,
        Reloaded::Refused(
            "listen, tenants (turned on) cannot change on reload: restart tokentap".into()
        )
    );
    let huge = format!(
        "{}metrics: {{max_series: 1000}}\n",
        text.replace("slo: {ttft: 1ms}", "slo: {ttft: 2s}")
    );
    let bound = reload(&running, &path, &huge).await;
    assert!(
        matches!(&bound, Reloaded::Failed(why) if why.starts_with("metrics.max_series: the 3 model values always counted")),
        "{bound:?}"
    );

    // Still judged by the first file: every request misses 1 ms.
    let client = client();
    for _ in 0..3 {
        let received = send(
            &client,
            post(&running, "/v1/chat/completions", &chat_request("m")),
        )
        .await;
        assert_eq!(received.status, 200);
    }
    settle(&running).await;
    let m = scrape(&running).await;
    assert_eq!(violations(&m, "ttft"), 3.0);
    assert_eq!(
        (
            reloads(&m, "success"),
            reloads(&m, "failure"),
            reloads(&m, "refused")
        ),
        (0.0, 3.0, 1.0)
    );
    assert_eq!(stamp(&m), started, "no reload succeeded");
    assert!(ttft_edges(&m).contains(&"0.001".to_owned()));
    let _ = std::fs::remove_file(path);
}

pub(crate) async fn post_reload(running: &Running, method: http::Method) -> (u16, String) {
    let request = http::Request::builder()
        .method(method)
        .uri(format!("http://{}/-/reload", running.metrics_addr()))
        .body(Full::new(Bytes::new()))
        .expect("request");
    let received = send(&client(), request).await;
    (
        received.status,
        String::from_utf8_lossy(&received.body).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_reload_is_off_by_default_and_reloads_once_enabled() {
    let upstream = support::upstream(|_| content_stream(2, ms(1))).await;
    let path = config_file("post");
    let text = yaml(&upstream.url(), "");
    let running = start_from(&path, &text).await;
    let (status, body) = post_reload(&running, http::Method::POST).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("metrics.enable_reload"), "{body}");
    assert_eq!(post_reload(&running, http::Method::GET).await.0, 405);
    assert_eq!(
        reloads(&scrape(&running).await, "success"),
        0.0,
        "nothing was reloaded"
    );

    // Turned on by a reload (SIGHUP's), then the endpoint reloads.
    let on = format!("{text}metrics: {{enable_reload: true}}\n");
    assert!(matches!(
        reload(&running, &path, &on).await,
        Reloaded::Applied { .. }
    ));
    std::fs::write(&path, format!("{on}slo: {{e2e: 1ms}}\n")).expect("write");
    let (status, body) = post_reload(&running, http::Method::POST).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("config reloaded: slo changed"), "{body}");
    let received = send(
        &client(),
        post(&running, "/v1/chat/completions", &chat_request("m")),
    )
    .await;
    assert_eq!(received.status, 200);
    settle(&running).await;
    assert_eq!(violations(&scrape(&running).await, "e2e"), 1.0);

    std::fs::write(
        &path,
        on.replace(
            "listen: 127.0.0.1:0\nmetrics",
            "listen: 127.0.0.1:9\nmetrics",
        ),
    )
    .expect("write");
    let (status, body) = post_reload(&running, http::Method::POST).await;
    assert_eq!(status, 500, "{body}");
    assert!(
        body.contains("listen cannot change on reload: restart tokentap"),
        "{body}"
    );
    let m = scrape(&running).await;
    assert_eq!((reloads(&m, "success"), reloads(&m, "refused")), (2.0, 1.0));
    let _ = std::fs::remove_file(path);
}

#[test]
fn the_binary_reloads_on_sighup_and_its_log_level_follows() {
    let upstream_rt = tokio::runtime::Runtime::new().expect("runtime");
    let upstream = upstream_rt.block_on(support::upstream(|_| content_stream(2, ms(1))));
    let text = format!(
        "upstream: {}\nlisten: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nlog_level: info\n",
        upstream.url()
    );
    let process = start_binary("reload-hup", &text, None);
    let config = process.dir().join("tokentap.yaml");
    let body = chat_request("m");
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let answered =
        || status_line_blocking(&process.proxy, request.as_bytes(), Duration::from_secs(5));
    let wait_for = |result: &str, n: f64| {
        for _ in 0..300 {
            if process
                .scrape()
                .get("tokentap_config_reloads_total", &[("result", result)])
                >= n
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no {result} reload counted");
    };
    assert!(answered().contains("200"));
    let written = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        written.replace("log_level: info", "log_level: warn"),
    )
    .expect("write");
    process.signal("HUP");
    wait_for("success", 1.0);
    assert!(answered().contains("200"), "serving on after the reload");
    std::fs::write(
        &config,
        written.replace("\nlisten: 127.0.0.1:0\n", "\nlisten: 127.0.0.1:1\n"),
    )
    .expect("write");
    process.signal("HUP");
    wait_for("refused", 1.0);
    std::fs::write(&config, &written).expect("write");
    process.signal("HUP");
    wait_for("success", 2.0);
    assert!(answered().contains("200"));
    process.signal("TERM");
    let (status, log) = process.wait();
    assert!(status.success(), "{log}");
    // The first and the third request logged at info; the second not, under `warn`.
    assert_eq!(log.matches("request finished").count(), 2, "{log}");
    assert_eq!(
        log.matches("SIGHUP received").count(),
        1,
        "under warn, only the first: {log}"
    );
    assert!(
        log.contains("listen cannot change on reload: restart tokentap"),
        "{log}"
    );
}

/// A real Prometheus scraping across a reload that changes the TTFT ceiling (skipped, with a message,
/// when `prometheus` is not on PATH, as `tests/prometheus.rs` is): the families the ceiling bounds take
/// the new boundary and Prometheus sees no counter reset in them, so the shipped ratio rule keeps its
/// denominator; its numerator counts the requests after the reload, each judged by the new ceiling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_real_prometheus_a_ceiling_change_resets_no_series_and_the_ratio_rule_counts_on()
{
    if !prometheus_installed("through_a_real_prometheus_*") {
        return;
    }
    let upstream = support::upstream(|_| {
        let mut steps = content_stream(2, ms(1));
        steps.insert(2, Step::Sleep(ms(20)));
        steps
    })
    .await;
    let path = config_file("prometheus");
    let text = yaml(&upstream.url(), "slo: {ttft: 9s}\n");
    let running = start_from(&path, &text).await;
    let client = client();
    // Paced across several scrapes, so the violations' series (new at the reload) is seen growing.
    let load = |n: usize| {
        let client = client.clone();
        let requests: Vec<_> = (0..n)
            .map(|_| post(&running, "/v1/chat/completions", &chat_request("m")))
            .collect();
        async move {
            for request in requests {
                assert_eq!(send(&client, request).await.status, 200);
                tokio::time::sleep(ms(150)).await;
            }
        }
    };
    load(20).await;
    let mut prom = Prometheus::start(&[running.metrics_addr().port()]);
    let total = "sum(tokentap_requests_total)";
    prom.wait_until("the first load scraped", total, |v| v == 20.0)
        .await;
    let reloaded = reload(&running, &path, &text.replace("ttft: 9s", "ttft: 5ms")).await;
    assert!(matches!(reloaded, Reloaded::Applied { .. }), "{reloaded:?}");
    load(20).await;
    prom.wait_until("the second load scraped", total, |v| v == 40.0)
        .await;
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let resets = prom
        .query("sum(resets(tokentap_time_to_first_token_seconds_count[5m]))")
        .await;
    assert_eq!(resets.len(), 1);
    assert_eq!(resets[0].1, 0.0, "no reset of _count across the reload");
    let count = prom
        .query("sum(tokentap_time_to_first_token_seconds_count)")
        .await;
    assert_eq!(count[0].1, 40.0);
    let les = prom
        .query("count by (le) (tokentap_time_to_first_token_seconds_bucket)")
        .await;
    let les: Vec<&str> = les.iter().filter_map(|(l, _)| l["le"].as_str()).collect();
    assert!(les.contains(&"0.005") && !les.contains(&"9"), "{les:?}");
    // Prometheus started after the first 20 (they met 9 s); the 20 in its window, after the reload, all
    // missed 5 ms: the rule's ratio is near one (under it by `rate()`'s extrapolation of the misses'
    // series, which appeared in the window), and never above it.
    let ratio = prom
        .query_model("model:tokentap_slo_violations_ttft:ratio_rate5m")
        .await;
    assert!(ratio > 0.5 && ratio <= 1.0, "TTFT misses ratio: {ratio}");
    let _ = std::fs::remove_file(path);
}
