//! Upstream scripts more than one suite answers with, beside the library's own (`tokentap::scripted`).

use std::sync::Arc;
use std::time::Duration;

use tokentap::scripted::*;

/// The rest of a script, once `open` says so: a gate, opened by what the test has seen happen, where a
/// sleep would guess how long that takes on this machine. It looks every 10 ms, for at most
/// [`super::HANG`], then goes on all the same. `then` must end the script (`Close`, `Reset`, a
/// keep-alive, or another gate whose steps do), since the looking stops only there.
pub fn once(open: impl Fn() -> bool + Send + Sync + 'static, then: Vec<Step>) -> Step {
    const LOOK: Duration = Duration::from_millis(10);
    assert!(
        matches!(
            then.last(),
            Some(
                Step::Close
                    | Step::Reset
                    | Step::KeepAliveFor(_)
                    | Step::KeepAliveThenReset(_)
                    | Step::Each(..)
            )
        ),
        "the steps after a gate end the script"
    );
    let looks = (super::HANG.as_millis() / LOOK.as_millis()) as u64;
    let make: Make = Arc::new(move |turn| match open() || turn + 1 == looks {
        true => then.clone(),
        false => vec![Step::Sleep(LOOK)],
    });
    Step::Each(0..looks, make)
}

/// A chat stream that sends its role chunk, then holds for `hold` before its one content chunk and
/// `[DONE]`: an answer slow enough to keep its upstream slot busy.
pub fn slow_stream(hold: Duration) -> Vec<Step> {
    vec![
        sse_head(),
        chunk(ROLE_CHUNK.as_bytes()),
        Step::Sleep(hold),
        chunk(content_chunk("late").as_bytes()),
        chunk(DONE.as_bytes()),
        last_chunk(),
    ]
}

/// An SSE answer of `frames` (captured events), each its own chunk, 1 ms apart.
pub fn streamed(frames: &[Vec<u8>]) -> Vec<Step> {
    let mut steps = vec![sse_head()];
    for frame in frames {
        steps.push(chunk(frame));
        steps.push(Step::Sleep(ms(1)));
    }
    steps.push(last_chunk());
    steps
}

/// A chat stream: its first token after `first`, `tokens` in all 5 ms apart, with usage (7 prompt
/// tokens).
pub fn tokens_after(first: Duration, tokens: usize) -> Vec<Step> {
    let mut steps = vec![sse_head(), Step::Sleep(first)];
    for i in 0..tokens {
        if i > 0 {
            steps.push(Step::Sleep(ms(5)));
        }
        steps.push(chunk(content_chunk(&format!("t{i}")).as_bytes()));
    }
    steps.push(chunk(usage_chunk(7, tokens as u64).as_bytes()));
    steps.push(chunk(DONE.as_bytes()));
    steps.push(last_chunk());
    steps
}

/// The request number a test's client put in the body (`"seed":N`), 0 when there is none.
pub fn seed(request: &RecordedRequest) -> usize {
    let body = String::from_utf8_lossy(&request.body);
    body.split("\"seed\":")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or(0)
}
