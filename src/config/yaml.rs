//! The YAML side of the configuration, and the only module that touches serde_yaml (so the file
//! format could be swapped without touching the rest). A document is deserialized straight into
//! [`Config`] (each type says its own keys, defaults and value syntaxes), with serde_path_to_error
//! keeping the dotted key of an error (`slo.models.llama-3.1-70b.ttft`).

use serde::{Deserialize, Deserializer};

use super::section::section;
use super::values::take_refused;
use super::{Config, ConfigError};

/// The whole document, read as a section: empty, comment-only or null is every default.
struct Document(Config);

impl<'de> Deserialize<'de> for Document {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        section(d).map(Document)
    }
}

/// Parses a YAML document into a [`Config`] (not yet validated); an empty (or comment-only)
/// document gives the defaults. A value its syntax refuses comes back as [`ConfigError::Invalid`]
/// naming the key; YAML syntax errors, unknown keys and wrong types as [`ConfigError::Syntax`] with
/// serde_yaml's path and position.
pub(super) fn parse(text: &str) -> Result<Config, ConfigError> {
    let mut config = read(serde_yaml::Deserializer::from_str(text))?;
    // The ceilings written under `tenants.slo` are judged with the others.
    if let Some(tenants) = &config.tenants {
        config.slo.tenants = tenants.slo.clone();
    }
    Ok(config)
}

/// Writes `config` out as a document and reads it back, so that values set in code meet the same
/// syntax as the file's (a duration above zero, an http(s) upstream), each error naming its key.
pub(super) fn reread(config: &Config) -> Result<(), ConfigError> {
    // Only a path that is not UTF-8 cannot be written, and no file could have set it.
    let Ok(document) = serde_yaml::to_value(config) else {
        return Ok(());
    };
    read(document).map(drop)
}

fn read<'de, D: Deserializer<'de>>(document: D) -> Result<Config, ConfigError>
where
    D::Error: std::fmt::Display,
{
    take_refused();
    match serde_path_to_error::deserialize::<_, Document>(document) {
        Ok(Document(config)) => Ok(config),
        Err(error) => Err(match take_refused() {
            Some(refused) => ConfigError::Invalid {
                key: error.path().to_string(),
                what: refused.what,
                value: refused.value,
                reason: refused.reason,
            },
            None => ConfigError::Syntax(error.into_inner().to_string()),
        }),
    }
}
