//! What-if goodput equals a re-run with those ceilings: requests are finished by the proxy's own
//! `record::finished::conclude` twice, once with no ceiling (the records `tokentap report` reads) and once
//! with ceilings X configured (what the proxy would have counted); `tokentap report --slo X` on the first
//! set must give the second's goodput and each ceiling's misses, request for request.
//!
//! The records are built here from the `FinishedRecord` (`record_of`), the way the request-record writer
//! fills them: the stream figures only for a stream, TPOT only for an `ok` request.

use std::time::Duration;

use http::StatusCode;
use serde_json::Value;
use tokentap::config::Slo;
use tokentap::config::{Ceilings, SloKind};
use tokentap::record::finished::{conclude, DecoderReport, FinishedRecord};
use tokentap::record::outcome::Outcome;
use tokentap::record::request_record::{RequestRecord, RECORD_VERSION};
use tokentap::record::timeline::Timeline;
use tokentap::report::query::{format_rfc3339, parse_ceilings};
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One request: outputs at these ms after arrival, then an end at `end_ms` with `outcome` and `status`.
struct Case {
    outputs: Vec<u64>,
    end_ms: u64,
    outcome: Outcome,
    status: Option<u16>,
    /// `None`: not metered (not 2xx); else streaming or one JSON body, with the usage's output tokens.
    decoded: Option<(bool, Option<u64>)>,
    /// The first answer (not reasoning) at or after this ms (never, for `u64::MAX`); `None`: the
    /// first output was the answer.
    answer_ms: Option<u64>,
    /// The chunk that starts the first tool call, at this ms.
    tool_ms: Option<u64>,
}

fn stream(outputs: Vec<u64>, end_ms: u64, tokens: u64) -> Case {
    Case {
        outputs,
        end_ms,
        outcome: Outcome::Ok,
        status: Some(200),
        decoded: Some((true, Some(tokens))),
        answer_ms: None,
        tool_ms: None,
    }
}

/// A stream that reasons until `answer_ms`.
fn reasoning(outputs: Vec<u64>, answer_ms: u64, end_ms: u64, tokens: u64) -> Case {
    Case {
        answer_ms: Some(answer_ms),
        ..stream(outputs, end_ms, tokens)
    }
}

fn every(from: u64, step: u64, n: u64) -> Vec<u64> {
    (0..n).map(|i| from + i * step).collect()
}

fn cases() -> Vec<Case> {
    vec![
        // Within everything.
        stream(every(100, 20, 10), 300, 10),
        // TTFT 500 ms.
        stream(every(500, 20, 10), 700, 10),
        // One 250 ms gap (ITL is judged on the longest gap).
        stream(vec![100, 120, 370, 390], 400, 4),
        // TPOT (1,900 − 100)/(3 − 1) = 900 ms.
        stream(vec![100, 150, 1_900], 1_900, 3),
        // E2E 2.5 s.
        stream(every(100, 100, 25), 2_500, 25),
        // A ceiling met exactly: TTFT 300 ms, a 200 ms gap, E2E 2 s.
        stream(
            vec![300, 500, 700, 900, 1_100, 1_300, 1_500, 1_700, 1_900, 2_000],
            2_000,
            10,
        ),
        // The client left after 400 ms without a first token: a TTFT lower bound over the ceiling.
        Case {
            outputs: vec![],
            end_ms: 400,
            outcome: Outcome::Cancelled,
            status: Some(200),
            decoded: Some((true, None)),
            answer_ms: None,
            tool_ms: None,
        },
        // The client left mid-stream; no gap, not even the open one, above the ITL ceiling.
        Case {
            outputs: every(100, 50, 5),
            end_ms: 350,
            outcome: Outcome::Cancelled,
            status: Some(200),
            decoded: Some((true, None)),
            answer_ms: None,
            tool_ms: None,
        },
        // The upstream broke the stream after a slow first token.
        Case {
            outputs: vec![800, 820],
            end_ms: 830,
            outcome: Outcome::UpstreamError,
            status: Some(200),
            decoded: Some((true, None)),
            answer_ms: None,
            tool_ms: None,
        },
        // A 503: not metered, never goodput, judged on E2E only.
        Case {
            outputs: vec![],
            end_ms: 50,
            outcome: Outcome::Ok,
            status: Some(503),
            decoded: None,
            answer_ms: None,
            tool_ms: None,
        },
        // One JSON body, 3 s: only the E2E ceiling applies.
        Case {
            outputs: vec![3_000],
            end_ms: 3_000,
            outcome: Outcome::Ok,
            status: Some(200),
            decoded: Some((false, Some(40))),
            answer_ms: None,
            tool_ms: None,
        },
        // Reasoning for 1.5 s, then the answer: TTFT met, time to first answer missed.
        reasoning(every(100, 100, 19), 1_500, 1_900, 19),
        // Reasoning, then the client left at 1.2 s before any answer: a lower bound over the ceiling.
        Case {
            outputs: every(100, 100, 11),
            end_ms: 1_200,
            outcome: Outcome::Cancelled,
            status: Some(200),
            decoded: Some((true, None)),
            answer_ms: Some(u64::MAX),
            tool_ms: None,
        },
        // An agent turn: text at 100 ms, the tool call at 1.4 s (every gap within ITL): the call missed.
        Case {
            tool_ms: Some(1_400),
            ..stream(every(100, 100, 14), 1_450, 14)
        },
        // A tool call at 200 ms: met.
        Case {
            tool_ms: Some(200),
            ..stream(every(100, 20, 10), 300, 10)
        },
        // One JSON body within E2E.
        Case {
            outputs: vec![900],
            end_ms: 900,
            outcome: Outcome::Ok,
            status: Some(200),
            decoded: Some((false, Some(40))),
            answer_ms: None,
            tool_ms: None,
        },
    ]
}

