//! Body wrappers that observe the bytes passing through the proxy and hand back the very same frames:
//! [`RequestTap`] reads the request's `model` on its way upstream (and cuts a body over its size limit),
//! [`ResponseTap`] timestamps the response's frames on their way to the client and finishes the
//! [`exchange`] when the body ends; [`session`] relays an upgraded (WebSocket) session's bytes both ways,
//! and [`realtime`] meters the responses inside it as its frames pass. The exchange is the request's state the taps feed: it runs the
//! response through its decoder (`decode`) and, once, records the result (`record`).

pub mod context;
pub mod exchange;
pub mod identity;
mod idle;
mod list_read;
#[cfg(test)]
mod mock;
pub mod realtime;
mod request;
mod response;
pub mod session;

pub use idle::IdleTimer;
pub use request::{Leftover, ModelScan, RequestSeen, RequestTap};
pub use response::{Arrived, BoxError, ReadAt, ResponseTap, StreamCut};
