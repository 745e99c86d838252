//! The tokenizers by model name. Configured ones (`tokenizers:`) are loaded at startup, and a bad one
//! stops it. Others are discovered under the search roots (`tokenizer_dirs`, see [`discover`]) the
//! first time a successful response names their model: the name is handed to one background thread,
//! which finds and loads the file (a `tokenizer.json` takes 100 ms or more and tens of MB), and until
//! it is ready that model's responses count chunks — never a wait on the data path. Each model name is
//! looked up once, found or not, and at most `max_models` names are ever looked up, so a client that
//! varies its model name can neither make tokentap search without end nor hold more tokenizers.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{discover, load, Model, AVAILABLE};
use crate::config::{Config, ConfigError};

#[derive(Default)]
pub struct Tokenizers {
    configured: HashMap<String, Arc<Model>>,
    configured_paths: BTreeMap<String, PathBuf>,
    discovery: Option<Discovery>,
}

/// The search roots a config asks for: `tokenizer_dirs`, else the HuggingFace hub cache of this
/// process's environment (none when it names no home). Empty means discovery is off.
pub fn search_roots(config: &Config) -> Vec<PathBuf> {
    match &config.tokenizer_dirs {
        Some(dirs) => dirs.clone(),
        None => discover::hf_hub_cache(|name| std::env::var_os(name))
            .into_iter()
            .collect(),
    }
}

impl Tokenizers {
    /// Loads every configured `tokenizer.json` (an error names the key and the file) and readies
    /// discovery under [`search_roots`] (none without the `tokenizer` feature). Logs what it found.
    pub fn load(config: &Config) -> Result<Self, ConfigError> {
        let mut configured = HashMap::new();
        for (model, path) in &config.tokenizers {
            let started = Instant::now();
            let loaded = load(path).map_err(|reason| ConfigError::Invalid {
                key: format!("tokenizers.{model}"),
                what: "tokenizer file",
                value: path.display().to_string(),
                reason,
            })?;
            let ms = started.elapsed().as_millis() as u64;
            tracing::info!(model, path = %path.display(), ms, "tokenizer loaded (configured)");
            configured.insert(model.clone(), Arc::new(loaded));
        }
        let roots = search_roots(config);
        let discovery = (AVAILABLE && !roots.is_empty()).then(|| {
            for root in &roots {
                log_root(root);
            }
            Discovery::new(roots, config.max_models)
        });
        if discovery.is_none() {
            tracing::info!(
                "tokenizer discovery is off (tokenizer_dirs is empty, no home directory, or built \
                 without the `tokenizer` feature)"
            );
        }
        Ok(Tokenizers {
            configured,
            configured_paths: config.tokenizers.clone(),
            discovery,
        })
    }

    /// No tokenizer can ever apply: none configured, no discovery.
    pub fn is_empty(&self) -> bool {
        self.configured.is_empty() && self.discovery.is_none()
    }

    /// The model's tokenizer if it is ready now; the first call for a model not configured starts
    /// its discovery and returns `None`.
    pub(super) fn get(&self, model: &str) -> Option<Arc<Model>> {
        if let Some(configured) = self.configured.get(model) {
            return Some(configured.clone());
        }
        self.discovery.as_ref()?.get(model)
    }

    /// The configured tokenizer files, by model.
    pub fn configured(&self) -> &BTreeMap<String, PathBuf> {
        &self.configured_paths
    }

    /// Where models are discovered; empty when discovery is off.
    pub fn search_roots(&self) -> &[PathBuf] {
        self.discovery.as_ref().map_or(&[], |d| &d.roots)
    }

