//! The decoder of one response body: frames the bytes that pass (SSE or NDJSON for streams, a top-level
//! field scan for JSON bodies), hands each decoded event to the API dialect, and tells the exchange
//! which output-bearing events a frame carried (one mark per event and choice) and whether the API's
//! terminal event has passed. It only reads the bytes it is lent; forwarding never
//! waits on it. The framing follows the response's content type, not the path: `text/event-stream` is
//! SSE, `application/x-ndjson` (Ollama's streams) is NDJSON, anything else is one JSON body, except
//! for an API whose output is audio (speech, [`Carries::Audio`]): there a body that is neither SSE nor
//! JSON is the audio, and its first byte is the first output (the time to first audio), nothing more.
//!
//! When the stream cannot be understood (an event over the framer's bound, a payload the dialect cannot
//! parse) metering switches off for the rest of that response with a reason; the bytes keep flowing.

use http::HeaderValue;

use crate::config::Metering;
use crate::decode::dialect::{Carries, Dialect, EventKind, EventOutput, Observations};
use crate::decode::event::FramedEvent;
use crate::decode::json::FieldScanner;
use crate::decode::ndjson::NdjsonFramer;
use crate::decode::sse::SseFramer;
use crate::decode::tokenizer::TextCount;
use crate::govern::Lease;
use crate::record::finished::DecoderReport;
pub use crate::record::finished::SkipReason;
use crate::record::meter::Read;

/// Largest raw top-level value (e.g. `usage`) kept from a non-streaming body.
const MAX_BODY_FIELD_BYTES: usize = 4096;

/// How a response body is laid out, from its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/event-stream`.
    Sse,
    /// `application/x-ndjson` and its aliases: one JSON object a line.
    Ndjson,
    /// `application/json`, `…+json`, or no content type: one JSON body, read for its top-level fields.
    Json,
    /// Anything else (`audio/mpeg`, `application/octet-stream`, `text/plain`, …): the audio of an API
    /// whose output is audio, else read as one JSON body, as every body was before audio.
    Raw,
}

impl Format {
    /// The format a `Content-Type` announces (any parameters, any case).
    pub fn of(content_type: Option<&HeaderValue>) -> Format {
        let essence = content_type
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(str::trim)
            .unwrap_or_default();
        let is = |name: &str| essence.eq_ignore_ascii_case(name);
        let lower = essence.to_ascii_lowercase();
        if is("text/event-stream") {
            Format::Sse
        } else if [
            "application/x-ndjson",
            "application/ndjson",
            "application/jsonl",
        ]
        .iter()
        .any(|name| is(name))
        {
            Format::Ndjson
        } else if essence.is_empty()
            || is("application/json")
            || is("text/json")
            || lower.ends_with("+json")
        {
            Format::Json
        } else {
            Format::Raw
        }
    }
}

enum Framing {
    Sse(SseFramer),
    Ndjson(NdjsonFramer),
    Json(FieldScanner),
    /// A body of audio: whether its first byte has passed.
    Audio {
        started: bool,
    },
}

/// Everything but the framer: what the events have told so far.
struct Reading {
    dialect: Box<dyn Dialect>,
    obs: Observations,
    text: TextCount,
    skipped: Option<SkipReason>,
    error_event: bool,
    /// An SSE event was decoded: a body with other lines than comments and none of these was not an
    /// event stream at all.
    decoded_event: bool,
    /// The choices the current event advanced; reused from event to event.
    choices: Vec<u32>,
    /// An answer-bearing output (not reasoning) has passed.
    answered: bool,
    /// Reasoning passed before the first answer.
    reasoning_first: bool,
    /// An event that starts or continues a call of the client's tools has passed.
    tool_called: bool,
    /// Output events that carried reasoning.
    reasoning_events: u64,
}

