//! Reading record files: plain or gzipped (told apart by the gzip magic bytes, not the name), `-` for
//! stdin, one [`RequestRecord`] a line. A line that is not a record is counted and skipped, never the
//! end of the report; a record of another schema version is counted apart. A line longer than
//! [`MAX_LINE`] is malformed: it is skipped without being held, so memory stays bounded.

use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal, Read, Write};

use serde::{Deserialize, Serialize};

use crate::record::request_record::{RequestRecord, RECORD_VERSION};

/// No record comes near this: the most gaps a record may list (`request_log.max_gaps`, at most 2^20)
/// take about 22 MiB. A longer line is skipped unread.
pub const MAX_LINE: usize = 32 << 20;
/// Progress goes to stderr every this many lines.
const PROGRESS_EVERY: u64 = 1_000_000;

/// What was read, and what was skipped with where it was first seen (`FILE:LINE`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct InputStats {
    pub files: u64,
    pub lines: u64,
    pub records: u64,
    pub malformed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_malformed: Option<String>,
    pub other_version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_other_version: Option<String>,
    /// Files whose reading failed part way (a truncated gzip stream): what was read counts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_errors: Vec<String>,
}

impl InputStats {
    /// The warnings to print on stderr, one a line.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(at) = &self.first_malformed {
            out.push(format!(
                "{} line(s) skipped: not a request record (first at {at})",
                self.malformed
            ));
        }
        if let Some(at) = &self.first_other_version {
            out.push(format!(
                "{} record(s) skipped: schema version other than {RECORD_VERSION} (first at {at})",
                self.other_version
            ));
        }
        out.extend(self.read_errors.iter().cloned());
        out
    }

    pub fn skipped_anything(&self) -> bool {
        self.malformed > 0 || self.other_version > 0 || !self.read_errors.is_empty()
    }
}

#[derive(Deserialize)]
struct Versioned {
    v: u32,
    /// `"session"` on a WebSocket session's record (docs/records.md), which the report passes over:
    /// the responses inside it have records of their own.
    #[serde(default)]
    record: Option<String>,
}

/// Where progress lines go: stderr when it is a terminal or `--progress` asked for it.
pub fn progress_sink(asked: bool) -> Option<Box<dyn Write>> {
    let stderr = io::stderr();
    (asked || stderr.is_terminal()).then(|| Box::new(stderr) as Box<dyn Write>)
}

/// Reads every record of `names` (`-` is stdin) into `each`. Fails only when a file cannot be opened.
pub fn read_all(
    names: &[String], mut progress: Option<&mut dyn Write>, mut each: impl FnMut(RequestRecord),
) -> Result<InputStats, String> {
    let mut stats = InputStats::default();
    for name in names {
        let reader: Box<dyn Read> = if name == "-" {
            Box::new(io::stdin().lock())
        } else {
            Box::new(File::open(name).map_err(|e| format!("{name}: {e}"))?)
        };
        let mut reader = BufReader::with_capacity(64 * 1024, reader);
        let gzipped = match reader.fill_buf() {
            Ok(head) => head.starts_with(&[0x1f, 0x8b]),
            Err(e) => return Err(format!("{name}: {e}")),
        };
        let mut reader: Box<dyn BufRead> = if gzipped {
            let inflated = flate2::bufread::MultiGzDecoder::new(reader);
            Box::new(BufReader::with_capacity(64 * 1024, inflated))
        } else {
            Box::new(reader)
        };
        stats.files += 1;
        read_one(name, &mut reader, &mut stats, &mut progress, &mut each);
    }
    Ok(stats)
}

fn read_one(
    name: &str, reader: &mut dyn BufRead, stats: &mut InputStats,
    progress: &mut Option<&mut dyn Write>, each: &mut impl FnMut(RequestRecord),
) {
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        let fits = match next_line(reader, &mut line) {
            Ok(Some(fits)) => fits,
            Ok(None) => return,
            Err(e) => {
                let at = number + 1;
                stats
                    .read_errors
                    .push(format!("{name}: reading stopped at line {at}: {e}"));
                return;
            }
        };
        number += 1;
        stats.lines += 1;
        if stats.lines % PROGRESS_EVERY == 0 {
            if let Some(out) = progress.as_mut() {
                let _ = writeln!(
                    out,
                    "tokentap report: {} lines read, {} records ({name})",
                    stats.lines, stats.records
                );
            }
        }
        let text = line.trim_ascii();
        if fits && text.is_empty() {
            continue;
        }
        let at = || format!("{name}:{number}");
        let parsed = fits.then(|| serde_json::from_slice::<RequestRecord>(text));
        match parsed {
            Some(Ok(record)) if record.v == RECORD_VERSION => {
                stats.records += 1;
                each(record);
            }
            Some(Ok(_)) => other_version(stats, at()),
            Some(Err(_)) => match serde_json::from_slice::<Versioned>(text) {
                Ok(versioned) if versioned.record.as_deref() == Some("session") => {}
                Ok(versioned) if versioned.v != RECORD_VERSION => other_version(stats, at()),
                _ => malformed(stats, at()),
            },
            None => malformed(stats, at()),
        }
    }
}

fn malformed(stats: &mut InputStats, at: String) {
    stats.malformed += 1;
    stats.first_malformed.get_or_insert(at);
}

fn other_version(stats: &mut InputStats, at: String) {
    stats.other_version += 1;
    stats.first_other_version.get_or_insert(at);
}

/// The next line into `line` (newline included): `Some(true)`, or `Some(false)` when it was longer
/// than [`MAX_LINE`] (then `line` holds nothing of it); `None` at the end of the input.
fn next_line(reader: &mut dyn BufRead, line: &mut Vec<u8>) -> io::Result<Option<bool>> {
    line.clear();
    let (mut fits, mut any) = (true, false);
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(any.then_some(fits));
        }
        any = true;
        let (take, done) = match memchr::memchr(b'\n', buf) {
            Some(at) => (at + 1, true),
            None => (buf.len(), false),
        };
        if fits && line.len() + take <= MAX_LINE {
            line.extend_from_slice(&buf[..take]);
        } else {
            fits = false;
            line.clear();
        }
        reader.consume(take);
        if done {
            return Ok(Some(fits));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<Option<Vec<u8>>> {
        let mut reader = BufReader::with_capacity(7, input);
        let mut line = Vec::new();
        let mut out = Vec::new();
        while let Some(fits) = next_line(&mut reader, &mut line).unwrap() {
            out.push(fits.then(|| line.clone()));
        }
        out
    }

    #[test]
    fn lines_are_split_across_buffer_refills_and_the_last_needs_no_newline() {
        let got = lines(b"abcdefghijkl\n\nxyz");
        let want = [&b"abcdefghijkl\n"[..], b"\n", b"xyz"];
        let want: Vec<_> = want.iter().map(|l| Some(l.to_vec())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn an_overlong_line_is_dropped_without_being_held() {
        let mut input = vec![b'x'; MAX_LINE + 10];
        input.extend_from_slice(b"\nok\n");
        assert_eq!(lines(&input), vec![None, Some(b"ok\n".to_vec())]);
    }
}
