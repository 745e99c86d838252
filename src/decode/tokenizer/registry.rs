//! The tokenizers by model name. Configured ones (`tokenizers:`) are loaded at startup, and a bad one
//! stops it. Others are looked up the first time a successful response names their model: by name under
//! the search roots (`tokenizer_dirs`, see [`discover`]), else where the upstream's own model list puts
//! that model (its `root`, see [`root`]; `model_list.tokenizer_from_root`). The name is handed to one
//! background thread, which finds and loads the file (a `tokenizer.json` takes 100 ms or more and tens of
//! MB), and until it is ready that model's responses count chunks — never a wait on the data path. Each
//! model name is looked up once, found or not, and at most `max_models` names are ever looked up, so a
//! client that varies its model name can neither make tokentap search without end nor hold more
//! tokenizers. A change of the upstream's list (it came after the first requests, or a model was
//! restarted from another directory) looks up again, at once and in the background, the names not found
//! and those loaded from a `root` that changed: the next request after the load is counted by it.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use super::{discover, load, root, Model, AVAILABLE};
use crate::config::{Config, ConfigError};
use crate::record::served::ServedModels;

#[derive(Default)]
pub struct Tokenizers {
    configured: HashMap<String, Arc<Model>>,
    configured_paths: BTreeMap<String, PathBuf>,
    discovery: Option<Discovery>,
    /// Look-ups may use the upstream's model list (`model_list.tokenizer_from_root`).
    from_root: bool,
}

