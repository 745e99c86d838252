//! The live page on the metrics port: `GET /` is one HTML page embedded in the binary (its glue in
//! `page.html`, uPlot vendored under `vendor/` and inlined into it, so the page loads nothing else and
//! works offline), and `GET /api/v1/live` is the JSON it refreshes from ([`crate::record::live::view`],
//! documented in docs/live.md). Both answer only when `ui.enabled`; the snapshots behind them are taken
//! by [`Live::run`], started with the metrics port.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;

use crate::config::parse_duration;
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
}

/// The page with uPlot inlined, built once.
pub fn page() -> Bytes {
    static BUILT: OnceLock<Bytes> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let html =
                PAGE.replacen("/*UPLOT_CSS*/", UPLOT_CSS, 1)
                    .replacen("/*UPLOT_JS*/", UPLOT_JS, 1);
            Bytes::from(html)
        })
        .clone()
}

/// `GET /`: the page. It may change with each release, so browsers revalidate it.
pub fn page_answer() -> Answer {
    Answer {
        status: StatusCode::OK,
        content_type: "text/html; charset=utf-8",
        cache_control: "no-cache",
        body: page(),
    }
}

/// `GET /api/v1/live[?window=DURATION]`: the JSON view, computed off the async workers.
pub async fn live_answer(live: &Arc<Live>, query: Option<&str>) -> Answer {
    let window = match window_of(query, live) {
        Ok(window) => window,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    let live = live.clone();
    let encoded = tokio::task::spawn_blocking(move || live.json(window)).await;
    match encoded {
        Ok(Ok(json)) => Answer {
            status: StatusCode::OK,
            content_type: "application/json",
            cache_control: "no-store",
            body: json,
        },
        Ok(Err(err)) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding: {err}\n"),
        ),
        Err(_) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "live view unavailable: shutting down\n".into(),
        ),
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

fn text(status: StatusCode, message: String) -> Answer {
    Answer {
        status,
        content_type: "text/plain; charset=utf-8",
        cache_control: "no-store",
        body: Bytes::from(message),
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
