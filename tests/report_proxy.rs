//! What-if goodput equals a re-run with those ceilings configured, through the real proxy: the same
//! scripted traffic goes once through tokentap with no ceiling and `request_log:` on, once with ceilings
//! Y. `tokentap report --slo Y` on the first run's records gives the second run's scraped
//! `tokentap_goodput_requests_total` and each `tokentap_slo_violations_total{slo}`; the second run's
//! records read as recorded give them too, and each figure's row sees what its histogram saw (count and
//! sum). Both runs are on tokio's paused clock, so each stream's timings are exactly its script's
//! (5 ms against a 50 ms TPOT ceiling is 5 ms in both runs, whatever the machine is doing) and a verdict
//! can differ between the runs only if the report and the proxy judge differently.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use support::*;
use tokentap::config::SloKind;
use tokentap::record::metrics::family;
use tokentap::report::query::parse_slo;

const CEILINGS: &str =
    "ttft=100ms,itl=150ms,tpot=50ms,e2e=400ms,time_to_first_answer=100ms,time_to_first_tool_call=100ms";
const CEILINGS_YAML: &str =
    "slo: {ttft: 100ms, itl: 150ms, tpot: 50ms, e2e: 400ms, time_to_first_answer: 100ms, time_to_first_tool_call: 100ms}\n";

fn reasoning_chunk(text: &str) -> String {
    format!(
        "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"reasoning_content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n"
    )
}

/// A stream: a first chunk after `first`, then one content chunk after each of `gaps`, with usage.
fn stream(first: Duration, gaps: &[u64], reasoning_until: Option<usize>) -> Vec<Step> {
    let mut steps = vec![sse_head(), Step::Sleep(first)];
    for i in 0..=gaps.len() {
        if i > 0 {
            steps.push(Step::Sleep(ms(gaps[i - 1])));
        }
        let text = format!("t{i}");
        let event = match reasoning_until {
            Some(until) if i < until => reasoning_chunk(&text),
            _ => content_chunk(&text),
        };
        steps.push(chunk(event.as_bytes()));
    }
    steps.push(chunk(usage_chunk(5, gaps.len() as u64 + 1).as_bytes()));
    steps.push(chunk(DONE.as_bytes()));
    steps.push(last_chunk());
    steps
}

