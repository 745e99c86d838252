//! The fields of a realtime message the meter needs, read as the message arrives ([`MessageReader`]):
//! its `type`, `response_id`, `model`, `session.model`, `response.id` and `status`, the usage (at the
//! top or in `response`, with its token details), `final`, `code`, whether it has an `id`, and whether
//! its `delta` carries anything. Everything else, a megabyte of base64 audio included, is checked as
//! JSON and passed over, never kept: what a reader holds is [`json::Push`]'s few bytes and these fields,
//! each at most [`json::CAPTURE`] bytes.
//!
//! It reads as `serde_json` reads the message into the `Wire` structs of `wire.rs` (the reference
//! these are held to): unknown fields skipped, a known field of the wrong type or given twice refuses
//! the whole message, `null` is an absent field.

use crate::decode::json::{Push, Token};

/// The usage fields of either protocol (vLLM's `prompt_tokens`/`completion_tokens`, OpenAI's
/// `input_tokens`/`output_tokens` with their details).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageFields {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// `input_token_details` and `output_token_details`: text, audio, cached.
    pub details: [Option<Details>; 2],
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Details {
    pub text_tokens: Option<u64>,
    pub audio_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
}

/// What one message said, in the fields the meter reads.
#[derive(Debug, Default, PartialEq)]
pub struct Fields {
    /// `type`; `None` when absent (then the message is not an event).
    pub kind: Option<String>,
    /// `delta`: `Some(true)` when it is an empty string.
    pub delta_empty: Option<bool>,
    pub response_id: Option<String>,
    pub model: Option<String>,
    /// `session`, when it is an object, with its `model`.
    pub session: Option<Option<String>>,
    /// `response`, when it is an object: its `id`, `status` and `usage`.
    pub response: Option<ResponseFields>,
    pub usage: Option<UsageFields>,
    pub last: Option<bool>,
    pub code: Option<String>,
    /// An `id` of any value (vLLM's session id).
    pub id: bool,
}

#[derive(Debug, Default, PartialEq)]
pub struct ResponseFields {
    pub id: Option<String>,
    pub status: Option<String>,
    pub usage: Option<UsageFields>,
}

/// Where the reader is: a known object, or how deep inside a value it passes over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    Root,
    Session,
    Response,
    /// A usage object, in `response` or at the top.
    Usage {
        in_response: bool,
    },
    /// Its token details: input (0) or output (1).
    Details {
        in_response: bool,
        which: usize,
    },
}

/// A known key, or one passed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Type,
    Delta,
    ResponseId,
    Model,
    Session,
    Response,
    Usage,
    Final,
    Code,
    Id,
    /// `response.id`.
    OwnId,
    Status,
    Count(Count),
    Details(usize),
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Count {
    Prompt,
    Completion,
    Input,
    Output,
    Text,
    Audio,
    Cached,
}

/// A message that does not read as the `Wire` structs read it.
struct Refused;

/// One direction's reader of messages (see the module's documentation).
pub struct MessageReader {
    push: Push,
    fields: Fields,
    /// The known objects open, outermost first (at most 4 deep).
    at: [At; 4],
    depth: usize,
    /// Inside a value passed over: how deep.
    skipping: usize,
    key: Option<Key>,
    /// Known keys seen in each open known object (a second one refuses the message).
    seen: [u32; 4],
    refused: bool,
}

impl Default for MessageReader {
    fn default() -> Self {
        MessageReader::new()
    }
}

impl MessageReader {
    pub fn new() -> Self {
        MessageReader {
            push: Push::new(),
            fields: Fields::default(),
            at: [At::Root; 4],
            depth: 0,
            skipping: 0,
            key: None,
            seen: [0; 4],
            refused: false,
        }
    }

    /// A new message begins.
    pub fn begin(&mut self) {
        self.push = Push::new();
        self.fields = Fields::default();
        (self.depth, self.skipping, self.key, self.seen) = (0, 0, None, [0; 4]);
        self.refused = false;
    }

