//! A finished request, written out once to every sink: the metrics, the log line, the per-request
//! record (`request_log:`), and whatever sink is added next. The meter builds the [`Finished`] event
//! (`record/meter.rs`) and hands it to [`Emitter::emit`], the one place a finished request leaves
//! tokentap; each sink writes what it carries of it, its figures read through the figure table
//! (`record::figure`), so a new figure reaches every sink from its row and a new sink is one more
//! [`Sink`].

mod log;
mod records;

use std::sync::Arc;
use std::time::SystemTime;

use crate::record::api::Api;
use crate::record::conversations::Turn;
use crate::record::finished::FinishedRecord;
use crate::record::gaps::GapSummary;
use crate::record::metrics::{Metrics, Series};

pub use log::LogLine;
pub use records::Records;

/// Who sent a finished request, and what it asked: what a sink says beside the figures.
#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    /// tokentap's own id of the request.
    pub id: &'a str,
    /// The client's `x-request-id`, when it sent a usable one.
    pub client_id: Option<&'a str>,
    pub method: &'a str,
    /// The path, without its query.
    pub path: &'a str,
    /// Wall-clock arrival.
    pub start: SystemTime,
}

/// One finished request, as every sink gets it.
pub struct Finished<'a> {
    pub who: Who<'a>,
    pub api: Api,
    /// Its labels (model, tenant) and the children of the families it wrote to.
    pub series: &'a Series,
    /// Every figure, the tokens and the verdict.
    pub record: &'a FinishedRecord,
    /// Its place in its conversation, when it has one.
    pub turn: Option<&'a Turn>,
    /// Its own gaps, when a sink lists them (`request_log:`).
    pub gaps: &'a GapSummary,
}

/// Somewhere a finished request is written.
pub trait Sink: Send + Sync {
    fn emit(&self, finished: &Finished<'_>);

    /// Whether it writes a request's own gaps: `(list every gap, at most this many)`; the meter keeps
    /// them only then.
    fn gaps(&self) -> Option<(bool, usize)> {
        None
    }
}

/// Every sink a finished request goes to.
pub struct Emitter {
    metrics: Arc<Metrics>,
    sinks: Vec<Box<dyn Sink>>,
}

impl Emitter {
    /// The metrics and the log line, always; `records` when `request_log:` is on.
    pub fn new(metrics: Arc<Metrics>, records: Option<Records>) -> Self {
        let mut sinks: Vec<Box<dyn Sink>> = vec![Box::new(LogLine)];
        if let Some(records) = records {
            sinks.push(Box::new(records));
        }
        Emitter { metrics, sinks }
    }

    /// Adds a sink.
    pub fn with(mut self, sink: impl Sink + 'static) -> Self {
        self.sinks.push(Box::new(sink));
        self
    }

    /// The gaps the sinks want listed: `(list every gap, at most this many)`, when any sink keeps a
    /// request's own gaps.
    pub fn gaps(&self) -> Option<(bool, usize)> {
        self.sinks.iter().filter_map(|s| s.gaps()).next()
    }

    pub fn emit(&self, finished: &Finished<'_>) {
        self.metrics.emit(finished);
        for sink in &self.sinks {
            sink.emit(finished);
        }
    }
}

impl Sink for Metrics {
    fn emit(&self, finished: &Finished<'_>) {
        self.finish(finished.series, finished.record);
        if let Some(turn) = finished.turn {
            self.finish_turn(finished.series, turn, finished.record);
        }
    }
}
