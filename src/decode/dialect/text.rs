//! A lenient text field for the dialects' event structs: a JSON string, borrowed from the event when it
//! has no escapes, or nothing for any other JSON value. Servers put objects where the docs say strings
//! (or the reverse) often enough that one odd field must not make a whole stream unreadable, and this
//! reads either without allocating or buffering the value.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The field's string value, `None` for null or a non-string value.
#[derive(Debug, Default)]
pub struct Text<'a>(pub Option<Cow<'a, str>>);

impl Text<'_> {
    /// The string, when it is a non-empty one.
    pub fn non_empty(&self) -> Option<&str> {
        self.0.as_deref().filter(|s| !s.is_empty())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Owned(v))))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_unit<E>(self) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_none<E>(self) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Text<'de>, D::Error> {
                Text::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Text<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Holder<'a> {
        #[serde(borrow, default)]
        t: Text<'a>,
    }

    fn read(json: &str) -> Option<String> {
        let h: Holder<'_> = serde_json::from_str(json).expect("valid JSON");
        h.t.0.map(Cow::into_owned)
    }

    #[test]
    fn strings_are_read_and_every_other_value_is_none() {
        assert_eq!(read(r#"{"t":"hi"}"#).as_deref(), Some("hi"));
        assert_eq!(read(r#"{"t":"a\"b"}"#).as_deref(), Some("a\"b"));
        for other in [
            "null",
            "1",
            "-1",
            "1.5",
            "true",
            "[1,[2]]",
            r#"{"a":{"b":1}}"#,
        ] {
            assert_eq!(read(&format!(r#"{{"t":{other}}}"#)), None, "{other}");
        }
        assert_eq!(read("{}"), None);
    }

    #[test]
    fn unescaped_strings_are_borrowed() {
        let json = r#"{"t":"plain"}"#;
        let h: Holder<'_> = serde_json::from_str(json).expect("valid JSON");
        assert!(matches!(h.t.0, Some(Cow::Borrowed("plain"))));
    }
}
