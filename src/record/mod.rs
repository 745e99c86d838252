//! Recording a finished request: the exchange, its timeline, the SLO verdict and the metrics.

pub mod exchange;
pub mod metrics;
pub mod slo;
pub mod timeline;
