//! tokentap: a transparent measuring reverse proxy for LLM inference servers.
//!
//! The folder tree is the data path, one module a stage, and imports only run down it
//! (docs/architecture.md; `tests/architecture.rs` checks):
//!
//! [`net`] accepts connections (listeners, admin endpoints, client connection timers) →
//! [`proxy`] forwards each request (the upstream client, hop-by-hop headers, a safe upstream path) →
//! [`tap`] wraps both bodies (the request's `model` is read on the way up; each response frame is
//! timestamped on the way down) and keeps the request's [`tap::exchange`] →
//! [`decode`] frames the response (SSE, NDJSON or a JSON body's fields) and its dialect says which
//! events carry generated output →
//! [`record`] turns the request's timeline into TTFT, ITL, TPOT and E2E, its SLO verdict and metrics.
//!
//! Leaves every stage may use: [`config`], [`logging`] and [`shutdown`] (the phases from serving
//! through draining to cutting what outlives the grace period).
//!
//! Tools beside the path, which may use every stage and are used by none: [`app`] assembles the stages
//! into a running tokentap and shuts it down ([`start`], [`run`], [`Running`]); [`report`] sums up
//! request record files (`tokentap report`); [`scripted`] is a model server that answers with scripts
//! of bytes, pauses and faults (`tokentap demo`'s, and the tests' and benchmarks').
#![forbid(unsafe_code)]
// Nothing outside the tests may panic on an input: no `unwrap`, `expect` or `panic!` (a test's
// `unwrap` says what it expects).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod app;
pub mod capture;
pub mod config;
pub mod decode;
pub mod govern;
pub mod logging;
pub mod net;
pub mod proxy;
pub mod record;
pub mod report;
pub mod scripted;
pub mod shutdown;
pub mod tap;

pub use app::{run, start, Reloaded, Running, Source, StartError};
pub use config::Config;
pub use shutdown::Drained;
