//! The path a request goes upstream with. The upstream may have a path prefix (`http://h/openai/`), and a
//! request must never reach beyond it: dot segments are removed as RFC 3986 §5.2.4 says, percent-encoded
//! dots (`%2e%2e`, `.%2E`) counting as dots, since the upstream's router may decode them. What cannot be
//! made safe by removing dots is refused with `400`, as nginx does before `proxy_pass`: a `..` that would
//! climb above the root, a backslash (`\` or `%5C`, a separator to some servers), a segment whose
//! encoded slashes (`%2F`) hide a dot segment (`..%2Fadmin`), and the asterisk form (`OPTIONS *`), which
//! has no meaning once a prefix is put before it. Only the path of an absolute-form target
//! (`GET http://other/x`) is used: the upstream is always the configured one. Every other byte of the
//! path, and the whole query, goes on as it came.

use http::Uri;

/// Why a request target cannot be forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetError {
    /// `*`, the asterisk form of `OPTIONS`.
    Asterisk,
    /// Neither `*` nor a path starting with `/` (the authority form of `CONNECT`).
    NotAPath,
    /// A `..` segment with nothing left to remove.
    AboveRoot,
    /// `\` or `%5C`.
    Backslash,
    /// A segment that decodes, `%2F` as `/`, into a `.` or `..` segment.
    EncodedSlashDots,
}

impl TargetError {
    pub fn reason(self) -> &'static str {
        match self {
            TargetError::Asterisk => "the asterisk form (*) cannot be forwarded",
            TargetError::NotAPath => "the request target is not a path",
            TargetError::AboveRoot => "the path climbs above the root with '..'",
            TargetError::Backslash => "the path contains a backslash",
            TargetError::EncodedSlashDots => "the path hides a dot segment behind an encoded slash",
        }
    }
}

/// A request target made safe to put behind the upstream's prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    path_and_query: String,
    path_len: usize,
}

impl Target {
    /// Starts with `/`, without dot segments.
    pub fn path(&self) -> &str {
        &self.path_and_query[..self.path_len]
    }

    /// The path, then `?` and the query as it came, when there was one.
    pub fn path_and_query(&self) -> &str {
        &self.path_and_query
    }
}

/// The client's request target as the path (and query) to forward, or why it cannot be forwarded.
pub fn resolve(uri: &Uri) -> Result<Target, TargetError> {
    let path = uri.path();
    let path = match path {
        "*" => return Err(TargetError::Asterisk),
        "" => "/",
        _ if !path.starts_with('/') => return Err(TargetError::NotAPath),
        _ => path,
    };
    if path.contains('\\') || contains_escape(path, b"5c") {
        return Err(TargetError::Backslash);
    }
    let mut kept = String::with_capacity(path.len() + uri.query().map_or(0, |q| q.len() + 1));
    if path.contains('.') || contains_escape(path, b"2e") {
        remove_dot_segments(path, &mut kept)?;
    } else {
        kept.push_str(path);
    }
    let path_len = kept.len();
    if let Some(query) = uri.query() {
        kept.push('?');
        kept.push_str(query);
    }
    Ok(Target {
        path_and_query: kept,
        path_len,
    })
}

/// RFC 3986 §5.2.4 on an absolute path, refusing instead of stopping at the root.
fn remove_dot_segments(path: &str, out: &mut String) -> Result<(), TargetError> {
    let mut kept: Vec<&str> = Vec::new();
    let mut segments = path[1..].split('/').peekable();
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        match dots(segment) {
            Some(Dots::One) => {}
            Some(Dots::Two) => {
                if kept.pop().is_none() {
                    return Err(TargetError::AboveRoot);
                }
            }
            None => {
                if contains_escape(segment, b"2f")
                    && segment
                        .split("%2F")
                        .flat_map(|part| part.split("%2f"))
                        .any(|part| dots(part).is_some())
                {
                    return Err(TargetError::EncodedSlashDots);
                }
                kept.push(segment);
                continue;
            }
        }
        if last {
            // `/a/b/..` is `/a/`: the directory the dots named.
            kept.push("");
        }
    }
    for segment in kept {
        out.push('/');
        out.push_str(segment);
    }
    Ok(())
}

