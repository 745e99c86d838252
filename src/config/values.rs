//! The value syntaxes of the configuration, parsed and formatted in one place so the YAML file,
//! the command line and error messages all agree: durations ("250ms"), sizes ("256KiB"), the
//! upstream URL and socket addresses; and the serde helpers that read and write them in a config
//! type's field (`#[serde(with = "values::duration")]`). Nothing here knows about YAML: a value's
//! error names the value, and the key it was found under is added from the error's path.

use std::cell::RefCell;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{ser, Deserialize, Serializer};

use super::{invalid, ConfigError};

pub(super) const DURATION_SYNTAX: &str =
    "expected a number followed by us, ms, s, m or h (e.g. \"250ms\", \"1.5s\", \"2m\")";
const SIZE_SYNTAX: &str = "expected a whole number of bytes, optionally followed by B, KiB, MiB, \
                           GiB, KB, MB or GB (e.g. \"262144\", \"256KiB\", \"8MiB\")";
pub(super) const POSITIVE: &str = "must be greater than zero";
const TOO_LARGE: &str = "the number is too large";
const URL_EXAMPLE: &str = "e.g. \"http://127.0.0.1:8000\" or \"https://api.example.com/openai\"";

/// Parses and normalises an upstream URL (also used for `--upstream`): http or https, a host, an
/// optional path prefix (returned without trailing '/'; path "/" when there is none), no query,
/// no fragment, no `user:password@` (a message never echoes the password).
pub fn parse_upstream(text: &str) -> Result<http::Uri, ConfigError> {
    let shown = redact_userinfo(text);
    let bad = |reason: String| invalid("upstream", "upstream URL", &shown, reason);
    if text.contains('#') {
        return Err(bad("must not contain a fragment (#...)".into()));
    }
    let uri = text.parse::<http::Uri>();
    let uri = uri.map_err(|e| bad(format!("{e} ({URL_EXAMPLE})")))?;
    let scheme = match uri.scheme_str() {
        Some(s @ ("http" | "https")) => s.to_owned(),
        _ => {
            return Err(bad(format!(
                "must start with http:// or https:// ({URL_EXAMPLE})"
            )))
        }
    };
    let authority = match uri.authority() {
        Some(a) if !a.host().is_empty() => a.clone(),
        _ => return Err(bad(format!("missing host ({URL_EXAMPLE})"))),
    };
    if authority.as_str().contains('@') {
        return Err(bad("must not contain credentials (user:password@)".into()));
    }
    if uri.query().is_some() {
        return Err(bad(
            "must not contain a query (?...), only a path prefix".into()
        ));
    }
    let prefix = uri.path().trim_end_matches('/');
    let path = if prefix.is_empty() { "/" } else { prefix };
    let normalised = format!("{scheme}://{authority}{path}").parse();
    normalised.map_err(|e: http::uri::InvalidUri| bad(e.to_string()))
}

/// Replaces a `user:password@` in the authority with `***@`.
fn redact_userinfo(text: &str) -> String {
    let start = text.find("://").map_or(0, |i| i + 3);
    let end = text[start..]
        .find(['/', '?', '#'])
        .map_or(text.len(), |i| start + i);
    match text[start..end].rfind('@') {
        Some(at) => format!("{}***{}", &text[..start], &text[start + at..]),
        None => text.to_owned(),
    }
}

/// Parses a duration: a decimal number immediately followed by `us`, `ms`, `s`, `m` or `h`
/// ("500us", "250ms", "1.5s", "2m"). No sign, exponent, bare number or whitespace (so "10 ms" is
/// rejected: one spelling, as in Prometheus and Go). "0s" parses; config keys require > 0.
/// Digits beyond nanosecond resolution are truncated. On error returns the reason.
pub fn parse_duration(text: &str) -> Result<Duration, &'static str> {
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .ok_or(DURATION_SYNTAX)?;
    let (number, unit) = text.split_at(split);
    let unit_nanos: u128 = match unit {
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(DURATION_SYNTAX),
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, "0"));
    if int.is_empty() || frac.is_empty() || frac.contains('.') {
        return Err(DURATION_SYNTAX);
    }
    let frac = &frac[..frac.len().min(18)];
    let whole: u128 = int.parse().map_err(|_| TOO_LARGE)?;
    let part: u128 = frac.parse().map_err(|_| DURATION_SYNTAX)?;
    let part = part * unit_nanos / 10u128.pow(frac.len() as u32);
    let nanos = whole
        .checked_mul(unit_nanos)
        .and_then(|n| n.checked_add(part));
    let nanos = nanos.ok_or(TOO_LARGE)?;
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| TOO_LARGE)?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// Formats a duration exactly, in the config syntax: "250ms", "1.5s", "60s", "500us", "0s".
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    let (per_unit, digits, unit) = match nanos {
        0 => return "0s".to_owned(),
        1_000_000_000.. => (1_000_000_000, 9, "s"),
        1_000_000.. => (1_000_000, 6, "ms"),
        _ => (1_000, 3, "us"),
    };
    let (whole, frac) = (nanos / per_unit, nanos % per_unit);
    if frac == 0 {
        return format!("{whole}{unit}");
    }
    let frac = format!("{frac:0digits$}");
    format!("{whole}.{}{unit}", frac.trim_end_matches('0'))
}

