//! serde's and libyaml's messages in the words of someone who writes YAML, not Rust: `expected usize`
//! becomes "a whole number (0 or more)", `invalid type: string "abc"` becomes `not "abc"`, an unknown
//! field becomes an unknown key with the keys that are known there. Only the wording changes: what is
//! refused, and why, is the parser's.

use super::ConfigError;

/// A deserializer's message about `path` (its dotted key, empty at the top level): the key it is about
/// (an unknown key's own, not its section's) and the error in plain words.
pub(super) fn serde_message(path: &str, message: &str) -> (String, ConfigError) {
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let mut names = backticked(rest).into_iter();
        let field = names.next().unwrap_or_default();
        // The path ends at the unknown key itself where the deserializer had read it.
        let section = match path.rsplit_once('.') {
            _ if path == field => "",
            Some((section, last)) if last == field => section,
            _ => path,
        };
        let key = match section {
            "" => field.clone(),
            section => format!("{section}.{field}"),
        };
        let known = names.collect();
        let section = section.to_owned();
        let unknown = ConfigError::UnknownKey {
            key: key.clone(),
            section,
            known,
            hint: String::new(),
        };
        return (key, unknown);
    }
    let said = match message {
        m if m.starts_with("unknown variant ") => {
            let mut names = backticked(m).into_iter();
            let found = names.next().unwrap_or_default();
            let names: Vec<String> = names.map(|n| format!("`{n}`")).collect();
            format!("must be {}, not `{found}`", one_of(&names))
        }
        m if m.starts_with("missing field ") => {
            let field = backticked(m).into_iter().next().unwrap_or_default();
            format!("`{field}` is required here")
        }
        m if m.starts_with("duplicate field ") => {
            let field = backticked(m).into_iter().next().unwrap_or_default();
            format!("`{field}` is written twice")
        }
        m => match type_mismatch(m) {
            Some((found, wanted)) => format!("must be {wanted}, not {found}"),
            None => m.to_owned(),
        },
    };
    let key = path.to_owned();
    let message = match key.as_str() {
        "" => said,
        key => format!("{key}: {said}"),
    };
    (key, ConfigError::Syntax(message))
}

/// The parser's message for a document it cannot read: the key it is about (empty: none) and the
/// message, with what usually causes it.
pub(super) fn yaml_syntax(message: &str) -> (String, String) {
    let duplicate = match message.split_once("duplicate entry with key ") {
        Some(("", name)) => Some(("", name)),
        Some((path, name)) => path.strip_suffix(": ").map(|path| (path, name)),
        None => None,
    };
    if let Some((path, name)) = duplicate {
        let name = name.trim_matches('"');
        let key = match path {
            "" => name.to_owned(),
            path => format!("{path}.{name}"),
        };
        return (
            key.clone(),
            format!("{key}: written twice (each key once per mapping)"),
        );
    }
    (String::new(), libyaml_message(message))
}

fn libyaml_message(message: &str) -> String {
    let cause = if message.contains("found character that cannot start any token")
        || message.contains("found a tab character")
    {
        " (YAML indents with spaces, never tabs)"
    } else if message.contains("mapping values are not allowed") {
        " (a `key: value` where YAML expects a plain value: is the line indented more than the key \
         above it, or is a value with `: ` in it unquoted?)"
    } else if message.contains("did not find expected key")
        || message.contains("did not find expected '-' indicator")
    {
        " (a line indented less or more than its neighbours, or an unclosed quote or bracket)"
    } else {
        ""
    };
    format!("the file is not valid YAML: {message}{cause}")
}

/// `a`, `a or b`, `one of a, b, c`.
fn one_of(names: &[String]) -> String {
    match names {
        [one] => one.clone(),
        [a, b] => format!("{a} or {b}"),
        names => format!("one of {}", names.join(", ")),
    }
}

/// The names between backticks in `text`, in order.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// `invalid type: X, expected Y` (or `invalid value:`) as (what was found, what was wanted), each in
/// plain words.
fn type_mismatch(message: &str) -> Option<(String, String)> {
    let rest = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))?;
    let (found, wanted) = rest.rsplit_once(", expected ")?;
    Some((found_words(found), wanted_words(wanted)))
}

fn found_words(found: &str) -> String {
    let quoted = |prefix: &str| {
        found
            .strip_prefix(prefix)
            .map(|v| v.trim_matches('`').to_owned())
    };
    if let Some(number) = quoted("integer ").or_else(|| quoted("floating point ")) {
        return number;
    }
    if let Some(b) = quoted("boolean ") {
        return b;
    }
    if let Some(text) = found.strip_prefix("string ") {
        return format!("the text {text}");
    }
    match found {
        "sequence" => "a list".to_owned(),
        "map" => "a mapping".to_owned(),
        "unit value" => "an empty value".to_owned(),
        other => other.to_owned(),
    }
}

fn wanted_words(wanted: &str) -> String {
    let words = match wanted {
        "usize" | "u64" => "a whole number (0 or more)",
        "u32" => "a whole number from 0 to 4294967295",
        "u16" => "a whole number from 0 to 65535",
        "u8" => "a whole number from 0 to 255",
        "isize" | "i64" | "i32" | "i16" | "i8" => "a whole number",
        "f64" | "f32" => "a number",
        "a boolean" => "true or false",
        "a string" | "a borrowed string" => "text",
        "path string" => "a path",
        "a sequence" => "a list (`[a, b]`, or one `- item` a line)",
        "a map" | "a mapping" | "option" => "a mapping (its keys indented under it)",
        w if w.starts_with("struct ") => "a mapping (its keys indented under it)",
        w => return w.to_owned(),
    };
    words.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_type_names_become_yaml_words() {
        let table = [
            (
                "invalid type: integer `-3`, expected usize",
                "max_models: must be a whole number (0 or more), not -3",
            ),
            (
                "invalid type: string \"many\", expected usize",
                "max_models: must be a whole number (0 or more), not the text \"many\"",
            ),
            (
                "invalid type: sequence, expected a string or a number",
                "max_models: must be a string or a number, not a list",
            ),
            (
                "invalid type: string \"yes please\", expected a boolean",
                "max_models: must be true or false, not the text \"yes please\"",
            ),
            (
                "invalid value: integer `99999999999`, expected u32",
                "max_models: must be a whole number from 0 to 4294967295, not 99999999999",
            ),
            (
                "invalid type: floating point `1.5`, expected usize",
                "max_models: must be a whole number (0 or more), not 1.5",
            ),
        ];
        for (serde, want) in table {
            let (key, error) = serde_message("max_models", serde);
            assert_eq!(
                (key.as_str(), error.to_string().as_str()),
                ("max_models", want)
            );
        }
    }

    #[test]
    fn an_unknown_field_is_an_unknown_key_with_the_known_ones() {
        let message = "unknown field `idle`, expected one of `model_idle`, `max_series`";
        let (key, error) = serde_message("metrics", message);
        assert_eq!(key, "metrics.idle");
        let ConfigError::UnknownKey { section, known, .. } = error else {
            panic!("an unknown key");
        };
        assert_eq!(
            (section.as_str(), known),
            (
                "metrics",
                vec!["model_idle".to_owned(), "max_series".into()]
            )
        );
    }
}
