//! The meter of one response body: frames the bytes that pass (SSE for streams, a top-level field scan for
//! JSON bodies), hands each decoded event to the API dialect, and tells the exchange how many
//! output-bearing events a frame carried. It only reads the bytes it is lent; forwarding never waits on it.
//!
//! When the stream cannot be understood (an event over the framer's bound, a payload the dialect cannot
//! parse) metering switches off for the rest of that response with a reason; the bytes keep flowing.

use http::HeaderValue;

use crate::config::Metering;
use crate::dialect::{Dialect, EventKind, Observations};
use crate::json_scan::FieldScanner;
use crate::sse::SseFramer;

/// Largest raw top-level value (e.g. `usage`) kept from a non-streaming body.
const MAX_BODY_FIELD_BYTES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    EventTooLarge,
    MalformedEvent,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::EventTooLarge => "event_too_large",
            SkipReason::MalformedEvent => "malformed_event",
        }
    }
}

enum Framing {
    Sse(SseFramer),
    Json(FieldScanner),
}

pub struct Meter {
    framing: Framing,
    dialect: Box<dyn Dialect>,
    obs: Observations,
    skipped: Option<SkipReason>,
    error_event: bool,
    /// An SSE event was decoded: a body with other lines than comments and none of these was not an
    /// event stream at all.
    decoded_event: bool,
}

/// True for `text/event-stream` (any parameters, any case).
pub fn is_event_stream(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("text/event-stream"))
}

impl Meter {
    pub fn new(dialect: Box<dyn Dialect>, streaming: bool, limits: &Metering) -> Self {
        let framing = if streaming {
            Framing::Sse(SseFramer::new(limits.max_event_bytes))
        } else {
            Framing::Json(FieldScanner::new(
                dialect.body_fields(),
                MAX_BODY_FIELD_BYTES,
                limits.max_event_bytes,
            ))
        };
        Meter {
            framing,
            dialect,
            obs: Observations::default(),
            skipped: None,
            error_event: false,
            decoded_event: false,
        }
    }

    pub fn is_streaming(&self) -> bool {
        matches!(self.framing, Framing::Sse(_))
    }

    /// Reads one body frame; returns how many output-bearing events it completed. The figures depend only
    /// on the bytes, never on where the network cut them into frames.
    pub fn feed(&mut self, bytes: &[u8]) -> u32 {
        if self.skipped.is_some() {
            return 0;
        }
        let Meter {
            framing,
            dialect,
            obs,
            skipped,
            error_event,
            decoded_event,
        } = self;
        match framing {
            Framing::Json(scanner) => {
                scanner.feed(bytes);
                0
            }
            Framing::Sse(framer) => {
                let mut outputs = 0;
                let fed = framer.feed(bytes, |event| {
                    if skipped.is_some() {
                        return;
                    }
                    *decoded_event = true;
                    match dialect.on_event(&event, obs) {
                        EventKind::Output => outputs += 1,
                        EventKind::Other => {}
                        EventKind::Error => *error_event = true,
                        EventKind::Malformed => *skipped = Some(SkipReason::MalformedEvent),
                    }
                });
                if fed.is_err() {
                    skipped.get_or_insert(SkipReason::EventTooLarge);
                }
                // Output events completed before the stream turned unreadable were real token arrivals,
                // whether or not the unreadable part came in the same frame.
                outputs
            }
        }
    }

    /// Called once at the end of the body: a JSON body's fields are read now, and an "event stream" that
    /// held other lines than comments but not a single complete event (a JSON or HTML body, binary bytes
    /// under an SSE content type) is reported as malformed rather than as a stream that carried no tokens.
    /// Keep-alive comments alone (a client that left during a long prefill) are not malformed.
    pub fn finish(&mut self) {
        match &self.framing {
            Framing::Json(scanner) => self.dialect.on_body(scanner, &mut self.obs),
            Framing::Sse(framer) => {
                if !self.decoded_event && framer.saw_non_comment() {
                    self.skipped.get_or_insert(SkipReason::MalformedEvent);
                }
            }
        }
    }

