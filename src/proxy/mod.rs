//! Forwarding: the per-request service, the request body held or streamed on its way up, the upstream
//! client, hop-by-hop headers and the request target.

pub mod error;
pub mod hop_by_hop;
pub mod request_body;
pub mod request_target;
pub mod service;
pub mod upstream;

pub use service::Proxy;
