//! Text from outside (model names, labels, what a Prometheus said) made safe to print on a terminal,
//! in a table or in a line: see [`printable`].

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every character that would act on a terminal or break a line escaped as `\u{…}`:
/// control characters (C0, DEL, C1: escape sequences begin with ESC or CSI), the line and paragraph
/// separators U+2028 and U+2029, and the bidirectional controls that reorder what is shown.
pub fn printable(text: &str) -> Cow<'_, str> {
    let acts = |c: char| {
        c.is_control()
            || matches!(
                c,
                '\u{2028}' | '\u{2029}' | '\u{061c}' | '\u{200e}' | '\u{200f}'
            )
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    };
    if !text.chars().any(acts) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if acts(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}