/// The search roots a config asks for: `tokenizer_dirs`, else the HuggingFace hub cache of this
/// process's environment (none when it names no home). Empty means discovery by name is off.
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
    /// discovery under [`search_roots`] and, given the upstream's model list (`served`) and
    /// `model_list.tokenizer_from_root`, from its `root`s (none without the `tokenizer` feature).
    /// Logs what it found.
    pub fn load(config: &Config, served: Option<&Arc<ServedModels>>) -> Result<Self, ConfigError> {
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
        let from_root =
            AVAILABLE && config.model_list.enabled && config.model_list.tokenizer_from_root;
        let listed = served.filter(|_| from_root).cloned();
        let discovery = (AVAILABLE && (!roots.is_empty() || listed.is_some())).then(|| {
            for root in &roots {
                log_root(root);
            }
            Discovery::new(roots, listed, config.max_models)
        });
        match (&discovery, from_root) {
            (None, _) => tracing::info!(
                "tokenizer discovery is off (tokenizer_dirs is empty, and model_list.enabled or \
                 model_list.tokenizer_from_root is false; or built without the `tokenizer` feature)"
            ),
            (Some(_), true) => tracing::info!(
                "a served model whose tokenizer is found nowhere else is looked for where the upstream's \
                 model list puts it (its `root`; model_list.tokenizer_from_root)"
            ),
            (Some(_), false) => {}
        }
        Ok(Tokenizers {
            configured,
            configured_paths: config.tokenizers.clone(),
            discovery,
            from_root,
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

    /// Where models are discovered by name; empty when that is off.
    pub fn search_roots(&self) -> &[PathBuf] {
        self.discovery.as_ref().map_or(&[], |d| &d.shared.roots)
    }

    /// What `check-config` prints: each configured tokenizer, then each search root and the
    /// models discoverable under it now (the same as the startup log), then whether the upstream's
    /// model list is used.
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
        let from_root = if self.from_root { "on" } else { "off" };
        lines.push(format!(
            "tokenizer from the upstream's model list (a served model's root): {from_root}"
        ));
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
    Loaded {
        tokenizer: Arc<Model>,
        /// The list's `root` it was found through; `None`: by its name under the search roots.
        root: Option<String>,
    },
    Absent,
}

/// The loader thread's queue, started with the first look-up. Only [`Discovery`] holds it strongly,
/// so the thread ends when tokentap is dropped.
type Queue = Mutex<Option<Sender<String>>>;

struct Discovery {
    shared: Arc<Shared>,
    queue: Arc<Queue>,
}

struct Shared {
    roots: Vec<PathBuf>,
    /// The upstream's model list, when a listed model's `root` may be looked in.
    served: Option<Arc<ServedModels>>,
    lookups: Mutex<HashMap<String, Lookup>>,
    /// Notified whenever a look-up finishes.
    finished: Condvar,
    max_names: usize,
}

impl Shared {
    fn list_generation(&self) -> u64 {
        self.served.as_ref().map_or(0, |s| s.generation())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Discovery {
    fn new(roots: Vec<PathBuf>, served: Option<Arc<ServedModels>>, max_names: usize) -> Self {
        let shared = Arc::new(Shared {
            roots,
            served,
            lookups: Mutex::new(HashMap::new()),
            finished: Condvar::new(),
            max_names,
        });
        let queue = Arc::new(Mutex::new(None));
        if let Some(served) = &shared.served {
            // Weak: the list outlives nothing here, and must keep neither the thread nor its queue.
            let (weak_shared, weak_queue) = (Arc::downgrade(&shared), Arc::downgrade(&queue));
            served.on_change(move || list_changed(&weak_shared, &weak_queue));
        }
        Discovery { shared, queue }
    }

    fn get(&self, model: &str) -> Option<Arc<Model>> {
        let mut lookups = lock(&self.shared.lookups);
        match lookups.get(model) {
            Some(Lookup::Loaded { tokenizer, .. }) => return Some(tokenizer.clone()),
            Some(_) => return None,
            None if lookups.len() >= self.shared.max_names => return None,
            None => {}
        }
        lookups.insert(model.to_owned(), Lookup::InProgress);
        drop(lookups);
        enqueue(&self.shared, &self.queue, model.to_owned());
        None
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

/// Hands `model` (marked in progress) to the loader thread, starting it if need be.
fn enqueue(shared: &Arc<Shared>, queue: &Queue, model: String) {
    let mut queue = lock(queue);
    if queue.is_none() {
        *queue = start_loader(shared);
    }
    let sent = queue
        .as_ref()
        .is_some_and(|q| q.send(model.clone()).is_ok());
    drop(queue);
    if !sent {
        lock(&shared.lookups).insert(model, Lookup::Absent);
        shared.finished.notify_all();
    }
}

fn start_loader(shared: &Arc<Shared>) -> Option<Sender<String>> {
    let (queue, names) = channel();
    let shared = shared.clone();
    let thread = std::thread::Builder::new().name("tokentap-tokenizers".into());
    match thread.spawn(move || loader(names, &shared)) {
        Ok(_) => Some(queue),
        Err(err) => {
            tracing::warn!(%err, "cannot start the tokenizer loader; counting chunks");
            None
        }
    }
}

/// The upstream's list changed: the names not found, and those found through a `root` the list now
/// gives another, are looked up again. Called on the list fetcher's task: it only queues.
fn list_changed(shared: &Weak<Shared>, queue: &Weak<Queue>) {
    let (Some(shared), Some(queue)) = (shared.upgrade(), queue.upgrade()) else {
        return;
    };
    let Some(served) = &shared.served else {
        return;
    };
    let mut lookups = lock(&shared.lookups);
    let again: Vec<String> = lookups
        .iter()
        .filter(|(name, lookup)| match lookup {
            Lookup::Absent => true,
            // A name the list leaves out keeps its tokenizer: a list that blinks must not drop it.
            Lookup::Loaded {
                root: Some(root), ..
            } => served.root_of(name).is_some_and(|now| now != *root),
            _ => false,
        })
        .map(|(name, _)| name.clone())
        .collect();
    for name in &again {
        lookups.insert(name.clone(), Lookup::InProgress);
    }
    drop(lookups);
    for name in again {
        enqueue(&shared, &queue, name);
    }
}

/// A look-up is done again when the list changed while it ran, at most this many times in all.
const TRIES: usize = 3;

/// The loader thread: finds and loads one model's tokenizer at a time, until tokentap is dropped.
fn loader(names: Receiver<String>, shared: &Shared) {
    // What was last said of each name not found, so a list that changes says it once.
    let mut said: HashMap<String, String> = HashMap::new();
    for model in names {
        for attempt in 1..=TRIES {
            let generation = shared.list_generation();
            let lookup = look_up(shared, &model, &mut said);
            // Under the lock: a change of the list after this either was seen here or finds the
            // result in place and looks the name up again.
            let mut lookups = lock(&shared.lookups);
            if shared.list_generation() == generation || attempt == TRIES {
                lookups.insert(model, lookup);
                break;
            }
        }
        shared.finished.notify_all();
    }
}

/// Where `model`'s `tokenizer.json` is: by name under the roots, else at the list's `root` for it
/// (returned with it); else why not.
fn find(shared: &Shared, model: &str) -> Result<(PathBuf, Option<String>), String> {
    if let Some(path) = discover::find(&shared.roots, model) {
        return Ok((path, None));
    }
    let by_name = match shared.roots.as_slice() {
        [] => "tokenizer_dirs is empty".to_owned(),
        roots => format!("no tokenizer.json for it under tokenizer_dirs {roots:?}"),
    };
    let Some(served) = &shared.served else {
        return Err(by_name);
    };
    let Some(listed_root) = served.root_of(model) else {
        return Err(format!(
            "{by_name}, and the upstream's model list gives it no root"
        ));
    };
    match root::tokenizer_at(&listed_root, &shared.roots) {
        Ok(path) => Ok((path, Some(listed_root))),
        Err(why) => Err(format!("{by_name}; the upstream's model list: {why}")),
    }
}

fn look_up(shared: &Shared, model: &str, said: &mut HashMap<String, String>) -> Lookup {
    let (path, listed_root) = match find(shared, model) {
        Ok(found) => found,
        Err(why) => {
            if said.get(model) != Some(&why) {
                tracing::info!(
                    model,
                    why,
                    "no tokenizer for this model: its output tokens are counted as chunks when the \
                     server sends no usage"
                );
                said.insert(model.to_owned(), why);
            }
            return Lookup::Absent;
        }
    };
    let started = Instant::now();
    // A file that makes the tokenizers crate panic leaves its model counting chunks.
    let loaded = std::panic::catch_unwind(|| load(&path));
    match loaded.unwrap_or_else(|_| Err("the tokenizer panicked while loading".into())) {
        Ok(tokenizer) => {
            said.remove(model);
            let ms = started.elapsed().as_millis() as u64;
            let shown = path.display();
            match &listed_root {
                None => tracing::info!(model, path = %shown, ms, "tokenizer loaded (discovered)"),
                Some(root) => tracing::info!(
                    model,
                    root,
                    path = %shown,
                    ms,
                    "tokenizer loaded (from the upstream's model list)"
                ),
            }
            Lookup::Loaded {
                tokenizer: Arc::new(tokenizer),
                root: listed_root,
            }
        }
        Err(err) => {
            let why = format!("{} does not load: {err}", path.display());
            if said.get(model) != Some(&why) {
                tracing::warn!(
                    model,
                    why,
                    "discovered tokenizer does not load; counting chunks"
                );
                said.insert(model.to_owned(), why);
            }
            Lookup::Absent
        }
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
        let tokenizers = Tokenizers::load(
            &config(&format!("tokenizer_dirs: [{}]", hub.display())),
            None,
        )
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
        let tokenizers = Tokenizers::load(&config(&yaml), None).expect("load");
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
        let tokenizers = Tokenizers::load(&config(&yaml), None).expect("load");
        assert!(tokenizers.search_roots().is_empty());
        assert!(tokenizers.get("m").is_some());
        assert!(tokenizers.get("other").is_none());
        assert_eq!(tokenizers.configured().get("m"), Some(&words));
    }

    fn served() -> Arc<ServedModels> {
        let gauge = prometheus::IntGauge::new("listed", "test").expect("gauge");
        Arc::new(ServedModels::new(std::iter::empty(), gauge))
    }

    fn list(served: &ServedModels, id: &str, root: &std::path::Path) {
        served.set(vec![crate::record::served::ServedModel {
            id: id.to_owned(),
            root: Some(root.display().to_string()),
        }]);
    }

    /// The root a name was loaded through (`Some(None)`: by its name), `None` when not loaded.
    fn loaded_through(tokenizers: &Tokenizers, model: &str) -> Option<Option<String>> {
        let discovery = tokenizers.discovery.as_ref()?;
        match lock(&discovery.shared.lookups).get(model)? {
            Lookup::Loaded { root, .. } => Some(root.clone()),
            _ => None,
        }
    }

    #[test]
    fn a_listed_root_is_looked_in_when_the_list_comes_even_after_the_first_look_up() {
        let scratch = Scratch::new("listed");
        scratch.file("llama/tokenizer.json", WORDS);
        scratch.file("other/config.json", "{}");
        let served = served();
        let tokenizers =
            Tokenizers::load(&config("tokenizer_dirs: []"), Some(&served)).expect("load");
        assert!(!tokenizers.is_empty() && tokenizers.search_roots().is_empty());
        // Requests before the list came: no tokenizer anywhere.
        assert!(tokenizers.get("llama-8b").is_none());
        assert!(tokenizers.settle(Duration::from_secs(10)));
        assert!(tokenizers.get("llama-8b").is_none());
        // The list names the model's directory: looked up again at once, without a request.
        list(&served, "llama-8b", &scratch.0.join("llama"));
        assert!(tokenizers.settle(Duration::from_secs(10)));
        assert!(tokenizers.get("llama-8b").is_some());
        let root = scratch.0.join("llama").display().to_string();
        assert_eq!(loaded_through(&tokenizers, "llama-8b"), Some(Some(root)));
        // A list without the name (an upstream that blinked) keeps it.
        served.set(Vec::new());
        assert!(tokenizers.settle(Duration::from_secs(10)));
        assert!(tokenizers.get("llama-8b").is_some());
        // The server restarted from another directory, without a tokenizer.json: not kept.
        list(&served, "llama-8b", &scratch.0.join("other"));
        assert!(tokenizers.settle(Duration::from_secs(10)));
        assert!(tokenizers.get("llama-8b").is_none());
    }

    #[test]
    fn a_name_found_under_the_roots_wins_over_the_listed_root() {
        let scratch = Scratch::new("precedence");
        scratch.file("dirs/llama-8b/tokenizer.json", WORDS);
        scratch.file("elsewhere/tokenizer.json", WORDS);
        let served = served();
        list(&served, "llama-8b", &scratch.0.join("elsewhere"));
        let yaml = format!("tokenizer_dirs: [{}]", scratch.0.join("dirs").display());
        let tokenizers = Tokenizers::load(&config(&yaml), Some(&served)).expect("load");
        assert!(tokenizers.get("llama-8b").is_none());
        assert!(tokenizers.settle(Duration::from_secs(10)));
        assert_eq!(loaded_through(&tokenizers, "llama-8b"), Some(None));
    }

    #[test]
    fn the_switch_off_or_no_model_list_leaves_the_roots_unread() {
        let scratch = Scratch::new("switch");
        scratch.file("llama/tokenizer.json", WORDS);
        for yaml in [
            "tokenizer_dirs: []\nmodel_list: {tokenizer_from_root: false}",
            "tokenizer_dirs: []\nmodel_list: {enabled: false}",
        ] {
            let served = served();
            list(&served, "llama-8b", &scratch.0.join("llama"));
            let tokenizers = Tokenizers::load(&config(yaml), Some(&served)).expect("load");
            assert!(tokenizers.is_empty(), "{yaml}");
            assert!(tokenizers.get("llama-8b").is_none(), "{yaml}");
            let off = "tokenizer from the upstream's model list (a served model's root): off";
            assert_eq!(tokenizers.report().last().map(String::as_str), Some(off));
        }
    }
}