impl Reading {
    /// Reads one event and appends a mark for each choice it carried output for.
    fn event(&mut self, event: &FramedEvent<'_>, marks: &mut Vec<u32>) {
        if self.skipped.is_some() {
            return;
        }
        self.decoded_event = true;
        // An event without data carries nothing in any dialect. `[DONE]` ends OpenAI's streams, and the
        // same marker some gateways add to every API ends theirs.
        match event.data.trim_ascii() {
            b"" => return,
            b"[DONE]" => {
                self.obs.ended = true;
                return;
            }
            _ => {}
        }
        self.choices.clear();
        let mut output = EventOutput::new(self.text.buffer(), &mut self.choices);
        let kind = self.dialect.on_event(event, &mut self.obs, &mut output);
        let channels = output.channels();
        self.text.after_event(self.obs.model.as_deref());
        if channels.tool_call && matches!(kind, EventKind::Output | EventKind::Other) {
            self.tool_called = true;
        }
        if kind == EventKind::Output {
            if channels.reasoning {
                self.reasoning_events += 1;
                self.reasoning_first |= !self.answered;
            }
            self.answered |= channels.answer;
        }
        match kind {
            EventKind::Output if self.choices.is_empty() => marks.push(0),
            EventKind::Output => marks.extend_from_slice(&self.choices),
            EventKind::Other => {}
            EventKind::Error => self.error_event = true,
            EventKind::Malformed => self.skipped = Some(SkipReason::MalformedEvent),
        }
    }
}

pub struct ResponseDecoder {
    framing: Framing,
    reading: Reading,
    /// What the framer's buffers hold of the governor's `event_bytes` (none when not governed).
    lease: Option<Lease>,
}

impl ResponseDecoder {
    /// `text` says whether (and with which tokenizer) the output text is to be counted.
    pub fn new(
        dialect: Box<dyn Dialect>, format: Format, limits: &Metering, text: TextCount,
    ) -> Self {
        let framing = match format {
            Format::Sse => Framing::Sse(SseFramer::new(limits.max_event_bytes)),
            Format::Ndjson => Framing::Ndjson(NdjsonFramer::new(limits.max_event_bytes)),
            Format::Raw if dialect.carries() == Carries::Audio => Framing::Audio { started: false },
            Format::Json | Format::Raw => Framing::Json(FieldScanner::new(
                dialect.body_fields(),
                MAX_BODY_FIELD_BYTES,
                limits.max_event_bytes,
            )),
        };
        ResponseDecoder {
            framing,
            lease: None,
            reading: Reading {
                dialect,
                obs: Observations::default(),
                text,
                skipped: None,
                error_event: false,
                decoded_event: false,
                choices: Vec::new(),
                answered: false,
                reasoning_first: false,
                tool_called: false,
                reasoning_events: 0,
            },
        }
    }

    /// Counts what the framer's buffers allocate in `lease` (the governor's `event_bytes`, the
    /// request's client's): from now on each change of their size is leased, and when the budget
    /// refuses, the framer's buffers are freed and the stream is no longer metered (it is forwarded
    /// all the same).
    pub fn govern(&mut self, lease: Lease) {
        self.lease = Some(lease);
        self.account();
    }

    fn account(&mut self) {
        let Some(lease) = &mut self.lease else {
            return;
        };
        let held = match &self.framing {
            Framing::Sse(framer) => framer.capacity(),
            Framing::Ndjson(framer) => framer.capacity(),
            Framing::Json(_) | Framing::Audio { .. } => 0,
        } as u64;
        if held == lease.bytes() {
            return;
        }
        if let Err(spent) = lease.resize(held) {
            match &mut self.framing {
                Framing::Sse(framer) => framer.release(),
                Framing::Ndjson(framer) => framer.release(),
                Framing::Json(_) | Framing::Audio { .. } => {}
            }
            lease.shrink(u64::MAX);
            let budget = lease.budget();
            (self.reading.skipped).get_or_insert(SkipReason::Unmetered(budget, spent));
        }
    }

    /// A stream of events (SSE or NDJSON), as opposed to one JSON body or a body of audio.
    pub fn is_streaming(&self) -> bool {
        matches!(self.framing, Framing::Sse(_) | Framing::Ndjson(_))
    }

