//! The network edge: the listeners, the admin endpoints (and the live page on the metrics port), each
//! client connection's timers and activity, TLS on the proxy port (`tls.rs`), the ports' connection caps (`places.rs`), the signals an operator sends, and the fleet's figures read from
//! Prometheus (`fleet.rs`).
//! The shutdown sequence they run is [`crate::shutdown`]; what they serve is assembled by `app/`.

pub mod activity;
pub mod admin;
pub mod client_conn;
pub mod delay;
pub mod fleet;
pub mod places;
pub mod server;
pub mod signals;
pub mod tls;
pub mod ui;
