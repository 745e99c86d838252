//! What every exchange is given ([`ExchangeContext`]), made once at start, and the part of it a reload
//! may change ([`Settings`]): one `Arc` a request takes at its admission and keeps to its end, so a
//! request in flight is judged by the ceilings it started with and every later one by the new.

use std::sync::{Arc, PoisonError, RwLock};

use crate::config::{Config, Metering};
use crate::decode::tokenizer::Tokenizers;
use crate::govern::Governor;
use crate::record::emit::Emitter;
use crate::record::meter::MeterContext;
use crate::record::metrics::Metrics;
use crate::shutdown::Count;
use crate::tap::identity::Identify;
pub use crate::tap::list_read::Readers;

/// The part of the config a reload may change, as the requests see it: each request takes the one
/// current at its admission (one `Arc` clone, [`ExchangeContext::settings`]) and finishes under it, so
/// every request in flight is judged by the ceilings it started with and every later one by the new.
pub struct Settings {
    /// The meter's context: the ceilings and the sinks (with the metrics and the conversations, which
    /// outlive a reload).
    pub meter: MeterContext,
    /// Reads each request's id and tenant (and, with `traces:`, the trace it joins).
    pub identify: Identify,
}

/// What every exchange is given: the settings a reload may change, the metering bounds, the configured
/// tokenizers, the readers of message lists, and the count of requests in flight a shutdown waits on.
pub struct ExchangeContext {
    /// The one place that holds the live part of the config; replaced whole by a reload.
    settings: RwLock<Arc<Settings>>,
    pub metering: Metering,
    pub tokenizers: Arc<Tokenizers>,
    /// Requests between t_arrive and t_end: what a shutdown waits for.
    pub requests: Count,
    /// The threads large message lists are read on.
    pub readers: Readers,
    /// Every budget of what clients may make tokentap hold or do (`src/govern/`).
    pub governor: Arc<Governor>,
}

impl ExchangeContext {
    pub fn new(
        settings: Settings, metering: Metering, tokenizers: Arc<Tokenizers>,
        governor: Arc<Governor>,
    ) -> Self {
        ExchangeContext {
            settings: RwLock::new(Arc::new(settings)),
            metering,
            tokenizers,
            requests: Count::default(),
            readers: Readers::default(),
            governor,
        }
    }

    /// The settings current now (a request takes them once, at its admission).
    pub fn settings(&self) -> Arc<Settings> {
        (self.settings.read().unwrap_or_else(PoisonError::into_inner)).clone()
    }

    /// Makes `settings` current for the requests admitted from now on; those in flight keep theirs.
    /// Returns the ones replaced.
    pub fn replace(&self, settings: Settings) -> Arc<Settings> {
        let mut current = self
            .settings
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut current, Arc::new(settings))
    }

    /// A context that meters into `metrics` with `config`'s ceilings and bounds, and writes no record
    /// and recognises no conversation (for the taps' unit tests and the benchmarks).
    pub fn metering_only(config: &Config, metrics: Arc<Metrics>) -> Self {
        let meter = MeterContext {
            metrics: metrics.clone(),
            slo: config.slo.clone(),
            conversations: None,
            emitter: Emitter::new(metrics, None),
        };
        let settings = Settings {
            meter,
            identify: Identify::new(None),
        };
        let tokenizers = Arc::new(Tokenizers::default());
        let governor = Governor::new(&config.budgets, &config.conversations);
        ExchangeContext::new(settings, config.metering.clone(), tokenizers, governor)
    }
}
