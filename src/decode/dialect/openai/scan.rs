//! The OpenAI chunk read without serde_json: every chunk of every OpenAI-compatible stream passes here,
//! and deserialising it was the largest single cost per chunk of the whole proxy (docs/lab/benchmark.md).
//!
//! [`scan`] reads the fields the serde structs of the parent module read, from the event's text in one
//! pass, allocating nothing (strings are borrowed as they stand between their quotes; escapes are decoded
//! only when a tokenizer asks for the text). It is not a second JSON parser with its own opinions: it
//! returns `None`, and the caller hands the event to serde_json, whenever it meets anything whose reading
//! it is not sure agrees with serde_json's: a key with an escape, a lone surrogate `\u` escape, a number where
//! serde_json would read a float or overflow, a type the structs do not expect, a duplicate field, more
//! than [`MAX_CHOICES`] choices with output, nesting deeper than 128 levels in a skipped value (what
//! `decode/json/cursor.rs` checks). So an event it reads is
//! one serde_json accepts and reads the same way, and every other event is serde_json's by construction.
//! The differential tests (`differential.rs`, the `openai_scan` fuzz target) hold the two readings
//! equal.

#![deny(clippy::indexing_slicing)]

use super::super::timings::{LlamaTimings, VllmMetrics};
use super::{CompletionDetails, PromptDetails, Usage};
use crate::decode::json::{once, Cursor, Seen, Str};

/// Choices with output one chunk may carry on the fast path (servers send one a chunk; a chunk with
/// more goes to serde_json).
pub const MAX_CHOICES: usize = 4;

/// The `tool_calls` array of a delta: how many calls, and its text, walked again when a tokenizer asks
/// for the calls' names and arguments.
#[derive(Debug, Clone, Copy)]
pub struct Calls<'a> {
    pub len: usize,
    raw: &'a str,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Delta<'a> {
    pub content: Option<Str<'a>>,
    pub refusal: Option<Str<'a>>,
    pub reasoning_content: Option<Str<'a>>,
    pub reasoning: Option<Str<'a>>,
    pub tool_calls: Option<Calls<'a>>,
    /// The `function_call` object's text.
    pub function_call: Option<&'a str>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Choice<'a> {
    pub index: Option<u32>,
    pub delta: Option<Delta<'a>>,
    pub text: Option<Str<'a>>,
}

/// What the parent's `Chunk` holds, of a chunk the fast path read: the choices that carry output only
/// (the others change nothing).
#[derive(Default)]
pub struct Chunk<'a> {
    pub model: Option<Str<'a>>,
    pub usage: Option<Usage>,
    pub metrics: Option<VllmMetrics>,
    pub timings: Option<LlamaTimings>,
    pub error: bool,
    outputs: [Option<Choice<'a>>; MAX_CHOICES],
}

impl<'a> Chunk<'a> {
    /// The choices that carry output, in the chunk's order.
    pub fn outputs(&self) -> impl Iterator<Item = &Choice<'a>> {
        self.outputs.iter().map_while(Option::as_ref)
    }
}

/// Reads one chunk (the event's data, trimmed) into `chunk` (a default one), or `None` to leave it to
/// serde_json (`chunk` is then half read, and means nothing).
pub fn scan<'a>(text: &'a str, chunk: &mut Chunk<'a>) -> Option<()> {
    let mut at = Cursor::new(text);
    at.chunk(chunk)?;
    at.ws();
    at.at_end().then_some(())
}

/// Calls `each` with every tool call's function name and arguments (strings only), in the order the
/// parent's serde path pushes them: each call in turn, its name before its arguments.
pub fn each_call_text<'a>(calls: &Calls<'a>, each: &mut dyn FnMut(Str<'a>)) {
    let _ = Cursor::new(calls.raw).tool_calls(each);
}

