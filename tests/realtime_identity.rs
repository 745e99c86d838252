//! A realtime session is an exchange (issue 51): its handshake says who the caller is (the tenant of
//! `tenants.header`, its `x-request-id`, the trace its `traceparent` names), and every response metered
//! inside the session carries that identity exactly as an HTTP request does: in its record, in its
//! metrics' `tenant` label, and as a span exported in the caller's trace, sampled the same way.

use std::time::Duration;

use crate::realtime::{records, replay, sequence, with_records};
use crate::support::*;
use crate::websocket::{once_no_session_is_open, ws_upstream};
use tokentap::record::metrics::family;

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_realtime_response_carries_the_handshakes_tenant_request_id_and_trace() {
    let collector = Collector::start(Reply::Accept).await;
    let (upstream_addr, mut rx) = ws_upstream().await;
    let (path, records_yaml) = with_records("realtime-identity");
    let yaml = format!(
        "{records_yaml}tenants: {{header: x-tenant}}\n\
         traces: {{endpoint: \"{}\", interval: 10ms}}\n",
        collector.url()
    );
    let proxy = proxy(&format!("http://{upstream_addr}"), &yaml).await;
    let mut script = sequence("openai-ga-text", Duration::from_millis(1));
    let caller = format!(
        "x-tenant: acme\r\nx-request-id: rt-1\r\ntraceparent: 00-{CALLER_TRACE}-{CALLER_SPAN}-01\r\n\r\n"
    );
    script.request = script
        .request
        .replacen("\r\n\r\n", &format!("\r\n{caller}"), 1);
    let (client, upstream, _) = replay(proxy.proxy_addr(), &mut rx, &script, None).await;
    drop((client, upstream));
    let metrics = once_no_session_is_open(&proxy).await;
    // The handshake's record, the response's, the session's.
    let (responses, _sessions) = records(&path, 3);
    assert_eq!(responses.len(), 1, "{responses:?}");
    let response = &responses[0];
    assert_eq!(response["tenant"], "acme", "{response}");
    assert_eq!(response["client_request_id"], "rt-1", "{response}");
    assert_eq!(response["trace_id"], CALLER_TRACE, "{response}");
    let span_id = response["span_id"].as_str().expect("a span id").to_owned();
    assert_ne!(span_id, CALLER_SPAN);

    let acme = [("api", "realtime"), ("tenant", "acme"), ("outcome", "ok")];
    assert_eq!(
        metrics.get(family::REQUESTS.name, &acme),
        1.0,
        "{}",
        metrics.text
    );

    proxy.flush_spans(Duration::from_secs(5)).await;
    let spans = collector.spans();
    let span = (spans.iter())
        .find(|s| hex(&s.span_id) == span_id)
        .unwrap_or_else(|| panic!("no span {span_id} among {spans:?}"));
    assert_eq!(hex(&span.trace_id), CALLER_TRACE);
    assert_eq!(hex(&span.parent_span_id), CALLER_SPAN);
    assert_eq!(span.kind, 2, "SERVER");
}
