//! HTTP/1.1 chunked coding, decoded in one place: the scripted server reads a request body with
//! it as bytes arrive, and raw clients in the tests check the proxy's answer with it.

/// What a buffer holds of a chunked body, read from its start.
#[derive(Debug, PartialEq, Eq)]
pub enum Chunked {
    /// A well-formed prefix: more bytes are needed.
    Incomplete,
    /// A chunk-size line that is not hexadecimal.
    Malformed,
    /// The whole body: its data, its trailer lines (each ending in CRLF), and how many bytes it took.
    Done {
        body: Vec<u8>,
        trailers: String,
        used: usize,
    },
}

/// Decodes the chunked body at the start of `buf`.
pub fn decode(buf: &[u8]) -> Chunked {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let Some(line) = line_at(buf, at) else {
            return Chunked::Incomplete;
        };
        let text = String::from_utf8_lossy(&buf[at..line]);
        let size = text.split(';').next().unwrap_or_default().trim();
        let Ok(size) = usize::from_str_radix(size, 16) else {
            return Chunked::Malformed;
        };
        at = line + 2;
        if size == 0 {
            break;
        }
        let Some(data) = buf.get(at..at + size) else {
            return Chunked::Incomplete;
        };
        body.extend_from_slice(data);
        at += size;
        match buf.get(at..at + 2) {
            None => return Chunked::Incomplete,
            Some(b"\r\n") => at += 2,
            Some(_) => return Chunked::Malformed,
        }
    }
    let mut trailers = String::new();
    loop {
        let Some(line) = line_at(buf, at) else {
            return Chunked::Incomplete;
        };
        if line == at {
            return Chunked::Done {
                body,
                trailers,
                used: at + 2,
            };
        }
        trailers.push_str(&String::from_utf8_lossy(&buf[at..line + 2]));
        at = line + 2;
    }
}

/// Where the line starting at `at` ends (the index of its CR), if its CRLF has arrived.
fn line_at(buf: &[u8], at: usize) -> Option<usize> {
    buf.get(at..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|pos| at + pos)
}