    /// What `check-config` prints: each configured tokenizer, then each search root and the
    /// models discoverable under it now (the same as the startup log).
    pub fn report(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .configured_paths
            .iter()
            .map(|(model, path)| {
                format!(
                    "tokenizer for model `{model}`: {} (configured)",
                    path.display()
                )
            })
            .collect();
        if self.search_roots().is_empty() {
            lines.push("tokenizer discovery: off".to_owned());
        }
        for root in self.search_roots() {
            if !root.is_dir() {
                lines.push(format!(
                    "tokenizer discovery under {}: not a directory (yet)",
                    root.display()
                ));
                continue;
            }
            let found = discover::scan(root);
            lines.push(format!(
                "tokenizer discovery under {}: {} model(s) found now",
                root.display(),
                found.len()
            ));
            for (model, path) in found {
                lines.push(format!(
                    "  tokenizer for model `{model}`: {}",
                    path.display()
                ));
            }
        }
        lines
    }

    /// Waits until no discovery is in progress, or `timeout`; true when none is.
    pub fn settle(&self, timeout: Duration) -> bool {
        self.discovery.as_ref().is_none_or(|d| d.settle(timeout))
    }
}

fn log_root(root: &std::path::Path) {
    let root_shown = root.display();
    if !root.is_dir() {
        tracing::warn!(
            dir = %root_shown,
            "tokenizer discovery: the search root is not a directory (yet); it is looked in again for each new model"
        );
        return;
    }
    let found = discover::scan(root);
    let models: Vec<&str> = found.iter().map(|(m, _)| m.as_str()).take(20).collect();
    let more = found.len().saturating_sub(models.len());
    tracing::info!(
        dir = %root_shown,
        found = found.len(),
        models = %models.join(", "),
        more,
        "tokenizer discovery: tokenizers found now (loaded when their model is first served)"
    );
}

/// What became of a discovered model name.
enum Lookup {
    InProgress,
    Loaded(Arc<Model>),
    Absent,
}

struct Discovery {
    roots: Vec<PathBuf>,
    shared: Arc<Shared>,
    /// The loader thread's queue, started with the first look-up.
    queue: Mutex<Option<Sender<String>>>,
}

struct Shared {
    lookups: Mutex<HashMap<String, Lookup>>,
    /// Notified whenever a look-up finishes.
    finished: Condvar,
    max_names: usize,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Discovery {
    fn new(roots: Vec<PathBuf>, max_names: usize) -> Self {
        let shared = Shared {
            lookups: Mutex::new(HashMap::new()),
            finished: Condvar::new(),
            max_names,
        };
        Discovery {
            roots,
            shared: Arc::new(shared),
            queue: Mutex::new(None),
        }
    }

    fn get(&self, model: &str) -> Option<Arc<Model>> {
        let mut lookups = lock(&self.shared.lookups);
        match lookups.get(model) {
            Some(Lookup::Loaded(tokenizer)) => return Some(tokenizer.clone()),
            Some(_) => return None,
            None if lookups.len() >= self.shared.max_names => return None,
            None => {}
        }
        lookups.insert(model.to_owned(), Lookup::InProgress);
        drop(lookups);
        let mut queue = lock(&self.queue);
        if queue.is_none() {
            *queue = self.start_loader();
        }
        let sent = queue
            .as_ref()
            .is_some_and(|q| q.send(model.to_owned()).is_ok());
        if !sent {
            lock(&self.shared.lookups).insert(model.to_owned(), Lookup::Absent);
        }
        None
    }

    fn start_loader(&self) -> Option<Sender<String>> {
        let (queue, names) = channel();
        let (roots, shared) = (self.roots.clone(), self.shared.clone());
        let thread = std::thread::Builder::new().name("tokentap-tokenizers".into());
        match thread.spawn(move || loader(names, &roots, &shared)) {
            Ok(_) => Some(queue),
            Err(err) => {
                tracing::warn!(%err, "cannot start the tokenizer loader; counting chunks");
                None
            }
        }
    }

    fn settle(&self, timeout: Duration) -> bool {
        let busy =
            |l: &mut HashMap<String, Lookup>| l.values().any(|v| matches!(v, Lookup::InProgress));
        let lookups = lock(&self.shared.lookups);
        let (lookups, _) = self
            .shared
            .finished
            .wait_timeout_while(lookups, timeout, busy)
            .unwrap_or_else(PoisonError::into_inner);
        !lookups.values().any(|v| matches!(v, Lookup::InProgress))
    }
}

/// The loader thread: finds and loads one model's tokenizer at a time, until tokentap is dropped.
fn loader(names: Receiver<String>, roots: &[PathBuf], shared: &Shared) {
    for model in names {
        let lookup = match discover::find(roots, &model) {
            None => {
                tracing::info!(
                    model,
                    dirs = ?roots,
                    "no tokenizer.json for this model under tokenizer_dirs: its output tokens are \
                     counted as chunks when the server sends no usage"
                );
                Lookup::Absent
            }
            Some(path) => {
                let started = Instant::now();
                // A file that makes the tokenizers crate panic leaves its model counting chunks.
                let loaded = std::panic::catch_unwind(|| load(&path));
                match loaded.unwrap_or_else(|_| Err("the tokenizer panicked while loading".into()))
                {
                    Ok(tokenizer) => {
                        let ms = started.elapsed().as_millis() as u64;
                        tracing::info!(model, path = %path.display(), ms, "tokenizer loaded (discovered)");
                        Lookup::Loaded(Arc::new(tokenizer))
                    }
                    Err(err) => {
                        tracing::warn!(model, path = %path.display(), %err, "discovered tokenizer does not load; counting chunks");
                        Lookup::Absent
                    }
                }
            }
        };
        lock(&shared.lookups).insert(model, lookup);
        shared.finished.notify_all();
    }
}

#[cfg(all(test, feature = "tokenizer"))]
mod tests {
    use super::super::discover::tests::Scratch;
    use super::*;

