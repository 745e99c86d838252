//! An HTTP/1.1 message body's framing read off its stream (RFC 9112 §6): a length, chunked, or to the
//! connection's close, handing on the body's data and saying where the message ends, so the bytes after
//! it are the next message's. A plain synchronous type fed any split of the stream; it holds at most one
//! chunk-size or trailer line ([`MAX_LINE`]), and a line longer than that, or bytes that break the
//! chunked coding, end the reading of the connection.

/// The longest chunk-size line (with extensions) or trailer line read.
pub const MAX_LINE: usize = 4 << 10;

/// A body that cannot be read as its framing says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// How a message's body is delimited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// `Content-Length`: this many bytes left.
    Length(u64),
    Chunked(Chunked),
    /// To the connection's close (a response with neither).
    Close,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chunked {
    state: State,
    /// The unfinished chunk-size or trailer line.
    line: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    #[default]
    Size,
    Data(u64),
    /// The CRLF after a chunk's data: how many of its two bytes were read.
    DataEnd(u8),
    Trailers,
    Done,
}

impl Body {
    /// Reads the body from `bytes`, handing each piece of data to `data`: how many bytes of `bytes`
    /// the body took, and whether it has ended.
    pub fn feed(
        &mut self, bytes: &[u8], data: &mut dyn FnMut(&[u8]),
    ) -> Result<(usize, bool), Malformed> {
        match self {
            Body::Length(left) => {
                let take = (*left).min(bytes.len() as u64) as usize;
                if take > 0 {
                    data(&bytes[..take]);
                }
                *left -= take as u64;
                Ok((take, *left == 0))
            }
            Body::Close => {
                if !bytes.is_empty() {
                    data(bytes);
                }
                Ok((bytes.len(), false))
            }
            Body::Chunked(chunked) => chunked.feed(bytes, data),
        }
    }

    /// Whether it ends only when the connection closes.
    pub fn to_close(&self) -> bool {
        matches!(self, Body::Close)
    }
}

impl Chunked {
    fn feed(
        &mut self, bytes: &[u8], data: &mut dyn FnMut(&[u8]),
    ) -> Result<(usize, bool), Malformed> {
        let mut at = 0;
        while at < bytes.len() && self.state != State::Done {
            let rest = &bytes[at..];
            match self.state {
                State::Data(left) => {
                    let take = left.min(rest.len() as u64) as usize;
                    data(&rest[..take]);
                    at += take;
                    self.state = match left - take as u64 {
                        0 => State::DataEnd(0),
                        left => State::Data(left),
                    };
                }
                State::DataEnd(read) => {
                    let expected = b"\r\n"[read as usize];
                    if rest[0] != expected {
                        return Err(Malformed);
                    }
                    at += 1;
                    self.state = match read {
                        0 => State::DataEnd(1),
                        _ => State::Size,
                    };
                }
                State::Size | State::Trailers => {
                    let Some(line) = self.line(rest, &mut at)? else {
                        continue;
                    };
                    self.state = match self.state {
                        State::Size => match size(&line)? {
                            0 => State::Trailers,
                            n => State::Data(n),
                        },
                        _ if line.is_empty() => State::Done,
                        other => other,
                    };
                }
                State::Done => {}
            }
        }
        Ok((at, self.state == State::Done))
    }

    /// The line that ends in `rest` (without its CRLF), once whole; `at` moves past what was read.
    fn line(&mut self, rest: &[u8], at: &mut usize) -> Result<Option<Vec<u8>>, Malformed> {
        match memchr::memchr(b'\n', rest) {
            Some(end) => {
                self.line.extend_from_slice(&rest[..end]);
                *at += end + 1;
                if self.line.len() > MAX_LINE {
                    return Err(Malformed);
                }
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                Ok(Some(line))
            }
            None => {
                self.line.extend_from_slice(rest);
                *at += rest.len();
                if self.line.len() > MAX_LINE {
                    return Err(Malformed);
                }
                Ok(None)
            }
        }
    }
}

/// A chunk-size line's size: hex digits, then optional extensions after `;`.
fn size(line: &[u8]) -> Result<u64, Malformed> {
    let digits = line
        .split(|b| *b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    if digits.is_empty() || digits.len() > 15 {
        return Err(Malformed);
    }
    let text = std::str::from_utf8(digits).map_err(|_| Malformed)?;
    u64::from_str_radix(text, 16).map_err(|_| Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` in pieces of `split` bytes: the data handed on, what the body took, and whether it ended.
    fn read(
        mut body: Body, wire: &[u8], split: usize,
    ) -> Result<(Vec<u8>, usize, bool), Malformed> {
        let mut data = Vec::new();
        let mut taken = 0;
        for piece in wire.chunks(split.max(1)) {
            let (used, done) = body.feed(piece, &mut |d| data.extend_from_slice(d))?;
            taken += used;
            if done {
                return Ok((data, taken, true));
            }
        }
        Ok((data, taken, false))
    }

    #[test]
    fn a_chunked_body_is_read_at_every_split_and_ends_before_the_next_message() {
        let wire = b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-trailer: 1\r\n\r\nHTTP/1.1 200 OK\r\n";
        let body_len = wire.len() - b"HTTP/1.1 200 OK\r\n".len();
        for split in 1..wire.len() {
            let (data, taken, done) = read(Body::Chunked(Chunked::default()), wire, split).unwrap();
            assert_eq!(data, b"helloabcdefghijklmnopqrstuvwxyz", "split {split}");
            assert!(done);
            assert_eq!(taken, body_len, "split {split}");
        }
    }

    #[test]
    fn a_length_body_takes_its_bytes_and_no_more() {
        let (data, taken, done) = read(Body::Length(5), b"hello world", 3).unwrap();
        assert_eq!((data.as_slice(), taken, done), (&b"hello"[..], 5, true));
        let (data, _, done) = read(Body::Close, b"all of it", 2).unwrap();
        assert_eq!((data.as_slice(), done), (&b"all of it"[..], false));
    }

    #[test]
    fn broken_chunked_coding_is_malformed() {
        for wire in [
            &b"zz\r\n"[..],
            b"5\r\nhelloXX",
            b"\r\n",
            b"ffffffffffffffff\r\n",
        ] {
            assert_eq!(
                read(Body::Chunked(Chunked::default()), wire, 64),
                Err(Malformed),
                "{wire:?}"
            );
        }
        let long = vec![b'1'; MAX_LINE + 2];
        assert_eq!(
            read(Body::Chunked(Chunked::default()), &long, 7),
            Err(Malformed)
        );
    }
}