    /// The next bytes of the message (any piece of it).
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.refused {
            return;
        }
        let MessageReader {
            push,
            fields,
            at,
            depth,
            skipping,
            key,
            seen,
            refused,
        } = self;
        let mut state = Reading {
            fields,
            at,
            depth,
            skipping,
            key,
            seen,
        };
        let mut failed = false;
        let fed = push.feed(bytes, &mut |token| {
            if !failed && state.token(token).is_err() {
                failed = true;
            }
        });
        *refused = fed.is_err() || failed;
    }

    /// The message ended: its fields, or `None` when it is not a JSON object read as the `Wire` structs
    /// read it.
    pub fn end(&mut self) -> Option<&Fields> {
        if self.refused || self.push.end(&mut |_| {}).is_err() {
            return None;
        }
        Some(&self.fields)
    }
}

/// The reader's state while tokens come (borrowed apart from its [`Push`]).
struct Reading<'a> {
    fields: &'a mut Fields,
    at: &'a mut [At; 4],
    depth: &'a mut usize,
    skipping: &'a mut usize,
    key: &'a mut Option<Key>,
    seen: &'a mut [u32; 4],
}

impl Reading<'_> {
    fn token(&mut self, token: Token<'_>) -> Result<(), Refused> {
        if *self.skipping > 0 {
            match token {
                Token::ObjectStart | Token::ArrayStart => *self.skipping += 1,
                Token::ObjectEnd | Token::ArrayEnd => *self.skipping -= 1,
                _ => {}
            }
            return Ok(());
        }
        if *self.depth == 0 {
            // The message itself: an object, else not an event.
            return match token {
                Token::ObjectStart => {
                    *self.depth = 1;
                    self.at[0] = At::Root;
                    Ok(())
                }
                _ => Err(Refused),
            };
        }
        let here = self.at[*self.depth - 1];
        match token {
            Token::Key(name) => {
                let key = name.map_or(Key::Other, |name| key_of(here, name));
                if key != Key::Other {
                    let bit = 1 << key_bit(key);
                    if self.seen[*self.depth - 1] & bit != 0 {
                        return Err(Refused);
                    }
                    self.seen[*self.depth - 1] |= bit;
                }
                *self.key = Some(key);
                Ok(())
            }
            Token::ObjectEnd => {
                *self.depth -= 1;
                Ok(())
            }
            Token::ArrayEnd => Err(Refused),
            value => {
                let key = self.key.take().ok_or(Refused)?;
                self.value(here, key, value)
            }
        }
    }

    fn value(&mut self, here: At, key: Key, value: Token<'_>) -> Result<(), Refused> {
        let opened = match (key, value) {
            (Key::Other | Key::Id, Token::ObjectStart | Token::ArrayStart) => {
                self.fields.id |= key == Key::Id;
                *self.skipping = 1;
                return Ok(());
            }
            (Key::Other, _) => return Ok(()),
            (Key::Id, _) => {
                self.fields.id = true;
                return Ok(());
            }
            (_, Token::Null) => return Ok(()),
            (Key::Session, Token::ObjectStart) => {
                self.fields.session = Some(None);
                At::Session
            }
            (Key::Response, Token::ObjectStart) => {
                self.fields.response = Some(ResponseFields::default());
                At::Response
            }
            (Key::Usage, Token::ObjectStart) => {
                let in_response = here == At::Response;
                *self.usage(in_response) = Some(UsageFields::default());
                At::Usage { in_response }
            }
            (Key::Details(which), Token::ObjectStart) => {
                let At::Usage { in_response } = here else {
                    return Err(Refused);
                };
                if let Some(usage) = self.usage(in_response) {
                    usage.details[which] = Some(Details::default());
                }
                At::Details { in_response, which }
            }
            (Key::Final, Token::Bool(b)) => {
                self.fields.last = Some(b);
                return Ok(());
            }
            (Key::Delta, Token::Str { empty, .. }) => {
                self.fields.delta_empty = Some(empty);
                return Ok(());
            }
            (Key::Count(count), Token::Number(Some(n))) => {
                let n = std::str::from_utf8(n).ok().and_then(|n| n.parse().ok());
                self.count(here, count, n.ok_or(Refused)?);
                return Ok(());
            }
            (_, Token::Str { value: Some(v), .. }) => {
                let v = std::str::from_utf8(v).map_err(|_| Refused)?.to_owned();
                let slot = match (here, key) {
                    (At::Root, Key::Type) => &mut self.fields.kind,
                    (At::Root, Key::ResponseId) => &mut self.fields.response_id,
                    (At::Root, Key::Model) => &mut self.fields.model,
                    (At::Root, Key::Code) => &mut self.fields.code,
                    (At::Session, Key::Model) => match &mut self.fields.session {
                        Some(model) => model,
                        None => return Err(Refused),
                    },
                    (At::Response, Key::OwnId | Key::Status) => {
                        let response = self.fields.response.as_mut().ok_or(Refused)?;
                        match key {
                            Key::Status => &mut response.status,
                            _ => &mut response.id,
                        }
                    }
                    _ => return Err(Refused),
                };
                *slot = Some(v);
                return Ok(());
            }
            // A string too long to keep where one is read (a model name over the bound): a value the
            // meter would not take anyway, so the message is not read.
            _ => return Err(Refused),
        };
        if *self.depth >= self.at.len() {
            return Err(Refused);
        }
        self.at[*self.depth] = opened;
        self.seen[*self.depth] = 0;
        *self.depth += 1;
        Ok(())
    }

    fn usage(&mut self, in_response: bool) -> &mut Option<UsageFields> {
        match (in_response, &mut self.fields.response) {
            (true, Some(response)) => &mut response.usage,
            _ => &mut self.fields.usage,
        }
    }

    fn count(&mut self, here: At, count: Count, n: u64) {
        let (in_response, which) = match here {
            At::Usage { in_response } => (in_response, None),
            At::Details { in_response, which } => (in_response, Some(which)),
            _ => return,
        };
        let Some(usage) = self.usage(in_response).as_mut() else {
            return;
        };
        let slot = match (which, count) {
            (None, Count::Prompt) => &mut usage.prompt_tokens,
            (None, Count::Completion) => &mut usage.completion_tokens,
            (None, Count::Input) => &mut usage.input_tokens,
            (None, Count::Output) => &mut usage.output_tokens,
            (Some(which), count) => {
                let Some(details) = usage.details[which].as_mut() else {
                    return;
                };
                match count {
                    Count::Text => &mut details.text_tokens,
                    Count::Audio => &mut details.audio_tokens,
                    Count::Cached => &mut details.cached_tokens,
                    _ => return,
                }
            }
            _ => return,
        };
        *slot = Some(n);
    }
}

