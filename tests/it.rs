//! The integration tests, one crate: each file of `tests/` is a module of it (a suite, listed in
//! docs/testing.md) and `support/` the house they share. One crate links once where ~45 binaries each
//! linked the library and the dependencies: building the tests takes well under half the time it did
//! (docs/testing.md, "One crate of tests"). Run one suite with `cargo test --test it headers::`.
//! The files that measure their own process (`leaks.rs`, `metrics_port.rs`, `metrics_port_limits.rs`:
//! descriptors, resident memory) and the benchmark harness's smoke test stay binaries of their own
//! (`Cargo.toml`).

mod support;

mod admission;
mod admission_faults;
mod architecture;
mod audio;
mod cancellation;
mod capture;
mod check_config;
mod cli;
mod clickhouse;
mod conversation_load;
mod conversations;
mod deploy;
mod dialects;
mod docs;
mod exemplars;
mod failures;
mod faults;
mod forwarding;
mod forwarding_delay;
mod governor;
mod governor_sessions;
mod headers;
mod hostile;
mod hostile_client;
mod hostile_upstream;
mod inside_ttft;
mod label_flood;
mod limits;
mod live_page;
mod log_line;
mod lora;
mod metering;
mod otlp_metrics;
mod process_memory;
mod prometheus;
mod properties;
mod realtime;
mod realtime_clients;
mod realtime_identity;
mod realtime_soak;
mod records;
mod records_faults;
mod reload;
mod reload_guard;
mod replicas;
mod report;
mod report_proxy;
mod report_whatif;
mod response_head;
mod shutdown;
mod sidecar;
mod signal;
mod split_forwarding;
mod terminal_output;
mod timeouts;
mod tls_listener;
mod tokenizer;
mod tool_calls;
mod traces;
mod upstream_reuse;
mod upstream_slots;
mod websocket;
