//! Startup and shutdown: the one place that assembles every stage into a running tokentap.
//!
//! [`start`] builds what the stages share (the metrics, the request records' writer, the tokenizers,
//! the upstream's model list, the live page), binds both ports (`net/server.rs`) and returns a
//! [`Running`] handle with the bound addresses, so tests run the whole proxy in-process on
//! `127.0.0.1:0`; [`run`] is the binary's main loop, which ends with a graceful shutdown
//! ([`Running::shutdown`], see `shutdown.rs`). Capture mode is assembled beside it (`capture.rs`:
//! [`start_capture`], [`run_capture`], [`read_capture_file`]).

mod capture;
pub mod plan;
mod reload;
mod run;
mod running;
mod start;

pub use capture::{
    read_capture_file, run_capture, start_capture, CaptureError, Capturing, FileRead,
};
pub use plan::StartError;
pub use reload::{changes, Reloaded, Source, LIVE};
pub use run::run;
pub use running::Running;
pub use start::start;
