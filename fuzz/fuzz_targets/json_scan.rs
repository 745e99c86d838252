//! The top-level JSON field scanner on any bytes: it never panics and keeps the same fields however the
//! body is cut into frames. Input: 1 byte of value bound, 2 of scan bound, 1 of split seed, then the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentap::decode::json::FieldScanner;
use tokentap_fuzz::frames;

const WANTED: &[&str] = &["model", "usage"];

type Found = (Option<Vec<u8>>, Option<Vec<u8>>, Option<String>, bool);

fn scan(max_value: usize, max_scan: usize, frames: &[&[u8]]) -> Found {
    let mut s = FieldScanner::new(WANTED, max_value, max_scan);
    frames.iter().for_each(|f| s.feed(f));
    (
        s.raw("model").map(<[u8]>::to_vec),
        s.raw("usage").map(<[u8]>::to_vec),
        s.string("model"),
        s.is_done(),
    )
}

fuzz_target!(|data: &[u8]| {
    let [v, s0, s1, seed, body @ ..] = data else {
        return;
    };
    let max_value = usize::from(*v) + 1;
    let max_scan = usize::from(u16::from_le_bytes([*s0, *s1])) + 1;
    let whole = scan(max_value, max_scan, &[body]);
    assert_eq!(scan(max_value, max_scan, &frames(body, *seed)), whole);
});