fn finish(case: &Case, ceilings: &Ceilings) -> FinishedRecord {
    let t0 = Instant::now();
    let mut timeline = Timeline::new(t0);
    for &at in &case.outputs {
        timeline.on_output(0, t0 + ms(at));
        if case.answer_ms.is_none_or(|answer| at >= answer) {
            timeline.on_answer(t0 + ms(at), case.answer_ms.is_some());
        }
        if case.tool_ms.is_some_and(|tool| at >= tool) {
            timeline.on_tool_call(t0 + ms(at));
        }
    }
    let report = case.decoded.map(|(streaming, usage)| DecoderReport {
        streaming,
        terminal_event: case.outcome == Outcome::Ok,
        usage_output_tokens: usage,
        input_tokens: Some(20),
        ..DecoderReport::default()
    });
    let status = case.status.and_then(|s| StatusCode::from_u16(s).ok());
    let end = t0 + ms(case.end_ms);
    conclude(
        report.as_ref(),
        &timeline,
        case.outcome,
        end,
        status,
        ceilings,
    )
}

fn record_of(i: usize, f: &FinishedRecord) -> RequestRecord {
    let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
    let stream = |d: Option<Duration>| secs(d.filter(|_| f.streaming));
    let ok = f.outcome == Outcome::Ok;
    RequestRecord {
        v: RECORD_VERSION,
        start: format_rfc3339(1_796_284_800.0 + i as f64),
        id: format!("r{i}"),
        model: "m".into(),
        api: "chat".into(),
        status: f.status.map(|s| s.as_u16()),
        outcome: f.outcome.as_str().into(),
        stream: f.streaming,
        e2e_s: f.figures.e2e.as_secs_f64(),
        ttft_s: secs(f.figures.ttft),
        time_to_first_answer_s: secs(f.figures.time_to_first_answer),
        time_to_first_tool_call_s: stream(f.figures.time_to_first_tool_call),
        tpot_s: stream(f.figures.tpot.filter(|_| ok)),
        max_gap_s: stream(f.figures.max_gap),
        output_tokens: f.output_tokens,
        input_tokens: f.input_tokens,
        goodput: f.verdict.goodput,
        slo_missed: f.verdict.missed.iter().map(|k| k.as_str().into()).collect(),
        ..RequestRecord::default()
    }
}

fn report_of(records: &[RequestRecord], slo: Option<Ceilings>) -> Value {
    let slo = slo.map(|default| Slo {
        default,
        ..Slo::default()
    });
    let lines: String = records
        .iter()
        .map(|r| serde_json::to_string(r).unwrap() + "\n")
        .collect();
    let dir = std::env::temp_dir().join(format!("tokentap-whatif-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("records-{}.jsonl", slo.is_some()));
    std::fs::write(&path, lines).unwrap();
    crate::support::json_report(&path, slo)
}

fn missed(doc: &Value, kind: &str) -> u64 {
    let attainment = doc["total"]["attainment"].as_array().unwrap();
    let entry = attainment.iter().find(|a| a["ceiling"] == kind);
    entry.map_or(0, |a| a["missed"].as_u64().unwrap())
}

#[test]
fn what_if_goodput_and_misses_equal_a_run_with_those_ceilings_configured() {
    let x = parse_ceilings(
        "ttft=300ms,tpot=40ms,itl=200ms,e2e=2s,time_to_first_answer=1s,time_to_first_tool_call=1s",
    )
    .unwrap();
    let cases = cases();
    let unjudged: Vec<RequestRecord> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| record_of(i, &finish(c, &Ceilings::default())))
        .collect();
    let configured: Vec<FinishedRecord> = cases.iter().map(|c| finish(c, &x)).collect();
    let good = configured.iter().filter(|f| f.verdict.goodput).count() as u64;
    // The cases are built so that each verdict is exercised: three good requests, each ceiling missed.
    assert_eq!(good, 3);
    let what_if = report_of(&unjudged, Some(x));
    assert_eq!(what_if["total"]["good_request_count"], good);
    for kind in SloKind::ALL {
        let proxy = configured
            .iter()
            .filter(|f| f.verdict.missed.contains(&kind))
            .count() as u64;
        assert!(proxy > 0, "no case misses {kind}");
        assert_eq!(missed(&what_if, kind.as_str()), proxy, "{kind}");
    }
    // And request for request: one record at a time.
    for (i, (record, proxy)) in unjudged.iter().zip(&configured).enumerate() {
        let one = report_of(std::slice::from_ref(record), Some(x));
        assert_eq!(
            one["total"]["good_request_count"],
            u64::from(proxy.verdict.goodput),
            "case {i}"
        );
        for kind in SloKind::ALL {
            let want = u64::from(proxy.verdict.missed.contains(&kind));
            assert_eq!(missed(&one, kind.as_str()), want, "case {i} {kind}");
        }
    }
    // The records the proxy writes with X configured, read as recorded, agree too.
    let recorded: Vec<RequestRecord> = configured
        .iter()
        .enumerate()
        .map(|(i, f)| record_of(i, f))
        .collect();
    let as_recorded = report_of(&recorded, None);
    assert_eq!(as_recorded["total"]["good_request_count"], good);
    for kind in SloKind::ALL {
        assert_eq!(
            missed(&as_recorded, kind.as_str()),
            missed(&what_if, kind.as_str())
        );
    }
}
