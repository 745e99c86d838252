//! The models the upstream says it serves, as its own list names them (`GET /v1/models`, Ollama's
//! `/api/tags`), and the names the configuration adds: which model names may take a `model` label place.
//!
//! A name took a place on its first 2xx answer, which keeps out the names a client makes up only while
//! the upstream checks them: against a gateway or server that answers any name (TGI, a catch-all route),
//! 300 made-up names took all 100 places and the real model was counted as `other`. So the proxy's list
//! fetcher (`proxy/models.rs`) pushes the upstream's list here, and admission (`metrics`) asks it which
//! of three states holds ([`ListState`]): *pending* until the fetcher's first answer (no name but the
//! configured ones takes a place: 100 made-up names sent in the first second took every place before,
//! and the listed model was counted as `other`), *listed* (a listed name takes a place on its first request, no other name does,
//! and a 2xx for a name the list lacks asks the fetcher to look again, for an adapter loaded since), or
//! *unlisted* (the upstream said twice in a row that it has no list, or none is asked for: a name takes a
//! place on its first 2xx). A list is kept until the upstream answers another one or says it has none:
//! an answer that cannot be read (a 5xx, a timeout) changes nothing, where one 503 used to open the gate
//! for an hour of junk names. The fetcher pushes, `record` never reaches back up to the proxy.
//!
//! Each entry keeps the server's `id` and, where it gives one, `root` (vLLM names the served model's
//! local directory there, and a LoRA adapter's path), for whoever needs the served models' files: the
//! tokenizer registry (`decode/tokenizer`) reads a listed model's `root` and asks to hear of each change
//! of the list ([`ServedModels::on_change`]), so `decode` reads this too and never reaches the proxy.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use prometheus::IntGauge;
use tokio::sync::Notify;

/// One model the upstream lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedModel {
    /// The name clients send (`id` in an OpenAI list, `name` in Ollama's).
    pub id: String,
    /// The served model's local path or repository, when the server says (vLLM's `root`).
    pub root: Option<String>,
}

/// What decides, now, which names may take a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListState {
    /// A fetcher asks, and has had no answer yet that says what the upstream serves (the first moments
    /// after start, or an upstream whose list cannot be read): only the configured names.
    Pending,
    /// The upstream's last list, kept until it answers another one or says it has none: the names it
    /// lists and the configured ones.
    Listed,
    /// The upstream lists nothing, or no list is asked for (`model_list.enabled: false`): a name takes
    /// a place on its first 2xx (the configured names always).
    Unlisted,
}

/// The upstream's last list and the configured names.
pub struct ServedModels {
    listed: RwLock<Listed>,
    /// Names always admitted: `model_list.names` and `slo.models`.
    configured: RwLock<HashSet<String>>,
    /// Wakes the fetcher: a name the list lacks (or a pending one) got a 2xx.
    wanted: Notify,
    /// `tokentap_upstream_models_listed`: names in the upstream's last list; -1 while pending.
    gauge: IntGauge,
    /// Called after each change of the list.
    watchers: Mutex<Vec<Watcher>>,
}

type Watcher = Box<dyn Fn() + Send + Sync>;

struct Listed {
    state: ListState,
    /// Empty unless `state` is `Listed`.
    models: Arc<[ServedModel]>,
    /// Each `id`, and for Ollama's `name:latest` also `name`, which Ollama takes for it.
    names: HashSet<String>,
    /// Counts the changes of the list.
    generation: u64,
}

/// What the gauge shows while no answer came.
const PENDING: i64 = -1;

