//! Recording a finished request: the exchange, its timeline, its outcome, the finished record (figures,
//! token source, SLO verdict) and the metrics.

pub mod exchange;
pub mod finished;
pub mod metrics;
pub mod outcome;
pub mod slo;
pub mod timeline;
