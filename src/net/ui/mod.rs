//! The live page on the metrics port: `GET /` is one HTML page embedded in the binary (its glue in
//! `page.html`, uPlot vendored under `vendor/` and inlined into it, so the page loads nothing else and
//! works offline), `GET /api/v1/live` is the JSON it refreshes from ([`crate::record::live::view`],
//! documented in docs/live.md), and `GET /api/v1/fleet` the fleet's table (`ui.prometheus`,
//! [`FleetPage`]). All answer only when `ui.enabled`; the snapshots behind them are taken by
//! [`Live::run`], started with the metrics port.
//!
//! The page's `Content-Security-Policy` lets it run its two scripts and nothing else: each is allowed
//! by its SHA-256 hash, computed here from the very bytes served, so no inline script anyone might
//! slip into the page (a model name, say) could run, and `frame-ancestors 'none'` keeps the page out of
//! other sites' frames.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use sha2::{Digest, Sha256};

use crate::config::parse_duration;
use crate::net::fleet::FleetPage;
use crate::record::live::views::ViewError;
use crate::record::live::Live;

const PAGE: &str = include_str!("page.html");
const UPLOT_JS: &str = include_str!("vendor/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("vendor/uPlot.min.css");

/// An answer of the live page's routes: status, content type, `Cache-Control`, body.
pub struct Answer {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub cache_control: &'static str,
    pub body: Bytes,
    /// A `503` because as many views as may be held are (counted by the caller).
    pub busy: bool,
}

/// The page with uPlot inlined, and the policy that lets exactly its scripts run; built once.
fn built() -> &'static (Bytes, HeaderValue) {
    static BUILT: OnceLock<(Bytes, HeaderValue)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let html =
            PAGE.replacen("/*UPLOT_CSS*/", UPLOT_CSS, 1)
                .replacen("/*UPLOT_JS*/", UPLOT_JS, 1);
        let scripts: Vec<String> = inline_scripts(&html)
            .map(|script| format!("'sha256-{}'", base64(&Sha256::digest(script.as_bytes()))))
            .collect();
        let policy = format!(
            "default-src 'none'; script-src {}; style-src 'unsafe-inline'; connect-src 'self'; \
             img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            scripts.join(" ")
        );
        let policy = HeaderValue::from_str(&policy).unwrap_or(HeaderValue::from_static(
            "default-src 'none'; frame-ancestors 'none'",
        ));
        (Bytes::from(html), policy)
    })
}

/// The page with uPlot inlined.
pub fn page() -> Bytes {
    built().0.clone()
}

/// The text of each `<script>` element of `html`, as a browser hashes it for a CSP.
fn inline_scripts(html: &str) -> impl Iterator<Item = &str> {
    html.split("<script>")
        .skip(1)
        .filter_map(|rest| rest.split_once("</script>").map(|(script, _)| script))
}

/// Standard base64 with padding (RFC 4648 §4), as CSP hash sources are written.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            *group.get(1).unwrap_or(&0),
            *group.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The answer as a response, with its cache policy and the page's `Content-Security-Policy`.