impl ServedModels {
    /// Unlisted (admission on the 2xx) until a fetcher says it will ask ([`ServedModels::ask`]).
    pub fn new<'a>(configured: impl Iterator<Item = &'a str>, gauge: IntGauge) -> Self {
        let listed = Listed {
            state: ListState::Unlisted,
            models: Arc::new([]),
            names: HashSet::new(),
            generation: 0,
        };
        ServedModels {
            listed: RwLock::new(listed),
            configured: RwLock::new(configured.map(str::to_owned).collect()),
            wanted: Notify::new(),
            gauge,
            watchers: Mutex::default(),
        }
    }

    /// Makes `configured` the names always admitted (a reload's `model_list.names` and `slo.models`).
    pub fn set_configured<'a>(&self, configured: impl Iterator<Item = &'a str>) {
        let names = configured.map(str::to_owned).collect();
        *self
            .configured
            .write()
            .unwrap_or_else(PoisonError::into_inner) = names;
    }

    /// A fetcher will ask the upstream for its list: until it pushes an answer, only the configured
    /// names take a place. Called before the proxy serves, so no request sees the 2xx admission first.
    pub fn ask(&self) {
        let mut listed = self.listed.write().unwrap_or_else(PoisonError::into_inner);
        if listed.state != ListState::Listed {
            listed.state = ListState::Pending;
            self.gauge.set(PENDING);
        }
    }

    /// Replaces the upstream's list (empty: it lists nothing, and admission falls back to the 2xx).
    /// When it differs from the last one, the watchers are called, before the gauge shows the new
    /// count (so whoever waits for the count sees what the watchers started).
    pub fn set(&self, models: Vec<ServedModel>) {
        let mut names = HashSet::new();
        for model in &models {
            if let Some(short) = model.id.strip_suffix(":latest") {
                names.insert(short.to_owned());
            }
            names.insert(model.id.clone());
        }
        let count = i64::try_from(models.len()).unwrap_or(i64::MAX);
        let mut listed = self.listed.write().unwrap_or_else(PoisonError::into_inner);
        let changed = *listed.models != *models;
        listed.state = match models.is_empty() {
            true => ListState::Unlisted,
            false => ListState::Listed,
        };
        if changed {
            *listed = Listed {
                state: listed.state,
                models: models.into(),
                names,
                generation: listed.generation.wrapping_add(1),
            };
        }
        drop(listed);
        if changed {
            let watchers = self.watchers.lock().unwrap_or_else(PoisonError::into_inner);
            for watcher in watchers.iter() {
                watcher();
            }
        }
        self.gauge.set(count);
    }

    /// Calls `watcher` after each change of the list, on the fetcher's task: it must return at once.
    pub fn on_change(&self, watcher: impl Fn() + Send + Sync + 'static) {
        let mut watchers = self.watchers.lock().unwrap_or_else(PoisonError::into_inner);
        watchers.push(Box::new(watcher));
    }

    /// Counts the changes of the list: a value read before a look-up and again after it says whether
    /// the list changed meanwhile.
    pub fn generation(&self) -> u64 {
        let listed = self.listed.read().unwrap_or_else(PoisonError::into_inner);
        listed.generation
    }

    /// The `root` the upstream's last list gives the model it names `id`; `None` when it lists no
    /// such model or gives it no root.
    pub fn root_of(&self, id: &str) -> Option<String> {
        let listed = self.listed.read().unwrap_or_else(PoisonError::into_inner);
        let model = listed.models.iter().find(|m| m.id == id)?;
        model.root.clone()
    }

    /// The upstream's last list, as it gave it.
    pub fn models(&self) -> Arc<[ServedModel]> {
        let listed = self.listed.read().unwrap_or_else(PoisonError::into_inner);
        listed.models.clone()
    }

    /// Whether the upstream's last list names anything.
    pub fn has_list(&self) -> bool {
        self.state() == ListState::Listed
    }

    /// What decides, now, which names may take a place.
    pub fn state(&self) -> ListState {
        let listed = self.listed.read().unwrap_or_else(PoisonError::into_inner);
        listed.state
    }

    /// Whether `name` is listed by the upstream or named in the configuration (while pending or
    /// unlisted, only the configured names are).
    pub fn lists(&self, name: &str) -> bool {
        let configured = self
            .configured
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        if configured.contains(name) {
            return true;
        }
        let listed = self.listed.read().unwrap_or_else(PoisonError::into_inner);
        listed.names.contains(name)
    }

    /// Asks the fetcher to fetch the list again soon (it decides how soon).
    pub fn want_refresh(&self) {
        self.wanted.notify_one();
    }

    /// Completes when a refresh was asked for since the last call.
    pub async fn refresh_wanted(&self) {
        self.wanted.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(configured: &[&str]) -> ServedModels {
        let gauge = IntGauge::new("listed", "test").unwrap();
        ServedModels::new(configured.iter().copied(), gauge)
    }

    #[test]
    fn a_listed_or_configured_name_is_admitted_and_ollamas_latest_tag_may_be_left_out() {
        let models = served(&["configured"]);
        assert!(!models.has_list());
        assert!(models.lists("configured") && !models.lists("llama3"));
        models.set(vec![
            ServedModel {
                id: "llama3:latest".into(),
                root: None,
            },
            ServedModel {
                id: "qwen:7b".into(),
                root: Some("/models/qwen".into()),
            },
        ]);
        assert!(models.has_list());
        assert_eq!(models.gauge.get(), 2);
        for name in ["llama3", "llama3:latest", "qwen:7b", "configured"] {
            assert!(models.lists(name), "{name}");
        }
        for name in ["qwen", "llama3:8b", "/models/qwen", "junk"] {
            assert!(!models.lists(name), "{name}");
        }
        assert_eq!(models.models()[1].root.as_deref(), Some("/models/qwen"));
        assert_eq!(models.root_of("qwen:7b").as_deref(), Some("/models/qwen"));
        assert_eq!(models.root_of("llama3:latest"), None);
        assert_eq!(models.root_of("/models/qwen"), None);
        models.set(Vec::new());
        assert!(!models.has_list() && !models.lists("llama3"));
        assert_eq!(models.gauge.get(), 0);
    }

    #[test]
    fn a_fetcher_that_asks_makes_names_pending_until_its_answer_and_an_empty_list_is_no_list() {
        let models = served(&["configured"]);
        assert_eq!(
            models.state(),
            ListState::Unlisted,
            "no fetcher: the 2xx admits"
        );
        models.ask();
        assert_eq!(models.state(), ListState::Pending);
        assert_eq!(models.gauge.get(), -1);
        assert!(models.lists("configured") && !models.lists("anything"));
        let one = vec![ServedModel {
            id: "llama".into(),
            root: None,
        }];
        models.set(one.clone());
        assert_eq!((models.state(), models.gauge.get()), (ListState::Listed, 1));
        models.ask(); // a list held stays
        assert_eq!(models.state(), ListState::Listed);
        models.set(Vec::new());
        assert_eq!(
            (models.state(), models.gauge.get()),
            (ListState::Unlisted, 0)
        );
        models.set(one);
        assert!(models.has_list() && models.lists("llama"));
    }

    #[test]
    fn watchers_hear_of_each_change_of_the_list_and_only_of_changes() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let models = served(&[]);
        let heard = Arc::new(AtomicUsize::new(0));
        let counter = heard.clone();
        models.on_change(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let one = |root: &str| {
            vec![ServedModel {
                id: "llama-8b".into(),
                root: Some(root.into()),
            }]
        };
        let start = models.generation();
        models.set(one("/models/llama"));
        models.set(one("/models/llama")); // every refresh sets the same list again
        assert_eq!(heard.load(Ordering::SeqCst), 1);
        assert_eq!(models.generation(), start + 1);
        models.set(one("/models/llama-2"));
        models.set(Vec::new());
        models.set(Vec::new());
        assert_eq!(heard.load(Ordering::SeqCst), 3);
        assert_eq!(models.generation(), start + 3);
    }
}
