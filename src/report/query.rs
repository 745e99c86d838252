//! What the user asked of a report, parsed from the command line: the time window (`--since`,
//! `--until`: RFC 3339, or a duration back from now such as `1h`), the grouping (`--by`) and the
//! what-if ceilings (`--slo ttft=300ms,tpot=40ms`). Times are seconds since the Unix epoch, UTC.

use crate::config::{parse_duration, Ceilings, Slo, SloKind};
use crate::record::conversations::turn_label;
pub use crate::record::request_record::parse_rfc3339;
use crate::record::request_record::RequestRecord;
use time::format_description::FormatItem;
use time::macros::format_description;
use time::OffsetDateTime;

/// `--by`: which label splits the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    Model,
    Tenant,
    Api,
    /// The record's position in its conversation, as the `turn` label buckets it (`1` … `16+`).
    Turn,
}

impl By {
    pub fn parse(text: &str) -> Result<By, String> {
        match text {
            "model" => Ok(By::Model),
            "tenant" => Ok(By::Tenant),
            "api" => Ok(By::Api),
            "turn" => Ok(By::Turn),
            _ => Err(format!(
                "--by: invalid grouping {text:?}: expected model, tenant, api or turn"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            By::Model => "model",
            By::Tenant => "tenant",
            By::Api => "api",
            By::Turn => "turn",
        }
    }

    /// The record's group; a record without a tenant (or a turn) is in [`NO_GROUP`].
    pub fn key(self, record: &RequestRecord) -> &str {
        match self {
            By::Model => &record.model,
            By::Tenant => record.tenant.as_deref().unwrap_or(NO_GROUP),
            By::Api => &record.api,
            By::Turn => record.turn.map_or(NO_GROUP, turn_label),
        }
    }
}

/// The group of records without a tenant (with `--by tenant`) or a turn (with `--by turn`).
pub const NO_GROUP: &str = "-";

/// `--since` / `--until`: a record is in the window when since ≤ start < until.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Window {
    pub since: Option<f64>,
    pub until: Option<f64>,
}

impl Window {
    pub fn contains(&self, start: f64) -> bool {
        self.since.is_none_or(|s| start >= s) && self.until.is_none_or(|u| start < u)
    }
}

/// A point in time for `--since`/`--until` (named by `flag` in errors): RFC 3339
/// (`2026-12-03T08:00:00Z`, an offset, or a bare date at midnight UTC) or a duration back from `now`.
pub fn parse_time(flag: &str, text: &str, now: f64) -> Result<f64, String> {
    if let Ok(back) = parse_duration(text) {
        return Ok(now - back.as_secs_f64());
    }
    parse_rfc3339(text).ok_or_else(|| {
        format!(
            "{flag}: invalid time {text:?}: expected RFC 3339 (\"2026-12-03T08:00:00Z\", \
             \"2026-12-03\") or a duration back from now (\"90m\", \"1h\")"
        )
    })
}

/// Seconds since the epoch → `2026-12-03T08:00:00.250Z` (milliseconds).
pub fn format_rfc3339(at: f64) -> String {
    const MILLIS: &[FormatItem<'_>] =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    let millis = (at * 1000.0).round() as i128;
    OffsetDateTime::from_unix_timestamp_nanos(millis * 1_000_000)
        .ok()
        .and_then(|t| t.format(MILLIS).ok())
        .unwrap_or_else(|| format!("{at}"))
}

/// `--slo ttft=300ms,tpot=40ms`: what-if ceilings for every model.
pub fn parse_slo(text: &str) -> Result<Slo, String> {
    Ok(Slo {
        default: parse_ceilings(text)?,
        ..Slo::default()
    })
}

/// The ceilings of `--slo`, the same keys as the `slo:` config.
pub fn parse_ceilings(text: &str) -> Result<Ceilings, String> {
    let mut ceilings = Ceilings::default();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let bad = |reason: String| format!("--slo: invalid ceiling {item:?}: {reason}");
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| bad("expected KEY=DURATION, e.g. ttft=300ms".into()))?;
        let kind = SloKind::from_key(key).ok_or_else(|| {
            bad(format!(
                "unknown ceiling {key:?}: expected one of {}",
                SloKind::KEYS.join(", ")
            ))
        })?;
        let ceiling = match parse_duration(value) {
            Ok(d) if d.is_zero() => return Err(bad("must be greater than zero".into())),
            Ok(d) => d,
            Err(reason) => return Err(bad(reason.into())),
        };
        ceilings[kind] = Some(ceiling);
    }
    if ceilings.is_empty() {
        return Err(format!(
            "--slo: no ceiling in {text:?}: expected e.g. ttft=300ms,tpot=40ms"
        ));
    }
    Ok(ceilings)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rfc3339_times_and_their_formatting() {
        let at = parse_rfc3339("2026-12-03T08:00:00.250Z").unwrap();
        assert_eq!(at, 1_796_284_800.25);
        assert_eq!(format_rfc3339(at), "2026-12-03T08:00:00.250Z");
        assert_eq!(
            parse_rfc3339("2026-12-03T09:30:00+01:30"),
            Some(1_796_284_800.0)
        );
        assert_eq!(parse_rfc3339("2026-12-03"), Some(1_796_256_000.0));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(format_rfc3339(951_782_400.0), "2000-02-29T00:00:00.000Z");
        for bad in [
            "2026-13-01",
            "2026-02-29",
            "2026-12-03T08:00:00",
            "2026-12-03T08:00Z",
            "2026-12-03T08:00:00.Z",
            "2026-12-03T24:00:00Z",
            "yesterday",
            "",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn relative_times_count_back_from_now() {
        assert_eq!(parse_time("--since", "1h", 10_000.0), Ok(6_400.0));
        let err = parse_time("--since", "last week", 0.0).unwrap_err();
        assert!(
            err.starts_with("--since: invalid time \"last week\""),
            "{err}"
        );
    }

    #[test]
    fn slo_flag_names_the_bad_item() {
        let c = parse_ceilings("ttft=300ms, itl=1s").unwrap();
        assert_eq!(c[SloKind::Ttft], Some(Duration::from_millis(300)));
        assert_eq!(c[SloKind::Itl], Some(Duration::from_secs(1)));
        assert_eq!(c[SloKind::Tpot], None);
        let err = parse_ceilings("ttft=300ms,ttfx=2s").unwrap_err();
        assert_eq!(
            err,
            "--slo: invalid ceiling \"ttfx=2s\": unknown ceiling \"ttfx\": expected one of ttft, tpot, itl, e2e, time_to_first_answer, time_to_first_tool_call"
        );
        assert!(parse_ceilings("ttft=0s").is_err());
        assert!(parse_ceilings("ttft").is_err());
        assert!(parse_ceilings("").is_err());
    }
}
