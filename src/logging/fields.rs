//! How a log line's fields are written: byte for byte what `tracing_subscriber`'s default field
//! formatter writes (users parse the `request finished` line), for less work. Its default writes each
//! field's name and `=` through two `nu_ansi_term` paintings even when colour is off, nested formatting
//! calls that cost more than the value itself; [`Fields`] writes a plain field's name and `=` straight to
//! the line and hands everything else (the message, errors, colour, raw identifiers) to the default
//! formatter itself, field by field. One field is its own: [`PREFORMATTED`], the request line's
//! `key=value` pairs, written as they are. [`Millis`] writes a millisecond figure as the `f64`'s `Debug` would,
//! from integers. [`Timestamp`] writes the line's time as the default timer does, with the date and the
//! time of day formatted once a second.

use std::cell::RefCell;
use std::fmt;
use std::time::UNIX_EPOCH;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};

/// The name of a field whose value is already `key=value` pairs, written to the line as it is (after
/// the separating space): the request line's figures (`record/emit/log.rs`), whose keys follow the
/// figure table. The writer of such a value escapes what it writes; the default formatter would
/// escape the message again, character by character, at more cost than writing the line.
pub const PREFORMATTED: &str = "fields";

/// The field formatter of the process log: the default one's output, cheaper (see the module).
#[derive(Debug, Default)]
pub struct Fields;

impl<'a> MakeVisitor<Writer<'a>> for Fields {
    type Visitor = FieldsVisitor<'a>;

    fn make_visitor(&self, writer: Writer<'a>) -> FieldsVisitor<'a> {
        FieldsVisitor {
            writer,
            is_empty: true,
            result: Ok(()),
        }
    }
}

pub struct FieldsVisitor<'a> {
    writer: Writer<'a>,
    /// Nothing written yet: the next field needs no separating space.
    is_empty: bool,
    result: fmt::Result,
}

impl FieldsVisitor<'_> {
    /// A field written by the default formatter (the message, an error, colour, `r#` names).
    fn by_default(&mut self, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        // It writes the separating space itself unless told the line has no field yet.
        let mut default = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut default);
        self.is_empty = false;
        self.result = default.finish();
    }

    /// Whether `field` is written as ` name=value` with no styling: what the default writes for any
    /// field but the message, without colour, for a name that is not a raw identifier.
    fn plain(&self, field: &Field) -> bool {
        let name = field.name();
        !self.writer.has_ansi_escapes()
            && name != "message"
            && !name.starts_with("r#")
            && !name.starts_with("log.")
    }
}

impl Visit for FieldsVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        if self.plain(field) {
            self.record_debug(field, &value);
        } else {
            self.by_default(|v| v.record_str(field, value));
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if self.result.is_err() {
            return;
        }
        self.by_default(|v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        // A pre-formatted field is written as it is: its value without its name.
        let named = field.name() != PREFORMATTED;
        if named && !self.plain(field) {
            self.by_default(|v| v.record_debug(field, value));
            return;
        }
        let writer = &mut self.writer;
        let mut result = if self.is_empty {
            Ok(())
        } else {
            writer.write_char(' ')
        };
        self.is_empty = false;
        if named {
            result = result
                .and_then(|()| writer.write_str(field.name()))
                .and_then(|()| writer.write_char('='));
        }
        self.result = result.and_then(|()| write!(writer, "{value:?}"));
    }
}

impl VisitOutput<fmt::Result> for FieldsVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for FieldsVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
    }
}

/// A duration in milliseconds rounded to the microsecond, written as `Debug` writes the `f64`
/// `(µs / 1e3)`: `12.345`, `12.5`, `0.0`. Integers do it for a tenth of the cost; from 10¹² ms up
/// (31 years) the `f64` itself is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Millis {
    micros: u64,
}

/// From here on an `f64` of milliseconds may have a shorter `Debug` form than its three decimals.
const EXACT_BELOW_MICROS: u64 = 1_000_000_000_000_000;

