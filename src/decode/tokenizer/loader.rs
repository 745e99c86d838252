//! The tokenizers not configured, looked up and loaded on one background thread: a model name is
//! handed to it the first time a successful response names the model, and it finds the file (by name
//! under the search roots, else at the upstream's listed `root` for it) and loads it (a `tokenizer.json`
//! takes 100 ms or more and tens of MB). Until it is ready that model's responses count chunks. Each
//! model name is looked up once, found or not, and at most `max_models` names (100 at most:
//! `registry::MAX_LOOKUPS`) are ever looked up, so a
//! client that varies its model name can neither make tokentap search without end nor hold more
//! tokenizers. A change of the upstream's list (it came after the first requests, or a model was
//! restarted from another directory) looks up again, at once and in the background, the names not found
//! and those loaded through a `root` the list now gives another: the next request after the load is
//! counted by it. The list lives in `record/served.rs`, which calls back here on each change.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use super::{discover, load, root, Model};
use crate::record::served::ServedModels;

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

pub(super) struct Discovery {
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
    pub(super) fn new(
        roots: Vec<PathBuf>, served: Option<Arc<ServedModels>>, max_names: usize,
    ) -> Self {
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

    pub(super) fn get(&self, model: &str) -> Option<Arc<Model>> {
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

    /// Where models are looked up by name.
    pub(super) fn roots(&self) -> &[PathBuf] {
        &self.shared.roots
    }

    pub(super) fn settle(&self, timeout: Duration) -> bool {
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
pub(super) mod tests {
    use super::super::discover::tests::Scratch;
    use super::*;

    const WORDS: &str = include_str!("../../../tests/fixtures/tokenizer/words.json");
    const SETTLE: Duration = Duration::from_secs(10);

    pub(crate) fn served() -> Arc<ServedModels> {
        let gauge = prometheus::IntGauge::new("listed", "test").expect("gauge");
        Arc::new(ServedModels::new(std::iter::empty(), gauge))
    }

    pub(crate) fn list(served: &ServedModels, id: &str, root: &std::path::Path) {
        served.set(vec![crate::record::served::ServedModel {
            id: id.to_owned(),
            root: Some(root.display().to_string()),
        }]);
    }

    /// The root a name was loaded through (`Some(None)`: by its name), `None` when not loaded.
    fn loaded_through(discovery: &Discovery, model: &str) -> Option<Option<String>> {
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
        let discovery = Discovery::new(Vec::new(), Some(served.clone()), 100);
        // Requests before the list came: no tokenizer anywhere.
        assert!(discovery.get("llama-8b").is_none());
        assert!(discovery.settle(SETTLE));
        assert!(discovery.get("llama-8b").is_none());
        // The list names the model's directory: looked up again at once, without a request.
        list(&served, "llama-8b", &scratch.0.join("llama"));
        assert!(discovery.settle(SETTLE));
        assert!(discovery.get("llama-8b").is_some());
        let root = scratch.0.join("llama").display().to_string();
        assert_eq!(loaded_through(&discovery, "llama-8b"), Some(Some(root)));
        // A list without the name (an upstream that blinked) keeps it.
        served.set(Vec::new());
        assert!(discovery.settle(SETTLE));
        assert!(discovery.get("llama-8b").is_some());
        // The server restarted from another directory, without a tokenizer.json: not kept.
        list(&served, "llama-8b", &scratch.0.join("other"));
        assert!(discovery.settle(SETTLE));
        assert!(discovery.get("llama-8b").is_none());
    }

    #[test]
    fn a_name_found_under_the_roots_wins_over_the_listed_root() {
        let scratch = Scratch::new("precedence");
        scratch.file("dirs/llama-8b/tokenizer.json", WORDS);
        scratch.file("elsewhere/tokenizer.json", WORDS);
        let served = served();
        list(&served, "llama-8b", &scratch.0.join("elsewhere"));
        let discovery = Discovery::new(vec![scratch.0.join("dirs")], Some(served), 100);
        assert!(discovery.get("llama-8b").is_none());
        assert!(discovery.settle(SETTLE));
        assert_eq!(loaded_through(&discovery, "llama-8b"), Some(None));
    }

    #[test]
    fn the_loader_thread_ends_with_its_discovery() {
        let served = served();
        let discovery = Discovery::new(Vec::new(), Some(served.clone()), 100);
        assert!(discovery.get("m").is_none());
        assert!(discovery.settle(SETTLE));
        let shared = Arc::downgrade(&discovery.shared);
        drop(discovery);
        // The thread holds `shared` until its queue closes; the list's watcher holds neither.
        for _ in 0..500 {
            if shared.upgrade().is_none() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            shared.upgrade().is_none(),
            "the loader thread outlived its discovery"
        );
        served.set(Vec::new());
    }
}
