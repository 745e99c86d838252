//! A WebSocket session's own figures, once it ended: counted in the session families and written to
//! every sink that takes sessions (the records, docs/records.md), and the place each response metered
//! inside it carries into its own record (the session's id, its position, its tokens audio and text
//! apart). `meter::finish_session` counts it and hands it on. The responses themselves are requests of `api="realtime"`, metered by `meter.rs`.

use std::time::{Duration, SystemTime};

use crate::record::api::Api;
use crate::record::finished::SkipReason;
use crate::record::outcome::Outcome;

/// Tokens audio and text apart, where the server's usage says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Modalities {
    pub input_text: Option<u64>,
    pub input_audio: Option<u64>,
    pub output_text: Option<u64>,
    pub output_audio: Option<u64>,
}

/// A response's place in its session.
#[derive(Debug, Clone, Copy)]
pub struct InSession<'a> {
    /// The session's id (the handshake's request id).
    pub id: &'a str,
    /// 1 for the session's first response.
    pub position: u64,
    pub tokens: Modalities,
}

/// A session that ended, as every sink gets it.
#[derive(Debug, Clone, Copy)]
pub struct SessionEnded<'a> {
    pub id: &'a str,
    /// The model the handshake's query or the session's events named.
    pub model: Option<&'a str>,
    pub api: Api,
    /// Wall-clock time of the upstream's `101`.
    pub start: SystemTime,
    pub duration: Duration,
    pub outcome: Outcome,
    /// The status code of the close frame each side sent, when it sent one with a code.
    pub close_client: Option<u16>,
    pub close_upstream: Option<u16>,
    pub responses: u64,
    /// The input and output tokens of its responses (the usage's, else the output chunks counted).
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Why its messages stopped being read, when they did.
    pub unmetered: Option<SkipReason>,
}
