//! Forwarding: the per-request service, the request body held or streamed on its way up, the upstream
//! client, hop-by-hop headers and the request target, WebSocket upgrades passed through; beside them, the upstream's model list, fetched in
//! the background.

pub mod admit;
pub mod error;
pub mod hop_by_hop;
pub mod models;
pub mod request_body;
pub mod request_target;
pub mod rewrite;
pub mod service;
pub mod upgrade;
pub mod upstream;

pub use service::Proxy;
