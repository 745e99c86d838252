//! Exact output-token counts from the streamed text, for servers that report no usage: a HuggingFace
//! `tokenizer.json` per model, configured (`tokenizers:`), found from the model's name under the
//! search roots (`tokenizer_dirs`, by default the HuggingFace hub cache: [`discover`], [`registry`]), or
//! where the upstream's own model list says the model is (its `root`: [`root`]).
//! It needs the `tokenizer` cargo feature, built by default; without it a configured tokenizer is a
//! config error, nothing is discovered and [`Model`] is an empty type, so none can exist.
//!
//! The dialects copy each output event's text into a [`TextCount`]'s buffer (only when the request's
//! model has a tokenizer ready: otherwise nothing is copied), one text per choice (OpenAI's `n` > 1
//! interleaves the choices' events; each choice is a text of its own, as the server generated it). The
//! texts are tokenized once, when the response ends, so the count is the tokenizer's count of the whole
//! output. Memory stays bounded: when the texts pass [`WINDOW_BYTES`] together, each text over its share
//! is tokenized, all its tokens but the last few are counted and their text is dropped, and the rest
//! stays to be tokenized with what follows (a token never spans the cut, since the kept tail starts at a
//! token boundary). Outputs shorter than the window, i.e. nearly all, are counted exactly; longer ones
//! can differ by a token at a cut for tokenizers that treat the start of a text specially. Forwarding
//! never waits on it beyond the tokenizing itself: no byte is held back.

use std::path::Path;
use std::sync::Arc;

use crate::decode::dialect::{is_reasoning_text, ChoiceTexts};

pub mod discover;
mod loader;
mod registry;
mod root;

pub use registry::{search_roots, Tokenizers};

/// Output text held before it is tokenized and counted.
pub const WINDOW_BYTES: usize = 64 * 1024;
/// Tokens at the end of a full window that are tokenized again together with the text after them.
const OVERLAP_TOKENS: usize = 8;

/// Whether this binary was built with the `tokenizer` feature (the config, which must refuse
/// tokenizer keys without it, owns the answer).
pub use crate::config::TOKENIZER_FEATURE as AVAILABLE;

#[cfg(feature = "tokenizer")]
pub type Model = tokenizers::Tokenizer;

/// Without the `tokenizer` feature no tokenizer can be loaded, so none can exist.
#[cfg(not(feature = "tokenizer"))]
#[derive(Debug)]
pub enum Model {}

#[cfg(feature = "tokenizer")]
fn load(path: &Path) -> Result<Model, String> {
    tokenizers::Tokenizer::from_file(path).map_err(|e| e.to_string())
}

#[cfg(not(feature = "tokenizer"))]
fn load(_: &Path) -> Result<Model, String> {
    Err(WITHOUT_FEATURE.to_owned())
}

/// The message for a configured tokenizer in a binary built without the feature.
pub use crate::config::WITHOUT_TOKENIZER_FEATURE as WITHOUT_FEATURE;

/// Byte offsets of the tokens of `text` (no special tokens added).
#[cfg(feature = "tokenizer")]
fn token_offsets(model: &Model, text: &str) -> Result<Vec<(usize, usize)>, String> {
    let encoding = model.encode(text, false).map_err(|e| e.to_string())?;
    Ok(encoding.get_offsets().to_vec())
}

#[cfg(not(feature = "tokenizer"))]
fn token_offsets(model: &Model, _: &str) -> Result<Vec<(usize, usize)>, String> {
    match *model {}
}

/// One response's output text on its way to a tokenizer.
pub enum TextCount {
    /// No tokenizer applies: no text is copied.
    Off,
    /// A tokenizer may apply but the request named no model: the text is held (up to the window)
    /// until the response names one.
    Pending {
        tokenizers: Arc<Tokenizers>,
        held: ChoiceTexts,
    },
    On(TextCounter),
}

impl TextCount {
    /// The counting state for a response, given the request's model (if it named one).
    pub fn start(tokenizers: &Arc<Tokenizers>, request_model: Option<&str>) -> Self {
        if tokenizers.is_empty() {
            return TextCount::Off;
        }
        match request_model {
            Some(model) => tokenizers
                .get(model)
                .map_or(TextCount::Off, |m| TextCount::On(TextCounter::new(m))),
            None => TextCount::Pending {
                tokenizers: tokenizers.clone(),
                held: ChoiceTexts::new(),
            },
        }
    }

    /// Where a dialect copies the next event's output text; `None` when nothing is to be copied.
    pub fn buffer(&mut self) -> Option<&mut ChoiceTexts> {
        match self {
            TextCount::Off => None,
            TextCount::Pending { held, .. } => Some(held),
            TextCount::On(counter) => Some(&mut counter.texts),
        }
    }

