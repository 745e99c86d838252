//! Reloading the config without a restart (SIGHUP, and `POST /-/reload` with `metrics.enable_reload`;
//! docs/operations.md, "Reload without a restart"), as nginx, Envoy and Prometheus reload theirs.
//!
//! The file is read, parsed and checked by the code that reads it at start (`check-config`'s), then
//! compared with the config running now: a change to a key that cannot change live ([`LIVE`] names
//! those that can) refuses the whole reload by name, and series counted up front above `metrics.max_series`
//! fails it as it fails a start. What can fail in applying it (a new request_log path that cannot be
//! opened, a new collector, the model list's key file) is prepared before anything changes; then the
//! metrics take the new boundaries and names (`record::metrics`, `reconfigure.rs`), the log its
//! filter, and the requests admitted from then on new [`Settings`] (ceilings, tenants, sinks), while
//! those in flight finish under the ones they started with. So a reload is applied whole or not at
//! all, and `tokentap_config_reloads_total{result}` counts how each came out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;

use crate::config::{Config, RecordPath};
use crate::govern::{Budget, Governor};
use crate::logging::records::{RecordWriter, Target};
use crate::net::tls::{Certificates, Fresh};
use crate::proxy::models::ModelList;
use crate::record::conversations::Conversations;
use crate::record::emit::{Emitter, Records};
use crate::record::meter::MeterContext;
use crate::record::metrics::{Metrics, ReloadResult};
use crate::record::trace::{SpanExporter, Tracing};
use crate::tap::context::{ExchangeContext, Settings};
use crate::tap::identity::Identify;

use super::plan::{self, RecordsOpen};

/// The keys (dotted, as docs/configuration.md writes them) a reload may change; a section named here
/// may change whole. Every other key needs a restart, so a key added later is refused on reload until
/// it is listed here and applied in [`Reloader::apply`].
pub const LIVE: [&str; 18] = [
    "slo",
    "buckets",
    "log_level",
    "traces",
    "model_list.names",
    "model_list.refresh",
    "model_list.api_key_file",
    "metrics.max_series",
    "metrics.enable_reload",
    "tenants.header",
    "tenants.bearer_hash",
    "tenants.hash_key",
    "tenants.allow",
    "tenants.slo",
    "request_log.path",
    "request_log.gaps",
    "request_log.max_gaps",
    "request_log.queue",
];

/// Reads the config file again, with the command line's overrides, validated (the binary's `load`).
pub type Source = Arc<dyn Fn() -> Result<Config, String> + Send + Sync>;

/// A reload reads the file twice this far apart and applies it only when both reads agree: a file
/// caught while an editor or a `kubectl cp` is still writing it (cut at a line, it may well parse) is
/// refused, not half applied.
pub const SETTLE: Duration = Duration::from_millis(100);

/// How a reload came out.
#[derive(Debug, Clone, PartialEq)]
pub enum Reloaded {
    /// Applied: the keys that changed, and the histogram families that took new boundaries.
    Applied {
        changed: Vec<String>,
        rebucketed: Vec<&'static str>,
        /// The request_log file was reopened (its path did not change: logrotate's `create` mode).
        reopened: bool,
        /// `listen_tls`'s certificate and key were read again and are served to new handshakes.
        certificates: bool,
    },
    /// Not applied: the file could not be read, did not parse or failed a check.
    Failed(String),
    /// Not applied: it changes keys that need a restart.
    Refused(String),
}

impl Reloaded {
    pub fn result(&self) -> ReloadResult {
        match self {
            Reloaded::Applied { .. } => ReloadResult::Success,
            Reloaded::Failed(_) => ReloadResult::Failure,
            Reloaded::Refused(_) => ReloadResult::Refused,
        }
    }

