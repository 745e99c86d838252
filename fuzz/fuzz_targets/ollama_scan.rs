//! The Ollama decoder's fast line scanner against serde_json, any bytes: wherever the scanner reads a
//! line itself, it must leave exactly what serde_json's reading leaves (kind, observations, channels,
//! text); everything else it leaves to serde_json. The input's form is
//! `tokentap::decode::dialect::Scanned::fuzz`'s: a byte of flags, then one line (event) a line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentap::decode::dialect::Scanned;

fuzz_target!(|data: &[u8]| Scanned::Ollama.fuzz(data));