impl Millis {
    /// `d` rounded to the microsecond, as `(d.as_secs_f64() * 1e6).round()` rounds it.
    pub fn of(d: std::time::Duration) -> Self {
        Millis {
            micros: (d.as_secs_f64() * 1e6).round() as u64,
        }
    }

    /// `secs` seconds rounded to the microsecond, as [`Millis::of`] rounds a duration of as many.
    pub fn of_secs(secs: f64) -> Self {
        Millis {
            micros: (secs * 1e6).round() as u64,
        }
    }

    /// The same figure as an `f64` of milliseconds.
    pub fn as_f64(self) -> f64 {
        self.micros as f64 / 1e3
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.micros >= EXACT_BELOW_MICROS {
            return write!(f, "{:?}", self.as_f64());
        }
        let (whole, frac) = (self.micros / 1000, self.micros % 1000);
        // The digits written back to front into one buffer, then written at once (a `write!` with a
        // width costs more than the figure): `Debug` drops trailing zeros but keeps one digit after
        // the point. `whole` is below 10^12 here, so 12 digits, the point and 3 more fit.
        let mut buf = [0u8; 16];
        let mut at = buf.len();
        let mut push = |digit: u64| {
            at -= 1;
            buf[at] = b'0' + (digit % 10) as u8;
        };
        let kept = if frac % 100 == 0 {
            1
        } else if frac % 10 == 0 {
            2
        } else {
            3
        };
        let mut rest = frac / 10u64.pow(3 - kept);
        for _ in 0..kept {
            push(rest);
            rest /= 10;
        }
        at -= 1;
        buf[at] = b'.';
        let mut whole = whole;
        loop {
            at -= 1;
            buf[at] = b'0' + (whole % 10) as u8;
            whole /= 10;
            if whole == 0 {
                break;
            }
        }
        f.write_str(std::str::from_utf8(&buf[at..]).map_err(|_| fmt::Error)?)
    }
}

/// The log line's time as `tracing_subscriber`'s `SystemTime` timer writes it
/// (`2026-12-03T12:46:12.123456Z`, UTC), for a fraction of its work: the part up to the second is
/// formatted once a second (per thread) and only the microseconds each line.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timestamp;

thread_local! {
    /// The second last formatted on this thread, and its `YYYY-MM-DDTHH:MM:SS.`.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// `YYYY-MM-DDTHH:MM:SS.` of `secs` after the epoch; `None` past the year 9999, which the default timer
/// writes in another form.
fn up_to_the_second(secs: u64) -> Option<String> {
    let at = time::OffsetDateTime::from_unix_timestamp(i64::try_from(secs).ok()?).ok()?;
    if at.year() > 9999 {
        return None;
    }
    Some(format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    ))
}

impl FormatTime for Timestamp {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let Ok(since) = std::time::SystemTime::now().duration_since(UNIX_EPOCH) else {
            return SystemTime.format_time(w);
        };
        let secs = since.as_secs();
        let written = SECOND.try_with(|cell| {
            let mut cached = cell.try_borrow_mut().ok()?;
            if cached.0 != secs {
                *cached = (secs, up_to_the_second(secs)?);
            }
            let micros = since.subsec_micros();
            Some(
                w.write_str(&cached.1)
                    .and_then(|()| write!(w, "{micros:06}Z")),
            )
        });
        match written {
            Ok(Some(result)) => result,
            // Past 9999, or this thread's cache is gone (the thread is ending).
            _ => SystemTime.format_time(w),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::Duration;

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[test]
    fn millis_are_written_as_the_f64s_debug_writes_them() {
        let mut micros: Vec<u64> = vec![0, 1, 9, 10, 99, 100, 999, 1000, 1001, 1010, 1100, 1500];
        micros.extend([12_345, 50_000, 50_015, 999_999, 1_000_000, 86_400_000_000]);
        micros.extend([EXACT_BELOW_MICROS - 1, EXACT_BELOW_MICROS, u64::MAX / 4096]);
        // A spread of every magnitude, with every kind of fraction.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            micros.push(x >> (x % 60));
        }
        for n in micros {
            let millis = Millis { micros: n };
            assert_eq!(
                millis.to_string(),
                format!("{:?}", millis.as_f64()),
                "{n} µs"
            );
        }
        for nanos in [0, 1, 499, 500, 1_499, 1_500, 123_456_789, 3_000_000_000_001] {
            let d = Duration::from_nanos(nanos);
            let before = (d.as_secs_f64() * 1e6).round() / 1e3;
            assert_eq!(Millis::of(d).to_string(), format!("{before:?}"), "{d:?}");
        }
    }