    /// After each event: settles a pending model, and counts a full window.
    pub fn after_event(&mut self, response_model: Option<&str>) {
        match self {
            TextCount::Off => {}
            TextCount::On(counter) => counter.after_event(),
            TextCount::Pending { tokenizers, held } => {
                if let Some(model) = response_model {
                    *self = match tokenizers.get(model) {
                        Some(m) => {
                            let mut counter = TextCounter::new(m);
                            counter.texts = std::mem::take(held);
                            TextCount::On(counter)
                        }
                        None => TextCount::Off,
                    };
                } else if total_len(held) > WINDOW_BYTES {
                    *self = TextCount::Off;
                }
            }
        }
    }

    /// The tokenizer's count of the whole output and of its reasoning, when a tokenizer counted it.
    /// `whole`: the whole output is wanted; else only the reasoning texts are tokenized (what was
    /// already counted of the rest to bound memory is reported all the same).
    pub fn finish(&mut self, whole: bool) -> Option<Counted> {
        match std::mem::replace(self, TextCount::Off) {
            TextCount::On(mut counter) => counter.finish(whole),
            _ => None,
        }
    }
}

/// A tokenizer's count of a response's output text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// Every token: answer and reasoning.
    pub output: u64,
    /// The reasoning tokens among them.
    pub reasoning: u64,
}

fn total_len(texts: &ChoiceTexts) -> usize {
    texts.iter().map(String::len).sum()
}

pub struct TextCounter {
    model: Arc<Model>,
    texts: ChoiceTexts,
    counted: Counted,
    window: usize,
    failed: bool,
}

impl TextCounter {
    fn new(model: Arc<Model>) -> Self {
        TextCounter {
            model,
            texts: ChoiceTexts::new(),
            counted: Counted::default(),
            window: WINDOW_BYTES,
            failed: false,
        }
    }

    fn after_event(&mut self) {
        if self.failed || total_len(&self.texts) <= self.window {
            return;
        }
        let share = self.window / self.texts.len().max(1);
        for at in 0..self.texts.len() {
            if self.texts.get(at).is_some_and(|t| t.len() > share) {
                self.count_window(at);
            }
            if self.failed {
                return;
            }
        }
    }

    /// Counts all tokens of choice `at`'s text but the last few, and drops their text.
    fn count_window(&mut self, at: usize) {
        let Some(text) = self.texts.get_mut(at) else {
            return;
        };
        let offsets = match token_offsets(&self.model, text) {
            Ok(offsets) => offsets,
            Err(err) => return self.fail(&err),
        };
        let last = offsets.len().saturating_sub(OVERLAP_TOKENS);
        // The cut is the start of a kept token that no counted token overlaps (byte-level tokens of
        // one character share its offsets), on a character boundary.
        let cut = (1..=last).rev().find_map(|k| {
            let (before, at) = (offsets.get(k - 1)?, offsets.get(k)?);
            (before.1 <= at.0 && text.is_char_boundary(at.0)).then_some((k, at.0))
        });
        match cut {
            Some((k, cut)) => {
                text.drain(..cut);
                self.add(at, k as u64);
            }
            None if text.len() > 4 * self.window => self.fail("no token boundary in the text"),
            None => {}
        }
    }

    fn fail(&mut self, why: &str) {
        tracing::debug!(why, "tokenizer could not count the output; counting chunks");
        self.failed = true;
        self.texts = ChoiceTexts::new();
    }

    /// `n` tokens of text `at` counted.
    fn add(&mut self, at: usize, n: u64) {
        self.counted.output = self.counted.output.saturating_add(n);
        if is_reasoning_text(at) {
            self.counted.reasoning = self.counted.reasoning.saturating_add(n);
        }
    }

    fn finish(&mut self, whole: bool) -> Option<Counted> {
        if self.failed {
            return None;
        }
        let texts = std::mem::take(&mut self.texts);
        for (at, text) in texts.iter().enumerate() {
            if text.is_empty() || !(whole || is_reasoning_text(at)) {
                continue;
            }
            match token_offsets(&self.model, text) {
                Ok(offsets) => self.add(at, offsets.len() as u64),
                Err(err) => {
                    self.fail(&err);
                    return None;
                }
            }
        }
        Some(self.counted)
    }
}

#[cfg(all(test, feature = "tokenizer"))]
mod tests {
    use super::*;

