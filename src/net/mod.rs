//! The network edge: the listeners, the admin endpoints (and the live page on the metrics port) and each
//! client connection's timers.
//! The shutdown sequence they run is [`crate::shutdown`].

pub mod admin;
pub mod client_conn;
pub mod delay;
pub mod server;
pub mod ui;
