//! Who sent a request, read from its head and never changed in it: the request id (tokentap's own,
//! unique within the process, so no client can make two records share one), the client's own
//! `x-request-id` beside it when it sent one, and, with `tenants:`, the tenant (a configured header's value,
//! or a short keyed hash of the bearer token). Neither is added to the forwarded request: its bytes
//! stay the client's.
//!
//! The bearer hash is HMAC-SHA256 under `tenants.hash_key` (else a random key drawn at start, so the
//! values change on restart), cut to 12 hex digits (48 bits): it names a tenant without revealing or
//! letting anyone recompute the token, and the token itself is never kept, logged or exported.
//!
//! With `traces:`, the trace a request joins is read here too, from its `traceparent`/`tracestate`,
//! and its span's id drawn (`record/trace/context.rs`): before anything goes upstream, as
//! `traces.propagate` sends that id as the server span's parent.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, Mac};
use http::header::AUTHORIZATION;
use http::HeaderMap;
use sha2::Sha256;

use crate::config::{TenantFrom, Tenants};
use std::time::SystemTime;

use crate::govern::Client;
use crate::record::emit::Who;
use crate::record::trace::{self, TraceContext};

/// The longest client request id taken as it is.
const MAX_ID_LEN: usize = 128;
/// Hex digits of the bearer hash.
const HASH_DIGITS: usize = 12;

/// Reads the identity of each request (one per process, shared by every exchange).
pub struct Identify {
    /// A per-process random prefix of tokentap's own ids.
    prefix: String,
    next: AtomicU64,
    tenant: Option<TenantSource>,
    /// The tenants the operator named (`tenants.allow`, `tenants.slo`): a request naming one of them is
    /// that tenant's for the governor's shares; any other is its address's (a name a client may make up
    /// must not buy it a share of its own).
    named: HashSet<String>,
    /// `traces:` is on: each request's trace is read.
    traces: bool,
}

enum TenantSource {
    Header(http::HeaderName),
    /// The HMAC key.
    BearerHash(Vec<u8>),
}

/// A request's id and tenant as read from its head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// tokentap's own id.
    pub id: String,
    /// The client's `x-request-id`, when it sent a usable one (visible ASCII, at most 128 bytes).
    pub client_id: Option<String>,
    /// The tenant the request names (before the label's cap); `None`: it names none.
    pub tenant: Option<String>,
    /// The trace it joins and its span's id; `None` without `traces:`.
    pub trace: Option<TraceContext>,
    /// Who the client is for the governor's shares: a named tenant, else the address.
    pub client: Client,
}

/// The identity of a request whose head was never read: no id, no tenant, no trace.
pub static UNKNOWN: Identity = Identity {
    id: String::new(),
    client_id: None,
    tenant: None,
    trace: None,
    client: Client::Unknown,
};

impl Identity {
    /// Who a request of this identity is, for its record, its span and the governor's shares: an HTTP
    /// request's own, and each response of the realtime session its handshake opened alike (`id`: the
    /// request's own id, a response's being its session's and its position).
    pub fn who<'a>(
        &'a self, id: &'a str, method: &'a str, path: &'a str, start: SystemTime, captured: bool,
    ) -> Who<'a> {
        Who {
            id,
            client_id: self.client_id.as_deref(),
            method,
            path,
            start,
            client: &self.client,
            captured,
        }
    }
}

/// 64 random bits from the standard library's per-process SipHash keys (the OS's randomness).
fn random_u64(salt: u64) -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(salt);
    hasher.finish()
}

impl Identify {
    /// Without `tenants`, no tenant is read.
    pub fn new(tenants: Option<&Tenants>) -> Self {
        let tenant = tenants.map(|t| match t.source() {
            TenantFrom::Header(name) => match http::HeaderName::from_bytes(name.as_bytes()) {
                Ok(name) => TenantSource::Header(name),
                // Validated in config; an impossible name reads no tenant.
                Err(_) => TenantSource::Header(http::HeaderName::from_static("x-tenant-id")),
            },
            TenantFrom::BearerHash => {
                let key = match &t.hash_key {
                    Some(key) => key.as_bytes().to_vec(),
                    None => (0..4u64)
                        .flat_map(|i| random_u64(i).to_le_bytes())
                        .collect(),
                };
                TenantSource::BearerHash(key)
            }
        });
        let named = tenants.map_or_else(HashSet::new, |t| {
            (t.allow.iter().chain(t.slo.keys())).cloned().collect()
        });
        Identify {
            prefix: format!("{:08x}", random_u64(u64::from(std::process::id())) as u32),
            next: AtomicU64::new(1),
            tenant,
            named,
            traces: false,
        }
    }

    /// Reads each request's trace too (`traces:`).
    pub fn with_traces(mut self, on: bool) -> Self {
        self.traces = on;
        self
    }

