//! Whether a request that failed on a reused connection is sent again, once, on a new one.
//!
//! A server closes a kept-alive connection when its keep-alive timer fires, and a request tokentap sends
//! at that moment crosses the close on the wire: the server never reads it, or reads it from a socket it
//! has already closed and resets the connection. That request was not served, and sending it again is
//! the only way the client gets the answer the server would have given. But a close or a reset without
//! a byte of answer is also what a server that read the request, worked on it, and then crashed or was
//! cut off looks like. Sent again, that request runs twice: a second generation (behind a load balancer,
//! on another replica), with whatever side effects it has (a gateway's billing, tool calls) repeated.
//! So a request is sent again only when it cannot have been served twice:
//!
//! 1. **Not a byte of it was written**: the server cannot have seen it ([`Why::NothingWritten`]).
//! 2. It is **idempotent**: its method is (RFC 9110 §9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE), or
//!    it carries an `Idempotency-Key` (the IETF httpapi draft) or `X-Idempotency-Key` header. Its sender
//!    said a second copy does no harm ([`Why::Idempotent`]); no bound in time, as Go's Transport.
//! 3. The close or reset came within [`WINDOW`] of the request's last byte leaving: the keep-alive race
//!    ([`Why::ClosedAsSent`]). A server that works on a request and then dies does so later than that.
//!
//! In every case the connection was reused (a new connection that fails is the server's answer),
//! nothing of an answer came back, the failure is a close or a reset (not a timeout, not a malformed
//! reply), and tokentap holds the whole body; a request that hyper handed back unsent is sent again
//! whatever its body (`mod.rs`).

use std::time::Duration;

use http::Request;

/// How long after a request's last byte left a close or reset still counts as the keep-alive race.
///
/// In the race the server closed before the request reached it, so its FIN, or the reset its kernel
/// sends for the data that arrives after the close, reaches tokentap at most one round trip after the
/// request's last byte left, plus the time tokentap's task takes to notice. A round trip is tens of
/// microseconds on loopback and under a millisecond in a datacenter: 100 ms leaves a hundredfold margin
/// for a loaded proxy and covers an upstream up to about 100 ms away, while a server that reads a
/// request, works on it and then fails has spent longer than that (a long prompt's prefill, a
/// non-streamed generation's seconds).
pub(super) const WINDOW: Duration = Duration::from_millis(100);

/// A held body at least this large gives its copy back once it can no longer be sent again (see
/// `Upstream::send`): its lease on the `held_bodies` budget should not wait for the answer's head,
/// which a non-streamed generation sends only at its end. A smaller one is not worth a timer.
pub(super) const RELEASE_COPY_BYTES: u64 = 64 << 10;

/// Why a request is sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Why {
    NothingWritten,
    Idempotent,
    ClosedAsSent,
}

/// What is known of a try that failed on a reused connection.
#[derive(Clone, Copy, Debug)]
pub(super) struct Failure {
    /// A byte of answer came back after the request went out.
    pub(super) answered: bool,
    /// A byte of the request was written.
    pub(super) written: bool,
    /// The connection closed or was reset (`UpstreamError::is_close`).
    pub(super) closed: bool,
    /// From the last byte written to when the failure was seen.
    pub(super) after_last_write: Duration,
}

/// Whether `request`, whose body tokentap holds, is sent again after `failure` (see the module's
/// documentation), and why.
pub(super) fn again<B>(request: &Request<B>, failure: &Failure) -> Option<Why> {
    if failure.answered || !failure.closed {
        return None;
    }
    if !failure.written {
        Some(Why::NothingWritten)
    } else if idempotent(request) {
        Some(Why::Idempotent)
    } else if failure.after_last_write <= WINDOW {
        Some(Why::ClosedAsSent)
    } else {
        None
    }
}

/// RFC 9110 §9.2.2's idempotent methods, or a request that names itself idempotent by its key (the
/// headers Go's Transport honours).
pub(super) fn idempotent<B>(request: &Request<B>) -> bool {
    let headers = request.headers();
    request.method().is_idempotent()
        || headers.contains_key("idempotency-key")
        || headers.contains_key("x-idempotency-key")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: &str, header: Option<&str>) -> Request<()> {
        let mut request = Request::builder()
            .method(method)
            .uri("/v1/chat/completions");
        if let Some(name) = header {
            request = request.header(name, "k-1");
        }
        request.body(()).expect("request")
    }

    fn closed_after(after_last_write: Duration) -> Failure {
        Failure {
            answered: false,
            written: true,
            closed: true,
            after_last_write,
        }
    }

    const LATE: Duration = Duration::from_secs(2);

    #[test]
    fn a_post_is_sent_again_only_within_the_window_of_its_last_byte() {
        let post = head("POST", None);
        let race = closed_after(Duration::from_micros(80));
        assert_eq!(again(&post, &race), Some(Why::ClosedAsSent));
        assert_eq!(again(&post, &closed_after(WINDOW)), Some(Why::ClosedAsSent));
        assert_eq!(
            again(&post, &closed_after(WINDOW + Duration::from_nanos(1))),
            None
        );
        assert_eq!(again(&post, &closed_after(LATE)), None);
        assert_eq!(again(&head("PATCH", None), &closed_after(LATE)), None);
    }

    #[test]
    fn idempotent_methods_and_keyed_requests_are_sent_again_however_late() {
        for method in ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"] {
            let got = again(&head(method, None), &closed_after(LATE));
            assert_eq!(got, Some(Why::Idempotent), "{method}");
        }
        for key in ["Idempotency-Key", "x-idempotency-key"] {
            let got = again(&head("POST", Some(key)), &closed_after(LATE));
            assert_eq!(got, Some(Why::Idempotent), "{key}");
        }
        assert_eq!(
            again(&head("POST", Some("x-request-id")), &closed_after(LATE)),
            None
        );
    }

    #[test]
    fn a_request_not_written_is_sent_again_whatever_its_method() {
        let unwritten = Failure {
            written: false,
            ..closed_after(LATE)
        };
        assert_eq!(
            again(&head("POST", None), &unwritten),
            Some(Why::NothingWritten)
        );
    }

    #[test]
    fn nothing_is_sent_again_after_a_byte_of_answer_or_a_failure_other_than_a_close() {
        for failure in [
            Failure {
                answered: true,
                ..closed_after(Duration::ZERO)
            },
            Failure {
                closed: false,
                ..closed_after(Duration::ZERO)
            },
            Failure {
                answered: true,
                written: false,
                ..closed_after(Duration::ZERO)
            },
        ] {
            assert_eq!(again(&head("GET", None), &failure), None, "{failure:?}");
        }
    }
}
