//! `slo:` and the SLO kinds: which ceilings exist ([`SloKind`], each named once, by [`SloKind::as_str`]),
//! a value per kind ([`ByKind`], so a set of [`Ceilings`] is an array indexed by its kind, not a field
//! each), and how default, per-model and per-tenant ceilings combine ([`Slo`]).
//!
//! A new kind is a variant here (in [`SloKind::ALL`] and [`SloKind::as_str`]) and the figure it judges
//! (`record::slo::judged_figure`): the YAML key, the `slo` label, the records' `slo_missed`, `--slo`, the
//! what-if report and the live page follow from it.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Index, IndexMut};
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use super::section::{Described, Named};
use super::values::{duration, format_duration};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SloKind {
    Ttft,
    Tpot,
    Itl,
    E2e,
    /// The time to the first answer-bearing output (reasoning excluded) of a stream.
    TimeToFirstAnswer,
    /// The time to the first tool call of a stream: how long an agent waits before it can act.
    TimeToFirstToolCall,
}

impl SloKind {
    /// Every kind, in the order configs, reports and the live page list them; `ALL[k as usize] == k`.
    pub const ALL: [SloKind; 6] = [
        SloKind::Ttft,
        SloKind::Tpot,
        SloKind::Itl,
        SloKind::E2e,
        SloKind::TimeToFirstAnswer,
        SloKind::TimeToFirstToolCall,
    ];
    pub const COUNT: usize = Self::ALL.len();
    /// Every kind's key, in [`SloKind::ALL`]'s order.
    pub const KEYS: [&'static str; Self::COUNT] = {
        let mut keys = [""; Self::COUNT];
        let mut i = 0;
        while i < Self::COUNT {
            assert!(
                Self::ALL[i] as usize == i,
                "SloKind::ALL is in declaration order"
            );
            keys[i] = Self::ALL[i].as_str();
            i += 1;
        }
        keys
    };

    /// The YAML key (under `slo:`, `slo.models.<model>`, `tenants.slo.<tenant>`, `--slo`), the `slo` label
    /// value and the records' `slo_missed` entry.
    pub const fn as_str(self) -> &'static str {
        match self {
            SloKind::Ttft => "ttft",
            SloKind::Tpot => "tpot",
            SloKind::Itl => "itl",
            SloKind::E2e => "e2e",
            SloKind::TimeToFirstAnswer => "time_to_first_answer",
            SloKind::TimeToFirstToolCall => "time_to_first_tool_call",
        }
    }

    /// The kind a key names.
    pub fn from_key(key: &str) -> Option<SloKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == key)
    }
}

impl fmt::Display for SloKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value per SLO kind, indexed by the kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ByKind<T>(pub [T; SloKind::COUNT]);

impl<T> ByKind<T> {
    pub fn from_fn(f: impl FnMut(SloKind) -> T) -> Self {
        ByKind(SloKind::ALL.map(f))
    }

    /// Each kind with its value, in [`SloKind::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (SloKind, &T)> {
        SloKind::ALL.into_iter().zip(&self.0)
    }
}

impl<T> Index<SloKind> for ByKind<T> {
    type Output = T;
    fn index(&self, kind: SloKind) -> &T {
        &self.0[kind as usize]
    }
}

impl<T> IndexMut<SloKind> for ByKind<T> {
    fn index_mut(&mut self, kind: SloKind) -> &mut T {
        &mut self.0[kind as usize]
    }
}

/// One set of SLO ceilings; `None` = not applied.
pub type Ceilings = ByKind<Option<Duration>>;

impl ByKind<Option<Duration>> {
    /// These ceilings with `kind`'s set to `ceiling`.
    pub fn with(mut self, kind: SloKind, ceiling: Duration) -> Self {
        self[kind] = Some(ceiling);
        self
    }

    /// Whether no ceiling is set.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }

    /// These ceilings with each one `overrides` sets replacing its own.
    fn under(self, overrides: Option<&Ceilings>) -> Ceilings {
        match overrides {
            Some(o) => ByKind::from_fn(|k| o[k].or(self[k])),
            None => self,
        }
    }
}

/// Default ceilings (directly under `slo:` in YAML), per-model overrides (`slo.models`) and
/// per-tenant overrides (written under `tenants.slo`, kept here too so every judge reads one `Slo`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slo {
    pub default: Ceilings,
    pub models: BTreeMap<String, Ceilings>,
    pub tenants: BTreeMap<String, Ceilings>,
}

impl Slo {
    /// A model's overrides merged field by field over the default; other models get the default.
    pub fn ceilings_for(&self, model: &str) -> Ceilings {
        self.default.under(self.models.get(model))
    }

    /// The ceilings of a request of `model` from `tenant` (its label value): the tenant's overrides
    /// merged field by field over the model's, which are merged over the default. A tenant's ceiling
    /// wins over its model's: the tenant's contract is what its requests are judged by.
    pub fn ceilings_for_request(&self, model: &str, tenant: Option<&str>) -> Ceilings {
        let tenant = tenant.and_then(|t| self.tenants.get(t));
        self.ceilings_for(model).under(tenant)
    }

