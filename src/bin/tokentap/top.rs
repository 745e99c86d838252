//! `tokentap top`: the live page's figures as a terminal table, for use over SSH. It reads the same
//! JSON the page reads (`GET /api/v1/live` on the metrics port) every `ui.interval` and redraws; with
//! `--once` it prints one table and exits (for scripts and tests).
//!
//! What it reads is input like any other: the whole answer (head and body) must come within `--timeout`
//! and be at most [`MAX_BODY`] bytes, so neither a slow drip nor an endless body holds it, and every
//! name it prints goes through [`printable`], so no escape sequence in a model name reaches the
//! terminal.

use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokentap::record::live::view::{Entry, LiveView};
use tokentap::report::render::printable;

/// The largest answer read: the live view of the default configuration is a few MiB.
const MAX_BODY: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum TopError {
    #[error("{0}: not an http:// URL of tokentap's metrics port")]
    Url(String),
    #[error("{url}: {error}")]
    Fetch { url: String, error: String },
}

/// Shows the figures of the metrics port at `base` (e.g. `http://127.0.0.1:9464`); each answer must
/// come whole within `timeout`.
pub async fn run(
    base: &str, window: Option<&str>, once: bool, timeout: Duration,
) -> Result<(), TopError> {
    let base = base.trim_end_matches('/');
    let mut url = format!("{base}/api/v1/live");
    if let Some(window) = window {
        url.push_str("?window=");
        url.push_str(window);
    }
    let uri: http::Uri = url.parse().map_err(|_| TopError::Url(base.to_owned()))?;
    if uri.scheme_str() != Some("http") {
        return Err(TopError::Url(base.to_owned()));
    }
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    loop {
        let view = fetch(&client, &uri, timeout)
            .await
            .map_err(|error| TopError::Fetch {
                url: url.clone(),
                error: printable(&error).into_owned(),
            })?;
        if !show(&render(&view), once) {
            return Ok(());
        }
        let pause = Duration::from_secs_f64(view.interval_seconds.clamp(1.0, 60.0));
        tokio::time::sleep(pause).await;
    }
}

/// Prints `table` (clearing the screen and homing the cursor first, unless `once`); false when the
/// loop should end: after `once`, or when stdout is gone (a closed pipe, a hung-up terminal).
pub(crate) fn show(table: &str, once: bool) -> bool {
    let mut out = std::io::stdout().lock();
    let clear = if once { "" } else { "\x1b[H\x1b[2J" };
    write!(out, "{clear}{table}")
        .and_then(|()| out.flush())
        .is_ok()
        && !once
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

async fn fetch(
    client: &HttpClient, uri: &http::Uri, timeout: Duration,
) -> Result<LiveView, String> {
    let whole = async {
        let response = client.get(uri.clone()).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(
                |e| match e.downcast_ref::<http_body_util::LengthLimitError>() {
                    Some(_) => format!(
                        "the answer is over {} MiB: not tokentap's live view",
                        MAX_BODY >> 20
                    ),
                    None => e.to_string(),
                },
            )?;
        Ok::<_, String>((status, body.to_bytes()))
    };
    let (status, body) = tokio::time::timeout(timeout, whole)
        .await
        .map_err(|_| format!("no whole answer within {timeout:?} (--timeout)"))??;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body);
        return Err(format!("{status}: {}", text.trim()));
    }
    serde_json::from_slice(&body).map_err(|e| format!("not the live view (version 1): {e}"))
}

fn ms(v: Option<f64>) -> String {
    match v {
        Some(s) if s >= 1.0 => format!("{s:.2}s"),
        Some(s) => format!("{:.0}ms", s * 1000.0),
        None => "-".into(),
    }
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// One line a model (then a tenant), the window's figures.
pub fn render(view: &LiveView) -> String {
    let mut out = String::new();
    let flight = view.in_flight.last().copied().unwrap_or(0.0);
    let _ = writeln!(
        out,
        "tokentap top · window {}s · {} in flight · every {}s\n",
        view.window_seconds, flight, view.interval_seconds
    );
    let _ = writeln!(
        out,
        "{:<28} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>10}",
        "MODEL",
        "REQ/S",
        "TTFT50",
        "TTFT99",
        "ITL50",
        "TPOT50",
        "E2E50",
        "IN/S",
        "OUT/S",
        "GOODPUT",
        "ERR/CAN/CUT"
    );
    let rows = view.models.iter().chain(&view.tenants);
    let mut any = false;
    for entry in rows {
        any = true;
        out.push_str(&row(entry));
    }
    if !any {
        out.push_str("(no requests yet)\n");
    }
    out
}

fn row(e: &Entry) -> String {
    let c = &e.current;
    let q = |h: &str, p: &str| c.quantiles.get(h).and_then(|q| q.get(p)).copied().flatten();
    let mut name = match &e.tenant {
        Some(t) => format!("{} · {}", printable(&e.model), printable(t)),
        None => printable(&e.model).into_owned(),
    };
    if name.chars().count() > 28 {
        name = name.chars().take(27).collect::<String>() + "…";
    }
    let goodput = c
        .goodput_ratio
        .map_or("-".into(), |g| format!("{:.1}%", g * 100.0));
    format!(
        "{:<28} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>10}\n",
        name,
        num(c.requests_per_second, 2),
        ms(q("ttft", "p50")),
        ms(q("ttft", "p99")),
        ms(q("itl", "p50")),
        ms(q("tpot", "p50")),
        ms(q("e2e", "p50")),
        num(c.input_tokens_per_second, 0),
        num(c.output_tokens_per_second, 0),
        goodput,
        format!("{}/{}/{}", c.errors, c.cancels, c.cuts),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/live.md's example, one line for its model with the window's figures.
    #[test]
    fn the_table_has_a_line_a_model_with_its_figures() {
        let docs = include_str!("../../../docs/live.md");
        let example = docs
            .split("```json\n")
            .nth(1)
            .and_then(|rest| rest.split("\n```").next())
            .expect("an example");
        let view: LiveView = serde_json::from_str(example).expect("a version-1 view");
        let table = render(&view);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("tokentap top · window 10s"), "{table}");
        assert!(lines[2].starts_with("MODEL "), "{table}");
        let row = lines[3];
        assert!(row.starts_with(&view.models[0].model), "{table}");
        let c = &view.models[0].current;
        let goodput = format!("{:.1}%", c.goodput_ratio.unwrap_or(0.0) * 100.0);
        assert!(row.contains(&goodput), "{row}");
        assert!(
            row.ends_with(&format!("{}/{}/{}", c.errors, c.cancels, c.cuts)),
            "{row}"
        );
        let empty = LiveView {
            models: Vec::new(),
            tenants: Vec::new(),
            ..view
        };
        assert!(render(&empty).contains("(no requests yet)"));
    }
}
