//! `model_list:`: which model names may take a `model` label place. By default tokentap asks the
//! upstream which models it serves (`GET /v1/models` on OpenAI-compatible servers, vLLM, SGLang, TGI and
//! llama.cpp; `/api/tags` on Ollama) and admits those names, plus the ones named here (until its first
//! answer, only these); only when the upstream says it has no list does a name take a place on its first
//! 2xx answer, as a client could otherwise fill every place with names an upstream that answers any name
//! accepts.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{format_duration, invalid, values, ConfigError};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelList {
    /// Ask the upstream for its list; `false`: admission on a 2xx answer (and `names`) only.
    pub enabled: bool,
    /// Time between two fetches of the list (sooner while the upstream has not answered one, after a
    /// first "no list", and when a name it does not list gets a 2xx).
    #[serde(with = "values::duration")]
    pub refresh: Duration,
    /// Names admitted as if the upstream listed them; like `slo.models`, each always has its own label.
    pub names: Vec<String>,
    /// A file whose contents (trimmed) are the bearer token the upstream's list needs (vLLM `--api-key`).
    pub api_key_file: Option<PathBuf>,
    /// A served model whose tokenizer is neither configured nor found by its name under
    /// `tokenizer_dirs` is looked for where the list's `root` for it points (vLLM's model directory).
    pub tokenizer_from_root: bool,
}

impl Default for ModelList {
    fn default() -> Self {
        ModelList {
            enabled: true,
            refresh: Duration::from_secs(60),
            names: Vec::new(),
            api_key_file: None,
            tokenizer_from_root: true,
        }
    }
}

impl ModelList {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let refresh = format_duration(self.refresh);
        if !(Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&self.refresh) {
            let reason = "must be between 1s and 24h";
            return Err(invalid("model_list.refresh", "duration", &refresh, reason));
        }
        for (i, name) in self.names.iter().enumerate() {
            let key = format!("model_list.names[{i}]");
            if name.is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
                let reason = "must be a model name: 1 to 200 bytes, no control characters";
                return Err(invalid(&key, "model name", name, reason));
            }
        }
        if let Some(path) = &self.api_key_file {
            super::check_readable_file("model_list.api_key_file", path)?;
        }
        Ok(())
    }

    /// The bearer token of `api_key_file`, read now; `None` without one. An empty file is an error.
    pub fn api_key(&self) -> Result<Option<String>, ConfigError> {
        let Some(path) = &self.api_key_file else {
            return Ok(None);
        };
        let shown = path.display().to_string();
        let key = "model_list.api_key_file";
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid(key, "path", &shown, format!("cannot read it: {e}")))?;
        let token = text.trim();
        if token.is_empty() || token.chars().any(char::is_control) {
            let reason = "must hold the token on one line";
            return Err(invalid(key, "path", &shown, reason));
        }
        Ok(Some(token.to_owned()))
    }
}