    /// Reads one body frame and appends to `marks` the choice of each output it completed, in order
    /// (an event that advanced two choices leaves two marks).
    pub fn feed(&mut self, bytes: &[u8], marks: &mut Vec<u32>) {
        let ResponseDecoder {
            framing, reading, ..
        } = self;
        if reading.skipped.is_some() {
            return;
        }
        let fed = match framing {
            Framing::Json(scanner) => {
                scanner.feed(bytes);
                Ok(())
            }
            Framing::Sse(framer) => framer.feed(bytes, |event| reading.event(&event, marks)),
            Framing::Ndjson(framer) => framer.feed(bytes, |line| {
                let event = FramedEvent::unnamed(line);
                reading.event(&event, marks);
            }),
            Framing::Audio { started } => {
                if !*started && !bytes.is_empty() {
                    *started = true;
                    reading.answered = true;
                    marks.push(0);
                }
                Ok(())
            }
        };
        if fed.is_err() {
            reading.skipped.get_or_insert(SkipReason::EventTooLarge);
        }
        self.account();
        // Output events completed before the stream turned unreadable were real token arrivals,
        // whether or not the unreadable part came in the same frame: the figures depend only on the
        // bytes, never on where the network cut them into frames.
    }

    /// Called once at the end of the body (`complete`: it ended normally). A JSON body's fields are
    /// read now, and an NDJSON stream's last line if it had no LF, whose outputs are appended to
    /// `marks`. An SSE body that held no event at all is reported as malformed here. Returns the
    /// decoder's [`DecoderReport`].
    pub fn finish(&mut self, complete: bool, marks: &mut Vec<u32>) -> DecoderReport {
        self.flush(complete, marks);
        let streaming = self.is_streaming();
        let reading = &mut self.reading;
        let obs = &reading.obs;
        // The tokenizer counts only what the server did not report: the output without usage, the
        // reasoning streamed without usage details; never audio.
        let audio = reading.dialect.carries() == Carries::Audio;
        let metered = streaming && reading.skipped.is_none() && !audio;
        let whole = metered && obs.output_tokens.is_none();
        let reasoning = metered && obs.reasoning_tokens.is_none() && reading.reasoning_events > 0;
        let counted = if whole || reasoning {
            reading.text.finish(whole)
        } else {
            None
        };
        DecoderReport {
            streaming,
            audio,
            skipped: reading.skipped,
            error_event: reading.error_event,
            terminal_event: obs.ended,
            usage_output_tokens: obs.output_tokens,
            reasoning_tokens: obs.reasoning_tokens,
            input_tokens: obs.input_tokens,
            reasoning_events: reading.reasoning_events,
            cached_input_tokens: obs.cached_input_tokens,
            server: obs.server,
            tokenizer_count: counted.filter(|_| whole).map(|c| c.output),
            tokenizer_reasoning_count: counted.filter(|_| reasoning).map(|c| c.reasoning),
        }
    }

    fn flush(&mut self, complete: bool, marks: &mut Vec<u32>) {
        let ResponseDecoder {
            framing, reading, ..
        } = self;
        match framing {
            Framing::Json(scanner) => reading.dialect.on_body(scanner, &mut reading.obs),
            Framing::Ndjson(framer) if complete && reading.skipped.is_none() => {
                framer.finish(|line| {
                    let event = FramedEvent::unnamed(line);
                    reading.event(&event, marks);
                });
            }
            // An "event stream" that held other lines than comments but not a single complete event (a
            // JSON or HTML body, binary bytes under an SSE content type) is malformed, not a stream that
            // carried no tokens. Keep-alive comments alone (a client that left during a long prefill)
            // are not malformed.
            Framing::Sse(framer) => {
                if !reading.decoded_event && framer.saw_non_comment() {
                    reading.skipped.get_or_insert(SkipReason::MalformedEvent);
                }
            }
            Framing::Ndjson(_) | Framing::Audio { .. } => {}
        }
    }

    pub fn observations(&self) -> &Observations {
        &self.reading.obs
    }

