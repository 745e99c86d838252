//! tokentap's families as one OTLP `ExportMetricsServiceRequest`: the GenAI server metrics the
//! OpenTelemetry semantic conventions define ([`SEMCONV_VERSION`], named in a resource attribute and
//! the schema URL) and tokentap's own figures under `tokentap.*`, each from the family the Prometheus
//! page serves, with the same bucket edges and the same counts, series by series.
//!
//! Cumulative: each point carries its series' totals since the series began (a series that restarted
//! from zero, a retired model that came back, starts again with a new start time). Delta: what changed
//! since the last export the collector accepted ([`Sent`] is kept only then), so an export that failed
//! loses nothing. A reload that changed a histogram's edges re-bases its series: the export after it
//! carries no point for them, the next one does.

use std::collections::HashMap;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Histogram, HistogramDataPoint, Metric,
    NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prometheus::proto::{Metric as Gathered, MetricFamily, MetricType};

use crate::config::Temporality;
use crate::record::emit::operation;
use crate::record::metrics::family::{self, Family};

/// The OpenTelemetry semantic conventions the `gen_ai.server.*` metrics follow (still "Development").
pub const SEMCONV_VERSION: &str = "1.41.0";
const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.41.0";
const NAME: &str = "tokentap";
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// One exported metric: its name, what it is, and the family it is read from.
struct Exported {
    name: &'static str,
    description: &'static str,
    unit: &'static str,
    family: &'static Family,
    /// A GenAI convention's metric (its attributes are the convention's), else tokentap's own.
    genai: bool,
}

const EXPORTED: [Exported; 6] = [
    Exported {
        name: "gen_ai.server.time_to_first_token",
        description: "Time to generate first token for successful responses.",
        unit: "s",
        family: &family::TTFT,
        genai: true,
    },
    Exported {
        name: "gen_ai.server.time_per_output_token",
        description:
            "Time per output token generated after the first token for successful responses.",
        unit: "s",
        family: &family::TPOT,
        genai: true,
    },
    Exported {
        name: "gen_ai.server.request.duration",
        description:
            "Generative AI server request duration such as time-to-last byte or last output token.",
        unit: "s",
        family: &family::E2E,
        genai: true,
    },
    Exported {
        name: "tokentap.time_to_first_token",
        description: family::TTFT.help,
        unit: "s",
        family: &family::TTFT,
        genai: false,
    },
    Exported {
        name: "tokentap.time_to_first_answer",
        description: family::TIME_TO_FIRST_ANSWER.help,
        unit: "s",
        family: &family::TIME_TO_FIRST_ANSWER,
        genai: false,
    },
    Exported {
        name: "tokentap.goodput",
        description: family::GOODPUT.help,
        unit: "{request}",
        family: &family::GOODPUT,
        genai: false,
    },
];

/// The names every export carries, for the docs' table and the tests.
pub fn names() -> impl Iterator<Item = (&'static str, &'static str)> {
    EXPORTED.iter().map(|e| (e.name, e.family.name))
}

/// A series as an export keys it: the metric's name and its attributes.
type Key = (&'static str, Vec<(String, String)>);

/// What a series carried when it was last sent, and since when it counts.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Since when its cumulative values count.
    start: u64,
    /// When it was sent.
    sent_at: u64,
    count: u64,
    sum: f64,
    bounds: Vec<f64>,
    /// Per bucket (not cumulative), `+Inf` last; empty for a counter.
    buckets: Vec<u64>,
}

/// Every series' last point sent (the collector accepted it).
#[derive(Debug, Default, Clone)]
pub struct Sent(HashMap<Key, Point>);

