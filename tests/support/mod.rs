//! Test harness, one file a job; this file only re-exports, so a test file writes `use support::*;`.
//! - `upstream`: the scripted upstream (raw HTTP/1.1 or TLS on loopback; faults are steps of its script).
//! - `script`: building its answers (heads, chunks, OpenAI events).
//! - `binary`: the built binary as a child process (signals, exit, log), blocking GETs.
//! - `proxy`: tokentap in-process, and what the test process holds (in flight, descriptors, memory).
//! - `client`: pooled h1/h2c clients, single h1/h2c connections to drop, what a client got.
//! - `raw`: raw bytes to the proxy port and the answer as bytes.
//! - `chunked`: the one chunked-coding decoder (the upstream's reader and `raw::dechunk` use it).
//! - `records`: the request records a test's tokentap writes, read back.
//! - `scrape`: `/metrics` read back as samples.
//! - `prometheus`: a real Prometheus on loopback scraping tokentap, and PromQL queries to it.
//! - `streams`: generated inputs (random cut points, proptest strategies).
#![allow(dead_code)]

mod binary;
mod chunked;
mod client;
mod prometheus;
mod proxy;
mod raw;
mod records;
mod scrape;
mod script;
pub mod streams;
mod upstream;

// Each test binary uses a different part of the harness.
#[allow(unused_imports)]
pub use binary::*;
#[allow(unused_imports)]
pub use client::*;
#[allow(unused_imports)]
pub use prometheus::*;
#[allow(unused_imports)]
pub use proxy::*;
#[allow(unused_imports)]
pub use raw::*;
#[allow(unused_imports)]
pub use records::*;
#[allow(unused_imports)]
pub use scrape::*;
#[allow(unused_imports)]
pub use script::*;
#[allow(unused_imports)]
pub use streams::{random_frames, Lcg};
#[allow(unused_imports)]
pub use upstream::*;
