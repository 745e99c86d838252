//! The network edge: listeners, admin endpoints, client connection timers and graceful shutdown.

pub mod client_conn;
pub mod repeated;
pub mod server;
pub mod shutdown;
