//! Every dialect's fast scanner against serde_json's reading, any bytes: wherever a scanner reads an
//! event itself, it must leave exactly what serde_json's reading leaves (kind, usage, model, the
//! server's timings, choices, channels, text); everything else it leaves to serde_json. The input's
//! form is `tokentap::decode::dialect::fuzz`'s: a byte of flags (the text copied, observations filled,
//! which dialect), then one event a line.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tokentap::decode::dialect::fuzz(data));
