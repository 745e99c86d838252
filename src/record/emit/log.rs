//! The `request finished` line of the log, one per finished request at `info`: who and what, the
//! outcome, every figure the request carries (from the figure table, `{name}_ms`), the tokens, its
//! place in its conversation and the SLO verdict (docs/forwarding.md, "The log").
//!
//! The line is written as `key=value` pairs, exactly as `tracing`'s default formatter writes fields:
//! every value a client chooses (the id, method, path, model) is a string written quoted and escaped
//! (`Debug`), so none can add a key to the line or break it (control characters, U+2028/U+2029);
//! numbers and tokentap's own words plain, a figure in milliseconds to the microsecond, a rate in
//! tokens/s to the hundredth.

use std::fmt::{self, Write as _};

use super::{Finished, Sink};
use crate::logging::fields::Millis;
use crate::record::figure::{Figure, Unit};
use crate::record::tokens::TokenSource;

/// The log line of each finished request.
pub struct LogLine;

impl Sink for LogLine {
    fn emit(&self, finished: &Finished<'_>) {
        // `fields` is `logging::fields::PREFORMATTED`: written as it is (tests/log_line.rs reads the line).
        tracing::info!(target: "tokentap::request", fields = %Line(finished), "request finished");
    }
}

/// ` key="value"` for a value that needs no escaping, as `Debug` would write it.
fn plain(f: &mut fmt::Formatter<'_>, key: &str, value: &str) -> fmt::Result {
    f.write_str(key)?;
    f.write_char('"')?;
    f.write_str(value)?;
    f.write_char('"')
}

/// ` key="value"` for a value a client chose, escaped as `Debug` escapes it; one that is all printable
/// ASCII without a quote or backslash (nearly every path and model name) is written as it is, which
/// `Debug` would write too, without its character-by-character escaping.
fn quoted(f: &mut fmt::Formatter<'_>, key: &str, value: &str) -> fmt::Result {
    if value
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
    {
        return plain(f, key, value);
    }
    f.write_str(key)?;
    write!(f, "{value:?}")
}

/// A finished request's line.
pub(super) struct Line<'a, 'b>(pub(super) &'a Finished<'b>);

impl fmt::Display for Line<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Finished {
            who,
            api,
            series,
            record,
            turn,
            ..
        } = self.0;
        // tokentap's own id, a method (an HTTP token: no quote, backslash or control character), the api
        // and the outcome need no escaping; what a client chose (its id, the path, the model) does.
        plain(f, "id=", who.id)?;
        if let Some(client) = who.client_id {
            quoted(f, " client_request_id=", client)?;
        }
        plain(f, " method=", who.method)?;
        quoted(f, " path=", who.path)?;
        quoted(f, " model=", &series.model)?;
        plain(f, " api=", api.as_str())?;
        let status = record
            .status
            .as_ref()
            .map_or("none", http::StatusCode::as_str);
        f.write_str(" status=")?;
        f.write_str(status)?;
        plain(f, " outcome=", record.outcome.as_str())?;
        for figure in Figure::ALL {
            let Some(value) = record.carried(figure) else {
                continue;
            };
            // `row.log_field()`, written without building it.
            let row = figure.row();
            f.write_char(' ')?;
            f.write_str(row.name)?;
            match row.unit {
                Unit::Seconds => {
                    f.write_str("_ms=")?;
                    fmt::Display::fmt(&Millis::of_secs(value), f)?;
                }
                // A rate to the hundredth, as the report prints it (the record keeps every digit).
                Unit::TokensPerSecond => write!(f, "={value:.2}")?,
            }
        }
        if let Some(n) = record.output_tokens {
            f.write_str(" output_tokens=")?;
            fmt::Display::fmt(&n, f)?;
        }
        if let Some(source) = record.token_source.map(TokenSource::as_str) {
            plain(f, " token_source=", source)?;
        }
        if let Some(n) = record.input_tokens {
            f.write_str(" input_tokens=")?;
            fmt::Display::fmt(&n, f)?;
        }
        if let Some(turn) = turn {
            quoted(f, " conversation=", &turn.conversation)?;
            write!(f, " turn={}", turn.turn)?;
            if let Some(think) = turn.think {
                write!(f, " think_ms={}", Millis::of(think))?;
            }
        }
        f.write_str(" slo=")?;
        fmt::Display::fmt(&record.slo(), f)?;
        if who.captured {
            f.write_str(" captured=true")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Quoted(&'static str);

    impl fmt::Display for Quoted {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            quoted(f, "k=", self.0)
        }
    }

    #[test]
    fn a_value_a_client_chose_is_written_as_debug_writes_it() {
        let values = [
            "/v1/chat/completions",
            "meta-llama/Llama-3.1-8B-Instruct",
            "",
            "it's ~ fine",
            "a \"quoted\" one",
            "back\\slash",
            "new\nline x=1",
            "tab\there",
            "\u{7f}",
            "caf\u{e9}",
            "line\u{2028}separator",
        ];
        for value in values {
            assert_eq!(
                Quoted(value).to_string(),
                format!("k={value:?}"),
                "{value:?}"
            );
        }
    }
}