fn script(request: &RecordedRequest) -> Vec<Step> {
    let body = String::from_utf8_lossy(&request.body).to_string();
    if request.request_line().contains("/missing") {
        return vec![json_response(404, "Not Found", r#"{"error":"no"}"#)];
    }
    let has = |model: &str| body.contains(&format!("\"{model}\""));
    if has("json") {
        let answer = r#"{"id":"x","object":"chat.completion","model":"json","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":9,"total_tokens":13}}"#;
        return vec![json_response(200, "OK", answer)];
    }
    if has("broken") {
        return vec![
            sse_head(),
            chunk(content_chunk("a").as_bytes()),
            Step::Sleep(ms(5)),
            Step::Close,
        ];
    }
    if has("slow_first") {
        return stream(ms(250), &[5, 5], None);
    }
    if has("stall") {
        return stream(ms(5), &[5, 300, 5], None);
    }
    if has("long") {
        return stream(ms(5), &[100; 5], None);
    }
    if has("tool") {
        // Text at once, the tool call 120 ms later: within every gap ceiling, past the call's.
        let call = r#"data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":null}]}"#;
        let mut steps = stream(ms(5), &[], None);
        steps.truncate(3);
        steps.push(Step::Sleep(ms(120)));
        steps.push(chunk(format!("{call}\n\n").as_bytes()));
        steps.push(chunk(DONE.as_bytes()));
        steps.push(last_chunk());
        return steps;
    }
    if has("reasoning") {
        // Reasoning for 200 ms, then the answer.
        return stream(ms(5), &[50, 50, 50, 50, 5], Some(5));
    }
    stream(ms(5), &[5; 5], None)
}

/// Runs the traffic through a proxy configured with `yaml`; returns its records and its metrics.
async fn run_traffic(name: &str, yaml: &str) -> (PathBuf, Metrics) {
    let upstream = upstream(script).await;
    let path = temp_file(name);
    let yaml = format!(
        "{yaml}request_log: {{path: {}, gaps: true}}\n",
        path.display()
    );
    let proxy = proxy(&upstream.url(), &yaml).await;
    let c = client();
    let chat = "/v1/chat/completions";
    for model in [
        "fast",
        "fast",
        "slow_first",
        "stall",
        "long",
        "reasoning",
        "tool",
        "json",
    ] {
        let answer = send(&c, post(&proxy, chat, &chat_request(model))).await;
        assert_eq!(answer.status, 200, "{model}");
    }
    let missing = send(&c, post(&proxy, "/missing/v1/chat/completions", "{}")).await;
    assert_eq!(missing.status, 404);
    let broken = send(&c, post(&proxy, chat, &chat_request("broken"))).await;
    assert!(broken.end.is_err(), "the stream broke off");
    settle(&proxy).await;
    read_json_records(&path, 10);
    (path, scrape(&proxy).await)
}

fn report(path: &Path, slo: Option<&str>) -> Value {
    json_report(path, slo.map(|s| parse_slo(s).expect("ceilings")))
}

fn missed(doc: &Value, kind: &str) -> f64 {
    let attainment = doc["total"]["attainment"].as_array().expect("attainment");
    let entry = attainment.iter().find(|a| a["ceiling"] == kind);
    entry.map_or(0.0, |a| a["missed"].as_f64().unwrap_or(f64::NAN))
}

#[tokio::test(start_paused = true)]
async fn what_if_goodput_equals_the_proxy_run_with_those_ceilings() {
    let (unjudged, _) = run_traffic("report-unjudged", "").await;
    let (judged, metrics) = run_traffic("report-judged", CEILINGS_YAML).await;
    let goodput = metrics.get(family::GOODPUT.name, &[]);
    // fast ×2 and the JSON body: every other request misses a ceiling or failed.
    assert_eq!(goodput, 3.0);
    let what_if = report(&unjudged, Some(CEILINGS));
    let recorded = report(&judged, None);
    for doc in [&what_if, &recorded] {
        assert_eq!(doc["total"]["request_count"], 10);
        assert_eq!(doc["total"]["good_request_count"].as_f64(), Some(goodput));
    }
    for kind in SloKind::ALL {
        let proxy = metrics.get(family::SLO_VIOLATIONS.name, &[("slo", kind.as_str())]);
        assert!(proxy > 0.0, "the traffic misses {kind}");
        assert_eq!(missed(&what_if, kind.as_str()), proxy, "what-if {kind}");
        assert_eq!(missed(&recorded, kind.as_str()), proxy, "recorded {kind}");
    }
    let requests = metrics.get(family::REQUESTS.name, &[]);
    assert_eq!(recorded["total"]["request_count"].as_f64(), Some(requests));
    // Each row sees the requests its histogram sees: the same count and the same sum.
    for (tag, histogram) in [
        ("time_to_first_token", family::TTFT.name),
        ("inter_chunk_latency", family::ITL.name),
        ("inter_token_latency", family::TPOT.name),
        ("request_latency", family::E2E.name),
        (
            "time_to_first_tool_call",
            family::TIME_TO_FIRST_TOOL_CALL.name,
        ),
        ("longest_gap", family::MAX_GAP.name),
        (
            "output_token_throughput_per_user",
            family::TOKENS_PER_SECOND.name,
        ),
    ] {
        let row = &recorded["total"]["metrics"][tag];
        let count = metrics.get(&format!("{histogram}_count"), &[]);
        let sum = metrics.get(&format!("{histogram}_sum"), &[]);
        assert_eq!(row["count"].as_f64(), Some(count), "{tag} count");
        let total = row["avg"].as_f64().unwrap_or(f64::NAN) * count;
        assert!(
            (total - sum).abs() < 1e-6 * sum.max(1.0),
            "{tag}: {total} vs {sum}"
        );
    }
    for path in [unjudged, judged] {
        let _ = std::fs::remove_file(path);
    }
}
