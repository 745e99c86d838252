//! What exemplars and native histograms cost (docs/metrics.md, "What they cost"): one observation into
//! a family kept both classic and native (TTFT) against one kept classic only (the time to response
//! head, the same boundaries), a sampled request's exemplars set at its end, and a whole page in each
//! exposition format, its size printed first. Run with `cargo bench --bench exposition`.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use divan::{black_box, Bencher};
use http::StatusCode;
use tokentap::config::{Ceilings, Config};
use tokentap::record::api::Api;
use tokentap::record::figure::Figure;
use tokentap::record::finished::{conclude, DecoderReport, FinishedRecord};
use tokentap::record::metrics::format::Format;
use tokentap::record::metrics::{Metrics, Series};
use tokentap::record::outcome::Outcome;
use tokentap::record::timeline::Timeline;

/// Models on the page of the page benchmarks, each with every figure observed and every exemplar set.
const MODELS: usize = 16;

fn main() {
    let metrics = full_page();
    for format in Format::ALL {
        let page = metrics.encode_as(format);
        let exemplars = std::str::from_utf8(&page).map_or(0, |p| p.matches(" # {").count());
        eprintln!(
            "{format:?}: {} bytes, {exemplars} exemplars (in text)",
            page.len()
        );
    }
    divan::main();
}

fn metrics() -> Metrics {
    Metrics::new(&Config::default()).unwrap_or_else(|e| panic!("metrics: {e}"))
}

fn series(metrics: &Metrics, model: &str) -> Series {
    let label = metrics.model_label(Some(model), None, true);
    metrics.series(label, Api::Chat)
}

/// A streamed request: its first token at 120 ms, 8 tokens, ended at 400 ms.
fn finished() -> FinishedRecord {
    let t0 = tokio::time::Instant::now();
    let ms = Duration::from_millis;
    let mut timeline = Timeline::new(t0);
    timeline.on_head(Some(t0 + ms(50)));
    for i in 0..8 {
        timeline.on_output(0, t0 + ms(120 + 40 * i));
    }
    timeline.on_answer(t0 + ms(120), false);
    let report = DecoderReport {
        streaming: true,
        terminal_event: true,
        usage_output_tokens: Some(8),
        ..DecoderReport::default()
    };
    let ceilings = Ceilings::default();
    let ok = Some(StatusCode::OK);
    conclude(
        Some(&report),
        &timeline,
        Outcome::Ok,
        t0 + ms(400),
        ok,
        &ceilings,
    )
}

/// Every model's series with every figure observed and, on every bucket of the exemplar families, an
/// exemplar: the largest page these formats make for that many models.
fn full_page() -> Metrics {
    let metrics = metrics();
    let mut record = finished();
    for m in 0..MODELS {
        let mut series = series(&metrics, &format!("model-{m:02}"));
        // Values across every bucket, each request exemplified.
        for v in (0..64).map(|i| 0.001 * 1.25f64.powi(i)) {
            for figure in Figure::ALL {
                series.observe(&metrics, figure, v);
            }
            series.observe_gap(&metrics, v);
            record.figures.ttft = Some(Duration::from_secs_f64(v));
            record.figures.time_to_first_answer = Some(Duration::from_secs_f64(v));
            record.figures.time_to_first_tool_call = Some(Duration::from_secs_f64(v));
            record.figures.max_gap = Some(Duration::from_secs_f64(v));
            record.figures.e2e = Duration::from_secs_f64(v);
            metrics.exemplify(
                &series,
                &record,
                ([7; 16], [9; 8]),
                "3f2a9c1e-1b",
                SystemTime::now(),
            );
        }
    }
    metrics
}

/// One TTFT observation: classic buckets and native ones.
#[divan::bench]
fn observe_classic_and_native(bencher: Bencher) {
    let metrics = metrics();
    let mut series = series(&metrics, "m");
    bencher.bench_local(|| series.observe(&metrics, Figure::Ttft, black_box(0.123)));
}

/// One observation of a family kept classic only, with TTFT's boundaries.
#[divan::bench]
fn observe_classic_only(bencher: Bencher) {
    let metrics = metrics();
    let mut series = series(&metrics, "m");
    bencher.bench_local(|| series.observe(&metrics, Figure::TimeToResponseHead, black_box(0.123)));
}

/// A sampled request's exemplars, set at its end: TTFT, time to first answer, E2E and ITL's.
#[divan::bench]
fn exemplify_per_sampled_request(bencher: Bencher) {
    let metrics = metrics();
    let series = series(&metrics, "m");
    let record = finished();
    let id: Arc<str> = Arc::from("3f2a9c1e-1b");
    bencher.bench_local(|| {
        let at = SystemTime::now();
        metrics.exemplify(&series, black_box(&record), ([7; 16], [9; 8]), &id, at)
    });
}

#[divan::bench(args = ["text", "openmetrics", "protobuf"])]
fn encode_page(bencher: Bencher, format: &str) {
    let metrics = full_page();
    let format = match format {
        "text" => Format::Text,
        "openmetrics" => Format::OpenMetrics,
        _ => Format::Protobuf,
    };
    bencher.bench_local(|| metrics.encode_as(format));
}