/// Calls `each` with a `function_call` object's name and then its arguments (strings only).
pub fn each_function_text<'a>(function: &'a str, each: &mut dyn FnMut(Str<'a>)) {
    let _ = Cursor::new(function).function(each);
}

/// The readers of the chunk's own shape.
impl<'a> Cursor<'a> {
    fn chunk(&mut self, chunk: &mut Chunk<'a>) -> Option<()> {
        let mut seen = Seen::default();
        let mut n = 0;
        self.object(|at, key| {
            match key {
                b"model" => {
                    seen.first(0)?;
                    chunk.model = at.opt_str()?;
                }
                b"choices" => {
                    seen.first(1)?;
                    if !at.null()? {
                        at.array(|at| {
                            let choice = at.choice()?;
                            if choice.carries_output() {
                                *chunk.outputs.get_mut(n)? = Some(choice);
                                n += 1;
                            }
                            Some(())
                        })?;
                    }
                }
                b"usage" => {
                    seen.first(2)?;
                    if !at.null_or_object()? {
                        chunk.usage = Some(at.usage()?);
                    }
                }
                b"metrics" => {
                    seen.first(3)?;
                    chunk.metrics = at.by_serde::<VllmMetrics>()?;
                }
                b"timings" => {
                    seen.first(4)?;
                    chunk.timings = at.by_serde::<LlamaTimings>()?;
                }
                b"error" => {
                    seen.first(5)?;
                    chunk.error = !at.null()?;
                    if chunk.error {
                        at.skip()?;
                    }
                }
                _ => return Some(false),
            }
            Some(true)
        })
    }

    /// A small struct of floats (the server's timings, on the last chunk only): the value's extent
    /// checked here, its reading left to serde_json on that extent alone, so it is serde_json's own.
    fn by_serde<T: serde::de::DeserializeOwned>(&mut self) -> Option<Option<T>> {
        if self.null_or_object()? {
            return Some(None);
        }
        let start = self.at;
        self.skip()?;
        serde_json::from_str(self.since(start)?).ok().map(Some)
    }

    fn usage(&mut self) -> Option<Usage> {
        let mut usage = Usage {
            prompt_tokens: None,
            completion_tokens: None,
            completion_tokens_details: None,
            prompt_tokens_details: None,
        };
        let mut seen = Seen::default();
        self.object(|at, key| {
            match key {
                b"prompt_tokens" => {
                    seen.first(0)?;
                    usage.prompt_tokens = at.opt_uint()?;
                }
                b"completion_tokens" => {
                    seen.first(1)?;
                    usage.completion_tokens = at.opt_uint()?;
                }
                b"completion_tokens_details" => {
                    seen.first(2)?;
                    let details = at.details(b"reasoning_tokens")?;
                    usage.completion_tokens_details =
                        details.map(|reasoning_tokens| CompletionDetails { reasoning_tokens });
                }
                b"prompt_tokens_details" => {
                    seen.first(3)?;
                    let details = at.details(b"cached_tokens")?;
                    usage.prompt_tokens_details =
                        details.map(|cached_tokens| PromptDetails { cached_tokens });
                }
                _ => return Some(false),
            }
            Some(true)
        })?;
        Some(usage)
    }

    /// A usage details object with one integer field read: `None` for null, else the field.
    fn details(&mut self, field: &[u8]) -> Option<Option<Option<u64>>> {
        if self.null_or_object()? {
            return Some(None);
        }
        let mut value = None;
        self.object(|at, key| {
            if key != field {
                return Some(false);
            }
            once(&mut value, at.opt_uint()?)?;
            Some(true)
        })?;
        Some(Some(value.flatten()))
    }