    /// What the log and `POST /-/reload`'s answer say.
    pub fn describe(&self) -> String {
        match self {
            Reloaded::Applied {
                changed,
                rebucketed,
                reopened,
                certificates,
            } => {
                let mut said = match changed.is_empty() {
                    true => "config reloaded: nothing changed".to_owned(),
                    false => format!("config reloaded: {} changed", changed.join(", ")),
                };
                if *reopened {
                    said += "; request_log file reopened";
                }
                if *certificates {
                    said += "; listen_tls certificate read again";
                }
                if !rebucketed.is_empty() {
                    let families = rebucketed.join(", ");
                    said += &format!("; new bucket boundaries: {families}");
                }
                said
            }
            Reloaded::Failed(why) => format!("config reload failed, nothing changed: {why}"),
            Reloaded::Refused(why) => format!("config reload refused, nothing changed: {why}"),
        }
    }
}

/// What a reload prepared before changing anything.
struct Prepared {
    /// The request_log writer kept (its path and queue did not change): reopened.
    kept_writer: Option<Arc<RecordWriter>>,
    records: Option<Records>,
    tracing: Option<Tracing>,
    /// A new fetcher of the upstream's model list, when its keys changed.
    model_list: Option<ModelList>,
    certificates: Option<Arc<Certificates>>,
    fresh: Option<Fresh>,
}

/// What a reload replaces beside the settings: the request_log writer, the span exporter and the model
/// list's fetcher (the shutdown flushes the first two, and stops the third).
#[derive(Default)]
pub(super) struct Parts {
    pub(super) records: Option<Arc<RecordWriter>>,
    pub(super) spans: Option<Arc<SpanExporter>>,
    pub(super) model_list_task: Option<JoinHandle<()>>,
    /// The proxy port's certificate (`listen_tls:`), read again at each reload (rotation).
    pub(super) certificates: Option<Arc<Certificates>>,
}

/// The one reloader of a running tokentap.
pub struct Reloader {
    context: Arc<ExchangeContext>,
    metrics: Arc<Metrics>,
    conversations: Option<Arc<Conversations>>,
    source: Mutex<Option<Source>>,
    /// `metrics.enable_reload` of the config running now.
    enabled: AtomicBool,
    /// The config running now; held for the whole of a reload, so two never interleave.
    running: tokio::sync::Mutex<Config>,
    /// The reloads asked for, and of them how many the last reload to start answers, with its
    /// result: a reload answers every request made before it read the file.
    asked: Mutex<Coalesced>,
    pub(super) parts: Mutex<Parts>,
}

#[derive(Default)]
struct Coalesced {
    asked: u64,
    answered: u64,
    last: Option<Reloaded>,
}

/// The settings `config` gives the requests (at start and at each reload).
pub(super) fn settings(
    config: &Config, metrics: &Arc<Metrics>, conversations: Option<Arc<Conversations>>,
    records: Option<Records>, tracing: Option<Tracing>,
) -> Settings {
    let traced = tracing.is_some();
    let mut emitter = Emitter::new(metrics.clone(), records);
    if let Some(tracing) = tracing {
        emitter = emitter.with_spans(tracing);
    }
    Settings {
        meter: MeterContext {
            metrics: metrics.clone(),
            slo: config.slo.clone(),
            conversations,
            emitter,
        },
        identify: Identify::new(config.tenants.as_ref()).with_traces(traced),
    }
}

impl Reloader {
    pub(super) fn new(
        config: &Config, context: Arc<ExchangeContext>, metrics: Arc<Metrics>,
        conversations: Option<Arc<Conversations>>, parts: Parts,
    ) -> Self {
        Reloader {
            context,
            metrics,
            conversations,
            source: Mutex::new(None),
            enabled: AtomicBool::new(config.metrics.enable_reload),
            running: tokio::sync::Mutex::new(config.clone()),
            asked: Mutex::default(),
            parts: Mutex::new(parts),
        }
    }

    pub(super) fn parts(&self) -> std::sync::MutexGuard<'_, Parts> {
        self.parts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where a reload reads the config from (the binary: the file and its flags).
    pub fn read_from(&self, source: Source) {
        *self.source.lock().unwrap_or_else(PoisonError::into_inner) = Some(source);
    }

