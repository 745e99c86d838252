//! tokentap: a transparent measuring reverse proxy for LLM inference servers.
//!
//! The data path, one module a step: [`server`] accepts connections → [`proxy`] forwards each request
//! (its path made safe by [`request_target`]) →
//! [`tap`] wraps both bodies (the request's `model` is read on the way up; each response frame is
//! timestamped on the way down) → [`sse`] frames the stream (or [`json_scan`] reads a JSON body's fields)
//! → a [`dialect`] says which events carry generated output → [`exchange`] keeps the request's
//! [`timeline`] and, when it ends, records it into [`metrics`] with its [`slo`] verdict.
//!
//! Around it: [`client_conn`] times each client connection (header read, idle), and [`shutdown`] takes
//! the whole proxy from serving through draining to cutting what outlives the grace period;
//! [`repeated`] keeps a warning a flood repeats (accept failures, refusals) to one line per 10 s.
#![forbid(unsafe_code)]

pub mod client_conn;
pub mod config;
pub mod demo;
pub mod dialect;
pub mod error;
pub mod exchange;
pub mod hop_by_hop;
pub mod json_scan;
pub mod logging;
pub mod meter;
pub mod metrics;
pub mod ndjson;
pub mod proxy;
pub mod repeated;
pub mod request_target;
pub mod server;
pub mod shutdown;
pub mod slo;
pub mod sse;
pub mod tap;
pub mod timeline;
pub mod tokenizer;
pub mod tokens;
pub mod upstream;

pub use config::Config;
pub use server::{run, start, Running, StartError};
pub use shutdown::Drained;
