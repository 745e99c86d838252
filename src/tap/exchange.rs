//! One request/response exchange from t_arrive to t_end, as the taps see it: the request's identity
//! and slots, the response's decoder, and the request's meter (`record::meter`). The taps say *when*
//! (a response frame passed, the body ended, the client left); the decoder reads what a frame carried;
//! the meter says *what* that means for the request's figures and writes the finished request to every
//! sink, once.
//!
//! The state lives in an [`ExchangeGuard`]: first inside the forwarding future, then inside the response
//! body. Whichever way the exchange ends — the body's last frame, an upstream error, or the guard being
//! dropped because the client went away — it is finished exactly once, and so is the request's
//! upstream-connection slot (`limits.max_upstream_connections`) given back. A client that goes away
//! after the API's terminal event has passed (the openai SDK's sync stream closes at `data: [DONE]`,
//! before the server's chunked terminator) had the whole answer: that request is complete, and ends
//! when the terminal event passed.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::decode::dialect::timings::tgi_headers;
use crate::decode::dialect::Dialect;
use crate::decode::messages;
use crate::decode::response::{Format, ResponseDecoder};
use crate::decode::tokenizer::TextCount;
use crate::govern::{Budget, Client};
use crate::record::api::Api;
use crate::record::conversations::{MessageList, Unread};
use crate::record::meter::{Ending, Listed, Meter, Names};
use crate::record::outcome::End;
use crate::record::server::ServerTimings;
use crate::record::trace::TraceContext;
use crate::shutdown::Counted;
pub use crate::tap::context::{ExchangeContext, Settings};
use crate::tap::identity::{Identity, UNKNOWN};
pub use crate::tap::list_read::HeldBody;
use crate::tap::list_read::ListRead;
use crate::tap::RequestSeen;

pub struct Exchange {
    context: Arc<ExchangeContext>,
    /// The settings current at the request's admission, which it finishes under.
    settings: Arc<Settings>,
    api: Api,
    method: Method,
    path: String,
    /// Wall-clock arrival.
    start: SystemTime,
    meter: Meter,
    request_model: Arc<RequestSeen>,
    dialect: Option<Box<dyn Dialect>>,
    decoder: Option<ResponseDecoder>,
    /// The choice of each output the decoder found in the frame being read; reused.
    marks: Vec<u32>,
    /// The server's timings its response headers carried (TGI's `x-queue-time`).
    header_timings: ServerTimings,
    /// This request in [`ExchangeContext::requests`], until it has been emitted (dropped with it).
    _counted: Counted,
    /// One of `limits.max_upstream_connections`, and one of its client connection's
    /// `limits.max_upstream_per_connection`, held from forwarding until the exchange finishes.
    upstream_permits: [Option<OwnedSemaphorePermit>; 2],
    /// The request's id and tenant, once its head was read.
    identity: Option<Identity>,
    /// The request's message list, read off the held body beside the forwarding: `None` when the API
    /// carries none or recognition is off.
    messages: Option<ListRead>,
    /// Metered from a packet capture (`capture/`), not forwarded.
    captured: bool,
}

impl Exchange {
    pub fn begin(
        context: Arc<ExchangeContext>, api: Api, dialect: Option<Box<dyn Dialect>>, method: Method,
        path: String, arrive: Instant, request_model: Arc<RequestSeen>,
    ) -> Self {
        let counted = context.requests.enter();
        let settings = context.settings();
        let meter = Meter::begin(&settings.meter, api, arrive);
        Exchange {
            context,
            settings,
            api,
            method,
            path,
            start: SystemTime::now(),
            meter,
            request_model,
            dialect,
            decoder: None,
            marks: Vec::new(),
            header_timings: ServerTimings::default(),
            _counted: counted,
            upstream_permits: [None, None],
            identity: None,
            messages: None,
            captured: false,
        }
    }

    /// The request was read off a packet capture, its head's first packet at wall-clock `start`.
    pub fn captured(&mut self, start: SystemTime) {
        self.captured = true;
        self.start = start;
    }