/// Parses a size: whole bytes ("262144"), optionally directly followed by `B`, `KiB`, `MiB`,
/// `GiB` (powers of 1024) or `KB`, `MB`, `GB` (powers of 1000). On error returns the reason.
pub fn parse_size(text: &str) -> Result<u64, &'static str> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let multiplier: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(SIZE_SYNTAX),
    };
    if number.is_empty() {
        return Err(SIZE_SYNTAX);
    }
    let bytes = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier));
    bytes.ok_or(TOO_LARGE)
}

/// A value refused by its syntax, whole. serde hands an error on as text only, and the YAML parser adds
/// its position to that text, which a value's error does without (`{key}: invalid {what} {value:?}:
/// {reason}`): so the helpers below leave it here too, and `yaml` takes it after a failed parse, with
/// the key from the error's path.
#[derive(Debug)]
pub(super) struct Refused {
    pub what: &'static str,
    pub value: String,
    pub reason: String,
}

thread_local! {
    static REFUSED: RefCell<Option<Refused>> = const { RefCell::new(None) };
}

fn refuse<E: de::Error>(what: &'static str, value: &str, reason: impl Into<String>) -> E {
    let (value, reason) = (value.to_owned(), reason.into());
    let error = E::custom(format_args!("invalid {what} {value:?}: {reason}"));
    REFUSED.with(|r| {
        r.replace(Some(Refused {
            what,
            value,
            reason,
        }))
    });
    error
}

/// The value refused on this thread since the last call, if one was.
pub(super) fn take_refused() -> Option<Refused> {
    REFUSED.with(|r| r.take())
}

/// A string or number kept as text, so its syntax can name the value (and say e.g. that `0.5` lacks
/// a unit). Other types are refused by the parser, with path and position.
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_owned()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(format!("{v:?}"))) // "1000.0", never taken for whole bytes
            }
        }
        d.deserialize_any(V)
    }
}

/// `#[serde(with)]` for a duration greater than zero ("250ms").
pub(super) mod duration {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let Scalar(text) = Scalar::deserialize(d)?;
        match parse_duration(&text) {
            Ok(d) if d.is_zero() => Err(refuse("duration", &text, POSITIVE)),
            Ok(d) => Ok(d),
            Err(reason) => Err(refuse("duration", &text, reason)),
        }
    }

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }
}

/// `#[serde(with)]` for an optional idle period: a duration, or `never` (also `0s`) for none.
pub(super) mod idle {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let Scalar(text) = Scalar::deserialize(d)?;
        if text == "never" {
            return Ok(None);
        }
        match parse_duration(&text) {
            Ok(d) => Ok(Some(d).filter(|d| !d.is_zero())),
            Err(reason) => Err(refuse("duration", &text, format!("{reason}, or \"never\""))),
        }
    }

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&d.map_or_else(|| "never".to_owned(), format_duration))
    }
}

/// `#[serde(with)]` for a size in bytes ("256KiB"), as `usize` or `u64`.
pub(super) mod size {
    use super::*;

    pub fn deserialize<'de, D, T>(d: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: TryFrom<u64>,
    {
        let Scalar(text) = Scalar::deserialize(d)?;
        let bytes = parse_size(&text).map_err(|reason| refuse("size", &text, reason))?;
        T::try_from(bytes).map_err(|_| refuse("size", &text, TOO_LARGE))
    }

    pub fn serialize<S, T>(bytes: &T, s: S) -> Result<S::Ok, S::Error>
    where
        S: Serializer,
        T: Copy + TryInto<u64>,
    {
        let bytes = (*bytes)
            .try_into()
            .map_err(|_| ser::Error::custom(TOO_LARGE))?;
        s.serialize_u64(bytes)
    }
}

/// `#[serde(with)]` for a socket address (`IP:PORT`, no host names).
pub(super) mod address {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        let Scalar(text) = Scalar::deserialize(d)?;
        let reason = "expected IP:PORT, e.g. \"0.0.0.0:8080\" or \"[::]:8080\" (no host names)";
        text.parse().map_err(|_| refuse("address", &text, reason))
    }

    pub fn serialize<S: Serializer>(addr: &SocketAddr, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(addr)
    }
}

