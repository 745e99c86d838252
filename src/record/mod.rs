//! Recording a request: its `api` label, the conversation it continues, its timeline, how it ended (its outcome), which token count to
//! trust, its finished record (figures and SLO verdict, a pure function), the metrics (and, with `otlp_metrics:`, their OTLP export) and its span, with the
//! models the upstream serves deciding which names take a label.

pub mod api;
pub mod conversations;
pub mod emit;
pub mod figure;
pub mod finished;
pub mod gaps;
pub mod live;
pub mod meter;
pub mod metrics;
pub mod otlp_metrics;
pub mod outcome;
pub mod request_record;
pub mod served;
pub mod server;
pub mod session;
pub mod slo;
pub mod timeline;
pub mod tokens;
pub mod trace;
