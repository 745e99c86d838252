//! Serving `/metrics` without taking time from the proxied requests.
//!
//! Gathering and encoding every series is CPU work that grows with the series count; done on an async
//! worker it would delay every stream that worker also drives. So the page is encoded on the blocking
//! pool, and scrapes that arrive while an encoding runs wait for it and get the very same bytes: sixteen
//! scrapers at once cost one encoding, not sixteen. A scrape that arrives after an encoding finished
//! starts a new one, so no page is older than the scrape that asked for it, less the time one encoding
//! takes. Idle model labels are retired just before each encoding.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use prometheus::core::Collector;
use prometheus::proto::{MetricFamily, MetricType};
use prometheus::{Encoder, TextEncoder};
use tokio::sync::watch;

use super::Metrics;

/// The gauge holding the current series count.
pub const SERIES: &str = "tokentap_metrics_series";

type Page = watch::Receiver<Option<Bytes>>;

/// The encoding in progress, if any; scrapes that find one share its page.
#[derive(Default)]
pub struct Coalesce {
    running: Mutex<Option<Page>>,
}

impl Coalesce {
    fn lock(&self) -> MutexGuard<'_, Option<Page>> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Ends the encoding in progress when dropped: after the page was sent, or if the encoding never ran or
/// panicked (then its waiters see the channel closed, and the next scrape starts afresh).
struct Running(Arc<Metrics>);

impl Drop for Running {
    fn drop(&mut self) {
        *self.0.scrapes.lock() = None;
    }
}

impl Metrics {
    /// The text exposition of every series, encoded off the async workers and shared by concurrent
    /// scrapes. `None` if the encoding could not run (the runtime is shutting down).
    pub async fn scrape(self: &Arc<Self>) -> Option<Bytes> {
        let mut page = {
            let mut running = self.scrapes.lock();
            match running.as_ref() {
                Some(page) => page.clone(),
                None => {
                    let (tx, page) = watch::channel(None);
                    *running = Some(page.clone());
                    let guard = Running(self.clone());
                    tokio::task::spawn_blocking(move || {
                        let body = guard.0.encode();
                        // The next scrape starts a new encoding before this page is handed out, so
                        // a scrape never gets a page encoded before it arrived and finished since.
                        drop(guard);
                        tx.send_replace(Some(body));
                    });
                    page
                }
            }
        };
        let ready = page.wait_for(Option::is_some).await.ok()?;
        ready.clone()
    }

    /// Retires idle model labels, then gathers and encodes every series, with the series count as of
    /// this very page.
    pub fn encode(&self) -> Bytes {
        self.retire_idle();
        self.encodes.inc();
        let mut families = self.registry.gather();
        let count = families.iter().map(series_in).sum::<usize>();
        self.series_count
            .set(i64::try_from(count).unwrap_or(i64::MAX));
        // The gauge was gathered before it was set: put in its new value.
        if let Some(family) = families.iter_mut().find(|f| f.name() == SERIES) {
            if let Some(fresh) = self.series_count.collect().pop() {
                *family = fresh;
            }
        }
        let mut out = Vec::with_capacity(64 * 1024);
        if let Err(err) = TextEncoder::new().encode(&families, &mut out) {
            tracing::error!(%err, "encoding metrics failed");
        }
        Bytes::from(out)
    }
}

/// The samples a family puts on the page: one per counter or gauge; per histogram one per boundary, plus
/// `+Inf`, `_sum` and `_count`.
pub fn series_in(family: &MetricFamily) -> usize {
    match family.get_field_type() {
        MetricType::HISTOGRAM => family
            .get_metric()
            .iter()
            .map(|m| m.get_histogram().get_bucket().len() + 3)
            .sum(),
        _ => family.get_metric().len(),
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Waker};

    use super::*;
    use crate::config::Config;
    use crate::record::api::Api;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scrapes_arriving_during_an_encoding_share_it_and_a_later_one_encodes_afresh() {
        let metrics = Arc::new(Metrics::new(&Config::default()).unwrap());
        let label = metrics.model_label(Some("m"), true);
        metrics.series(label, Api::Chat).e2e.observe(0.5);
        let encodes = || metrics.encodes.get();
        let before = encodes();
        let mut scrapes: Vec<_> = (0..16).map(|_| Box::pin(metrics.scrape())).collect();
        {
            // The encoding retires idle labels first, under this lock: holding it keeps the encoding
            // running until every scrape has arrived.
            let _held = metrics.models.lock();
            let mut cx = Context::from_waker(Waker::noop());
            for scrape in &mut scrapes {
                assert!(scrape.as_mut().poll(&mut cx).is_pending());
            }
        }
        let mut pages = Vec::new();
        for scrape in scrapes {
            pages.push(scrape.await.expect("a page"));
        }
        assert_eq!(encodes() - before, 1, "sixteen scrapes, one encoding");
        assert!(pages.iter().all(|p| *p == pages[0]));
        let text = std::str::from_utf8(&pages[0]).unwrap();
        assert!(
            text.contains("tokentap_metrics_encodes_total 1\n"),
            "{text}"
        );
        let later = metrics.scrape().await.expect("a page");
        assert_eq!(
            encodes() - before,
            2,
            "a scrape after the encoding ended gets a new one"
        );
        assert!(std::str::from_utf8(&later)
            .unwrap()
            .contains("tokentap_metrics_encodes_total 2\n"));
    }

    #[test]
    fn the_series_gauge_counts_every_sample_on_its_own_page() {
        let metrics = Metrics::new(&Config::default()).unwrap();
        let label = metrics.model_label(Some("m"), true);
        metrics.series(label, Api::Chat);
        let page = metrics.encode();
        let text = std::str::from_utf8(&page).unwrap();
        let samples = text.lines().filter(|l| !l.starts_with('#')).count();
        let gauge = format!("{SERIES} {samples}\n");
        assert!(text.contains(&gauge), "{gauge:?} missing");
    }
}
