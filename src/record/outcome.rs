//! The one place that decides how a request ended, the `outcome` label. As in tower-http's `classify`,
//! the status is known at the head and the outcome only at the end: a 200 can still end in an upstream
//! reset, a cut, or an error event inside the stream. Every way an exchange ends is named by an [`End`];
//! [`classify`] turns it, with what the decoder saw, into the [`Outcome`].

/// How a request ended, the `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The response ended normally (whatever its status).
    Ok,
    /// The client went away before the response ended.
    Cancelled,
    /// The upstream could not be reached, broke the stream, or reported an error inside it.
    UpstreamError,
    /// A timeout cut the request.
    Timeout,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Cancelled => "cancelled",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Timeout => "timeout",
        }
    }
}

/// How the exchange ended, as the forwarding service or the response tap saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The response body ended: its last frame passed, or it had none.
    Complete,
    /// The exchange was dropped unfinished: the client went away.
    ClientGone,
    /// The upstream's body broke off with an error.
    UpstreamBroke,
    /// tokentap cut the stream itself: `timeouts.idle`, or a shutdown's grace period ran out.
    Cut,
    /// tokentap answered itself, before there was an upstream response.
    Refused(Refusal),
}

impl End {
    /// Whether the response reached the client whole: its body ended (or tokentap's own answer was
    /// sent), or the client left after the API's terminal event passed (`terminal_event`). The decoder
    /// reads what it still holds only then.
    pub fn delivered_whole(self, terminal_event: bool) -> bool {
        match self {
            End::Complete | End::Refused(Refusal::Declined) => true,
            End::ClientGone => terminal_event,
            End::UpstreamBroke | End::Cut | End::Refused(_) => false,
        }
    }
}

/// Why tokentap answered a request itself (the proxy's errors say which kind they are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The upstream could not be reached, failed before its head, or sent a head that cannot be passed on.
    UpstreamFailed,
    /// A deadline passed first: connecting, the upstream's head, the client's body, a shutdown's grace.
    TimedOut,
    /// The client's request body broke off.
    ClientBodyBroken,
    /// tokentap declined the request (too large, overloaded, a bad target, not supported): a complete
    /// answer, whose status says it was refused.
    Declined,
}

/// What the rest of the exchange knows at its end, besides how it ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// The API's terminal event passed: the client had the whole answer.
    pub terminal_event: bool,
    /// The decoder read an error reported inside the stream (e.g. an OpenAI `{"error":...}` event).
    pub error_event: bool,
    /// tokentap cut the client's request body for going idle (`timeouts.request_body_idle`).
    pub request_body_idle: bool,
}

/// The outcome of an exchange that ended as `end`.
///
/// - an upstream that broke because tokentap cut the client's stalled request body under it: `timeout`;
/// - a client that left after the terminal event passed had the whole answer: `ok`;
/// - an `ok` stream that carried an error event: `upstream_error`.
pub fn classify(end: End, seen: Seen) -> Outcome {
    let outcome = match end {
        End::Complete => Outcome::Ok,
        End::ClientGone => Outcome::Cancelled,
        End::UpstreamBroke => Outcome::UpstreamError,
        End::Cut => Outcome::Timeout,
        End::Refused(Refusal::UpstreamFailed) => Outcome::UpstreamError,
        End::Refused(Refusal::TimedOut) => Outcome::Timeout,
        End::Refused(Refusal::ClientBodyBroken) => Outcome::Cancelled,
        End::Refused(Refusal::Declined) => Outcome::Ok,
    };
    let outcome = match outcome {
        Outcome::UpstreamError if seen.request_body_idle => Outcome::Timeout,
        Outcome::Cancelled if seen.terminal_event => Outcome::Ok,
        other => other,
    };
    match outcome {
        Outcome::Ok if seen.error_event => Outcome::UpstreamError,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOTHING: Seen = Seen {
        terminal_event: false,
        error_event: false,
        request_body_idle: false,
    };
    const TERMINAL: Seen = Seen {
        terminal_event: true,
        ..NOTHING
    };
    const ERROR_EVENT: Seen = Seen {
        error_event: true,
        ..NOTHING
    };
    const BODY_IDLE: Seen = Seen {
        request_body_idle: true,
        ..NOTHING
    };

    #[test]
    fn each_end_has_its_outcome_when_nothing_else_was_seen() {
        assert_eq!(classify(End::Complete, NOTHING), Outcome::Ok);
        assert_eq!(classify(End::ClientGone, NOTHING), Outcome::Cancelled);
        assert_eq!(
            classify(End::UpstreamBroke, NOTHING),
            Outcome::UpstreamError
        );
        assert_eq!(classify(End::Cut, NOTHING), Outcome::Timeout);
    }

    #[test]
    fn a_client_gone_after_the_terminal_event_had_the_whole_answer() {
        assert_eq!(classify(End::ClientGone, TERMINAL), Outcome::Ok);
        assert_eq!(classify(End::Complete, TERMINAL), Outcome::Ok);
        assert_eq!(
            classify(End::UpstreamBroke, TERMINAL),
            Outcome::UpstreamError
        );
        assert_eq!(classify(End::Cut, TERMINAL), Outcome::Timeout);
    }

    #[test]
    fn an_error_event_turns_only_an_ok_end_into_upstream_error() {
        assert_eq!(classify(End::Complete, ERROR_EVENT), Outcome::UpstreamError);
        let both = Seen {
            terminal_event: true,
            error_event: true,
            ..NOTHING
        };
        assert_eq!(classify(End::ClientGone, both), Outcome::UpstreamError);
        assert_eq!(classify(End::ClientGone, ERROR_EVENT), Outcome::Cancelled);
        assert_eq!(classify(End::Cut, ERROR_EVENT), Outcome::Timeout);
    }

    #[test]
    fn an_upstream_broken_by_the_cut_of_an_idle_request_body_is_a_timeout() {
        assert_eq!(classify(End::UpstreamBroke, BODY_IDLE), Outcome::Timeout);
        assert_eq!(classify(End::Complete, BODY_IDLE), Outcome::Ok);
        assert_eq!(classify(End::ClientGone, BODY_IDLE), Outcome::Cancelled);
        let failed = End::Refused(Refusal::UpstreamFailed);
        assert_eq!(classify(failed, BODY_IDLE), Outcome::Timeout);
    }

    #[test]
    fn each_refusal_has_its_outcome() {
        let cases = [
            (Refusal::UpstreamFailed, Outcome::UpstreamError),
            (Refusal::TimedOut, Outcome::Timeout),
            (Refusal::ClientBodyBroken, Outcome::Cancelled),
            (Refusal::Declined, Outcome::Ok),
        ];
        for (refusal, outcome) in cases {
            assert_eq!(
                classify(End::Refused(refusal), NOTHING),
                outcome,
                "{refusal:?}"
            );
        }
    }
}
