//! Reading the response: line framers (SSE, NDJSON), the JSON field scanner, the API dialects, the
//! tokenizer and the decoder that puts them together.

pub mod dialect;
#[cfg(test)]
mod fixtures;
pub mod json_scan;
pub mod ndjson;
pub mod response;
pub mod sse;
pub mod tokenizer;
