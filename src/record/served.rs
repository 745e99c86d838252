//! The models the upstream says it serves, as its own list names them (`GET /v1/models`, Ollama's
//! `/api/tags`), and the names the configuration adds: which model names may take a `model` label place.
//!
//! A name took a place on its first 2xx answer, which keeps out the names a client makes up only while
//! the upstream checks them: against a gateway or server that answers any name (TGI, a catch-all route),
//! 300 made-up names took all 100 places and the real model was counted as `other`. So the proxy's list
//! fetcher (`proxy/models.rs`) pushes the upstream's list here, and admission (`metrics`) asks it: a listed
//! name takes a place on its first request, and while the upstream lists anything, no other name does
//! (a 2xx for a name it does not list asks the fetcher to look again, for an adapter loaded since). Only
//! an upstream that lists nothing leaves admission to the 2xx. The fetcher pushes, `record` never
//! reaches back up to the proxy.
//!
//! Each entry keeps the server's `id` and, where it gives one, `root` (vLLM names the served model's
//! local directory there, and a LoRA adapter's path), for whoever needs the served models' files.

use std::collections::HashSet;
use std::sync::{Arc, PoisonError, RwLock};

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

/// The upstream's last list and the configured names.
pub struct ServedModels {
    listed: RwLock<Listed>,
    /// Names always admitted: `model_list.names` and `slo.models`.
    configured: HashSet<String>,
    /// Wakes the fetcher: a name the list lacks got a 2xx.
    wanted: Notify,
    /// `tokentap_upstream_models_listed`: names in the upstream's last list.
    gauge: IntGauge,
}

#[derive(Default)]
struct Listed {
    models: Arc<[ServedModel]>,
    /// Each `id`, and for Ollama's `name:latest` also `name`, which Ollama takes for it.
    names: HashSet<String>,
}

impl ServedModels {
    pub fn new<'a>(configured: impl Iterator<Item = &'a str>, gauge: IntGauge) -> Self {
        ServedModels {
            listed: RwLock::default(),
            configured: configured.map(str::to_owned).collect(),
            wanted: Notify::new(),
            gauge,
        }
    }

    /// Replaces the upstream's list (empty: it lists nothing, and admission falls back to the 2xx).
    pub fn set(&self, models: Vec<ServedModel>) {
        let mut names = HashSet::new();
        for model in &models {
            if let Some(short) = model.id.strip_suffix(":latest") {
                names.insert(short.to_owned());
            }
            names.insert(model.id.clone());
        }
        self.gauge
            .set(i64::try_from(models.len()).unwrap_or(i64::MAX));
        let mut listed = self.listed.write().unwrap_or_else(PoisonError::into_inner);
        *listed = Listed {
            models: models.into(),
            names,
        };
    }

    /// The upstream's last list, as it gave it.
    pub fn models(&self) -> Arc<[ServedModel]> {
        let listed = self.listed.read().unwrap_or_else(PoisonError::into_inner);
        listed.models.clone()
    }

    /// Whether the upstream's last list names anything.
    pub fn has_list(&self) -> bool {
        let listed = self.listed.read().unwrap_or_else(PoisonError::into_inner);
        !listed.models.is_empty()
    }

    /// Whether `name` is listed by the upstream or named in the configuration.
    pub fn lists(&self, name: &str) -> bool {
        if self.configured.contains(name) {
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
        models.set(Vec::new());
        assert!(!models.has_list() && !models.lists("llama3"));
        assert_eq!(models.gauge.get(), 0);
    }
}