    /// The held request body, just sent upstream: its message list is read now, while the upstream
    /// works, for the conversation this request continues (`list_read.rs` says where and how far).
    /// `None`: the body streams (too large to hold), so its list is not read.
    pub fn read_messages(&mut self, body: Option<HeldBody>) {
        let recognising = self.settings.meter.conversations.is_some();
        if !recognising || !messages::has_messages(self.api) {
            return;
        }
        let lease = (self.context.governor).lease(Budget::MessageLists, &self.client());
        self.messages = Some(ListRead::start(
            self.api,
            body,
            &self.context.readers,
            lease,
        ));
    }

    /// Reads the request's id and tenant, and the trace it joins (`traces:`), from its head (the head
    /// itself is left as it is); `address`: the client's.
    pub fn identify(&mut self, headers: &HeaderMap, address: Option<IpAddr>) {
        self.identity = Some(self.settings.identify.of(headers, address));
    }

    /// Who the client is for the governor's shares (once the head was read).
    pub fn client(&self) -> Client {
        self.identity
            .as_ref()
            .map_or(Client::Unknown, |i| i.client.clone())
    }

    /// Who sent the request (its id, tenant, trace), once its head was read: a realtime session's
    /// responses are its handshake's.
    pub fn identity(&self) -> Option<&Identity> {
        self.identity.as_ref()
    }

    /// The trace the request joins and its span's id, once its head was read (`traces:`): what
    /// `traces.propagate` sends upstream.
    pub fn trace(&self) -> Option<&TraceContext> {
        self.identity.as_ref()?.trace.as_ref()
    }

    /// Holds `permit` (an upstream slot) and `share` (one of its client connection's) until the exchange
    /// finishes, however it ends.
    pub fn hold(&mut self, permit: OwnedSemaphorePermit, share: Option<OwnedSemaphorePermit>) {
        self.upstream_permits = [Some(permit), share];
    }

    /// The response head arrived. Successful responses of a known API are metered from here on.
    pub fn on_response(&mut self, status: StatusCode, content_type: Option<&HeaderValue>) {
        self.on_response_at(status, content_type, Instant::now());
    }

    /// The response head arrived at `at` (a captured packet's time).
    pub fn on_response_at(
        &mut self, status: StatusCode, content_type: Option<&HeaderValue>, at: Instant,
    ) {
        self.meter.on_response_at(status, at);
        if status.is_success() {
            if let Some(dialect) = self.dialect.take() {
                let format = Format::of(content_type);
                let text = match format {
                    Format::Json | Format::Raw => TextCount::Off,
                    _ => TextCount::start(&self.context.tokenizers, self.request_model.get()),
                };
                let metering = &self.context.metering;
                let mut decoder = ResponseDecoder::new(dialect, format, metering, text);
                let governor = &self.context.governor;
                decoder.govern(governor.lease(Budget::EventBytes, &self.client()));
                self.decoder = Some(decoder);
            }
        }
    }

    /// The response head's headers, for the server timings some servers send there (TGI). Read only for
    /// a metered response.
    pub fn on_server_headers(&mut self, headers: &HeaderMap) {
        if self.decoder.is_some() {
            self.header_timings = tgi_headers(headers);
        }
    }

    /// A response body frame is passing at `now`: the decoder reads it, the meter hears what it carried.
    pub fn on_data(&mut self, bytes: &[u8], now: Instant) {
        let Some(decoder) = self.decoder.as_mut() else {
            return;
        };
        decoder.feed(bytes, &mut self.marks);
        let read = decoder.read(&self.marks);
        let names = names(&self.request_model, Some(decoder), self.identity.as_ref());
        self.meter
            .on_frame(&self.settings.meter, &read, &names, now);
        self.marks.clear();
    }