    #[test]
    fn the_time_up_to_the_second_is_the_calendars() {
        // Each as `date -u -d @SECS +%FT%T` writes it.
        let cases = [
            (0, "1970-01-01T00:00:00."),
            (951_782_400, "2000-02-29T00:00:00."),
            (1_795_700_000, "2026-11-26T13:33:20."),
            (4_102_444_799, "2099-12-31T23:59:59."),
            (253_402_300_799, "9999-12-31T23:59:59."),
        ];
        for (secs, expected) in cases {
            assert_eq!(up_to_the_second(secs).as_deref(), Some(expected), "{secs}");
        }
        assert_eq!(up_to_the_second(253_402_300_800), None, "the year 10000");
    }

    #[test]
    fn the_timestamp_is_the_default_timers() {
        let write = |timer: &dyn FormatTime| {
            let mut line = String::new();
            let _ = timer.format_time(&mut Writer::new(&mut line));
            line
        };
        // Both read the clock: retried until they read it within one second.
        for _ in 0..100 {
            let (ours, default) = (write(&Timestamp), write(&SystemTime));
            assert_eq!(ours.len(), default.len(), "{ours} {default}");
            assert!(ours.ends_with('Z') && ours.as_bytes()[19] == b'.', "{ours}");
            if ours[..20] == default[..20] {
                return;
            }
        }
        panic!("never within one second");
    }

    /// What a subscriber wrote, for the test to read.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let mut bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            bytes.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    fn events() {
        let error = io::Error::other("the disk is full");
        let r#type = "raw";
        tracing::info!(
            id = "3f2a9c1e-1b",
            method = "POST",
            path = "/v1/chat/a\"b=c",
            model = "m\u{1b}[31m x status=500 \u{2028}",
            api = "chat",
            status = %"200",
            outcome = "ok",
            ttft_ms = Some(tracing::field::display(Millis { micros: 12_345 })),
            tpot_ms = None::<f64>,
            e2e_ms = 50.5,
            output_tokens = Some(8u64),
            input_tokens = -3i64,
            streaming = true,
            quoted = "a \"b\" \\ \n",
            r#type,
            "request finished"
        );
        tracing::warn!(%error, "writing a record failed");
        tracing::warn!(
            error = &error as &(dyn std::error::Error + 'static),
            limit = 3u64
        );
        tracing::info!("only a message with \u{1b}[2J an escape");
        tracing::info!(first = 1u64, "message {} after a field", 2);
        tracing::info!(empty = "");
    }

    fn written(ansi: bool, ours: bool) -> String {
        let out = Captured::default();
        let builder = tracing_subscriber::fmt()
            .with_writer(out.clone())
            .with_ansi(ansi)
            .without_time();
        let _guard = if ours {
            tracing::subscriber::set_default(builder.fmt_fields(Fields).finish())
        } else {
            tracing::subscriber::set_default(builder.finish())
        };
        tracing::info_span!("conn", peer = "127.0.0.1:1", n = 2u64).in_scope(events);
        events();
        let bytes = out.0.lock().unwrap_or_else(PoisonError::into_inner).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn lines_are_byte_for_byte_the_default_formatters_with_colour_and_without() {
        for ansi in [false, true] {
            let default = written(ansi, false);
            assert!(default.contains("request finished "), "{default}");
            assert!(
                ansi || default.contains(" ttft_ms=12.345 e2e_ms=50.5 "),
                "{default}"
            );
            assert_eq!(written(ansi, true), default, "ansi: {ansi}");
        }
    }
}
