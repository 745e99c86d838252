//! The Responses decoder's fast `response.*.delta` scanner against serde_json, any bytes: wherever the
//! scanner reads an event itself, it must leave exactly what serde_json's reading leaves (kind,
//! observations, channels, text); everything else it leaves to serde_json.
//! Input: 1 byte of flags (text copied or not), then lines, each one event (a `data:` prefix is taken
//! off, so the SSE fixtures are a corpus as they are).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentap::decode::dialect::{responses_both_ways, Observations};

fuzz_target!(|data: &[u8]| {
    let [flags, events @ ..] = data else {
        return;
    };
    for line in events.split(|&b| b == b'\n') {
        let event = line.strip_prefix(b"data:").unwrap_or(line).trim_ascii();
        let (fast, serde) = responses_both_ways(event, &Observations::default(), flags & 1 != 0);
        if let Some(fast) = fast {
            assert_eq!(Some(fast), serde, "{:?}", String::from_utf8_lossy(event));
        }
    }
});
