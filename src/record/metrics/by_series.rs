//! What a histogram family keeps beside its `prometheus` children, one value per series (its native
//! buckets, `native.rs`; its exemplars, `exemplars.rs`), found by the series' label values without
//! building a key: a request resolves its series once, but every request does, so a lookup that
//! allocated would be an allocation per request and family.

use std::collections::HashMap;
use std::hash::Hasher;

/// A series' label values, as kept.
type Key = Box<[Box<str>]>;

/// One `T` per series, by its label values (in the family's label order).
pub struct BySeries<T> {
    /// By the hash of the values; the values themselves beside each, for the rare collision.
    map: HashMap<u64, Vec<(Key, T)>>,
}

impl<T> Default for BySeries<T> {
    fn default() -> Self {
        BySeries {
            map: HashMap::new(),
        }
    }
}

/// FNV-1a over the values, each ended by a byte no UTF-8 text has: a few instructions a byte, where
/// SipHash cost a request's resolution hundreds. The values are label values tokentap admitted (capped
/// model and tenant names, closed sets), never chosen freely by a client, so a hash that an adversary
/// could collide costs nothing here; a collision only lengthens one list.
fn hash_of<S: AsRef<str>>(values: &[S]) -> u64 {
    let mut hasher = Fnv(0xcbf2_9ce4_8422_2325);
    for value in values {
        hasher.write(value.as_ref().as_bytes());
        hasher.write_u8(0xff);
    }
    hasher.finish()
}

struct Fnv(u64);

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

fn same<S: AsRef<str>>(kept: &[Box<str>], values: &[S]) -> bool {
    kept.len() == values.len() && kept.iter().zip(values).all(|(k, v)| **k == *v.as_ref())
}

impl<T> BySeries<T> {
    pub fn get<S: AsRef<str>>(&self, values: &[S]) -> Option<&T> {
        let entries = self.map.get(&hash_of(values))?;
        entries
            .iter()
            .find(|(k, _)| same(k, values))
            .map(|(_, t)| t)
    }

    /// The series' value, made by `new` the first time.
    pub fn get_or_insert_with<S: AsRef<str>>(
        &mut self, values: &[S], new: impl FnOnce() -> T,
    ) -> &mut T {
        let entries = self.map.entry(hash_of(values)).or_default();
        let at = match entries.iter().position(|(k, _)| same(k, values)) {
            Some(at) => at,
            None => {
                let key = values.iter().map(|v| Box::from(v.as_ref())).collect();
                entries.push((key, new()));
                entries.len() - 1
            }
        };
        &mut entries[at].1
    }

    /// Keeps only the series for which `keep(values, value)` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(&[Box<str>], &mut T) -> bool) {
        self.map.retain(|_, entries| {
            entries.retain_mut(|(k, t)| keep(k, t));
            !entries.is_empty()
        });
    }

    /// Every series' label values and value.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = (&[Box<str>], &T)> {
        self.map
            .values()
            .flat_map(|entries| entries.iter().map(|(k, t)| (&**k, t)))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&[Box<str>], &mut T)> {
        self.map
            .values_mut()
            .flat_map(|entries| entries.iter_mut().map(|(k, t)| (&**k, t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_found_by_its_values_and_only_by_them() {
        let mut map = BySeries::default();
        *map.get_or_insert_with(&["m", "chat"], || 0) += 1;
        *map.get_or_insert_with(&["m", "chat"], || 0) += 1;
        *map.get_or_insert_with(&["mc", "hat"], || 0) += 5;
        assert_eq!(map.get(&["m", "chat"]), Some(&2));
        assert_eq!(
            map.get(&["mc", "hat"]),
            Some(&5),
            "values are not concatenated"
        );
        assert_eq!(map.get(&["m"]), None);
        assert_eq!(map.iter().count(), 2);
        map.retain(|k, _| &*k[0] != "m");
        assert_eq!((map.iter().count(), map.get(&["m", "chat"])), (1, None));
    }
}