enum Dots {
    One,
    Two,
}

/// Whether `segment` is `.` or `..`, either dot possibly written `%2e` or `%2E`.
fn dots(segment: &str) -> Option<Dots> {
    let mut rest = segment.as_bytes();
    let mut n = 0;
    while !rest.is_empty() {
        rest = if rest[0] == b'.' {
            &rest[1..]
        } else if rest.len() >= 3 && rest[0] == b'%' && rest[1..3].eq_ignore_ascii_case(b"2e") {
            &rest[3..]
        } else {
            return None;
        };
        n += 1;
    }
    match n {
        1 => Some(Dots::One),
        2 => Some(Dots::Two),
        _ => None,
    }
}

/// Whether `%` followed by the two hex digits `hex` (lowercase) occurs in `s`, in either case.
fn contains_escape(s: &str, hex: &[u8; 2]) -> bool {
    s.as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1..].eq_ignore_ascii_case(hex))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(target: &str) -> Result<String, TargetError> {
        let uri: Uri = target.parse().map_err(|_| TargetError::NotAPath)?;
        resolve(&uri).map(|t| t.path_and_query().to_owned())
    }

    #[test]
    fn dot_segments_are_removed_and_the_query_kept_byte_for_byte() {
        let cases = [
            ("/v1/chat/completions", "/v1/chat/completions"),
            ("/v1/./chat/completions", "/v1/chat/completions"),
            ("/v1/x/../chat/completions", "/v1/chat/completions"),
            ("/v1/%2e/chat/%2E%2e/chat", "/v1/chat"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/a/..", "/"),
            ("/.", "/"),
            ("/", "/"),
            ("/a//../b", "/a/b"),
            ("//x", "//x"),
            ("/a.b/..c/...", "/a.b/..c/..."),
            ("/a%2eb/%2e%2e%2e", "/a%2eb/%2e%2e%2e"),
            ("/models/org%2Fname", "/models/org%2Fname"),
            ("/v1/./x?q=/../%2e%2e&y=%5C\\", "/v1/x?q=/../%2e%2e&y=%5C\\"),
            ("/v1?", "/v1?"),
            ("http://other.example/v1/./x?a=1", "/v1/x?a=1"),
            ("http://other.example?a=1", "/?a=1"),
        ];
        for (target, want) in cases {
            assert_eq!(resolved(target).as_deref(), Ok(want), "{target}");
        }
    }

    #[test]
    fn targets_that_would_leave_the_prefix_are_refused() {
        let cases = [
            ("/../admin/secret", TargetError::AboveRoot),
            ("/%2e%2e/admin", TargetError::AboveRoot),
            ("/.%2E/admin", TargetError::AboveRoot),
            ("/%2E./admin", TargetError::AboveRoot),
            ("/a/../../x", TargetError::AboveRoot),
            ("/a/./../..", TargetError::AboveRoot),
            ("/..", TargetError::AboveRoot),
            ("/a\\..\\..\\x", TargetError::Backslash),
            ("/a%5c..%5Cx", TargetError::Backslash),
            ("/..%2Fadmin", TargetError::EncodedSlashDots),
            (
                "/v1/x%2f%2e%2e%2f%2e%2e%2fadmin",
                TargetError::EncodedSlashDots,
            ),
            ("/a%2F.%2Fb", TargetError::EncodedSlashDots),
            ("*", TargetError::Asterisk),
        ];
        for (target, want) in cases {
            assert_eq!(resolved(target), Err(want), "{target}");
        }
    }

    #[test]
    fn the_path_is_the_part_before_the_query() {
        let uri: Uri = "/v1/./models?x=1".parse().unwrap_or_default();
        let target = resolve(&uri);
        assert_eq!(target.as_ref().map(Target::path), Ok("/v1/models"));
    }
}