    /// Reads the config again and applies it (SIGHUP, `POST /-/reload`). One reload runs at a time,
    /// and asking while one runs asks for the next: every caller waiting then gets the result of that
    /// one reload, which read the file after all of them asked (a storm of requests is a few reloads,
    /// never one thread each).
    pub async fn reload(&self) -> Reloaded {
        let mine = {
            let mut asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
            asked.asked += 1;
            asked.asked
        };
        let running = self.running.lock().await;
        let upto = {
            let asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
            if let (true, Some(last)) = (asked.answered >= mine, &asked.last) {
                return last.clone();
            }
            asked.asked
        };
        let loaded = self.read().await;
        let reloaded = self.apply_locked(running, loaded).await;
        let mut asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
        asked.answered = upto;
        asked.last = Some(reloaded.clone());
        reloaded
    }

    /// The config file, read twice [`SETTLE`] apart (see there).
    async fn read(&self) -> Result<Config, String> {
        let source = self
            .source
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(source) = source else {
            return Err("no config file to read: this tokentap was started without one".into());
        };
        let read = |source: Source| async move {
            tokio::task::spawn_blocking(move || source())
                .await
                .unwrap_or_else(|e| Err(format!("reading the config: {e}")))
        };
        let first = read(source.clone()).await;
        tokio::time::sleep(SETTLE).await;
        let second = read(source).await;
        match (first, second) {
            (Ok(first), Ok(second)) if first != second => Err(
                "the file changed while it was read (still being written?): nothing applied; reload again once it is written".into(),
            ),
            (Ok(_), second) => second,
            (Err(first), _) => Err(first),
        }
    }

    /// Applies `loaded` (a config read and checked as at start), or nothing; counts and logs how it
    /// came out.
    pub async fn apply(&self, loaded: Result<Config, String>) -> Reloaded {
        let running = self.running.lock().await;
        self.apply_locked(running, loaded).await
    }

    async fn apply_locked(
        &self, mut running: tokio::sync::MutexGuard<'_, Config>, loaded: Result<Config, String>,
    ) -> Reloaded {
        let reloaded = match loaded {
            Ok(config) => self.replace(&mut running, config).await,
            Err(why) => Reloaded::Failed(why),
        };
        self.metrics.reloads.count(reloaded.result());
        match &reloaded {
            Reloaded::Applied { .. } => tracing::info!("{}", reloaded.describe()),
            _ => tracing::error!("{}", reloaded.describe()),
        }
        reloaded
    }

    async fn replace(&self, running: &mut Config, config: Config) -> Reloaded {
        let (live, restart) = changes(running, &config);
        if !restart.is_empty() {
            let keys = restart.join(", ");
            return Reloaded::Refused(format!("{keys} cannot change on reload: restart tokentap"));
        }
        let prepared = match self.prepare(running, &config).await {
            Ok(prepared) => prepared,
            Err(why) => return Reloaded::Failed(why),
        };
        let (kept_writer, records, tracing) =
            (prepared.kept_writer, prepared.records, prepared.tracing);
        let (certificates, fresh) = (prepared.certificates, prepared.fresh);
        // Applied from here on, whole.
        let rebucketed = match self.metrics.reconfigure(&config) {
            Ok(rebucketed) => rebucketed,
            Err(e) => return Reloaded::Failed(format!("registering metrics: {e}")),
        };
        match crate::logging::set_level(config.log_level.as_deref()) {
            Ok(_) => {}
            Err(e) => tracing::warn!(%e, "log_level: the log's filter was not replaced"),
        }
        if let Some(writer) = &kept_writer {
            writer.reopen();
        }
        if let (Some(certificates), Some(fresh)) = (&certificates, fresh) {
            certificates.serve(fresh);
        }
        {
            let mut parts = self.parts();
            parts.records = records.as_ref().map(|r| r.writer.clone());
            parts.spans = tracing.as_ref().map(|t| t.exporter.clone());
            if let Some(list) = prepared.model_list {
                if let Some(task) = parts.model_list_task.replace(tokio::spawn(list.run())) {
                    task.abort();
                }
            }
        }
        let conversations = self.conversations.clone();
        let settings = settings(&config, &self.metrics, conversations, records, tracing);
        self.context.replace(settings);
        self.enabled
            .store(config.metrics.enable_reload, Ordering::Relaxed);
        *running = config;
        Reloaded::Applied {
            changed: live,
            rebucketed,
            reopened: kept_writer.is_some(),
            certificates: certificates.is_some(),
        }
    }