/// `#[serde(with)]` for the upstream URL ([`parse_upstream`]).
pub(super) mod upstream {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<http::Uri, D::Error> {
        let Scalar(text) = Scalar::deserialize(d)?;
        parse_upstream(&text).map_err(|error| match error {
            ConfigError::Invalid {
                what,
                value,
                reason,
                ..
            } => refuse(what, &value, reason),
            other => de::Error::custom(other),
        })
    }

    pub fn serialize<S: Serializer>(uri: &http::Uri, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(uri)
    }
}

/// `#[serde(deserialize_with)]` for names compared without case (header and host names): lowercase.
pub(super) fn lowercase<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Lowercase,
{
    Ok(T::deserialize(d)?.lowercase())
}

pub(super) trait Lowercase {
    fn lowercase(self) -> Self;
}

impl Lowercase for Option<String> {
    fn lowercase(self) -> Self {
        self.map(|s| s.to_ascii_lowercase())
    }
}

impl Lowercase for Vec<String> {
    fn lowercase(self) -> Self {
        self.iter().map(|s| s.to_ascii_lowercase()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::rows;

    #[test]
    fn upstream_is_normalised_and_checked() {
        let table = "
            http://127.0.0.1:8000 | http://127.0.0.1:8000/
            http://127.0.0.1:8000/ | http://127.0.0.1:8000/
            https://api.example.com/openai/ | https://api.example.com/openai
            https://api.example.com/a/b// | https://api.example.com/a/b
            http://[::1]:8000 | http://[::1]:8000/
        ";
        for row in rows(table) {
            assert_eq!(parse_upstream(row[0]).unwrap().to_string(), row[1]);
        }
        for bad in [
            "",
            "ftp://x",
            "x",
            "http://x/a#top",
            "http://x/?",
            "http:///a",
            "http://x y",
        ] {
            assert!(parse_upstream(bad).is_err(), "{bad:?}");
        }
        let msg = parse_upstream("https://user:secret@api.example.com/v1").unwrap_err();
        let want = "upstream: invalid upstream URL \"https://***@api.example.com/v1\": must not contain credentials (user:password@)";
        assert_eq!(msg.to_string(), want);
    }

    #[test]
    fn duration_parsing_table() {
        let table = "
            500us | 500000 | 0.5us | 500 | 250ms | 250000000 | 12.5ms | 12500000
            1.5s | 1500000000 | 0.001s | 1000000 | 2m | 120000000000 | 0.5h | 1800000000000
            0s | 0 | 007s | 7000000000 | 1.0000000015s | 1000000001
        ";
        for row in rows(table) {
            for pair in row.chunks(2) {
                let want = Duration::from_nanos(pair[1].parse().unwrap());
                assert_eq!(parse_duration(pair[0]), Ok(want), "{pair:?}");
            }
        }
        // Whitespace is rejected on purpose ("10 ms"): one spelling, as in Go and Prometheus.
        let bad = [
            "", "5", "1.5", "-1s", "+1s", "1.5.2s", "10 ms", " 1s", "1s ", ".5s", "5.s",
        ];
        for text in bad
            .into_iter()
            .chain(["1e3s", "5S", "5sec", "1m30s", "ms", "5ns", "1,5s"])
        {
            assert_eq!(parse_duration(text), Err(DURATION_SYNTAX), "{text:?}");
        }
        assert_eq!(parse_duration("99999999999999999999999h"), Err(TOO_LARGE));
    }

    #[test]
    fn format_duration_is_exact_and_round_trips() {
        let table = "
            250000000 | 250ms | 1500000000 | 1.5s | 60000000000 | 60s | 500000 | 500us
            12500000 | 12.5ms | 100 | 0.1us | 1000000001 | 1.000000001s | 0 | 0s
        ";
        for row in rows(table) {
            for pair in row.chunks(2) {
                let d = Duration::from_nanos(pair[0].parse().unwrap());
                assert_eq!(
                    (format_duration(d).as_str(), parse_duration(pair[1])),
                    (pair[1], Ok(d))
                );
            }
        }
    }

    #[test]
    fn size_parsing_table() {
        let table = "
            0 | 0 | 262144 | 262144 | 512B | 512 | 256KiB | 262144 | 8MiB | 8388608
            1GiB | 1073741824 | 1KB | 1000 | 2MB | 2000000 | 1GB | 1000000000
        ";
        for row in rows(table) {
            for pair in row.chunks(2) {
                assert_eq!(
                    parse_size(pair[0]),
                    Ok(pair[1].parse().unwrap()),
                    "{pair:?}"
                );
            }
        }
        for text in [
            "", "KiB", "-1", "1.5MiB", "256 KiB", "256kib", "256K", "1TiB", "0x10",
        ] {
            assert_eq!(parse_size(text), Err(SIZE_SYNTAX), "{text:?}");
        }
        assert_eq!(parse_size("99999999999GiB"), Err(TOO_LARGE));
    }
}