/// What `name` is in the object `here`: the keys the `Wire` structs name, each where it names it.
fn key_of(here: At, name: &[u8]) -> Key {
    match (here, name) {
        (At::Root, b"type") => Key::Type,
        (At::Root, b"delta") => Key::Delta,
        (At::Root, b"response_id") => Key::ResponseId,
        (At::Root, b"model") => Key::Model,
        (At::Root, b"session") => Key::Session,
        (At::Root, b"response") => Key::Response,
        (At::Root, b"usage") => Key::Usage,
        (At::Root, b"final") => Key::Final,
        (At::Root, b"code") => Key::Code,
        (At::Root, b"id") => Key::Id,
        (At::Session, b"model") => Key::Model,
        (At::Response, b"id") => Key::OwnId,
        (At::Response, b"status") => Key::Status,
        (At::Response, b"usage") => Key::Usage,
        (At::Usage { .. }, b"prompt_tokens") => Key::Count(Count::Prompt),
        (At::Usage { .. }, b"completion_tokens") => Key::Count(Count::Completion),
        (At::Usage { .. }, b"input_tokens") => Key::Count(Count::Input),
        (At::Usage { .. }, b"output_tokens") => Key::Count(Count::Output),
        (At::Usage { .. }, b"input_token_details") => Key::Details(0),
        (At::Usage { .. }, b"output_token_details") => Key::Details(1),
        (At::Details { .. }, b"text_tokens") => Key::Count(Count::Text),
        (At::Details { .. }, b"audio_tokens") => Key::Count(Count::Audio),
        (At::Details { .. }, b"cached_tokens") => Key::Count(Count::Cached),
        _ => Key::Other,
    }
}

/// A known key's bit among those seen in one object.
fn key_bit(key: Key) -> u32 {
    match key {
        Key::Type => 0,
        Key::Delta => 1,
        Key::ResponseId => 2,
        Key::Model => 3,
        Key::Session => 4,
        Key::Response => 5,
        Key::Usage => 6,
        Key::Final => 7,
        Key::Code => 8,
        Key::Id => 9,
        Key::OwnId => 10,
        Key::Status => 11,
        Key::Count(c) => 12 + c as u32,
        Key::Details(which) => 19 + which as u32,
        Key::Other => 31,
    }
}
