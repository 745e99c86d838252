//! The tokenizers by model name. Configured ones (`tokenizers:`) are loaded at startup, and a bad one
//! stops it. Others are looked up in the background the first time a successful response names their
//! model ([`loader`]): by name under the search roots (`tokenizer_dirs`, see [`discover`]), else where
//! the upstream's own model list puts that model (its `root`, see [`root`];
//! `model_list.tokenizer_from_root`). Until one is ready that model's responses count chunks — never a
//! wait on the data path.
//!
//! [`loader`]: super::loader
//! [`root`]: super::root

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::loader::Discovery;
use super::{discover, load, Model, AVAILABLE};
use crate::config::{Config, ConfigError};
use crate::record::served::ServedModels;

#[derive(Default)]
pub struct Tokenizers {
    configured: HashMap<String, Arc<Model>>,
    configured_paths: BTreeMap<String, PathBuf>,
    discovery: Option<Discovery>,
    /// Look-ups may use the upstream's model list (`model_list.tokenizer_from_root`).
    from_root: bool,
    /// The search roots are `tokenizer_dirs`' (not the HuggingFace cache found by default).
    dirs_configured: bool,
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
    /// Logs each configured one it loaded; what it looks in is [`Tokenizers::log`]'s.
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
        let discovery = (AVAILABLE && (!roots.is_empty() || listed.is_some()))
            .then(|| Discovery::new(roots, listed, config.max_models.min(MAX_LOOKUPS)));
        Ok(Tokenizers {
            configured,
            configured_paths: config.tokenizers.clone(),
            discovery,
            from_root,
            dirs_configured: config.tokenizer_dirs.is_some(),
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
        self.discovery.as_ref().map_or(&[], |d| d.roots())
    }

    /// What `check-config` prints: each configured tokenizer, then each search root and the
    /// models discoverable under it now, then whether the upstream's model list is used.
    pub fn report(&self) -> Vec<String> {
        self.said().into_iter().map(|(_, line)| line).collect()
    }

    /// Logs at start what [`Tokenizers::report`] says, line for line (so the log and `check-config`
    /// never disagree); a configured `tokenizer_dirs` entry that is not a directory is a warning,
    /// the HuggingFace cache not there yet is not (most machines that run tokentap have none).
    pub fn log(&self) {
        for (warn, line) in self.said() {
            match warn {
                true => tracing::warn!("{line}"),
                false => tracing::info!("{line}"),
            }
        }
    }

    /// Each line of the report, and whether it warns.
    fn said(&self) -> Vec<(bool, String)> {
        let mut lines: Vec<(bool, String)> = self
            .configured_paths
            .iter()
            .map(|(model, path)| {
                let line = format!(
                    "tokenizer for model `{model}`: {} (configured)",
                    path.display()
                );
                (false, line)
            })
            .collect();
        if self.search_roots().is_empty() {
            lines.push((false, "tokenizer discovery by name: off".to_owned()));
        }
        for root in self.search_roots() {
            let shown = root.display();
            if !root.is_dir() {
                let line = match self.dirs_configured {
                    true => format!(
                        "tokenizer discovery under {shown}: not a directory (yet); looked in again \
                         for each new model"
                    ),
                    false => format!(
                        "tokenizer discovery under {shown} (the HuggingFace cache): none there yet; \
                         looked in again for each new model"
                    ),
                };
                lines.push((self.dirs_configured, line));
                continue;
            }
            let found = discover::scan(root);
            let line = format!(
                "tokenizer discovery under {shown}: {} model(s) found now (each loaded when its \
                 model is first served)",
                found.len()
            );
            lines.push((false, line));
            for (model, path) in found.iter().take(SHOWN) {
                lines.push((
                    false,
                    format!("  tokenizer for model `{model}`: {}", path.display()),
                ));
            }
            if found.len() > SHOWN {
                let line = format!("  and {} more", found.len() - SHOWN);
                lines.push((false, line));
            }
        }
        let from_root = if self.from_root { "on" } else { "off" };
        lines.push((
            false,
            format!(
                "tokenizer from the upstream's model list (a served model's root): {from_root}"
            ),
        ));
        lines
    }

    /// Waits until no discovery is in progress, or `timeout`; true when none is.
    pub fn settle(&self, timeout: Duration) -> bool {
        self.discovery.as_ref().is_none_or(|d| d.settle(timeout))
    }
}

/// The most model names ever looked up (fewer with a lower `max_models`): each one found holds a
/// tokenizer of tens of MB, and a server's LoRA adapters, hundreds of names, share their base model's.
pub const MAX_LOOKUPS: usize = 100;

/// The models listed under a search root, at most.
const SHOWN: usize = 20;

#[cfg(all(test, feature = "tokenizer"))]
mod tests {
    use super::super::discover::tests::Scratch;
    use super::super::loader::tests::{list, served};
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

    #[test]
    fn the_model_list_alone_readies_look_ups_and_the_switch_off_or_no_list_reads_no_root() {
        let scratch = Scratch::new("switch");
        scratch.file("llama/tokenizer.json", WORDS);
        let served = served();
        list(&served, "llama-8b", &scratch.0.join("llama"));
        let on = Tokenizers::load(&config("tokenizer_dirs: []"), Some(&served)).expect("load");
        assert!(!on.is_empty() && on.search_roots().is_empty());
        let said = "tokenizer from the upstream's model list (a served model's root): on";
        assert_eq!(on.report().last().map(String::as_str), Some(said));
        for yaml in [
            "tokenizer_dirs: []\nmodel_list: {tokenizer_from_root: false}",
            "tokenizer_dirs: []\nmodel_list: {enabled: false}",
        ] {
            let tokenizers = Tokenizers::load(&config(yaml), Some(&served)).expect("load");
            assert!(tokenizers.is_empty(), "{yaml}");
            assert!(tokenizers.get("llama-8b").is_none(), "{yaml}");
            let off = "tokenizer from the upstream's model list (a served model's root): off";
            assert_eq!(tokenizers.report().last().map(String::as_str), Some(off));
        }
    }
}
