//! How a dialect reads its wire format: the one trait every dialect implements, [`Wire`], from which its
//! [`Dialect`] (what the decoder holds) follows.
//!
//! A dialect says what one event is (`Event`, its serde struct), how serde_json reads it (`by_serde`:
//! required, and the reference), what an event means for the response (`apply`: one function, whichever
//! reading made the event), and what it reads of a non-streaming body. A scanner that reads the
//! per-token events without serde_json (`scan`) is optional, and only ever a faster way to the same
//! reading: where it reads an event it must leave exactly what serde_json's reading leaves, and wherever
//! it is not sure to, it returns `None` and serde_json reads the event. [`both_ways`] reads one event
//! both ways; the differential tests (`*/differential.rs` on `both_ways.rs`) and the `dialect_scan` fuzz
//! target ([`fuzz`]) hold the two equal.

use serde::Deserialize;

use super::{
    Carries, Channels, ChoiceTexts, Dialect, EventKind, EventOutput, Observations, DIALECTS,
};
use crate::decode::event::FramedEvent;
use crate::decode::json::FieldScanner;

/// A dialect's wire format. Every `Event` a reading hands out is applied once, by `apply`.
pub trait Wire: Default + Send + 'static {
    /// One event as the dialect reads it, borrowing the event's bytes: the struct serde_json fills,
    /// which the scanner fills too where it can.
    type Event<'a>: Deserialize<'a>;

    /// serde_json's reading of one event's data, the reference; `None`: the event is malformed.
    fn by_serde(data: &[u8]) -> Option<Self::Event<'_>> {
        serde_json::from_slice(data).ok()
    }

    /// The scanner's reading, handed to `then` where it lies (an event is never moved: some are
    /// large); `None` to leave the event to serde_json. Without a scanner every event is serde_json's.
    fn scan<'a, R>(_data: &'a [u8], _then: impl FnOnce(&Self::Event<'a>) -> R) -> Option<R> {
        None
    }

    /// What one event meant: its kind; any usage, model or end it carries into `obs`; what an
    /// output-bearing event produced into `output`.
    fn apply(
        &mut self, event: &Self::Event<'_>, obs: &mut Observations, output: &mut EventOutput<'_>,
    ) -> EventKind;

    /// What its output events carry: tokens, unless it says otherwise.
    const CARRIES: Carries = Carries::Tokens;

    /// The top-level fields of a non-streaming JSON body this dialect reads.
    const BODY_FIELDS: &'static [&'static str];

    /// Reads usage and model from a non-streaming body's top-level fields.
    fn body(&mut self, fields: &FieldScanner, obs: &mut Observations);
}

impl<W: Wire> Dialect for W {
    /// An event without data, and the `[DONE]` some servers end every API's stream with, carry nothing;
    /// every other event is the scanner's if it reads it, else serde_json's.
    fn on_event(
        &mut self, event: &FramedEvent<'_>, obs: &mut Observations, output: &mut EventOutput<'_>,
    ) -> EventKind {
        let data = event.data.trim_ascii();
        if data.is_empty() || data == b"[DONE]" {
            return EventKind::Other;
        }
        if let Some(kind) = W::scan(data, |event| self.apply(event, obs, output)) {
            return kind;
        }
        match W::by_serde(data) {
            Some(event) => self.apply(&event, obs, output),
            None => EventKind::Malformed,
        }
    }

    fn body_fields(&self) -> &'static [&'static str] {
        W::BODY_FIELDS
    }

    fn on_body(&mut self, fields: &FieldScanner, obs: &mut Observations) {
        self.body(fields, obs);
    }

    fn carries(&self) -> Carries {
        W::CARRIES
    }
}

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

/// [`both_ways`] of one dialect.
#[doc(hidden)]
pub type BothWays = fn(&[u8], &Observations, bool) -> (Option<Reading>, Option<Reading>);

/// One event read by the scanner (`None` when it left the event to serde_json) and by serde_json, each
/// by a dialect that has seen no event before, from a copy of `before`, with the text copied or not.
#[doc(hidden)]
pub fn both_ways<W: Wire>(
    data: &[u8], before: &Observations, with_text: bool,
) -> (Option<Reading>, Option<Reading>) {
    let apply = |event: &W::Event<'_>, obs: &mut Observations, out: &mut EventOutput<'_>| {
        W::default().apply(event, obs, out)
    };
    (
        reading(before, with_text, |obs, out| {
            W::scan(data, |e| apply(e, obs, out))
        }),
        reading(before, with_text, |obs, out| {
            Some(W::by_serde(data).map_or(EventKind::Malformed, |e| apply(&e, obs, out)))
        }),
    )
}

fn reading(
    before: &Observations, with_text: bool,
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

/// What the `dialect_scan` fuzz target runs: `input` is a byte of flags (bit 0: the text copied; bit 1:
/// the observations filled as earlier events would have; the rest: which row of the dialect table),
/// then lines, each one event (a `data:` prefix taken off, so the SSE fixtures are a corpus as they
/// are). Wherever a scanner reads an event, its reading must equal serde_json's.
#[doc(hidden)]
pub fn fuzz(input: &[u8]) {
    let [flags, events @ ..] = input else {
        return;
    };
    let row = &DIALECTS[usize::from(flags >> 2) % DIALECTS.len()];
    let mut before = Observations::default();
    if flags & 2 != 0 {
        before.model = Some("earlier".to_owned());
        before.cached_input_tokens = Some(4);
        before.output_tokens = Some(1);
    }
    for line in events.split(|&b| b == b'\n') {
        let event = line.strip_prefix(b"data:").unwrap_or(line).trim_ascii();
        let (fast, serde) = (row.both_ways)(event, &before, flags & 1 != 0);
        if let Some(fast) = fast {
            assert_eq!(
                Some(fast),
                serde,
                "{}: {:?}",
                row.paths[0],
                String::from_utf8_lossy(event)
            );
        }
    }
}
