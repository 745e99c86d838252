//! A scripted model server: raw HTTP/1.1 on loopback whose every answer is a script of steps (bytes,
//! pauses, a close, a reset, a keep-alive timer), so its faults are steps like its tokens. `tokentap
//! demo` streams through it; the tests, the benchmarks and the soak run against it.
//!
//! [`server`] serves the scripts and notes what arrived; [`answers`] spells what they send (heads,
//! chunks, SSE events, OpenAI chunks and whole streams); [`chunked`] decodes a chunked body (the
//! server's reader of request bodies, and a test's reader of tokentap's answers).

pub mod answers;
pub mod chunked;
pub mod server;

pub use answers::*;
pub use chunked::{decode, Chunked};
pub use server::{ConnectionLog, Make, RecordedRequest, Render, Scripted, Step, Upstream};
