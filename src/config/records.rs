//! The opt-in keys about who and which requests: `request_log` (one JSON record per finished request,
//! docs/records.md) and `tenants` (a capped `tenant` label and per-tenant SLO ceilings), with their
//! defaults and checks. Both are absent by default: without them tokentap does no per-request work for
//! them and exports exactly the series it did before.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::section::named;
use super::{invalid, values, Ceilings, ConfigError};

/// `request_log:`: where the records go and what they hold.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RequestLog {
    /// Required: the default (an empty path) is refused by [`Config::validate`](super::Config::validate).
    pub path: RecordPath,
    /// Every gap of a stream (`gaps_s`), up to `max_gaps`.
    pub gaps: bool,
    /// The most gaps one record lists; the rest are counted (`gaps`), not listed.
    pub max_gaps: usize,
    /// Records waiting for the writer; beyond them a record is dropped and counted.
    pub queue: usize,
}

/// Where records are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordPath {
    /// `-`: standard output, for a log pipeline that reads the container's stdout.
    Stdout,
    /// A file, appended to and reopened on SIGHUP (logrotate's `create` mode).
    File(PathBuf),
}

impl Default for RecordPath {
    fn default() -> Self {
        RecordPath::File(PathBuf::new())
    }
}

/// `-`, else a file path.
impl<'de> Deserialize<'de> for RecordPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let path = PathBuf::deserialize(d)?;
        Ok(match path.as_os_str() == "-" {
            true => RecordPath::Stdout,
            false => RecordPath::File(path),
        })
    }
}

impl Serialize for RecordPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RecordPath::Stdout => s.serialize_str("-"),
            RecordPath::File(path) => path.serialize(s),
        }
    }
}

impl Default for RequestLog {
    fn default() -> Self {
        RequestLog::new(RecordPath::default())
    }
}

impl RequestLog {
    pub const DEFAULT_MAX_GAPS: usize = 4096;
    pub const DEFAULT_QUEUE: usize = 8192;
    const MAX_GAPS: usize = 1 << 20;
    const MAX_QUEUE: usize = 1 << 20;

    pub fn new(path: RecordPath) -> Self {
        RequestLog {
            path,
            gaps: false,
            max_gaps: Self::DEFAULT_MAX_GAPS,
            queue: Self::DEFAULT_QUEUE,
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if let RecordPath::File(path) = &self.path {
            let shown = path.display().to_string();
            if shown.is_empty() {
                let reason = "request_log needs a `path`: a file, or \"-\" for standard output";
                return Err(invalid("request_log.path", "path", "", reason));
            }
            if path.is_dir() {
                let reason = "is a directory; name the file to write (e.g. /var/log/tokentap/requests.jsonl)";
                return Err(invalid("request_log.path", "path", &shown, reason));
            }
        }
        if !(1..=Self::MAX_GAPS).contains(&self.max_gaps) {
            let reason = "must be between 1 and 1048576";
            let value = self.max_gaps.to_string();
            return Err(invalid("request_log.max_gaps", "value", &value, reason));
        }
        if !(1..=Self::MAX_QUEUE).contains(&self.queue) {
            let reason = "must be between 1 and 1048576";
            let value = self.queue.to_string();
            return Err(invalid("request_log.queue", "value", &value, reason));
        }
        Ok(())
    }
}

/// `tenants:`: where a request's tenant comes from ([`Tenants::source`]: `header` or `bearer_hash`,
/// exactly one) and the cap on the label.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tenants {
    /// The request header whose value is the tenant (lowercase name).
    #[serde(deserialize_with = "values::lowercase")]
    pub header: Option<String>,
    /// The tenant is a short keyed hash of the `Authorization: Bearer` token.
    pub bearer_hash: bool,
    /// The key of the bearer-token hash; `None`: a random key per process (labels change on restart).
    pub hash_key: Option<String>,
    /// Distinct `tenant` label values before the rest count as `other`.
    pub max: usize,
    /// The only tenant values that may take a place (with the `tenants.slo` names); empty: any value
    /// the upstream answers 2xx.
    pub allow: Vec<String>,
    /// Per-tenant ceilings as written; reading a config copies them to [`super::Slo::tenants`], where
    /// every judge reads them.
    #[serde(deserialize_with = "named")]
    pub slo: BTreeMap<String, Ceilings>,
}

