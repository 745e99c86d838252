//! The whole proxy, property-tested: any stream (good or hostile events), cut into frames anywhere by the
//! upstream, reaches the client byte-identical, and `/metrics` gives exactly the figures the decoder gives
//! for the same bytes fed at once. Each case starts a scripted upstream and tokentap on tokio's paused
//! clock, so the pauses between frames are real frame boundaries yet cost no time.
//! `PROPTEST_CASES` sets the number of cases (default 64).

use crate::support;

use proptest::prelude::*;
use support::streams::{cut, splits, stream};
use support::*;
use tokentap::config::Metering;
use tokentap::decode::dialect::detect;
use tokentap::decode::response::{Format, ResponseDecoder};
use tokentap::decode::tokenizer::TextCount;
use tokentap::record::metrics::family;

/// What the decoder makes of the whole body at once: the reference the proxy's figures must match.
struct Expected {
    outputs: u64,
    output_tokens: u64,
    input_tokens: u64,
    skipped: Option<&'static str>,
    outcome: &'static str,
}

fn expected(path: &str, body: &[u8]) -> Expected {
    let limits = Metering {
        max_event_bytes: 1024,
        model_scan_bytes: 1 << 20,
    };
    let mut decoder = ResponseDecoder::new(
        detect(path).1.expect("dialect"),
        Format::Sse,
        &limits,
        TextCount::Off,
    );
    let mut marks = Vec::new();
    decoder.feed(body, &mut marks);
    decoder.finish(true, &mut marks);
    let outputs = marks.len() as u64;
    let obs = decoder.observations();
    let skipped = decoder.skipped().map(|r| r.as_str());
    Expected {
        outputs,
        // docs/metrics.md, output tokens: the usage, unless it is below the output events streamed
        // (then the usage and its reasoning, at least the events); without usage, the events.
        output_tokens: match (skipped, obs.output_tokens) {
            (Some(_), _) => 0,
            (None, Some(n)) if n >= outputs => n,
            (None, Some(n)) => (n + obs.reasoning_tokens.unwrap_or(0)).max(outputs),
            (None, None) => outputs,
        },
        input_tokens: match skipped {
            Some(_) => 0,
            None => obs.input_tokens.unwrap_or(0),
        },
        skipped,
        outcome: if decoder.saw_error_event() {
            "upstream_error"
        } else {
            "ok"
        },
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

async fn through_the_proxy(path: &'static str, body: Vec<u8>, frames: Vec<Vec<u8>>) {
    let want = expected(path, &body);
    let script = {
        let mut steps = vec![sse_head()];
        for frame in &frames {
            steps.push(chunk(frame));
            steps.push(Step::Sleep(ms(1)));
        }
        steps.push(last_chunk());
        steps
    };
    let upstream = upstream(move |_| script.clone()).await;
    let proxy = proxy(&upstream.url(), "metering:\n  max_event_bytes: 1KiB\n").await;
    let got = send(&client(), post(&proxy, path, &chat_request("m"))).await;
    assert_eq!(got.status, 200);
    assert!(got.body == body, "the bytes changed on the way");
    assert_eq!(got.end, Ok(()));
    settle(&proxy).await;
    let m = scrape(&proxy).await;
    let model = [("model", "m")];
    assert_eq!(m.requests("m", "200", want.outcome), 1.0);
    assert_eq!(m.get(family::REQUESTS.name, &[]), 1.0);
    assert_eq!(
        m.get(family::OUTPUT_TOKENS.name, &model),
        want.output_tokens as f64
    );
    assert_eq!(
        m.get(family::INPUT_TOKENS.name, &model),
        want.input_tokens as f64
    );
    assert_eq!(
        m.get(&family::TTFT.count(), &model),
        want.outputs.min(1) as f64
    );
    assert_eq!(
        m.get(&family::ITL.count(), &model),
        want.outputs.saturating_sub(1) as f64
    );
    for reason in ["event_too_large", "malformed_event"] {
        assert_eq!(
            m.get(family::METERING_SKIPPED.name, &[("reason", reason)]),
            if want.skipped == Some(reason) {
                1.0
            } else {
                0.0
            },
            "{reason}"
        );
    }
    assert_eq!(m.get(family::IN_FLIGHT.name, &[]), 0.0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn any_split_of_any_stream_is_forwarded_identically_and_metered_the_same(
        body in stream(16), points in splits(), chat in any::<bool>(),
    ) {
        let path = if chat { "/v1/chat/completions" } else { "/v1/completions" };
        let frames: Vec<Vec<u8>> = cut(&body, &points)
            .into_iter()
            .filter(|f| !f.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime");
        runtime.block_on(through_the_proxy(path, body, frames));
    }
}
