//! How a section of the document becomes its config type: the types derive `Deserialize` themselves
//! (`deny_unknown_fields`, `default`), and a field that holds a section is read through [`section`]
//! (or [`optional_section`]), which adds the one rule serde's derive lacks: a key written without a
//! value (`connect:`, `~`, `null`) takes its default, exactly as a key left out does. The default of
//! each key comes from its type's [`Default`], seen through its `Serialize` form, so no key is listed
//! anywhere but in its type.
//!
//! Also the maps keyed by a model or tenant name ([`Named`]), which refuse a name written twice. Nothing
//! here knows the file format: `yaml` hands its deserializer in.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A section (`timeouts:` …): absent, empty or null is the type's default, and so is each key in it
/// written without a value.
pub(super) fn section<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Serialize + Default,
{
    Ok(optional_section(d)?.unwrap_or_default())
}

/// A section that is off unless written (`request_log:`, `tenants:`): null is off; in a written one,
/// a key without a value takes its default, as in [`section`].
pub(super) fn optional_section<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Serialize + Default,
{
    d.deserialize_option(SectionVisitor(PhantomData))
}

struct SectionVisitor<T>(PhantomData<T>);

impl<'de, T> Visitor<'de> for SectionVisitor<T>
where
    T: Deserialize<'de> + Serialize + Default,
{
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping")
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<T>, A::Error> {
        let defaults = match serde_json::to_value(T::default()) {
            Ok(Value::Object(defaults)) => defaults,
            Ok(_) => serde_json::Map::new(),
            Err(e) => return Err(de::Error::custom(e)),
        };
        let map = NullsAreDefaults {
            map,
            defaults,
            key: None,
        };
        T::deserialize(MapAccessDeserializer::new(map)).map(Some)
    }
}

/// A section's entries as they come, except that a null value is replaced by the key's default.
struct NullsAreDefaults<A> {
    map: A,
    /// The section's default, key by key, in its `Serialize` form.
    defaults: serde_json::Map<String, Value>,
    /// The key of the entry being read.
    key: Option<String>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for NullsAreDefaults<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self, seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.key = None;
        let key = &mut self.key;
        self.map.next_key_seed(KeySeed { seed, key })
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        let default = self.key.as_ref().and_then(|k| self.defaults.get(k));
        let default = default.cloned().unwrap_or(Value::Null);
        self.map.next_value_seed(NullIsDefault { seed, default })
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// Reads an entry's value; null reads the default instead.
struct NullIsDefault<S> {
    seed: S,
    default: Value,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for NullIsDefault<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for NullIsDefault<S> {
    type Value = S::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value")
    }

    fn visit_none<E: de::Error>(self) -> Result<S::Value, E> {
        self.seed.deserialize(self.default).map_err(E::custom)
    }

    fn visit_unit<E: de::Error>(self) -> Result<S::Value, E> {
        self.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(d)
    }
}

/// Reads a key as the derived code asks for it (so an unknown key is refused where it stands), noting
/// its text on the way.
struct KeySeed<'a, S> {
    seed: S,
    key: &'a mut Option<String>,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        let key = self.key;
        self.seed.deserialize(KeyDeserializer { d, key })
    }
}

struct KeyDeserializer<'a, D> {
    d: D,
    key: &'a mut Option<String>,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for KeyDeserializer<'_, D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let key = self.key;
        self.d.deserialize_any(KeyVisitor { visitor, key })
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let key = self.key;
        self.d.deserialize_identifier(KeyVisitor { visitor, key })
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let key = self.key;
        self.d.deserialize_str(KeyVisitor { visitor, key })
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let key = self.key;
        self.d.deserialize_string(KeyVisitor { visitor, key })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum ignored_any
    }
}

/// Passes a key on to the derived code's visitor, keeping its text.
struct KeyVisitor<'a, V> {
    visitor: V,
    key: &'a mut Option<String>,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for KeyVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        *self.key = Some(v.to_owned());
        self.visitor.visit_str(v)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        *self.key = Some(v.to_owned());
        self.visitor.visit_borrowed_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        *self.key = Some(v.clone());
        self.visitor.visit_string(v)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<V::Value, E> {
        self.visitor.visit_bool(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<V::Value, E> {
        self.visitor.visit_i64(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<V::Value, E> {
        self.visitor.visit_u64(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<V::Value, E> {
        self.visitor.visit_f64(v)
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<V::Value, E> {
        self.visitor.visit_bytes(v)
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_unit()
    }
}

/// What a [`Named`] map holds, for its error message.
pub(super) trait Described {
    const EXPECTING: &'static str;
}

impl Described for PathBuf {
    const EXPECTING: &'static str = "a mapping from model name to a tokenizer.json path";
}

/// A map keyed by model or tenant name (`slo.models`, `tenants.slo`, `tokenizers`): null is empty, a
/// name without a value gets the value's default, and a name written twice is refused instead of the
/// last one silently winning.
pub(super) struct Named<T>(pub BTreeMap<String, T>);

/// [`Named`] for `#[serde(deserialize_with)]`.
pub(super) fn named<'de, D, T>(d: D) -> Result<BTreeMap<String, T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default + Described,
{
    Ok(Named::deserialize(d)?.0)
}

impl<'de, T: Deserialize<'de> + Default + Described> Deserialize<'de> for Named<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Default + Described> Visitor<'de> for V<T> {
            type Value = Named<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::EXPECTING)
            }
            fn visit_none<E: de::Error>(self) -> Result<Named<T>, E> {
                Ok(Named(BTreeMap::new()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Named<T>, E> {
                self.visit_none()
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Named<T>, D::Error> {
                d.deserialize_map(self)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Named<T>, A::Error> {
                let mut named = BTreeMap::new();
                while let Some(name) = map.next_key::<String>()? {
                    let value = map.next_value::<Option<T>>()?;
                    if named.contains_key(&name) {
                        let message = format!("model `{name}` appears twice");
                        return Err(de::Error::custom(message));
                    }
                    named.insert(name, value.unwrap_or_default());
                }
                Ok(Named(named))
            }
        }
        d.deserialize_option(V(PhantomData))
    }
}