    pub fn observations(&self) -> &Observations {
        &self.obs
    }

    pub fn skipped(&self) -> Option<SkipReason> {
        self.skipped
    }

    /// The server reported an error inside the stream (e.g. an OpenAI `{"error":...}` event).
    pub fn saw_error_event(&self) -> bool {
        self.error_event
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::detect;

    fn limits() -> Metering {
        Metering {
            max_event_bytes: 1024,
            model_scan_bytes: 1024,
        }
    }

    #[test]
    fn counts_output_events_and_reads_usage_from_a_stream() {
        let (_, dialect) = detect("/v1/chat/completions");
        let mut meter = Meter::new(dialect.expect("openai"), true, &limits());
        let role =
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        assert_eq!(meter.feed(role.as_bytes()), 0);
        let two = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n";
        assert_eq!(meter.feed(two.as_bytes()), 2);
        let usage = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
        assert_eq!(meter.feed(usage.as_bytes()), 0);
        assert_eq!(meter.observations().output_tokens, Some(2));
        assert_eq!(meter.skipped(), None);
    }

    #[test]
    fn oversized_event_switches_metering_off() {
        let (_, dialect) = detect("/v1/chat/completions");
        let mut meter = Meter::new(dialect.expect("openai"), true, &limits());
        let big = format!("data: {}\n\n", "x".repeat(4096));
        assert_eq!(meter.feed(big.as_bytes()), 0);
        assert_eq!(meter.skipped(), Some(SkipReason::EventTooLarge));
        assert_eq!(
            meter.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"),
            0
        );
    }

    #[test]
    fn a_stream_without_a_single_event_is_malformed() {
        let (_, dialect) = detect("/v1/chat/completions");
        let mut meter = Meter::new(dialect.expect("openai"), true, &limits());
        assert_eq!(
            meter.feed(b"{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n"),
            0
        );
        meter.finish();
        assert_eq!(meter.skipped(), Some(SkipReason::MalformedEvent));
        for quiet in [&b""[..], b": ping\n\n: ping\r\n\r\n: pi"] {
            let (_, dialect) = detect("/v1/chat/completions");
            let mut meter = Meter::new(dialect.expect("openai"), true, &limits());
            meter.feed(quiet);
            meter.finish();
            assert_eq!(meter.skipped(), None);
        }
        let (_, dialect) = detect("/v1/chat/completions");
        let mut meter = Meter::new(dialect.expect("openai"), true, &limits());
        meter.feed(b": ping\n\n{\"error\":");
        meter.finish();
        assert_eq!(meter.skipped(), Some(SkipReason::MalformedEvent));
    }

    #[test]
    fn reads_usage_from_a_json_body_at_the_end() {
        let (_, dialect) = detect("/v1/completions");
        let mut meter = Meter::new(dialect.expect("openai"), false, &limits());
        let body = br#"{"model":"m","choices":[{"text":"hi"}],"usage":{"prompt_tokens":5,"completion_tokens":9}}"#;
        let (a, b) = body.split_at(30);
        assert_eq!(meter.feed(a) + meter.feed(b), 0);
        meter.finish();
        let obs = meter.observations();
        assert_eq!(
            (obs.input_tokens, obs.output_tokens, obs.model.as_deref()),
            (Some(5), Some(9), Some("m"))
        );
    }

    #[test]
    fn event_stream_content_type_is_recognised_with_parameters() {
        assert!(is_event_stream(Some(&HeaderValue::from_static(
            "text/event-stream; charset=utf-8"
        ))));
        assert!(is_event_stream(Some(&HeaderValue::from_static(
            "Text/Event-Stream"
        ))));
        assert!(!is_event_stream(Some(&HeaderValue::from_static(
            "application/json"
        ))));
        assert!(!is_event_stream(None));
    }
}