/// The export of `families` at `now` (Unix nanoseconds), and what [`Sent`] becomes once the collector
/// accepts it. `started`: when tokentap started, the first series' start.
pub fn request(
    families: &[MetricFamily], sent: &Sent, temporality: Temporality, now: u64, started: u64,
    service_name: &str, server: (&str, u16),
) -> (ExportMetricsServiceRequest, Sent) {
    let mut next = Sent::default();
    let mut metrics = Vec::new();
    for exported in &EXPORTED {
        let Some(gathered) = families.iter().find(|f| f.name() == exported.family.name) else {
            continue;
        };
        let mut histogram_points = Vec::new();
        let mut sum_points = Vec::new();
        for series in gathered.get_metric() {
            let Some(attributes) = attributes(exported, series, server) else {
                continue;
            };
            let key = (exported.name, attributes);
            let now_point = point(gathered.get_field_type(), series, started);
            let previous = sent.0.get(&key);
            let (kept, shown) = compare(now_point, previous, temporality, now);
            let Some(shown) = shown else {
                next.0.insert(key, kept);
                continue;
            };
            let attributes = (key.1.iter())
                .map(|(k, v)| key_value(k, string(v)))
                .collect();
            match gathered.get_field_type() {
                MetricType::HISTOGRAM => histogram_points.push(HistogramDataPoint {
                    attributes,
                    start_time_unix_nano: shown.start,
                    time_unix_nano: now,
                    count: shown.count,
                    sum: Some(shown.sum),
                    bucket_counts: shown.buckets.clone(),
                    explicit_bounds: shown.bounds.clone(),
                    ..HistogramDataPoint::default()
                }),
                _ => sum_points.push(NumberDataPoint {
                    attributes,
                    start_time_unix_nano: shown.start,
                    time_unix_nano: now,
                    value: Some(number_data_point::Value::AsInt(
                        i64::try_from(shown.count).unwrap_or(i64::MAX),
                    )),
                    ..NumberDataPoint::default()
                }),
            }
            next.0.insert(key, kept);
        }
        let aggregation_temporality = match temporality {
            Temporality::Cumulative => AggregationTemporality::Cumulative,
            Temporality::Delta => AggregationTemporality::Delta,
        } as i32;
        let data = match gathered.get_field_type() {
            MetricType::HISTOGRAM if !histogram_points.is_empty() => {
                metric::Data::Histogram(Histogram {
                    data_points: histogram_points,
                    aggregation_temporality,
                })
            }
            MetricType::COUNTER if !sum_points.is_empty() => metric::Data::Sum(Sum {
                data_points: sum_points,
                aggregation_temporality,
                is_monotonic: true,
            }),
            _ => continue,
        };
        metrics.push(Metric {
            name: exported.name.to_owned(),
            description: exported.description.to_owned(),
            unit: exported.unit.to_owned(),
            data: Some(data),
            ..Metric::default()
        });
    }
    // A series not in this export (its label value retired) is forgotten: if it comes back, it
    // restarts.
    let resource = Resource {
        attributes: vec![
            key_value("service.name", string(service_name)),
            key_value("service.version", string(VERSION)),
            key_value("tokentap.semconv.version", string(SEMCONV_VERSION)),
        ],
        ..Resource::default()
    };
    let scope = InstrumentationScope {
        name: NAME.to_owned(),
        version: VERSION.to_owned(),
        ..InstrumentationScope::default()
    };
    let request = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(scope),
                metrics,
                schema_url: SCHEMA_URL.to_owned(),
            }],
            schema_url: SCHEMA_URL.to_owned(),
        }],
    };
    (request, next)
}

/// A series' attributes: a GenAI metric's are the convention's (`gen_ai.operation.name`,
/// `gen_ai.request.model` from the `model` label, `server.*`) and tokentap's `api` and `tenant`; an
/// API the conventions name no operation for has none. tokentap's own are its labels.
fn attributes(
    exported: &Exported, series: &Gathered, server: (&str, u16),
) -> Option<Vec<(String, String)>> {
    let label = |name: &str| {
        let pair = series.get_label().iter().find(|p| p.name() == name);
        pair.map(|p| p.value().to_owned())
    };
    let mut attributes = Vec::new();
    if exported.genai {
        let op = operation(&label("api")?)?;
        attributes.push(("gen_ai.operation.name".to_owned(), op.to_owned()));
        attributes.push(("gen_ai.request.model".to_owned(), label("model")?));
        attributes.push(("server.address".to_owned(), server.0.to_owned()));
        attributes.push(("server.port".to_owned(), server.1.to_string()));
    }
    for pair in series.get_label() {
        attributes.push((format!("tokentap.{}", pair.name()), pair.value().to_owned()));
    }
    Some(attributes)
}

/// A gathered series as a point (start left to [`compare`]).
fn point(kind: MetricType, series: &Gathered, started: u64) -> Point {
    if kind != MetricType::HISTOGRAM {
        let count = series.get_counter().get_value().max(0.0) as u64;
        return Point {
            start: started,
            sent_at: 0,
            count,
            sum: 0.0,
            bounds: Vec::new(),
            buckets: Vec::new(),
        };
    }
    let h = series.get_histogram();
    let (mut bounds, mut buckets, mut below) = (Vec::new(), Vec::new(), 0);
    for bucket in h.get_bucket() {
        bounds.push(bucket.upper_bound());
        buckets.push(bucket.cumulative_count().saturating_sub(below));
        below = bucket.cumulative_count();
    }
    buckets.push(h.get_sample_count().saturating_sub(below));
    Point {
        start: started,
        sent_at: 0,
        count: h.get_sample_count(),
        sum: h.get_sample_sum(),
        bounds,
        buckets,
    }
}

/// What to keep as sent for a series now at `current` (last sent as `previous`), and the point to
/// show for it, if any (none: its edges changed under delta temporality, so it is re-based now and
/// shown from the next export on).
fn compare(
    mut current: Point, previous: Option<&Point>, temporality: Temporality, now: u64,
) -> (Point, Option<Point>) {
    current.sent_at = now;
    let Some(previous) = previous else {
        return (current.clone(), Some(current));
    };
    if current.count < previous.count {
        // It restarted from zero (a retired label value that came back): it counts from the last
        // export on.
        current.start = previous.sent_at;
        return (current.clone(), Some(current));
    }
    current.start = previous.start;
    match temporality {
        Temporality::Cumulative => (current.clone(), Some(current)),
        Temporality::Delta if current.bounds != previous.bounds => (current, None),
        Temporality::Delta => {
            let shown = Point {
                start: previous.sent_at,
                sent_at: now,
                count: current.count - previous.count,
                sum: current.sum - previous.sum,
                bounds: current.bounds.clone(),
                buckets: (current.buckets.iter().zip(&previous.buckets))
                    .map(|(now, then)| now.saturating_sub(*then))
                    .collect(),
            };
            (current, Some(shown))
        }
    }
}

fn string(value: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(value.to_owned())),
    }
}

fn key_value(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(value),
        ..KeyValue::default()
    }
}