    /// The id and tenant of a request with `headers` from `address`.
    pub fn of(&self, headers: &HeaderMap, address: Option<IpAddr>) -> Identity {
        let client_id = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| usable_id(v))
            .map(str::to_owned);
        let tenant = match &self.tenant {
            None => None,
            Some(TenantSource::Header(name)) => headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned),
            Some(TenantSource::BearerHash(key)) => {
                bearer(headers).and_then(|token| hash(key, token))
            }
        };
        let named = tenant.as_deref().filter(|t| self.named.contains(*t));
        Identity {
            id: self.own_id(),
            client_id,
            client: Client::of(address, named),
            tenant,
            trace: self.traces.then(|| trace::ids_for(headers)),
        }
    }

    /// tokentap's own id: the process's random prefix and a counter (`3f2a9c1e-1b`).
    fn own_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n:x}", self.prefix)
    }
}

/// A client id is taken when it is short and made of visible ASCII (no spaces, no control
/// characters: it goes into a log line and a JSON record as it is).
fn usable_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_LEN && id.bytes().all(|b| b.is_ascii_graphic())
}

/// The token of `Authorization: Bearer <token>`.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_at(value.iter().position(|&b| b == b' ')?);
    let token = token.trim_ascii();
    (scheme.eq_ignore_ascii_case(b"bearer") && !token.is_empty()).then_some(token)
}

/// The tenant tag `tenants.bearer_hash` gives `token` under `key` (`tokentap tenant-tag`); `None` for
/// an empty token.
pub fn bearer_tag(key: &str, token: &str) -> Option<String> {
    let token = token.trim();
    if token.is_empty() {
        return None;
    }
    hash(key.as_bytes(), token.as_bytes())
}

/// `None` only if HMAC refused the key, which it does for no length.
fn hash(key: &[u8], token: &[u8]) -> Option<String> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
    mac.update(token);
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(HASH_DIGITS + 2);
    out.push_str("t-");
    for byte in digest.iter().take(HASH_DIGITS / 2) {
        out.push_str(&format!("{byte:02x}"));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            if let Ok(value) = value.parse() {
                map.append(*name, value);
            }
        }
        map
    }

    fn tenants(from: TenantFrom, key: Option<&str>) -> Tenants {
        let (header, bearer_hash) = match from {
            TenantFrom::Header(name) => (Some(name), false),
            TenantFrom::BearerHash => (None, true),
        };
        Tenants {
            header,
            bearer_hash,
            max: 4,
            hash_key: key.map(str::to_owned),
            ..Tenants::default()
        }
    }

    #[test]
    fn the_id_is_always_tokentaps_own_and_the_clients_is_kept_beside_it_when_usable() {
        let identify = Identify::new(None);
        let of = |value: &str| identify.of(&headers(&[("x-request-id", value)]), None);
        let sent = of("abc-123_X.y");
        assert_eq!(sent.client_id.as_deref(), Some("abc-123_X.y"));
        // Two requests with the same client id still have ids of their own.
        assert_ne!(sent.id, of("abc-123_X.y").id);
        let unusable = [
            of(""),
            of("has space"),
            of(&"x".repeat(129)),
            of("tab\there"),
        ];
        for identity in &unusable {
            assert_eq!(identity.client_id, None, "{identity:?}");
        }
        let own: Vec<String> = unusable.into_iter().map(|i| i.id).collect();
        for id in &own {
            assert_eq!(id.len(), 10, "{id}");
        }
        let unique: std::collections::HashSet<_> = own.iter().collect();
        assert_eq!(unique.len(), 4);
        assert_eq!(identify.of(&HeaderMap::new(), None).tenant, None);
    }

    #[test]
    fn the_tenant_is_a_header_value_or_a_keyed_hash_that_never_contains_the_token() {
        let by_header = Identify::new(Some(&tenants(
            TenantFrom::Header("x-tenant-id".into()),
            None,
        )));
        let got = by_header.of(&headers(&[("x-tenant-id", " acme ")]), None);
        assert_eq!(got.tenant.as_deref(), Some("acme"));
        assert_eq!(by_header.of(&HeaderMap::new(), None).tenant, None);

        let key = Some("a key of at least sixteen bytes");
        let hashed = Identify::new(Some(&tenants(TenantFrom::BearerHash, key)));
        let token = "sk-secret-0123456789abcdef";
        let auth = format!("Bearer {token}");
        let tenant = hashed
            .of(&headers(&[("authorization", &auth)]), None)
            .tenant;
        let tenant = tenant.unwrap_or_default();
        assert_eq!(tenant.len(), 2 + HASH_DIGITS, "{tenant}");
        assert!(tenant.starts_with("t-"));
        for part in [token, "secret", "0123", "sk-"] {
            assert!(!tenant.contains(part), "{tenant} shows {part}");
        }
        // The same token and key: the same tenant; another key: another value.
        let again = Identify::new(Some(&tenants(TenantFrom::BearerHash, key)));
        assert_eq!(
            again.of(&headers(&[("authorization", &auth)]), None).tenant,
            Some(tenant.clone())
        );
        let other = Identify::new(Some(&tenants(
            TenantFrom::BearerHash,
            Some("another key, sixteen+"),
        )));
        assert_ne!(
            other.of(&headers(&[("authorization", &auth)]), None).tenant,
            Some(tenant)
        );
        for no_bearer in ["Basic dXNlcjpwYXNz", "Bearer ", "Bearer"] {
            let got = hashed
                .of(&headers(&[("authorization", no_bearer)]), None)
                .tenant;
            assert_eq!(got, None, "{no_bearer}");
        }
    }
}