    pub fn skipped(&self) -> Option<SkipReason> {
        self.reading.skipped
    }

    /// The server reported an error inside the stream (e.g. an OpenAI `{"error":...}` event).
    pub fn saw_error_event(&self) -> bool {
        self.reading.error_event
    }

    /// The API's terminal event has passed: the client has the whole answer.
    pub fn ended(&self) -> bool {
        self.reading.obs.ended
    }

    /// An answer-bearing output (text, refusal, tool call: not reasoning) has passed.
    pub fn answered(&self) -> bool {
        self.reading.answered
    }

    /// Reasoning passed before the first answer (or, with no answer yet, at all).
    pub fn reasoning_first(&self) -> bool {
        self.reading.reasoning_first
    }

    /// A call of the client's tools has started: the first event of one has passed (a tool-call delta,
    /// or a tool-use block's or item's start, which names the tool before its arguments stream).
    pub fn tool_called(&self) -> bool {
        self.reading.tool_called
    }

    /// What the frame just fed carried (`outputs`: the marks [`ResponseDecoder::feed`] appended), and
    /// what has passed so far, for the request's meter.
    pub fn read<'a>(&self, outputs: &'a [u32]) -> Read<'a> {
        let reading = &self.reading;
        Read {
            outputs,
            answered: reading.answered,
            reasoning_first: reading.reasoning_first,
            tool_called: reading.tool_called,
            ended: reading.obs.ended,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::dialect::detect;

    /// Feeds a frame; the number of output marks it made.
    fn feed(decoder: &mut ResponseDecoder, bytes: &[u8]) -> usize {
        let mut marks = Vec::new();
        decoder.feed(bytes, &mut marks);
        marks.len()
    }

    fn finish(decoder: &mut ResponseDecoder, complete: bool) -> usize {
        let mut marks = Vec::new();
        decoder.finish(complete, &mut marks);
        marks.len()
    }

    fn limits() -> Metering {
        Metering {
            max_event_bytes: 1024,
            model_scan_bytes: 1024,
        }
    }

    /// A decoder for the dialect of `path`, with the small test limits and no text counting.
    fn decoder_for(path: &str, format: Format) -> ResponseDecoder {
        let (_, dialect) = detect(path);
        let dialect = dialect.unwrap_or_else(|| panic!("no dialect for {path}"));
        ResponseDecoder::new(dialect, format, &limits(), TextCount::Off)
    }

    #[test]
    fn counts_output_events_and_reads_usage_from_a_stream() {
        let mut decoder = decoder_for("/v1/chat/completions", Format::Sse);
        let role =
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        assert_eq!(feed(&mut decoder, role.as_bytes()), 0);
        let two = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n";
        assert_eq!(feed(&mut decoder, two.as_bytes()), 2);
        let usage = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
        assert_eq!(feed(&mut decoder, usage.as_bytes()), 0);
        assert_eq!(decoder.observations().output_tokens, Some(2));
        assert_eq!(decoder.skipped(), None);
    }

    #[test]
    fn the_decoder_knows_when_the_first_answer_came_and_whether_reasoning_came_before() {
        let reasoning = b"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n";
        let answer = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
        let mut decoder = decoder_for("/v1/chat/completions", Format::Sse);
        assert_eq!(feed(&mut decoder, reasoning), 1);
        assert!(!decoder.answered() && decoder.reasoning_first());
        assert_eq!(feed(&mut decoder, reasoning), 1);
        assert_eq!(feed(&mut decoder, answer), 1);
        assert!(decoder.answered() && decoder.reasoning_first());
        assert_eq!(feed(&mut decoder, reasoning), 1);
        let mut marks = Vec::new();
        assert_eq!(decoder.finish(true, &mut marks).reasoning_events, 3);
        let mut decoder = decoder_for("/v1/chat/completions", Format::Sse);
        feed(&mut decoder, answer);
        feed(&mut decoder, reasoning);
        assert!(decoder.answered() && !decoder.reasoning_first());
    }

    /// Each API's stream that calls a tool, in the shape its servers send: the decoder says a tool call
    /// has started at the event that starts it, not before (text or reasoning first), and never in a
    /// stream without one.
    #[test]
    fn the_decoder_knows_when_a_tool_call_starts_in_every_dialect() {
        let cases: [(&str, Format, &[&str], &str); 4] = [
            (
                "/v1/chat/completions",
                Format::Sse,
                &[
                    r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
                    r#"data: {"choices":[{"index":0,"delta":{"reasoning_content":"need weather"}}]}"#,
                ],
                r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"id":"chatcmpl-tool-1","type":"function","index":0,"function":{"name":"get_weather","arguments":""}}]}}]}"#,
            ),
            (
                "/v1/responses",
                Format::Sse,
                &[
                    r#"event: response.created
data: {"type":"response.created","response":{"id":"resp_1","status":"in_progress"}}"#,
                    r#"event: response.output_text.delta
data: {"type":"response.output_text.delta","output_index":0,"delta":"Let me check."}"#,
                ],
                r#"event: response.output_item.added
data: {"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":""}}"#,
            ),
            (
                "/v1/messages",
                Format::Sse,
                &[
                    r#"event: message_start
data: {"type":"message_start","message":{"model":"claude","usage":{"input_tokens":10,"output_tokens":1}}}"#,
                    r#"event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Checking."}}"#,
                ],
                r#"event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}"#,
            ),
            (
                "/api/chat",
                Format::Ndjson,
                &[
                    r#"{"model":"m","message":{"role":"assistant","content":"","thinking":"hm"},"done":false}"#,
                ],
                r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},"done":false}"#,
            ),
        ];
        for (path, format, before, call) in cases {
            let separator = if format == Format::Ndjson {
                "\n"
            } else {
                "\n\n"
            };
            let mut decoder = decoder_for(path, format);
            for event in before {
                feed(&mut decoder, format!("{event}{separator}").as_bytes());
                assert!(!decoder.tool_called(), "{path}: before the call: {event}");
            }
            feed(&mut decoder, format!("{call}{separator}").as_bytes());
            assert!(decoder.tool_called(), "{path}: {call}");
        }
    }

    #[test]
    fn empty_and_done_events_carry_nothing_in_any_dialect() {
        for path in [
            "/v1/messages",
            "/v1/responses",
            "/generate_stream",
            "/completion",
        ] {
            let mut decoder = decoder_for(path, Format::Sse);
            assert_eq!(
                feed(&mut decoder, b"event: ping\ndata:\n\ndata: [DONE]\n\n"),
                0,
                "{path}"
            );
            assert_eq!(decoder.skipped(), None, "{path}");
        }
    }

    #[test]
    fn done_ends_the_stream_in_every_dialect() {
        for path in ["/v1/chat/completions", "/v1/completions", "/v1/messages"] {
            let mut decoder = decoder_for(path, Format::Sse);
            feed(&mut decoder, b"data: {\"choices\":[]}\n\n: ping\n\n");
            assert!(!decoder.ended(), "{path}");
            feed(&mut decoder, b"data: [DONE]\n\n");
            assert!(decoder.ended(), "{path}");
        }
    }

    #[test]
    fn oversized_event_switches_metering_off() {
        let mut decoder = decoder_for("/v1/chat/completions", Format::Sse);
        let big = format!("data: {}\n\n", "x".repeat(4096));
        assert_eq!(feed(&mut decoder, big.as_bytes()), 0);
        assert_eq!(decoder.skipped(), Some(SkipReason::EventTooLarge));
        assert_eq!(
            feed(
                &mut decoder,
                b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"
            ),
            0
        );
    }

    #[test]
    fn reads_usage_from_a_json_body_at_the_end() {
        let mut decoder = decoder_for("/v1/completions", Format::Json);
        let body = br#"{"model":"m","choices":[{"text":"hi"}],"usage":{"prompt_tokens":5,"completion_tokens":9}}"#;
        let (a, b) = body.split_at(30);
        assert_eq!(feed(&mut decoder, a) + feed(&mut decoder, b), 0);
        finish(&mut decoder, true);
        let obs = decoder.observations();
        assert_eq!(
            (obs.input_tokens, obs.output_tokens, obs.model.as_deref()),
            (Some(5), Some(9), Some("m"))
        );
    }

    #[test]
    fn format_follows_the_content_type_with_parameters_in_any_case() {
        let of = |ct: &'static str| Format::of(Some(&HeaderValue::from_static(ct)));
        assert_eq!(of("text/event-stream; charset=utf-8"), Format::Sse);
        assert_eq!(of("Text/Event-Stream"), Format::Sse);
        assert_eq!(of("application/x-ndjson"), Format::Ndjson);
        assert_eq!(of("application/x-ndjson; charset=utf-8"), Format::Ndjson);
        assert_eq!(of("application/json"), Format::Json);
        assert_eq!(of("application/json; charset=utf-8"), Format::Json);
        assert_eq!(of("application/problem+json"), Format::Json);
        assert_eq!(Format::of(None), Format::Json);
        assert_eq!(of("audio/mpeg"), Format::Raw);
        assert_eq!(of("application/octet-stream"), Format::Raw);
        assert_eq!(of("text/plain; charset=utf-8"), Format::Raw);
    }

    #[test]
    fn ndjson_last_line_without_lf_is_read_only_when_the_body_ended_normally() {
        let body = b"{\"model\":\"m\",\"response\":\"a\",\"done\":false}\n{\"model\":\"m\",\"response\":\"b\",\"done\":false}";
        let mut decoder = decoder_for("/api/generate", Format::Ndjson);
        assert_eq!(feed(&mut decoder, body), 1);
        assert_eq!(finish(&mut decoder, true), 1);
        let mut decoder = decoder_for("/api/generate", Format::Ndjson);
        assert_eq!(feed(&mut decoder, body), 1);
        assert_eq!(finish(&mut decoder, false), 0);
        assert_eq!(decoder.skipped(), None);
    }

    #[test]
    fn a_body_of_audio_has_one_output_at_its_first_byte_and_no_tokens() {
        let mut decoder = decoder_for("/v1/audio/speech", Format::Raw);
        assert_eq!(feed(&mut decoder, b""), 0, "an empty frame is not audio");
        assert_eq!(feed(&mut decoder, b"ID3\x04"), 1);
        assert!(decoder.answered());
        assert_eq!(feed(&mut decoder, &[0xff; 4096]), 0, "only the first byte");
        let mut marks = Vec::new();
        let report = decoder.finish(true, &mut marks);
        assert!(marks.is_empty());
        assert!(report.audio && !report.streaming);
        assert_eq!((report.usage_output_tokens, report.skipped), (None, None));
        // Every other API reads such a body as JSON, as before: no output.
        let mut decoder = decoder_for("/v1/chat/completions", Format::Raw);
        assert_eq!(feed(&mut decoder, b"hello"), 0);
        assert!(!decoder.finish(true, &mut marks).audio);
    }

    #[test]
    fn a_stream_without_a_single_event_is_malformed() {
        let mut decoder = decoder_for("/v1/chat/completions", Format::Sse);
        assert_eq!(
            feed(
                &mut decoder,
                b"{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n"
            ),
            0
        );
        finish(&mut decoder, true);
        assert_eq!(decoder.skipped(), Some(SkipReason::MalformedEvent));
        for quiet in [&b""[..], b": ping\n\n: ping\r\n\r\n: pi"] {
            let mut decoder = decoder_for("/v1/chat/completions", Format::Sse);
            feed(&mut decoder, quiet);
            finish(&mut decoder, true);
            assert_eq!(decoder.skipped(), None);
        }
        let mut decoder = decoder_for("/v1/chat/completions", Format::Sse);
        feed(&mut decoder, b": ping\n\n{\"error\":");
        finish(&mut decoder, true);
        assert_eq!(decoder.skipped(), Some(SkipReason::MalformedEvent));
    }
}
