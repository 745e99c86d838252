//! The YAML side of the configuration, and the only module that touches serde_yaml (so the file
//! format could be swapped without touching the rest). A document is parsed once into a tree
//! ([`Document`]) and deserialized from it into [`Config`] (each type says its own keys, defaults and
//! value syntaxes), with serde_path_to_error keeping the dotted key of an error
//! (`slo.models.llama-3.1-70b.ttft`). A key can be taken out of the tree and the rest read again, which
//! is how `problems` finds every error of a file and not only the first.

use serde::{Deserialize, Deserializer};
use serde_yaml::Value;

use super::section::section;
use super::values::take_refused;
use super::{Config, ConfigError};

/// The whole document, read as a section: empty, comment-only or null is every default.
struct DocumentConfig(Config);

impl<'de> Deserialize<'de> for DocumentConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        section(d).map(DocumentConfig)
    }
}

/// A parsed YAML document, not yet read into a [`Config`].
pub(super) struct Document(Value);

/// What went wrong reading a document: the dotted key (empty: the document as a whole), the line
/// serde_yaml marked (only when read from text), and the error in the user's words.
pub(super) struct Found {
    pub key: String,
    pub line: Option<usize>,
    pub error: ConfigError,
}

impl Document {
    /// Parses the text; a document YAML itself refuses (a bad indentation, a tab, an unclosed
    /// bracket, a key written twice) comes back with serde_yaml's line.
    pub(super) fn parse(text: &str) -> Result<Document, Box<Found>> {
        match serde_yaml::from_str::<Value>(text) {
            Ok(value) => Ok(Document(value)),
            Err(error) => {
                let line = error.location().map(|l| l.line());
                let message = without_position(&error.to_string());
                let (key, message) = super::words::yaml_syntax(&message);
                let error = ConfigError::Syntax(message);
                Err(Box::new(Found { key, line, error }))
            }
        }
    }

    /// Reads the document into a [`Config`] (not yet validated).
    pub(super) fn read(&self) -> Result<Config, Box<Found>> {
        let mut config = read(&self.0)?;
        // The ceilings written under `tenants.slo` are judged with the others.
        if let Some(tenants) = &config.tenants {
            config.slo.tenants = tenants.slo.clone();
        }
        Ok(config)
    }

    /// This document written over `base`'s: each key it writes replaces `base`'s, a mapping key by key
    /// (so `slo: {ttft: 1s}` changes that one ceiling and keeps the others); what it leaves out keeps
    /// `base`'s value.
    pub(super) fn over(self, base: &Config) -> Document {
        match serde_yaml::to_value(base) {
            Ok(mut under) => {
                merge(&mut under, self.0);
                Document(under)
            }
            // Only a path that is not UTF-8 cannot be written: the document alone, then.
            Err(_) => self,
        }
    }

    /// Takes `key` (dotted, as an error names it; an index `[i]` takes its whole list) out of the
    /// document, so the rest can be read again; false when the document does not hold it.
    pub(super) fn remove(&mut self, key: &str) -> bool {
        let key = key.split('[').next().unwrap_or_default();
        !key.is_empty() && remove(&mut self.0, key)
    }

    /// Whether `key` may be written in `section` (a top-level key): read alone, without a value, it
    /// is not refused as unknown.
    pub(super) fn section_has(section: &str, key: &str) -> bool {
        let mut inner = serde_yaml::Mapping::new();
        inner.insert(Value::from(key), Value::Null);
        let mut outer = serde_yaml::Mapping::new();
        outer.insert(Value::from(section), Value::Mapping(inner));
        read(&Value::Mapping(outer)).is_ok()
    }

    /// The top-level keys, as the defaults write them.
    pub(super) fn top_level_keys() -> Vec<String> {
        match serde_yaml::to_value(Config::default()) {
            Ok(Value::Mapping(map)) => map
                .keys()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// Parses a YAML document into a [`Config`] (not yet validated), stopping at the first error; an
/// empty (or comment-only) document gives the defaults.
#[cfg(test)]
pub(super) fn parse(text: &str) -> Result<Config, ConfigError> {
    let found = |found: Box<Found>| found.error;
    Document::parse(text).map_err(found)?.read().map_err(found)
}

/// Writes `config` out as a document and reads it back, so that values set in code meet the same
/// syntax as the file's (a duration above zero, an http(s) upstream), each error naming its key.
pub(super) fn reread(config: &Config) -> Result<(), ConfigError> {
    // Only a path that is not UTF-8 cannot be written, and no file could have set it.
    let Ok(document) = serde_yaml::to_value(config) else {
        return Ok(());
    };
    read(&document).map(drop).map_err(|found| found.error)
}

fn read(document: &Value) -> Result<Config, Box<Found>> {
    take_refused();
    match serde_path_to_error::deserialize::<_, DocumentConfig>(document) {
        Ok(DocumentConfig(config)) => Ok(config),
        Err(error) => {
            let path = error.path().to_string();
            let path = if path == "." { String::new() } else { path };
            let line = error.inner().location().map(|l| l.line());
            let error = match take_refused() {
                Some(refused) => {
                    let key = path.clone();
                    let (what, value, reason) = (refused.what, refused.value, refused.reason);
                    let error = ConfigError::Invalid {
                        key,
                        what,
                        value,
                        reason,
                    };
                    return Err(Box::new(Found {
                        key: path,
                        line,
                        error,
                    }));
                }
                None => without_position(&error.into_inner().to_string()),
            };
            let (key, error) = super::words::serde_message(&path, &error);
            Err(Box::new(Found { key, line, error }))
        }
    }
}

/// serde_yaml's message without the path and position it adds (the caller names both).
fn without_position(message: &str) -> String {
    let message = match message.find(" at line ") {
        Some(at) => &message[..at],
        None => message,
    };
    message.to_owned()
}

/// Writes `over` onto `under`: mappings key by key, anything else replaced whole.
fn merge(under: &mut Value, over: Value) {
    match (under, over) {
        (Value::Mapping(under), Value::Mapping(over)) => {
            for (key, value) in over {
                match under.get_mut(&key) {
                    Some(slot) => merge(slot, value),
                    None => {
                        under.insert(key, value);
                    }
                }
            }
        }
        (under, over) => *under = over,
    }
}

fn remove(value: &mut Value, key: &str) -> bool {
    let Value::Mapping(map) = value else {
        return false;
    };
    let mut best: Option<Value> = None;
    for name in map.keys() {
        let Some(name_text) = name.as_str() else {
            continue;
        };
        let fits = key == name_text
            || key
                .strip_prefix(name_text)
                .is_some_and(|rest| rest.starts_with('.'));
        let longer = best
            .as_ref()
            .and_then(Value::as_str)
            .is_none_or(|b| b.len() < name_text.len());
        if fits && longer {
            best = Some(name.clone());
        }
    }
    let Some(name) = best else {
        return false;
    };
    let name_len = name.as_str().map_or(0, str::len);
    if key.len() == name_len {
        return map.remove(&name).is_some();
    }
    map.get_mut(&name)
        .is_some_and(|inner| remove(inner, &key[name_len + 1..]))
}
