//! The one place that decides how a request ended, the `outcome` label. As in tower-http's `classify`,
//! the status is known at the head and the outcome only at the end: a 200 can still end in an upstream
//! reset, a cut, or an error event inside the stream. Every way an exchange ends is named by an [`End`];
//! [`classify`] turns it, with what the decoder saw, into the [`Outcome`].

use crate::error::ProxyError;

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
#[derive(Debug, Clone, Copy)]
pub enum End<'a> {
    /// The response body ended: its last frame passed, or it had none.
    Complete,
    /// The exchange was dropped unfinished: the client went away.
    ClientGone,
    /// The upstream's body broke off with an error.
    UpstreamBroke,
    /// tokentap cut the stream itself: `timeouts.idle`, or a shutdown's grace period ran out.
    Cut,
    /// tokentap answered with this error itself, before there was an upstream response.
    Refused(&'a ProxyError),
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
pub fn classify(end: End<'_>, seen: Seen) -> Outcome {
    let outcome = match end {
        End::Complete => Outcome::Ok,
        End::ClientGone => Outcome::Cancelled,
        End::UpstreamBroke => Outcome::UpstreamError,
        End::Cut => Outcome::Timeout,
        End::Refused(error) => refused(error),
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

fn refused(error: &ProxyError) -> Outcome {
    match error {
        ProxyError::UpstreamUnreachable { .. }
        | ProxyError::UpstreamFailed { .. }
        | ProxyError::UpstreamBadStatus { .. } => Outcome::UpstreamError,
        ProxyError::UpstreamConnectTimeout { .. }
        | ProxyError::UpstreamHeadersTimeout { .. }
        | ProxyError::RequestBodyIdle { .. }
        | ProxyError::ShutdownCut => Outcome::Timeout,
        ProxyError::ClientBodyBroken => Outcome::Cancelled,
        // A complete answer to a request tokentap refused: the status says it was refused.
        ProxyError::RequestBodyTooLarge { .. }
        | ProxyError::UpstreamOverloaded { .. }
        | ProxyError::BadTarget { .. }
        | ProxyError::NotImplemented { .. } => Outcome::Ok,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
        let failed = ProxyError::UpstreamFailed {
            upstream: "u".into(),
            reason: "reset".into(),
        };
        assert_eq!(classify(End::Refused(&failed), BODY_IDLE), Outcome::Timeout);
    }

    #[test]
    fn each_refusal_has_its_outcome() {
        let upstream = || "127.0.0.1:1".to_owned();
        let cases = [
            (
                ProxyError::UpstreamUnreachable {
                    upstream: upstream(),
                    reason: "refused".into(),
                },
                Outcome::UpstreamError,
            ),
            (
                ProxyError::UpstreamBadStatus {
                    upstream: upstream(),
                    status: 101,
                    why: "x",
                },
                Outcome::UpstreamError,
            ),
            (
                ProxyError::UpstreamConnectTimeout {
                    upstream: upstream(),
                },
                Outcome::Timeout,
            ),
            (
                ProxyError::UpstreamHeadersTimeout {
                    upstream: upstream(),
                    after: Duration::from_secs(1),
                },
                Outcome::Timeout,
            ),
            (
                ProxyError::RequestBodyIdle {
                    after: Duration::from_secs(1),
                },
                Outcome::Timeout,
            ),
            (ProxyError::ShutdownCut, Outcome::Timeout),
            (ProxyError::ClientBodyBroken, Outcome::Cancelled),
            (ProxyError::RequestBodyTooLarge { limit: 1 }, Outcome::Ok),
            (ProxyError::UpstreamOverloaded { limit: 1 }, Outcome::Ok),
            (ProxyError::BadTarget { reason: "x" }, Outcome::Ok),
            (ProxyError::NotImplemented { what: "x" }, Outcome::Ok),
        ];
        for (error, outcome) in cases {
            assert_eq!(classify(End::Refused(&error), NOTHING), outcome, "{error}");
        }
    }
}
