//! The integration tests that start processes (the binary, Prometheus, Python with chdb) or load the
//! machine (a thousand connections, hundreds of streams, a soak): the whole tier's, left out of the
//! quick one (`cargo test --lib --bins --test it`; docs/testing.md, "Tiers"). Each file of `tests/` listed
//! here is a module, as in `tests/it.rs`; a test that starts a process holds `support::slot()`, so one
//! of them runs at a time. Run one suite with `cargo test --test heavy prometheus::`.

mod support;

mod check_config;
mod cli;
mod clickhouse;
mod conversation_load;
mod exemplars;
mod governor;
mod governor_sessions;
mod label_flood;
mod process_memory;
mod prometheus;
mod realtime_soak;
mod records_faults;
mod reload;
mod reload_guard;
mod replicas;
mod signal;
mod terminal_output;
mod upstream_reuse;
