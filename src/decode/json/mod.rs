//! Reading JSON, all of it here. Two readers for two kinds of input:
//!
//! - [`FieldScanner`] (`fields.rs`): a few top-level fields of a body that streams through in frames cut
//!   anywhere (a request's `model`, a non-streaming response's `model` and `usage`), without holding the
//!   body: a byte-level state machine, bounded in what it keeps.
//! - `Cursor` (`cursor.rs`, on the strings of `escape.rs`): a checked position in one JSON text held
//!   whole (an event of a stream, a held request body), whose readers check every byte as serde_json
//!   does and give up (`None`) wherever serde_json might read it otherwise. The dialects' scanners
//!   (`dialect/*/scan.rs`) and the request's message reader (`messages/`) are built of it.
//!
//! - [`Push`] (`push/`): any JSON text that arrives in pieces and must not be held whole (a WebSocket
//!   message inflated as it passes), read into tokens as it comes, short values captured, long ones
//!   only checked.
//!
//! serde_json itself reads everything these leave: the dialects' serde structs are the reference
//! the scanners are held to.

mod cursor;
mod escape;
mod fields;
mod push;
#[cfg(test)]
pub(in crate::decode) use push::tests::edited;

pub(in crate::decode) use cursor::{once, Cursor, Seen};
pub(in crate::decode) use escape::Str;
pub use fields::FieldScanner;
pub use push::{Push, Token, CAPTURE};