    const WORDS: &str = include_str!("../../../tests/fixtures/tokenizer/words.json");

    fn config(yaml: &str) -> Config {
        Config::from_yaml_str(yaml).expect("config")
    }

    #[test]
    fn a_discovered_tokenizer_is_ready_only_after_its_background_load() {
        let scratch = Scratch::new("registry");
        scratch.file("hub/models--org--words/snapshots/abc/tokenizer.json", WORDS);
        scratch.file("hub/models--org--words/refs/main", "abc");
        let hub = scratch.0.join("hub");
        let tokenizers = Tokenizers::load(&config(&format!("tokenizer_dirs: [{}]", hub.display())))
            .expect("load");
        assert_eq!(tokenizers.search_roots(), [hub]);
        // The first response of the model starts the look-up and is not counted by a tokenizer.
        assert!(tokenizers.get("org/words").is_none());
        assert!(tokenizers.settle(Duration::from_secs(10)));
        assert!(tokenizers.get("org/words").is_some());
        assert!(tokenizers.get("org/absent").is_none());
        assert!(tokenizers.settle(Duration::from_secs(10)));
        assert!(tokenizers.get("org/absent").is_none());
    }

    #[test]
    fn at_most_max_models_names_are_ever_looked_up() {
        let scratch = Scratch::new("cap");
        scratch.file("a/tokenizer.json", WORDS);
        scratch.file("b/tokenizer.json", WORDS);
        let yaml = format!("max_models: 1\ntokenizer_dirs: [{}]", scratch.0.display());
        let tokenizers = Tokenizers::load(&config(&yaml)).expect("load");
        for model in ["a", "b"] {
            assert!(tokenizers.get(model).is_none());
            assert!(tokenizers.settle(Duration::from_secs(10)));
        }
        assert!(tokenizers.get("a").is_some());
        assert!(tokenizers.get("b").is_none(), "a second name was looked up");
    }

    #[test]
    fn configured_tokenizers_win_and_an_empty_dir_list_turns_discovery_off() {
        let scratch = Scratch::new("off");
        scratch.file("m/tokenizer.json", WORDS);
        let words = scratch.file("words.json", WORDS);
        let yaml = format!("tokenizers:\n  m: {}\ntokenizer_dirs: []", words.display());
        let tokenizers = Tokenizers::load(&config(&yaml)).expect("load");
        assert!(tokenizers.search_roots().is_empty());
        assert!(tokenizers.get("m").is_some());
        assert!(tokenizers.get("other").is_none());
        assert_eq!(tokenizers.configured().get("m"), Some(&words));
    }
}
