//! A request body held until whole (the default) or streamed upstream as it comes: the config line that
//! picks one, and what the upstream saw when tokentap gave up on such a body part way.

use std::time::Duration;

use tokentap::scripted::Upstream;

use super::WaitClosed;

/// The line to put under `limits:` for a held body (none: it is the default) or a streamed one.
pub fn hold_line(held: bool) -> &'static str {
    match held {
        true => "",
        false => "  hold_request_body_bytes: 0\n",
    }
}

/// After tokentap refused a body part way (a `408`, a `413`): a held one never reached the upstream; a
/// streamed one went with its head, and its upstream request was aborted (the connection closed within
/// `bound`).
pub async fn assert_upstream_let_go(upstream: &Upstream, held: bool, bound: Duration) {
    if held {
        assert_eq!(
            upstream.connection_count(),
            0,
            "a held body reached the upstream"
        );
    } else {
        upstream.wait_closed_within(0, bound).await;
    }
}
