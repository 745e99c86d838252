//! Spans as OTLP's wire format: one `ExportTraceServiceRequest` (protobuf) per batch, with the
//! resource (`service.name`, `service.version`) and tokentap's instrumentation scope once, optionally
//! gzipped. The messages are the OpenTelemetry project's (`opentelemetry-proto`, prost), so tokentap
//! declares none of the protocol itself; no gRPC stack comes with them.

use std::io::Write;

use flate2::write::GzEncoder;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event as OtlpEvent, SpanKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{
    ResourceSpans, ScopeSpans, Span as OtlpSpan, Status as OtlpStatus,
};
use prost::Message;

use super::span::{Attribute, Span, Status, Value};

/// The instrumentation scope, and `service.version`: this build.
const NAME: &str = "tokentap";
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The batch as one export request.
pub fn request(spans: &[Span], service_name: &str) -> ExportTraceServiceRequest {
    let resource = Resource {
        attributes: vec![
            key_value(
                "service.name",
                any(any_value::Value::StringValue(service_name.to_owned())),
            ),
            key_value(
                "service.version",
                any(any_value::Value::StringValue(VERSION.to_owned())),
            ),
        ],
        ..Resource::default()
    };
    let scope = InstrumentationScope {
        name: NAME.to_owned(),
        version: VERSION.to_owned(),
        ..InstrumentationScope::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource),
            scope_spans: vec![ScopeSpans {
                scope: Some(scope),
                spans: spans.iter().map(span).collect(),
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
}

/// The export request's body: protobuf, gzipped when `gzip`.
pub fn body(spans: &[Span], service_name: &str, gzip: bool) -> std::io::Result<Vec<u8>> {
    let encoded = request(spans, service_name).encode_to_vec();
    match gzip {
        true => self::gzip(&encoded),
        false => Ok(encoded),
    }
}

/// An export body gzipped (fast: the export runs on the blocking pool, once per batch or interval).
pub fn gzip(encoded: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut zipped = GzEncoder::new(Vec::new(), flate2::Compression::fast());
    zipped.write_all(encoded)?;
    zipped.finish()
}

fn span(span: &Span) -> OtlpSpan {
    let context = &span.context;
    OtlpSpan {
        trace_id: context.trace_id.0.to_vec(),
        span_id: context.span_id.0.to_vec(),
        trace_state: context.trace_state.clone().unwrap_or_default(),
        parent_span_id: context.parent.map(|p| p.0.to_vec()).unwrap_or_default(),
        flags: span.otlp_flags(),
        name: span.name.clone(),
        kind: SpanKind::Server as i32,
        start_time_unix_nano: span.start,
        end_time_unix_nano: span.end,
        attributes: attributes(&span.attributes),
        events: span
            .events
            .iter()
            .map(|e| OtlpEvent {
                time_unix_nano: e.at,
                name: e.name.to_owned(),
                attributes: attributes(&e.attributes),
                ..OtlpEvent::default()
            })
            .collect(),
        status: Some(match &span.status {
            Status::Unset => OtlpStatus::default(),
            Status::Error(message) => OtlpStatus {
                message: message.clone(),
                code: StatusCode::Error as i32,
            },
        }),
        ..OtlpSpan::default()
    }
}

fn attributes(list: &[Attribute]) -> Vec<KeyValue> {
    list.iter()
        .map(|a| {
            let value = match &a.value {
                Value::Str(s) => any_value::Value::StringValue(s.clone()),
                Value::Int(i) => any_value::Value::IntValue(*i),
                Value::Double(d) => any_value::Value::DoubleValue(*d),
                Value::Bool(b) => any_value::Value::BoolValue(*b),
                Value::Strs(list) => any_value::Value::ArrayValue(ArrayValue {
                    values: list
                        .iter()
                        .map(|s| any(any_value::Value::StringValue(s.clone())))
                        .collect(),
                }),
            };
            key_value(a.key, any(value))
        })
        .collect()
}

fn any(value: any_value::Value) -> AnyValue {
    AnyValue { value: Some(value) }
}

fn key_value(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(value),
        ..KeyValue::default()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::super::context::{parse_traceparent, SpanId, TraceContext};
    use super::super::span::Event;
    use super::*;

    fn spans() -> Vec<Span> {
        let parent = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let parent = parent.unwrap_or_else(|| panic!("the W3C example parses"));
        let context = TraceContext {
            trace_id: parent.trace_id,
            span_id: SpanId([0x11; 8]),
            parent: Some(parent.span_id),
            flags: parent.flags,
            trace_state: Some("congo=t61rcWkgMzE".into()),
            replaced: false,
        };
        // A span as the span sink builds it (`record/emit/spans.rs`): a 502 answered in 2 s, its first
        // token at 0.5 s, its TTFT ceiling missed.
        let start = 1_800_000_000_000_000_000;
        let attribute = |key, value| Attribute { key, value };
        let span = Span {
            context,
            name: "chat qwen".into(),
            start,
            end: start + 2_000_000_000,
            attributes: vec![
                attribute("gen_ai.operation.name", Value::Str("chat".into())),
                attribute("gen_ai.usage.output_tokens", Value::Int(9)),
                attribute("gen_ai.response.time_to_first_chunk", Value::Double(0.5)),
                attribute("error.type", Value::Str("502".into())),
                attribute("tokentap.stream", Value::Bool(true)),
                attribute("tokentap.slo_missed", Value::Strs(vec!["ttft".into()])),
            ],
            events: vec![Event {
                name: "tokentap.first_token",
                at: start + 500_000_000,
                attributes: vec![attribute("tokentap.ttft_s", Value::Double(0.5))],
            }],
            status: Status::Error("502".into()),
        };
        vec![span]
    }

    fn value(attributes: &[KeyValue], key: &str) -> Option<any_value::Value> {
        let found = attributes.iter().find(|kv| kv.key == key)?;
        found.value.as_ref()?.value.clone()
    }

    #[test]
    fn a_batch_decodes_back_with_every_field_it_was_built_with() {
        let spans = spans();
        for gzip in [false, true] {
            let bytes = body(&spans, "tokentap-eu", gzip).unwrap_or_default();
            let bytes = match gzip {
                false => bytes,
                true => {
                    let mut plain = Vec::new();
                    let mut reader = flate2::read::GzDecoder::new(&bytes[..]);
                    reader.read_to_end(&mut plain).unwrap_or_default();
                    plain
                }
            };
            let back = ExportTraceServiceRequest::decode(&bytes[..]).unwrap_or_default();
            assert_eq!(back, request(&spans, "tokentap-eu"), "gzip {gzip}");
            let resource = back.resource_spans[0].resource.clone().unwrap_or_default();
            assert_eq!(
                value(&resource.attributes, "service.name"),
                Some(any_value::Value::StringValue("tokentap-eu".into()))
            );
            let scope = &back.resource_spans[0].scope_spans[0];
            assert_eq!(
                scope.scope.as_ref().map(|s| s.name.as_str()),
                Some("tokentap")
            );
            let span = &scope.spans[0];
            assert_eq!(hex(&span.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
            assert_eq!(hex(&span.parent_span_id), "00f067aa0ba902b7");
            assert_eq!(hex(&span.span_id), "1111111111111111");
            assert_eq!(span.trace_state, "congo=t61rcWkgMzE");
            assert_eq!(span.flags, 0x301);
            assert_eq!(span.kind, SpanKind::Server as i32);
            assert_eq!(span.name, "chat qwen");
            let start = 1_800_000_000_000_000_000;
            assert_eq!(
                (span.start_time_unix_nano, span.end_time_unix_nano),
                (start, start + 2_000_000_000)
            );
            assert_eq!(
                value(&span.attributes, "gen_ai.response.time_to_first_chunk"),
                Some(any_value::Value::DoubleValue(0.5))
            );
            assert_eq!(
                value(&span.attributes, "gen_ai.usage.output_tokens"),
                Some(any_value::Value::IntValue(9))
            );
            assert_eq!(
                value(&span.attributes, "error.type"),
                Some(any_value::Value::StringValue("502".into()))
            );
            let missed = value(&span.attributes, "tokentap.slo_missed");
            let Some(any_value::Value::ArrayValue(missed)) = missed else {
                panic!("slo_missed is an array: {missed:?}");
            };
            assert_eq!(missed.values.len(), 1);
            assert_eq!(span.events.len(), 1);
            assert_eq!(span.events[0].name, "tokentap.first_token");
            assert_eq!(span.events[0].time_unix_nano, start + 500_000_000);
            let status = span.status.clone().unwrap_or_default();
            assert_eq!(
                (status.code, status.message.as_str()),
                (StatusCode::Error as i32, "502")
            );
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
