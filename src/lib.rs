//! tokentap: a transparent measuring reverse proxy for LLM inference servers.
//!
//! The data path, one module a step: [`net::server`] accepts connections → [`proxy`] forwards each request
//! (its path made safe by [`proxy::request_target`]) →
//! [`tap`] wraps both bodies (the request's `model` is read on the way up; each response frame is
//! timestamped on the way down) → [`decode::sse`] frames the stream (or [`decode::json_scan`] reads a JSON body's fields)
//! → a [`decode::dialect`] says which events carry generated output → [`record::exchange`] keeps the request's
//! [`record::timeline`] and, when it ends, records it into [`record::metrics`] with its [`record::slo`] verdict.
//!
//! Around it: [`net::client_conn`] times each client connection (header read, idle), and [`net::shutdown`] takes
//! the whole proxy from serving through draining to cutting what outlives the grace period;
//! [`net::repeated`] keeps a warning a flood repeats (accept failures, refusals) to one line per 10 s.
#![forbid(unsafe_code)]

pub mod config;
pub mod decode;
pub mod logging;
pub mod net;
pub mod proxy;
pub mod record;
pub mod shutdown;
pub mod tap;

pub use config::Config;
pub use net::server::{run, start, Running, StartError};
pub use shutdown::Drained;