    /// Everything a reload to `config` needs that can fail, prepared before anything changes (the
    /// plan's checks first, in start's words): a refusal says why.
    async fn prepare(&self, running: &Config, config: &Config) -> Result<Prepared, String> {
        (self.metrics.bound_for(config)).check(config.metrics.max_series)?;
        // Everything that can fail, before anything changes: what the plan checks first, in its words.
        plan::request_log(config).map_err(|e| e.to_string())?;
        let kept = |writer: &Option<Arc<RecordWriter>>| {
            let log = config.request_log.as_ref()?;
            let same = (running.request_log.as_ref())
                .is_some_and(|old| old.path == log.path && old.queue == log.queue);
            same.then(|| writer.clone()).flatten()
        };
        let kept_writer = kept(&self.parts().records);
        let records = match (&config.request_log, kept_writer.clone()) {
            (Some(log), Some(writer)) => Some(Records {
                writer,
                gaps: log.gaps,
                max_gaps: log.max_gaps,
            }),
            _ => (records(config, &self.metrics, &self.context.governor).await)
                .map_err(|e| e.to_string())?,
        };
        let exporter = self.parts().spans.clone();
        let tracing = match (exporter, running.traces == config.traces) {
            (Some(exporter), true) => Tracing::with_exporter(config, exporter),
            _ => Tracing::start(config, self.metrics.spans.clone(), &self.context.governor)
                .map_err(|e| format!("traces: {e}"))?,
        };
        let model_list = match config.model_list.enabled && running.model_list != config.model_list
        {
            true => Some(
                ModelList::new(config, self.metrics.served.clone()).map_err(|e| e.to_string())?,
            ),
            false => None,
        };
        let certificates = self.parts().certificates.clone();
        let fresh =
            (certificates.as_ref().map(|c| c.read()).transpose()).map_err(|e| e.to_string())?;
        Ok(Prepared {
            kept_writer,
            records,
            tracing,
            model_list,
            certificates,
            fresh,
        })
    }
}

/// How long start waits for the request_log path to open before it serves without it: a path that
/// cannot be opened is refused at start, one whose open blocks (a FIFO no one reads) is not waited for.
const RECORDS_OPEN_WAIT: Duration = Duration::from_secs(1);

/// Starts the request_log writer, when one is configured.
pub(super) async fn records(
    config: &Config, metrics: &Metrics, governor: &Governor,
) -> Result<Option<Records>, RecordsOpen> {
    let (Some(log), Some(counters)) = (&config.request_log, &metrics.records) else {
        return Ok(None);
    };
    let (target, path) = match &log.path {
        RecordPath::Stdout => (Target::Stdout, "-".to_owned()),
        RecordPath::File(path) => (Target::File(path.clone()), path.display().to_string()),
    };
    let refused = |source| RecordsOpen {
        path: path.clone(),
        source,
    };
    let (writer, opened) =
        RecordWriter::start(target, log.queue, counters.clone()).map_err(refused)?;
    let waited = tokio::task::spawn_blocking(move || opened.wait(RECORDS_OPEN_WAIT)).await;
    match waited {
        Ok(Some(Err(source))) => return Err(refused(source)),
        Ok(None) => tracing::warn!(
            path,
            "request_log.path is not open after 1s (a FIFO no one reads yet? a hung mount?): serving on; \
             records wait in the queue, then are dropped and counted, until it opens"
        ),
        Ok(Some(Ok(()))) | Err(_) => {}
    }
    let writer = writer.governed(governor.pool(Budget::Records).clone());
    Ok(Some(Records {
        writer: Arc::new(writer),
        gaps: log.gaps,
        max_gaps: log.max_gaps,
    }))
}

impl crate::net::admin::Reload for Reloader {
    fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    fn reload(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = (bool, String)> + Send + '_>> {
        Box::pin(async move {
            let reloaded = Reloader::reload(self).await;
            let applied = matches!(reloaded, Reloaded::Applied { .. });
            (applied, reloaded.describe())
        })
    }
}