    /// Every configured ceiling of `kind` (default, models and tenants) in seconds, sorted,
    /// deduplicated.
    pub fn boundaries(&self, kind: SloKind) -> Vec<f64> {
        let all = std::iter::once(&self.default)
            .chain(self.models.values())
            .chain(self.tenants.values());
        let mut v: Vec<f64> = all.filter_map(|c| Some(c[kind]?.as_secs_f64())).collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    }
}

impl Described for Ceilings {
    const EXPECTING: &'static str = "a mapping from model name to SLO ceilings";
}

/// The keys of `slo:`: every kind, and `models`.
const SLO_KEYS: [&str; SloKind::COUNT + 1] = {
    let mut keys = [""; SloKind::COUNT + 1];
    let mut i = 0;
    while i < SloKind::COUNT {
        keys[i] = SloKind::KEYS[i];
        i += 1;
    }
    keys[SloKind::COUNT] = "models";
    keys
};

/// A key of `slo:`; an unknown one is refused while its key is read, so the error points at it.
enum SloKey {
    Kind(SloKind),
    Models,
}

impl<'de> Deserialize<'de> for SloKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = SloKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an SLO ceiling or `models`")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<SloKey, E> {
                match SloKind::from_key(key) {
                    Some(kind) => Ok(SloKey::Kind(kind)),
                    None if key == "models" => Ok(SloKey::Models),
                    None => Err(E::unknown_field(key, &SLO_KEYS)),
                }
            }
        }
        d.deserialize_identifier(V)
    }
}

impl<'de> Deserialize<'de> for SloKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = SloKind;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an SLO ceiling")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<SloKind, E> {
                SloKind::from_key(key).ok_or_else(|| E::unknown_field(key, &SloKind::KEYS))
            }
        }
        d.deserialize_identifier(V)
    }
}

/// A ceiling as written: a duration above zero, or null for none.
struct Ceiling(Option<Duration>);

impl<'de> Deserialize<'de> for Ceiling {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Positive(#[serde(deserialize_with = "duration::deserialize")] Duration);
        Ok(Ceiling(Option::<Positive>::deserialize(d)?.map(|p| p.0)))
    }
}

/// Reads one ceiling per kind key into `ceilings`, refusing a kind written twice.
fn read_ceiling<'de, A: MapAccess<'de>>(
    map: &mut A, kind: SloKind, ceilings: &mut Ceilings, seen: &mut ByKind<bool>,
) -> Result<(), A::Error> {
    if std::mem::replace(&mut seen[kind], true) {
        return Err(de::Error::duplicate_field(kind.as_str()));
    }
    ceilings[kind] = map.next_value::<Ceiling>()?.0;
    Ok(())
}

impl<'de> Deserialize<'de> for Ceilings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ceilings;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of SLO ceilings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ceilings, A::Error> {
                let (mut ceilings, mut seen) = (Ceilings::default(), ByKind::default());
                while let Some(kind) = map.next_key::<SloKind>()? {
                    read_ceiling(&mut map, kind, &mut ceilings, &mut seen)?;
                }
                Ok(ceilings)
            }
        }
        d.deserialize_struct("Ceilings", &SloKind::KEYS, V)
    }
}

impl<'de> Deserialize<'de> for Slo {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Slo;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Slo, A::Error> {
                let (mut slo, mut seen, mut models) = (Slo::default(), ByKind::default(), false);
                while let Some(key) = map.next_key::<SloKey>()? {
                    match key {
                        SloKey::Kind(kind) => {
                            read_ceiling(&mut map, kind, &mut slo.default, &mut seen)?
                        }
                        SloKey::Models if std::mem::replace(&mut models, true) => {
                            return Err(de::Error::duplicate_field("models"));
                        }
                        SloKey::Models => {
                            slo.models = map.next_value::<Named<Ceilings>>()?.0;
                        }
                    }
                }
                Ok(slo)
            }
        }
        d.deserialize_struct("Slo", &SLO_KEYS, V)
    }
}

/// Every kind, `null` where no ceiling is set (a config's complete form, as the docs' test reads it).
fn serialize_ceilings<M: SerializeMap>(map: &mut M, ceilings: &Ceilings) -> Result<(), M::Error> {
    for (kind, ceiling) in ceilings.iter() {
        map.serialize_entry(kind.as_str(), &ceiling.map(format_duration))?;
    }
    Ok(())
}

impl Serialize for ByKind<Option<Duration>> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(SloKind::COUNT))?;
        serialize_ceilings(&mut map, self)?;
        map.end()
    }
}

/// `slo:` as written: the default ceilings and `models` (the tenants' are written under `tenants.slo`).
impl Serialize for Slo {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(SLO_KEYS.len()))?;
        serialize_ceilings(&mut map, &self.default)?;
        map.serialize_entry("models", &self.models)?;
        map.end()
    }
}
