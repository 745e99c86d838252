//! Reading the response: line framers (SSE, NDJSON), the JSON field scanner, the API dialects, the
//! tokenizer and the meter that puts them together.

pub mod dialect;
#[cfg(test)]
mod fixtures;
pub mod json_scan;
pub mod meter;
pub mod ndjson;
pub mod sse;
pub mod tokenizer;
