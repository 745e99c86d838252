//! How a request's output token count `N` is formed from what the stream offered: the server's usage,
//! a tokenizer's count of the streamed text, and the number of output-bearing events that passed.
//!
//! Preference follows what is most exact: usage, else a tokenizer, else one token an event. One
//! invariant holds whatever the source: `N` is never below the number of output-bearing events (each
//! carried at least one token). A server whose usage reports fewer is misreporting: some leave the
//! reasoning they streamed out of `completion_tokens` and report it apart, in the usage details. Then the
//! reasoning tokens are added back, the result is raised to the event count if still below it, and the
//! source says `usage_corrected`, so the disagreement is visible.
//!
//! Without usage, what the client saw is counted (a tokenizer on the text, else one token an event),
//! and the server may have generated tokens the client never sees: a tool-call parser streams the
//! call's name and arguments but not the markup around them (hermes' `<tool_call>{"name": …,
//! "arguments":`), a reasoning parser strips its markers and streams the reasoning apart. Measured
//! against vLLM, such counts were 52–71 % below the server's. A count made without usage on a stream
//! that carried a tool call or reasoning is therefore a lower bound, and its source says so: `floor`.

/// Where a request's output token count came from, the `token_source` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// The usage the server reported, as reported.
    Usage,
    /// The server's usage was below the output-bearing events streamed, and was corrected.
    UsageCorrected,
    /// The configured tokenizer, counting the streamed output text.
    Tokenizer,
    /// One token per output-bearing event.
    Chunks,
    /// Counted without usage (a tokenizer, or one per event) on a stream that carried a tool call or
    /// reasoning, whose server generated tokens the client never saw: a lower bound.
    Floor,
}

impl TokenSource {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenSource::Usage => "usage",
            TokenSource::UsageCorrected => "usage_corrected",
            TokenSource::Tokenizer => "tokenizer",
            TokenSource::Chunks => "chunks",
            TokenSource::Floor => "floor",
        }
    }

    /// Every source, in the order the docs list them.
    pub const ALL: [TokenSource; 5] = [
        TokenSource::Usage,
        TokenSource::UsageCorrected,
        TokenSource::Tokenizer,
        TokenSource::Chunks,
        TokenSource::Floor,
    ];
}

/// What the response offered for counting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offered {
    /// The server's output tokens (`completion_tokens`, `output_tokens`, `eval_count`, …).
    pub usage: Option<u64>,
    /// The reasoning tokens the usage details report.
    pub reasoning: Option<u64>,
    /// Output-bearing events that passed (one per event and choice).
    pub events: u64,
    /// The response was a stream of events (a single JSON body has no events to count).
    pub streaming: bool,
    /// The output was audio: an event is a piece of audio, not a token, so the usage is the only
    /// count, taken as reported (never raised to the events), and without it there is none.
    pub audio: bool,
    /// The stream carried output the server parsed out of what it generated (a tool call, or reasoning
    /// streamed apart): what the client saw is less than what was generated.
    pub parsed: bool,
}

