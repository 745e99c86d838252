//! Recording a request: its `api` label, its timeline, which token count to trust, the SLO verdict and
//! the metrics.

pub mod api;
pub mod metrics;
pub mod slo;
pub mod timeline;
pub mod tokens;