/// The keys whose values differ between `old` and `new`: those a reload may change, and those that
/// need a restart (a section turned on or off is named by itself, and says so: `request_log (turned
/// on)`, as docs/configuration.md's table and the README say it).
pub fn changes(old: &Config, new: &Config) -> (Vec<String>, Vec<String>) {
    fn walk(
        old: &Value, new: &Value, path: &str, live: &mut Vec<String>, restart: &mut Vec<String>,
    ) {
        if old == new {
            return;
        }
        if LIVE.contains(&path) {
            return live.push(path.to_owned());
        }
        match (old, new) {
            (Value::Object(a), Value::Object(b)) if !path.is_empty() || !a.is_empty() => {
                let keys = a.keys().chain(b.keys().filter(|k| !a.contains_key(*k)));
                for key in keys {
                    let inner = match path {
                        "" => key.clone(),
                        _ => format!("{path}.{key}"),
                    };
                    let (x, y) = (a.get(key), b.get(key));
                    walk(
                        x.unwrap_or(&Value::Null),
                        y.unwrap_or(&Value::Null),
                        &inner,
                        live,
                        restart,
                    );
                }
            }
            (Value::Null, Value::Object(_)) => restart.push(format!("{path} (turned on)")),
            (Value::Object(_), Value::Null) => restart.push(format!("{path} (turned off)")),
            _ => restart.push(path.to_owned()),
        }
    }
    let (mut live, mut restart) = (Vec::new(), Vec::new());
    match (serde_json::to_value(old), serde_json::to_value(new)) {
        (Ok(old), Ok(new)) => walk(&old, &new, "", &mut live, &mut restart),
        _ => restart.push("(the config could not be compared)".into()),
    }
    (live, restart)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> Config {
        Config::from_yaml_str(yaml).unwrap()
    }

    #[test]
    fn live_keys_change_and_every_other_key_is_named_for_a_restart() {
        let old = config("slo: {ttft: 1s}\ntenants: {header: x-t, max: 4}");
        let new = config("slo: {ttft: 2s}\ntenants: {header: x-u, max: 4}\nlog_level: warn");
        let (live, restart) = changes(&old, &new);
        assert_eq!(live, ["log_level", "slo", "tenants.header"]);
        assert!(restart.is_empty(), "{restart:?}");
        let new = config("listen: 127.0.0.1:1\nslo: {ttft: 1s}\ntenants: {header: x-t, max: 5}");
        let (_, restart) = changes(&old, &new);
        assert_eq!(restart, ["listen", "tenants.max"]);
        let (_, restart) = changes(&old, &config("slo: {ttft: 1s}"));
        assert_eq!(
            restart,
            ["tenants (turned off)"],
            "a section turned off is named"
        );
        // The records' counters are registered at start: turning request_log on needs a restart, and
        // the refusal says it in the words of the README and docs/configuration.md.
        let logged = config(
            "slo: {ttft: 1s}\ntenants: {header: x-t, max: 4}\nrequest_log: {path: /dev/null}",
        );
        assert_eq!(changes(&old, &logged).1, ["request_log (turned on)"]);
        assert_eq!(changes(&logged, &old).1, ["request_log (turned off)"]);
        let (_, restart) = changes(&old, &config("slo: {ttft: 1s}\ntenants: {header: x-t, max: 4}\nupstream: http://10.0.0.1:80\ntimeouts: {connect: 1s}"));
        assert_eq!(restart, ["timeouts.connect", "upstream"]);
    }

    #[test]
    fn every_live_key_is_a_key_of_the_config() {
        let every = config("request_log: {path: /dev/null}\ntenants: {header: x-t}\ntraces: {endpoint: http://127.0.0.1:4318}");
        let value = serde_json::to_value(&every).unwrap();
        for key in LIVE {
            let found = key.split('.').try_fold(&value, |v, k| v.get(k));
            assert!(found.is_some(), "{key} is no key");
        }
    }
}
