//! The dialects whose per-token events a scanner of their own reads beside serde_json, and one event
//! read both ways: what the differential tests (`*/differential.rs`, `both_ways.rs`) and the `*_scan`
//! fuzz targets hold equal.

use super::{
    anthropic, llamacpp, ollama, openai, responses, tgi, Channels, ChoiceTexts, EventKind,
    EventOutput, Observations,
};

/// A dialect with a scanner: its per-token events are read without serde_json, and whatever the
/// scanner is not sure to read as serde_json does is left to serde_json.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scanned {
    OpenAi,
    Anthropic,
    Responses,
    Tgi,
    LlamaCpp,
    Ollama,
}

/// How a dialect reads one event's data into observations and output.
type Reader<T> = fn(&[u8], &mut Observations, &mut EventOutput<'_>) -> T;

/// Everything one event left behind, compared whole.
#[doc(hidden)]
#[derive(Debug, PartialEq)]
pub struct Reading {
    pub kind: EventKind,
    pub obs: Observations,
    pub channels: Channels,
    pub choices: Vec<u32>,
    pub texts: ChoiceTexts,
}

impl Scanned {
    /// The scanner (`None` when it leaves the event to serde_json) and the serde_json reader.
    fn readers(self) -> (Reader<Option<EventKind>>, Reader<EventKind>) {
        match self {
            Scanned::OpenAi => (openai::read_fast, openai::read_by_serde),
            Scanned::Anthropic => (anthropic::read_fast, anthropic::read_by_serde),
            Scanned::Responses => (responses::read_fast, responses::read_by_serde),
            Scanned::Tgi => (tgi::read_fast, tgi::read_by_serde),
            Scanned::LlamaCpp => (llamacpp::read_fast, llamacpp::read_by_serde),
            Scanned::Ollama => (ollama::read_fast, ollama::read_by_serde),
        }
    }

    /// One event read by the scanner (`None` when it left the event to serde_json) and by serde_json,
    /// each from a copy of `before`, with the text copied or not.
    pub fn both_ways(
        self,
        data: &[u8],
        before: &Observations,
        with_text: bool,
    ) -> (Option<Reading>, Option<Reading>) {
        let (fast, serde) = self.readers();
        (
            reading(before, with_text, |obs, out| fast(data, obs, out)),
            reading(before, with_text, |obs, out| Some(serde(data, obs, out))),
        )
    }

    /// What each scanner's fuzz target runs: `input` is a byte of flags (bit 0: the text copied; bit 1:
    /// the observations filled as earlier events would have), then lines, each one event (a `data:`
    /// prefix taken off, so the SSE fixtures are a corpus as they are). Wherever the scanner reads an
    /// event, its reading must equal serde_json's.
    pub fn fuzz(self, input: &[u8]) {
        let [flags, events @ ..] = input else {
            return;
        };
        let mut before = Observations::default();
        if flags & 2 != 0 {
            before.model = Some("earlier".to_owned());
            before.cached_input_tokens = Some(4);
            before.output_tokens = Some(1);
        }
        for line in events.split(|&b| b == b'\n') {
            let event = line.strip_prefix(b"data:").unwrap_or(line).trim_ascii();
            let (fast, serde) = self.both_ways(event, &before, flags & 1 != 0);
            if let Some(fast) = fast {
                assert_eq!(Some(fast), serde, "{:?}", String::from_utf8_lossy(event));
            }
        }
    }
}

fn reading(
    before: &Observations,
    with_text: bool,
    read: impl FnOnce(&mut Observations, &mut EventOutput<'_>) -> Option<EventKind>,
) -> Option<Reading> {
    let (mut obs, mut choices, mut texts) = (before.clone(), Vec::new(), Vec::new());
    let mut output = EventOutput::new(with_text.then_some(&mut texts), &mut choices);
    let kind = read(&mut obs, &mut output)?;
    let channels = output.channels();
    Some(Reading {
        kind,
        obs,
        channels,
        choices,
        texts,
    })
}
