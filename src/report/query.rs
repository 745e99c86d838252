//! What the user asked of a report, parsed from the command line: the time window (`--since`,
//! `--until`: RFC 3339, or a duration back from now such as `1h`), the grouping (`--by`) and the
//! what-if ceilings (`--slo ttft=300ms,tpot=40ms`). Times are seconds since the Unix epoch, UTC.

use std::time::Duration;

use crate::config::{parse_duration, Ceilings, Slo, SloKind};
use crate::record::request_record::RequestRecord;

/// `--by`: which label splits the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    Model,
    Tenant,
    Api,
}

impl By {
    pub fn parse(text: &str) -> Result<By, String> {
        match text {
            "model" => Ok(By::Model),
            "tenant" => Ok(By::Tenant),
            "api" => Ok(By::Api),
            _ => Err(format!(
                "--by: invalid grouping {text:?}: expected model, tenant or api"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            By::Model => "model",
            By::Tenant => "tenant",
            By::Api => "api",
        }
    }

    /// The record's group; a record without a tenant is in `-`.
    pub fn key(self, record: &RequestRecord) -> &str {
        match self {
            By::Model => &record.model,
            By::Tenant => record.tenant.as_deref().unwrap_or("-"),
            By::Api => &record.api,
        }
    }
}

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

/// `YYYY-MM-DD[(T| )hh:mm:ss[.frac](Z|±hh:mm)]` → seconds since the epoch.
pub fn parse_rfc3339(text: &str) -> Option<f64> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let digits = b.get(from..from + len)?;
        digits
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| std::str::from_utf8(digits).ok()?.parse().ok())?
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    if !(1..=12).contains(&month) || !(1..=days_in_month(year, month)).contains(&day) {
        return None;
    }
    let midnight = days_from_civil(year, month, day) as f64 * 86_400.0;
    if b.len() == 10 {
        return Some(midnight);
    }
    if !matches!(b[10], b'T' | b't' | b' ') || b.len() < 20 || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut at = 19;
    let mut fraction = 0.0;
    if b[at] == b'.' {
        let digits = b[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        fraction = text.get(at..at + 1 + digits)?.parse::<f64>().ok()?;
        at += 1 + digits;
    }
    let offset = match b.get(at..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (num(at + 1, 2)?, num(at + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let minutes = h * 60 + m;
            if *sign == b'+' {
                minutes
            } else {
                -minutes
            }
        }
        _ => return None,
    };
    let seconds = hour * 3600 + minute * 60 + second - offset * 60;
    Some(midnight + seconds as f64 + fraction)
}

/// Seconds since the epoch → `2026-12-03T08:00:00.250Z` (milliseconds).
pub fn format_rfc3339(at: f64) -> String {
    let millis = (at * 1000.0).round() as i64;
    let (days, ms_of_day) = (millis.div_euclid(86_400_000), millis.rem_euclid(86_400_000));
    let (y, m, d) = civil_from_days(days);
    let (s, ms) = (ms_of_day / 1000, ms_of_day % 1000);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
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
    let keys: Vec<&str> = SloKind::ALL.iter().map(|k| k.as_str()).collect();
    let mut ceilings = Ceilings::default();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let bad = |reason: String| format!("--slo: invalid ceiling {item:?}: {reason}");
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| bad("expected KEY=DURATION, e.g. ttft=300ms".into()))?;
        let kind = SloKind::ALL
            .into_iter()
            .find(|k| k.as_str() == key)
            .ok_or_else(|| {
                bad(format!(
                    "unknown ceiling {key:?}: expected one of {}",
                    keys.join(", ")
                ))
            })?;
        let ceiling = match parse_duration(value) {
            Ok(d) if d.is_zero() => return Err(bad("must be greater than zero".into())),
            Ok(d) => d,
            Err(reason) => return Err(bad(reason.into())),
        };
        set(&mut ceilings, kind, ceiling);
    }
    if SloKind::ALL.iter().all(|&k| ceilings.get(k).is_none()) {
        return Err(format!(
            "--slo: no ceiling in {text:?}: expected e.g. ttft=300ms,tpot=40ms"
        ));
    }
    Ok(ceilings)
}

fn set(ceilings: &mut Ceilings, kind: SloKind, ceiling: Duration) {
    let slot = match kind {
        SloKind::Ttft => &mut ceilings.ttft,
        SloKind::Tpot => &mut ceilings.tpot,
        SloKind::Itl => &mut ceilings.itl,
        SloKind::E2e => &mut ceilings.e2e,
        SloKind::TimeToFirstAnswer => &mut ceilings.time_to_first_answer,
    };
    *slot = Some(ceiling);
}

#[cfg(test)]
mod tests {
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
        assert_eq!(c.ttft, Some(Duration::from_millis(300)));
        assert_eq!(c.itl, Some(Duration::from_secs(1)));
        assert_eq!(c.tpot, None);
        let err = parse_ceilings("ttft=300ms,ttfx=2s").unwrap_err();
        assert_eq!(
            err,
            "--slo: invalid ceiling \"ttfx=2s\": unknown ceiling \"ttfx\": expected one of ttft, tpot, itl, e2e, time_to_first_answer"
        );
        assert!(parse_ceilings("ttft=0s").is_err());
        assert!(parse_ceilings("ttft").is_err());
        assert!(parse_ceilings("").is_err());
    }
}