    /// Ends the exchange as `end` at `now`: its slots go back at once; the rest waits for the request's
    /// message list when a reader is still reading it (a few milliseconds at most, `list_read.rs`). It
    /// stays counted in flight (`shutdown.rs`) until it has been emitted, so a drain, or a test that
    /// waits for nothing in flight, finds its record written and its metrics counted.
    fn finish(mut self, end: End, now: Instant) {
        self.upstream_permits = [None, None];
        match self.messages.take() {
            Some(read) => read.finish_then(move |listed| self.conclude(end, now, listed)),
            None => self.conclude(end, now, Ok(None)),
        }
    }

    /// The decoder reads what it still holds and hands over its report, and the meter finishes the
    /// request (`listed`: its message list, as read).
    fn conclude(mut self, end: End, now: Instant, listed: Result<Option<&MessageList>, Unread>) {
        let delivered = end.delivered_whole(self.meter.terminal_event().is_some());
        let report = self.decoder.as_mut().map(|decoder| {
            let mut report = decoder.finish(delivered, &mut self.marks);
            let mut server = self.header_timings;
            server.merge(report.server);
            report.server = server;
            report
        });
        let decoder = self.decoder.as_ref();
        let listed = match listed {
            Ok(None) => Listed::Nothing,
            Ok(Some(list)) => Listed::List(list),
            Err(reason) => Listed::Unread(reason),
        };
        let identity = self.identity.as_ref().unwrap_or(&UNKNOWN);
        let (method, path) = (self.method.as_str(), self.path.as_str());
        let ending = Ending {
            end,
            report,
            last: decoder.map(|d| d.read(&self.marks)).unwrap_or_default(),
            request_body_idle: self.request_model.body_idle(),
            names: names(&self.request_model, decoder, Some(identity)),
            who: identity.who(&identity.id, method, path, self.start, self.captured),
            listed,
            response_id: decoder.and_then(|d| d.observations().response_id.as_deref()),
            trace: identity.trace.as_ref(),
            session: None,
        };
        self.meter.finish(&self.settings.meter, ending, now);
    }
}

/// The names a request's labels come from: its `model`, the response's, its tenant.
fn names<'a>(
    request: &'a RequestSeen, decoder: Option<&'a ResponseDecoder>, identity: Option<&'a Identity>,
) -> Names<'a> {
    Names {
        request_model: request.get(),
        response_model: decoder.and_then(|d| d.observations().model.as_deref()),
        tenant: identity.and_then(|i| i.tenant.as_deref()),
    }
}

/// Owns an exchange until it is finished; dropping it unfinished means the client went away. The
/// exchange is boxed: it is over a kilobyte, and the guard travels in the request's future and then in
/// the response body, each moved whole more than once per request.
pub struct ExchangeGuard(Option<Box<Exchange>>);

impl ExchangeGuard {
    pub fn new(exchange: Exchange) -> Self {
        ExchangeGuard(Some(Box::new(exchange)))
    }

    pub fn get_mut(&mut self) -> Option<&mut Exchange> {
        self.0.as_deref_mut()
    }

    /// Moves the exchange into a guard of its own (the response body's), leaving this one empty.
    pub fn take(&mut self) -> ExchangeGuard {
        ExchangeGuard(self.0.take())
    }

    /// Finishes the exchange as `end`, unless it was already finished.
    pub fn finish(&mut self, end: End) {
        self.finish_at(end, Instant::now());
    }

    /// Finishes the exchange as `end` at `now` (a captured packet's time), unless it was already
    /// finished.
    pub fn finish_at(&mut self, end: End, now: Instant) {
        if let Some(exchange) = self.0.take() {
            (*exchange).finish(end, now);
        }
    }

    /// Leaves the exchange unfinished for good: what was read of it cannot be trusted whole (a
    /// capture lost its bytes). It leaves the requests in flight; nothing of it is counted or written.
    pub fn abandon(&mut self) {
        if let Some(exchange) = self.0.take() {
            exchange.meter.abandon();
        }
    }
}

impl Drop for ExchangeGuard {
    fn drop(&mut self) {
        self.finish(End::ClientGone);
    }
}