pub fn response(answer: Answer) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(answer.body));
    *response.status_mut() = answer.status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(answer.content_type),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(answer.cache_control),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CONTENT_SECURITY_POLICY, built().1.clone());
    if answer.busy {
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

/// `GET /`: the page. It may change with each release, so browsers revalidate it.
pub fn page_answer() -> Answer {
    Answer {
        status: StatusCode::OK,
        content_type: "text/html; charset=utf-8",
        cache_control: "no-cache",
        body: page(),
        busy: false,
    }
}

/// `GET /api/v1/live[?window=DURATION]`: the JSON view, computed off the async workers and shared
/// (`record::live::views`); `503` with `Retry-After: 1` when as many views as may be held are.
pub async fn live_answer(live: &Arc<Live>, query: Option<&str>) -> Answer {
    let window = match window_of(query, live) {
        Ok(window) => window,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    match live.view(window).await {
        Ok(body) => json(body),
        Err(err @ ViewError::Encoding(_)) => {
            text(StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n"))
        }
        Err(err) => Answer {
            busy: err == ViewError::Busy,
            ..text(StatusCode::SERVICE_UNAVAILABLE, format!("{err}\n"))
        },
    }
}

/// `GET /api/v1/fleet`: the fleet's table from the Prometheus of `ui.prometheus` (docs/live.md, "The
/// fleet"); `404` without one, `502` saying what went wrong when Prometheus did not answer.
pub async fn fleet_answer(fleet: Option<&FleetPage>) -> Answer {
    let Some(fleet) = fleet else {
        let message = "no fleet table: ui.prometheus is not set\n".to_owned();
        return text(StatusCode::NOT_FOUND, message);
    };
    match fleet.answer().await {
        Ok(body) => json(body),
        Err(err) => text(StatusCode::BAD_GATEWAY, format!("{err}\n")),
    }
}

/// The `window` query parameter, else `ui.window`; it must lie between `ui.interval` and `ui.history`.
fn window_of(query: Option<&str>, live: &Live) -> Result<Duration, String> {
    let given = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("window="));
    let Some(text) = given else {
        return Ok(live.ui.window);
    };
    let (lo, hi) = (live.ui.interval, live.ui.history);
    match parse_duration(text) {
        Ok(window) if (lo..=hi).contains(&window) => Ok(window),
        Ok(_) => Err(format!(
            "window: {text:?} must be between ui.interval ({}) and ui.history ({})\n",
            crate::config::format_duration(lo),
            crate::config::format_duration(hi)
        )),
        Err(err) => Err(format!("window: {err}\n")),
    }
}

/// A `200` JSON answer that no cache keeps.
fn json(body: Bytes) -> Answer {
    Answer {
        status: StatusCode::OK,
        content_type: "application/json",
        cache_control: "no-store",
        body,
        busy: false,
    }
}

fn text(status: StatusCode, message: String) -> Answer {
    Answer {
        status,
        content_type: "text/plain; charset=utf-8",
        cache_control: "no-store",
        body: Bytes::from(message),
        busy: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_inlines_uplot_and_loads_nothing_from_elsewhere() {
        let page = page();
        let html = std::str::from_utf8(&page).unwrap();
        assert!(!html.contains("/*UPLOT_JS*/") && !html.contains("/*UPLOT_CSS*/"));
        assert!(html.contains("uPlot"));
        // Nothing the browser would fetch from elsewhere (uPlot's licence comment names its home page).
        for external in [
            "src=\"http",
            "href=\"http",
            "url(http",
            "@import",
            "src=\"//",
            "href=\"//",
        ] {
            assert!(!html.contains(external), "{external}");
        }
        assert!(page.len() < 256 << 10, "{} bytes", page.len());
    }

    #[test]
    fn the_policy_allows_exactly_the_pages_two_scripts_by_hash_and_no_framing() {
        let (page, policy) = built();
        let policy = policy.to_str().unwrap();
        let html = std::str::from_utf8(page).unwrap();
        let scripts: Vec<&str> = inline_scripts(html).collect();
        assert_eq!(scripts.len(), 2, "uPlot and the page's own code");
        let script_src = policy
            .split("; ")
            .find_map(|d| d.strip_prefix("script-src "))
            .expect("a script-src");
        let hashes: Vec<String> = scripts
            .iter()
            .map(|s| format!("'sha256-{}'", base64(&Sha256::digest(s.as_bytes()))))
            .collect();
        assert_eq!(script_src, hashes.join(" "));
        assert!(!script_src.contains("unsafe"), "{script_src}");
        assert!(policy.contains("frame-ancestors 'none'"));
        // No handler attribute or javascript: URL, which hashes would not let run.
        for inline in [" onclick=", " onload=", " onerror=", "javascript:"] {
            assert!(!html.contains(inline), "{inline}");
        }
    }

    #[test]
    fn base64_is_rfc_4648() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in cases {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
        // The hash of `alert('Hello, world.');`, the CSP specification's own example.
        let example = Sha256::digest(b"alert('Hello, world.');");
        assert_eq!(
            base64(&example),
            "qznLcsROx4GACP2dm0UCKCzCG+HiZ1guq6ZZDob/Tng="
        );
    }

    #[test]
    fn a_window_outside_interval_and_history_is_refused_by_name() {
        let config = crate::config::Config::default();
        let live = Live::new(&config);
        assert_eq!(window_of(None, &live), Ok(Duration::from_secs(60)));
        assert_eq!(
            window_of(Some("x=1&window=5m"), &live),
            Ok(Duration::from_secs(300))
        );
        assert!(window_of(Some("window=1s"), &live)
            .unwrap_err()
            .contains("between ui.interval (5s) and ui.history (1800s)"));
        assert!(window_of(Some("window=soon"), &live)
            .unwrap_err()
            .starts_with("window: "));
    }
}