/// `N` and its source; `None` when nothing can be known (a JSON body without usage). `tokenizer` is
/// asked only when the server reported no usage.
pub fn output_tokens(
    offered: Offered, tokenizer: impl FnOnce() -> Option<u64>,
) -> Option<(u64, TokenSource)> {
    let events = offered.events;
    if offered.audio {
        return offered.usage.map(|n| (n, TokenSource::Usage));
    }
    match offered.usage {
        Some(n) if n >= events => Some((n, TokenSource::Usage)),
        Some(n) => {
            let with_reasoning = n.saturating_add(offered.reasoning.unwrap_or(0));
            Some((with_reasoning.max(events), TokenSource::UsageCorrected))
        }
        None if !offered.streaming => None,
        None if offered.parsed => Some((tokenizer().unwrap_or(0).max(events), TokenSource::Floor)),
        None => match tokenizer() {
            Some(n) if n >= events => Some((n, TokenSource::Tokenizer)),
            _ => Some((events, TokenSource::Chunks)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(usage: Option<u64>, reasoning: Option<u64>, events: u64) -> Offered {
        Offered {
            usage,
            reasoning,
            events,
            streaming: true,
            audio: false,
            parsed: false,
        }
    }

    #[test]
    fn audio_is_counted_by_its_usage_alone() {
        let audio = |usage| Offered {
            audio: true,
            ..stream(usage, None, 3)
        };
        // Three pieces of audio are not three tokens: without usage there is no count.
        assert_eq!(output_tokens(audio(None), || Some(9)), None);
        // Usage as reported, even below the events: a piece of audio is not a token.
        assert_eq!(
            output_tokens(audio(Some(2)), || None),
            Some((2, TokenSource::Usage))
        );
    }

    #[test]
    fn without_usage_a_stream_with_a_tool_call_or_reasoning_is_a_floor() {
        let parsed = Offered {
            parsed: true,
            ..stream(None, None, 366)
        };
        // The hermes parser's markup is generated, never streamed: one per event is a lower bound.
        assert_eq!(
            output_tokens(parsed, || None),
            Some((366, TokenSource::Floor))
        );
        // A tokenizer counts the visible text only: still a floor, never below the events.
        assert_eq!(
            output_tokens(parsed, || Some(420)),
            Some((420, TokenSource::Floor))
        );
        assert_eq!(
            output_tokens(parsed, || Some(12)),
            Some((366, TokenSource::Floor))
        );
        // With usage, the server's count is exact whatever it parsed.
        let with_usage = Offered {
            usage: Some(1138),
            ..parsed
        };
        assert_eq!(
            output_tokens(with_usage, || None),
            Some((1138, TokenSource::Usage))
        );
    }

    #[test]
    fn usage_wins_when_it_covers_the_events() {
        // vLLM merges tokens into fewer events under load: usage above the events is exact.
        let got = output_tokens(stream(Some(2560), None, 2287), || Some(1));
        assert_eq!(got, Some((2560, TokenSource::Usage)));
        // Reasoning counted inside completion_tokens (OpenAI's way) is not added again.
        let got = output_tokens(stream(Some(400), Some(340), 390), || None);
        assert_eq!(got, Some((400, TokenSource::Usage)));
    }

    #[test]
    fn usage_that_leaves_reasoning_out_gets_it_back() {
        // 2 reported, 340 reasoning reported apart, 342 events streamed.
        let got = output_tokens(stream(Some(2), Some(340), 342), || None);
        assert_eq!(got, Some((342, TokenSource::UsageCorrected)));
        // Merged events: the reasoning details are the better figure.
        let got = output_tokens(stream(Some(2), Some(340), 300), || None);
        assert_eq!(got, Some((342, TokenSource::UsageCorrected)));
    }

    #[test]
    fn usage_below_the_events_is_raised_to_them() {
        let got = output_tokens(stream(Some(3), None, 10), || None);
        assert_eq!(got, Some((10, TokenSource::UsageCorrected)));
    }

    #[test]
    fn tokenizer_counts_only_without_usage_and_never_below_the_events() {
        let mut asked = false;
        let got = output_tokens(stream(Some(5), None, 5), || {
            asked = true;
            Some(9)
        });
        assert_eq!((got, asked), (Some((5, TokenSource::Usage)), false));
        let got = output_tokens(stream(None, None, 5), || Some(7));
        assert_eq!(got, Some((7, TokenSource::Tokenizer)));
        let got = output_tokens(stream(None, None, 5), || Some(4));
        assert_eq!(got, Some((5, TokenSource::Chunks)));
        let got = output_tokens(stream(None, None, 5), || None);
        assert_eq!(got, Some((5, TokenSource::Chunks)));
    }

    #[test]
    fn a_json_body_without_usage_has_no_count() {
        let body = Offered::default();
        assert_eq!(output_tokens(body, || Some(3)), None);
        let body = Offered {
            usage: Some(12),
            ..Offered::default()
        };
        assert_eq!(output_tokens(body, || None), Some((12, TokenSource::Usage)));
    }
}
