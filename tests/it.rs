//! The integration tests that run in this process, the quick tier's (docs/testing.md, "Tiers"): each
//! file of `tests/` is a module of it (a suite, listed in docs/testing.md) and `support/` the house they
//! share. One crate links once where ~45 binaries each linked the library and the dependencies (docs/
//! testing.md, "Two crates of tests"). Run one suite with `cargo test --test it headers::`. The suites
//! that start processes or load the machine are `tests/heavy.rs`'s; the files that measure their own
//! process (`leaks.rs`, `metrics_port.rs`, `metrics_port_limits.rs`: descriptors, resident memory) and the
//! benchmark harness's smoke test stay binaries of their own (`Cargo.toml`).

mod support;

mod admission;
mod admission_faults;
mod architecture;
mod audio;
mod cancellation;
mod capture;
mod conversations;
mod deploy;
mod dialects;
mod docs;
mod failures;
mod faults;
mod forwarding;
mod forwarding_delay;
mod headers;
mod hostile;
mod hostile_client;
mod hostile_upstream;
mod inside_ttft;
mod limits;
mod live_page;
mod log_line;
mod lora;
mod metering;
mod otlp_metrics;
mod properties;
mod realtime;
mod realtime_clients;
mod realtime_identity;
mod records;
mod report;
mod report_proxy;
mod report_whatif;
mod response_head;
mod shutdown;
mod sidecar;
mod split_forwarding;
mod timeouts;
mod tls_listener;
mod tokenizer;
mod tool_calls;
mod traces;
mod upstream_slots;
mod websocket;
