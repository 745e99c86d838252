//! Reading the exchange: the request's message list (as digests, for conversations), a form upload's
//! fields (`form.rs`), and the response:
//! the event every framer hands on, line framers (SSE, NDJSON), the JSON readers (`json/`), the API
//! dialects, the tokenizer and the response decoder that puts them together.

pub mod dialect;
pub mod event;
#[cfg(test)]
mod fixtures;
pub mod form;
pub mod json;
pub mod messages;
pub mod ndjson;
pub mod realtime;
pub mod response;
pub mod sse;
pub mod tokenizer;
pub mod websocket;
