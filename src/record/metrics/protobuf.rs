//! Prometheus's protobuf exposition (`application/vnd.google.protobuf;
//! proto=io.prometheus.client.MetricFamily; encoding=delimited`): each family a length-delimited
//! `io.prometheus.client.MetricFamily`, its classic buckets as on every page, each bucket's exemplar,
//! and, for the families `family::NATIVE` names, the native histogram beside them (schema, zero
//! bucket, spans and deltas: `native.rs`). It is what a Prometheus with native histograms on asks for
//! first, and the only format that carries them.
//!
//! The messages are declared here, after Prometheus's `client_model` (`io/prometheus/client/
//! metrics.proto`, v0.6): the `prometheus` crate's own copy predates native histograms and exemplars,
//! and no maintained crate publishes the current one. Only the fields tokentap writes are declared;
//! numbers and types are the proto's, so any reader of that file reads these.

use prost::Message;

use prometheus::proto::{Metric as Gathered, MetricFamily as GatheredFamily, MetricType};

use super::exemplars::Exemplar as Kept;
use super::native::{spans_and_deltas, SCHEMA, ZERO_THRESHOLD};
use super::rebucket::Rebucketable;

#[derive(Clone, PartialEq, Message)]
pub struct MetricFamily {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub help: String,
    /// `MetricType`: 0 counter, 1 gauge, 4 histogram.
    #[prost(int32, tag = "3")]
    pub r#type: i32,
    #[prost(message, repeated, tag = "4")]
    pub metric: Vec<Metric>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Metric {
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    #[prost(message, optional, tag = "2")]
    pub gauge: Option<Value>,
    #[prost(message, optional, tag = "3")]
    pub counter: Option<Value>,
    #[prost(message, optional, tag = "7")]
    pub histogram: Option<Histogram>,
}

#[derive(Clone, PartialEq, Message)]
pub struct LabelPair {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `Gauge` and `Counter` alike: the value (field 1).
#[derive(Clone, PartialEq, Message)]
pub struct Value {
    #[prost(double, tag = "1")]
    pub value: f64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Histogram {
    #[prost(uint64, tag = "1")]
    pub sample_count: u64,
    #[prost(double, tag = "2")]
    pub sample_sum: f64,
    #[prost(message, repeated, tag = "3")]
    pub bucket: Vec<Bucket>,
    #[prost(sint32, tag = "5")]
    pub schema: i32,
    #[prost(double, tag = "6")]
    pub zero_threshold: f64,
    #[prost(uint64, tag = "7")]
    pub zero_count: u64,
    #[prost(message, repeated, tag = "12")]
    pub positive_span: Vec<BucketSpan>,
    #[prost(sint64, repeated, tag = "13")]
    pub positive_delta: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Bucket {
    #[prost(uint64, tag = "1")]
    pub cumulative_count: u64,
    #[prost(double, tag = "2")]
    pub upper_bound: f64,
    #[prost(message, optional, tag = "3")]
    pub exemplar: Option<Exemplar>,
}

#[derive(Clone, PartialEq, Message)]
pub struct BucketSpan {
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

#[derive(Clone, PartialEq, Message)]
pub struct Exemplar {
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    #[prost(double, tag = "2")]
    pub value: f64,
    #[prost(message, optional, tag = "3")]
    pub timestamp: Option<Timestamp>,
}

/// `google.protobuf.Timestamp`.
#[derive(Clone, PartialEq, Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// Writes `families` to `out`, each length-delimited; `joined` names the registered family of a
/// histogram that is native or carries exemplars.
pub fn encode<'a>(
    families: &[GatheredFamily], joined: impl Fn(&str) -> Option<&'a Rebucketable>,
    out: &mut Vec<u8>,
) {
    for gathered in families {
        let kind = gathered.get_field_type();
        let registered = match kind {
            MetricType::HISTOGRAM => joined(gathered.name()),
            _ => None,
        };
        let family = MetricFamily {
            name: gathered.name().to_owned(),
            help: gathered.help().to_owned(),
            r#type: match kind {
                MetricType::COUNTER => 0,
                MetricType::GAUGE => 1,
                MetricType::HISTOGRAM => 4,
                _ => 3,
            },
            metric: (gathered.get_metric().iter())
                .map(|m| metric(m, kind, registered))
                .collect(),
        };
        // Writing to a Vec cannot run out of room.
        let _ = family.encode_length_delimited(out);
    }
}

fn metric(gathered: &Gathered, kind: MetricType, registered: Option<&Rebucketable>) -> Metric {
    let label = (gathered.get_label().iter())
        .map(|pair| LabelPair {
            name: pair.name().to_owned(),
            value: pair.value().to_owned(),
        })
        .collect();
    let mut metric = Metric {
        label,
        ..Metric::default()
    };
    match kind {
        MetricType::COUNTER => {
            let value = gathered.get_counter().get_value();
            metric.counter = Some(Value { value });
        }
        MetricType::GAUGE => {
            let value = gathered.get_gauge().get_value();
            metric.gauge = Some(Value { value });
        }
        MetricType::HISTOGRAM => metric.histogram = Some(histogram(gathered, registered)),
        _ => {}
    }
    metric
}

fn histogram(gathered: &Gathered, registered: Option<&Rebucketable>) -> Histogram {
    let classic = gathered.get_histogram();
    let exemplars = registered
        .map(|r| r.exemplars_of(gathered))
        .unwrap_or_default();
    let native = registered.and_then(|r| r.native_of(gathered));
    let exemplar_of = |bucket: usize| {
        let kept = exemplars.iter().find(|(b, _)| *b == bucket);
        kept.map(|(_, e)| exemplar(e))
    };
    let mut bucket: Vec<Bucket> = (classic.get_bucket().iter().enumerate())
        .map(|(i, b)| Bucket {
            cumulative_count: b.cumulative_count(),
            upper_bound: b.upper_bound(),
            exemplar: exemplar_of(i),
        })
        .collect();
    let inf = bucket.len();
    if let Some(exemplar) = exemplar_of(inf) {
        bucket.push(Bucket {
            cumulative_count: classic.get_sample_count(),
            upper_bound: f64::INFINITY,
            exemplar: Some(exemplar),
        });
    }
    let mut histogram = Histogram {
        sample_count: classic.get_sample_count(),
        sample_sum: classic.get_sample_sum(),
        bucket,
        ..Histogram::default()
    };
    // A native family's series is native even before its first observation: the zero threshold
    // (above 0) is what marks it so.
    let native = native.or_else(|| {
        registered
            .filter(|r| r.native())
            .map(|_| Default::default())
    });
    if let Some(native) = native {
        // The native buckets' own count and sum: the classic child is observed a moment apart, and a
        // native histogram's count must hold its buckets'.
        histogram.sample_count = native.count;
        histogram.sample_sum = native.sum;
        let (spans, deltas) = spans_and_deltas(&native.buckets);
        histogram.schema = SCHEMA;
        histogram.zero_threshold = ZERO_THRESHOLD;
        histogram.zero_count = native.zero;
        histogram.positive_span = (spans.into_iter())
            .map(|(offset, length)| BucketSpan { offset, length })
            .collect();
        histogram.positive_delta = deltas;
    }
    histogram
}

fn exemplar(kept: &Kept) -> Exemplar {
    let at = kept
        .at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Exemplar {
        label: (kept.labels().into_iter())
            .map(|(name, value)| LabelPair {
                name: name.to_owned(),
                value,
            })
            .collect(),
        value: kept.value,
        timestamp: Some(Timestamp {
            seconds: i64::try_from(at.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(at.subsec_nanos()).unwrap_or(0),
        }),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::config::Config;
    use crate::record::api::Api;
    use crate::record::figure::Figure;
    use crate::record::metrics::family;
    use crate::record::metrics::format::Format;
    use crate::record::metrics::Metrics;

    /// TTFT buckets 0.1, 0.5 (the ceiling), 1; three first tokens, the 0.7 s one's span exported.
    pub(in crate::record::metrics) fn observed() -> Metrics {
        let yaml = "slo: {ttft: 500ms}\nbuckets: {ttft: [0.1, 1]}";
        let metrics = Metrics::new(&Config::from_yaml_str(yaml).unwrap()).unwrap();
        let label = metrics.model_label(Some("m"), None, true);
        let mut series = metrics.series(label, Api::Chat);
        for v in [0.3, 0.3, 0.7] {
            series.observe(&metrics, Figure::Ttft, v);
        }
        let ttft = metrics.exemplified(&family::TTFT).unwrap();
        let exemplar = Kept {
            trace_id: [0x4b; 16],
            span_id: [0x00; 8],
            request_id: Arc::from("3f2a9c1e-1b"),
            value: 0.7,
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_288_442_123),
        };
        ttft.exemplify(&["m", "chat"], exemplar);
        metrics
    }

    fn decode(mut page: &[u8]) -> Vec<MetricFamily> {
        let mut families = Vec::new();
        while !page.is_empty() {
            families.push(MetricFamily::decode_length_delimited(&mut page).unwrap());
        }
        families
    }

    #[test]
    fn a_native_family_carries_its_native_buckets_beside_the_classic_ones_and_its_exemplar() {
        let metrics = observed();
        let families = decode(&metrics.encode_as(Format::Protobuf));
        let ttft = families
            .iter()
            .find(|f| f.name == family::TTFT.name)
            .unwrap();
        assert_eq!(ttft.r#type, 4);
        let h = ttft.metric[0].histogram.clone().unwrap();
        let classic: Vec<(f64, u64)> = h
            .bucket
            .iter()
            .map(|b| (b.upper_bound, b.cumulative_count))
            .collect();
        assert_eq!(classic[..3], [(0.1, 0), (0.5, 2), (1.0, 3)]);
        let exemplar = h.bucket[2].exemplar.clone().unwrap();
        assert_eq!(exemplar.value, 0.7);
        let labels: Vec<(&str, &str)> = (exemplar.label.iter())
            .map(|l| (&*l.name, &*l.value))
            .collect();
        let trace = "4b".repeat(16);
        assert_eq!(
            labels,
            [
                ("trace_id", &*trace),
                ("span_id", "0000000000000000"),
                ("request_id", "3f2a9c1e-1b")
            ]
        );
        assert_eq!(
            exemplar.timestamp,
            Some(Timestamp {
                seconds: 1_796_288_442,
                nanos: 123_000_000
            })
        );
        // 0.3 is in (2^(-14/8), 2^(-13/8)] = (0.2973, 0.3242]: index -13; 0.7 in index -4.
        assert_eq!(
            (h.schema, h.zero_threshold, h.sample_count),
            (3, ZERO_THRESHOLD, 3)
        );
        assert_eq!(
            h.positive_span,
            [
                BucketSpan {
                    offset: -13,
                    length: 1
                },
                BucketSpan {
                    offset: 8,
                    length: 1
                }
            ]
        );
        assert_eq!(h.positive_delta, [2, -1]);
        // A family that is not native stays classic; a counter is a counter.
        let delay = families
            .iter()
            .find(|f| f.name == family::FORWARDING_DELAY.name)
            .unwrap();
        let delay = delay.metric[0].histogram.clone().unwrap();
        assert_eq!((delay.zero_threshold, delay.positive_span.len()), (0.0, 0));
        let encodes = families
            .iter()
            .find(|f| f.name == family::ENCODES.name)
            .unwrap();
        assert_eq!(
            (encodes.r#type, encodes.metric[0].counter.clone()),
            (0, Some(Value { value: 1.0 }))
        );
    }
}