    fn choice(&mut self) -> Option<Choice<'a>> {
        if self.peek()? != b'{' {
            return None;
        }
        let mut choice = Choice::default();
        let mut seen = Seen::default();
        self.object(|at, key| {
            match key {
                b"index" => {
                    seen.first(0)?;
                    choice.index = match at.opt_uint()? {
                        Some(n) => Some(u32::try_from(n).ok()?),
                        None => None,
                    };
                }
                b"delta" => {
                    seen.first(1)?;
                    if !at.null_or_object()? {
                        choice.delta = Some(at.delta()?);
                    }
                }
                b"text" => {
                    seen.first(2)?;
                    choice.text = at.opt_str()?;
                }
                _ => return Some(false),
            }
            Some(true)
        })?;
        Some(choice)
    }

    fn delta(&mut self) -> Option<Delta<'a>> {
        let mut delta = Delta::default();
        let mut seen = Seen::default();
        self.object(|at, key| {
            match key {
                b"content" => {
                    seen.first(0)?;
                    delta.content = at.opt_str()?;
                }
                b"refusal" => {
                    seen.first(1)?;
                    delta.refusal = at.opt_str()?;
                }
                b"reasoning_content" => {
                    seen.first(2)?;
                    delta.reasoning_content = at.opt_str()?;
                }
                b"reasoning" => {
                    seen.first(3)?;
                    delta.reasoning = at.opt_str()?;
                }
                b"tool_calls" => {
                    seen.first(4)?;
                    if !at.null()? {
                        let start = at.at;
                        let len = at.tool_calls(&mut |_| {})?;
                        let raw = at.since(start)?;
                        delta.tool_calls = Some(Calls { len, raw });
                    }
                }
                b"function_call" => {
                    seen.first(5)?;
                    if !at.null_or_object()? {
                        let start = at.at;
                        at.function(&mut |_| {})?;
                        delta.function_call = Some(at.since(start)?);
                    }
                }
                _ => return Some(false),
            }
            Some(true)
        })?;
        Some(delta)
    }

    /// A `tool_calls` array (each call an object whose `function` is null or an object); calls
    /// `each` with the functions' texts and returns how many calls there are.
    fn tool_calls(&mut self, each: &mut dyn FnMut(Str<'a>)) -> Option<usize> {
        let mut len = 0;
        self.array(|at| {
            if at.peek()? != b'{' {
                return None;
            }
            let mut function = None;
            at.object(|at, key| {
                if key != b"function" {
                    return Some(false);
                }
                once(&mut function, ())?;
                if !at.null_or_object()? {
                    at.function(each)?;
                }
                Some(true)
            })?;
            len += 1;
            Some(())
        })?;
        Some(len)
    }

    /// A function object: calls `each` with its non-empty string `name`, then its `arguments`.
    fn function(&mut self, each: &mut dyn FnMut(Str<'a>)) -> Option<()> {
        let (mut name, mut arguments) = (None, None);
        self.object(|at, key| {
            match key {
                b"name" => once(&mut name, at.text_field()?)?,
                b"arguments" => once(&mut arguments, at.text_field()?)?,
                _ => return Some(false),
            }
            Some(true)
        })?;
        for part in [name, arguments].into_iter().flatten().flatten() {
            if !part.is_empty() {
                each(part);
            }
        }
        Some(())
    }
}
fn non_empty(s: &Option<Str<'_>>) -> bool {
    s.is_some_and(|s| !s.is_empty())
}

impl Delta<'_> {
    pub fn carries_reasoning(&self) -> bool {
        non_empty(&self.reasoning_content) || non_empty(&self.reasoning)
    }

    pub fn carries_tool_call(&self) -> bool {
        self.tool_calls.is_some_and(|calls| calls.len > 0) || self.function_call.is_some()
    }

    pub fn carries_answer(&self) -> bool {
        non_empty(&self.content)
            || non_empty(&self.refusal)
            || self.tool_calls.is_some_and(|calls| calls.len > 0)
            || self.function_call.is_some()
    }
}

impl Choice<'_> {
    pub fn carries_output(&self) -> bool {
        self.delta
            .is_some_and(|d| d.carries_answer() || d.carries_reasoning())
            || non_empty(&self.text)
    }
}
