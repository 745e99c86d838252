//! A finished request's span as a plain value, as the exporter encodes it (`otlp.rs`): its trace, name,
//! times, attributes, events and status. The span sink builds it from the finished request
//! (`record/emit/spans.rs`), after the request ended.
//!
//! One span per request, kind SERVER: it is tokentap's handling of the request it received, from the
//! request head (t_arrive) to the response's end (t_end), child of the caller's span when a
//! `traceparent` named one. The server's own span (vLLM's) is its sibling in that trace, or its child
//! with `traces.propagate`.

use super::context::{TraceContext, SAMPLED};

/// One span, as the exporter encodes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub context: TraceContext,
    pub name: String,
    /// Unix nanoseconds: t_arrive on the wall clock.
    pub start: u64,
    /// t_end.
    pub end: u64,
    pub attributes: Vec<Attribute>,
    pub events: Vec<Event>,
    pub status: Status,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attribute {
    pub key: &'static str,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Double(f64),
    Bool(bool),
    Strs(Vec<String>),
}

/// A moment in the request, at its time.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub name: &'static str,
    /// Unix nanoseconds.
    pub at: u64,
    pub attributes: Vec<Attribute>,
}

/// OpenTelemetry's span status: a SERVER span is an error for a failure, unset otherwise.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Unset,
    Error(String),
}

impl Span {
    /// The W3C flags as OTLP's `Span.flags` carries them: the trace flags (sampled: it is exported),
    /// and whether the parent is remote (bit 8 says that bit 9 is known).
    pub fn otlp_flags(&self) -> u32 {
        const HAS_IS_REMOTE: u32 = 0x100;
        const IS_REMOTE: u32 = 0x200;
        let remote = match self.context.parent {
            Some(_) => IS_REMOTE,
            None => 0,
        };
        u32::from(self.context.flags | SAMPLED) | HAS_IS_REMOTE | remote
    }

    /// The attribute named `key`, if the span has it.
    pub fn attribute(&self, key: &str) -> Option<&Value> {
        self.attributes
            .iter()
            .find(|a| a.key == key)
            .map(|a| &a.value)
    }
}