impl Default for Tenants {
    fn default() -> Self {
        Tenants {
            header: None,
            bearer_hash: false,
            hash_key: None,
            max: Tenants::DEFAULT_MAX,
            allow: Vec::new(),
            slo: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantFrom {
    /// The value of this request header (lowercase name).
    Header(String),
    /// A short keyed hash of the `Authorization: Bearer` token; never the token.
    BearerHash,
}

/// Headers that carry credentials: their value must never become a label.
const CREDENTIAL_HEADERS: [&str; 5] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "api-key",
];

/// Keys shown as examples (in config/tokentap.yaml, the README, earlier releases): a key anyone can
/// read is no key, and with it a short token is found again from its tag in seconds.
const EXAMPLE_KEYS: [&str; 3] = [
    "at least 16 bytes",
    "PASTE-THE-OUTPUT-OF: head -c 32 /dev/urandom | base64",
    "a-key-of-sixteen-bytes",
];

/// How to make a `hash_key`, in every refusal.
const MAKE_A_KEY: &str =
    "make one with `head -c 32 /dev/urandom | base64` (or `openssl rand -base64 32`)";

impl Tenants {
    pub const DEFAULT_MAX: usize = 32;
    const MAX: usize = 10_000;
    /// Shortest `hash_key`, in characters: 32 random bytes written in base64 are 44 (in hex, 64).
    const MIN_KEY: usize = 44;
    /// Fewest distinct bytes in a `hash_key`: `aaaa…` or `0101…` is not random.
    const MIN_DISTINCT: usize = 8;

    /// Where the tenant comes from (as validated: `header` or `bearer_hash`, not both).
    pub fn source(&self) -> TenantFrom {
        match &self.header {
            Some(name) if !self.bearer_hash => TenantFrom::Header(name.clone()),
            _ => TenantFrom::BearerHash,
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        match (&self.header, self.bearer_hash) {
            (Some(header), true) => {
                let reason = "set either `header` or `bearer_hash: true`, not both";
                return Err(invalid("tenants.header", "value", header, reason));
            }
            (None, false) => {
                let reason =
                    "say where the tenant comes from: `header: x-tenant-id` or `bearer_hash: true`";
                return Err(invalid("tenants", "value", "{}", reason));
            }
            _ => {}
        }
        if let TenantFrom::Header(name) = &self.source() {
            let reason = "must be a header name such as x-tenant-id";
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(invalid("tenants.header", "header name", name, reason));
            }
            if CREDENTIAL_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                let reason = "carries a credential, which must never become a label; use `bearer_hash: true` for the bearer token";
                return Err(invalid("tenants.header", "header name", name, reason));
            }
        }
        if !(1..=Self::MAX).contains(&self.max) {
            let (value, reason) = (self.max.to_string(), "must be between 1 and 10000");
            return Err(invalid("tenants.max", "value", &value, reason));
        }
        if let Some(key) = &self.hash_key {
            if !self.bearer_hash {
                let reason = "only applies with `bearer_hash: true`";
                return Err(invalid("tenants.hash_key", "key", "(not shown)", reason));
            }
            let refuse = |why: &str| {
                let reason = format!("{why}; {MAKE_A_KEY}");
                Err(invalid("tenants.hash_key", "key", "(not shown)", reason))
            };
            if EXAMPLE_KEYS.contains(&key.trim()) {
                return refuse("is the documented example, which anyone can read");
            }
            if key.len() < Self::MIN_KEY {
                return refuse("must be at least 32 random bytes (44 characters of base64)");
            }
            let distinct = key.bytes().collect::<std::collections::HashSet<u8>>().len();
            if distinct < Self::MIN_DISTINCT {
                return refuse("must be random bytes, not a pattern");
            }
        }
        for (i, value) in self.allow.iter().enumerate() {
            let key = format!("tenants.allow[{i}]");
            if value.is_empty() || value.len() > 200 || value.chars().any(char::is_control) {
                let reason = "must be a tenant value: 1 to 200 bytes, no control characters";
                return Err(invalid(&key, "tenant", value, reason));
            }
            let tag = value.strip_prefix("t-").filter(|hex| {
                hex.len() == 12 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            });
            if self.bearer_hash && tag.is_none() {
                let reason = "with bearer_hash, list tags as they appear in the records and on /metrics (`t-` and 12 hex digits); `tokentap tenant-tag --config FILE` prints a token's tag";
                return Err(invalid(&key, "tenant", value, reason));
            }
        }
        Ok(())
    }
}
