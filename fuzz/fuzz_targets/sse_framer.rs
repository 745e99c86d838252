//! The SSE framer on any bytes: it never panics, never holds more than its bound, and decodes the same
//! events (and overflows at the same point) however the input is cut into frames.
//! Input: 2 bytes of bound, 1 byte of split seed, then the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentap::decode::sse::SseFramer;
use tokentap_fuzz::frames;

type Events = Vec<(Vec<u8>, Vec<u8>)>;

fn run(max: usize, frames: &[&[u8]]) -> (Events, bool) {
    let mut framer = SseFramer::new(max);
    let mut events = Vec::new();
    for frame in frames {
        let fed = framer.feed(frame, |e| events.push((e.event.to_vec(), e.data.to_vec())));
        assert!(framer.buffered_bytes() <= max, "held more than the bound");
        if fed.is_err() {
            return (events, true);
        }
    }
    (events, false)
}

fuzz_target!(|data: &[u8]| {
    let [a, b, seed, stream @ ..] = data else {
        return;
    };
    let max = usize::from(u16::from_le_bytes([*a, *b])) + 1;
    let whole = run(max, &[stream]);
    assert_eq!(run(max, &frames(stream, *seed)), whole);
});