    const WORDS: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tokenizer/words.json"
    );

    fn words() -> Arc<Model> {
        Arc::new(load(Path::new(WORDS)).expect("test tokenizer"))
    }

    #[test]
    fn whole_text_is_counted_once_at_the_end() {
        let mut counter = TextCounter::new(words());
        counter.texts.push("hello world, hello".to_owned());
        counter.after_event();
        assert_eq!(counter.finish(true).map(|c| c.output), Some(4)); // hello, world, ",", hello
    }

    /// vLLM's `n` = 2 streams interleave the choices' chunks; each choice is its own text, so the
    /// count is the sum of the choices' counts, not the count of their chunks run together.
    #[test]
    fn each_choice_is_counted_as_a_text_of_its_own() {
        let (mut texts, mut choices) = (ChoiceTexts::new(), Vec::new());
        let pieces = [
            (0, "hel"),
            (1, "hello "),
            (0, "lo, "),
            (1, "world"),
            (0, "world"),
        ];
        for (choice, piece) in pieces {
            let mut output =
                crate::decode::dialect::EventOutput::new(Some(&mut texts), &mut choices);
            output.choice(choice);
            output.push(piece);
        }
        assert_eq!(texts, ["hello, world", "", "hello world"]);
        let mut counter = TextCounter::new(words());
        counter.texts = texts;
        assert_eq!(counter.finish(true).map(|c| c.output), Some(3 + 2));
        // Run together they would be "helhello lo, worldworld": 4 tokens.
        let mut together = TextCounter::new(words());
        together.texts.push("helhello lo, worldworld".to_owned());
        assert_eq!(together.finish(true).map(|c| c.output), Some(4));
    }

    #[test]
    fn reasoning_text_is_counted_apart_and_alone_when_only_it_is_wanted() {
        let (mut texts, mut choices) = (ChoiceTexts::new(), Vec::new());
        for (reasoning, piece) in [(true, "hello hello"), (false, "world"), (true, " world")] {
            let mut output =
                crate::decode::dialect::EventOutput::new(Some(&mut texts), &mut choices);
            match reasoning {
                true => output.push_reasoning(piece),
                false => output.push(piece),
            }
        }
        assert_eq!(texts, ["world", "hello hello world"]);
        let mut counter = TextCounter::new(words());
        counter.texts = texts.clone();
        let both = Counted {
            output: 4,
            reasoning: 3,
        };
        assert_eq!(counter.finish(true), Some(both));
        let mut counter = TextCounter::new(words());
        counter.texts = texts;
        let reasoning_only = Counted {
            output: 3,
            reasoning: 3,
        };
        assert_eq!(counter.finish(false), Some(reasoning_only));
    }

    #[test]
    fn windowed_count_equals_the_whole_text_count_and_memory_stays_bounded() {
        let text = "the quick brown fox jumps over the lazy dog; ".repeat(400);
        let whole = token_offsets(&words(), &text).expect("encode").len() as u64;
        for window in [64, 100, 333, 4096] {
            let mut counter = TextCounter::new(words());
            counter.window = window;
            counter.texts.push(String::new());
            for piece in text.as_bytes().chunks(7) {
                counter.texts[0].push_str(std::str::from_utf8(piece).expect("ascii"));
                counter.after_event();
                assert!(total_len(&counter.texts) <= window + 200, "window {window}");
            }
            assert_eq!(
                counter.finish(true).map(|c| c.output),
                Some(whole),
                "window {window}"
            );
        }
    }

    #[test]
    fn pending_text_goes_to_the_tokenizer_the_response_names() {
        let mut config = crate::Config::default();
        config.tokenizers.insert("m".to_owned(), WORDS.into());
        config.tokenizer_dirs = Some(Vec::new());
        let tokenizers = Arc::new(Tokenizers::load(&config, None).expect("load"));
        let mut count = TextCount::start(&tokenizers, None);
        count
            .buffer()
            .expect("pending")
            .push("hello world".to_owned());
        count.after_event(None);
        count.after_event(Some("m"));
        assert_eq!(count.finish(true).map(|c| c.output), Some(2));
        let mut other = TextCount::start(&tokenizers, Some("not-configured"));
        assert!(other.buffer().is_none());
        assert_eq!(other.finish(true).map(|c| c.output), None);
    }

    #[test]
    fn unreadable_tokenizer_file_is_a_config_error_naming_the_key() {
        let mut config = crate::Config::default();
        config.tokenizers.insert("m".to_owned(), file!().into());
        let err = Tokenizers::load(&config, None)
            .err()
            .expect("not a tokenizer")
            .to_string();
        assert!(
            err.starts_with("tokenizers.m: invalid tokenizer file"),
            "{err}"
        );
    }
}
