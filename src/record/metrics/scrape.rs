//! Serving `/metrics` without taking time from the proxied requests, and without a copy of the page per
//! scraper.
//!
//! Gathering and encoding every series is CPU work that grows with the series count; done on an async
//! worker it would delay every stream that worker also drives. So the page is encoded on the blocking
//! pool, and scrapes that arrive while an encoding runs wait for it and get the very same bytes: sixteen
//! scrapers at once cost one encoding, not sixteen. A scrape that arrives after an encoding finished
//! starts a new one, so no page is older than the scrape that asked for it, less the time one encoding
//! takes. Idle model labels are retired just before each encoding.
//!
//! Each exposition format (`format.rs`: the classic text, OpenMetrics with exemplars, protobuf with
//! native histograms) is encoded and shared on its own: scrapes share a page only with scrapes that
//! asked for the same format.
//!
//! A page stays in memory as long as some connection is still sending it: a client that asks and never
//! reads holds its page until `timeouts.metrics_send` closes it. With a multi-LoRA deployment's 7 MiB
//! page, forty such clients each holding a page of their own held 290 MiB. So the pages being sent are
//! known (weakly: a page is freed when its last connection lets go), and while [`PAGES_HELD`] of them are
//! still being sent, a new scrape gets the newest of them instead of an encoding of its own: whatever
//! the scrapers do, at most that many pages (and the one being encoded) are in memory at once. Such a
//! page is at most `timeouts.metrics_send` old, and only while clients hold pages unread.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::Bytes;
use prometheus::core::Collector;
use prometheus::proto::{MetricFamily, MetricType};
use prometheus::{Encoder, TextEncoder};
use tokio::sync::watch;

use super::format::Format;
use super::rebucket::Rebucketable;
use super::Metrics;
use crate::govern::{Budget, Client, Lease};

/// The gauge holding the current series count.
pub const SERIES: &str = super::family::SERIES.name;

/// Distinct pages of one format that may be held by connections still sending them before scrapes
/// share the newest.
pub const PAGES_HELD: usize = 2;

type Page = watch::Receiver<Option<Bytes>>;

/// One encoded page; every scrape that gets it shares these bytes. What it holds is leased from the
/// governor's `metrics_pages` budget until its last scrape lets go of it.
struct Encoded {
    page: Vec<u8>,
    _room: Option<Lease>,
}

/// The owner of a page's bytes in every [`Bytes`] handed out: the page is freed with the last of them.
struct Shared(Arc<Encoded>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0.page
    }
}

/// The encoding in progress, if any, and the pages handed out that may still be being sent.
#[derive(Default)]
pub struct Coalesce {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Scrapes that find one share its page.
    running: Option<Page>,
    /// Oldest first; a page no connection holds any more is gone and is pruned.
    held: Vec<Weak<Encoded>>,
}

impl Coalesce {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Ends the encoding in progress when dropped: after the page was sent, or if the encoding never ran or
/// panicked (then its waiters see the channel closed, and the next scrape starts afresh).
struct Running(Arc<Metrics>, Format);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.scrapes[self.1 as usize].lock().running = None;
    }
}

impl Metrics {
    /// Every series in `format`, encoded off the async workers and shared by concurrent scrapes of
    /// that format (and, while [`PAGES_HELD`] pages are still being sent, by later ones). `None` if
    /// the encoding could not run (the runtime is shutting down).
    pub async fn scrape(self: &Arc<Self>, format: Format) -> Option<Bytes> {
        let mut page = {
            let mut state = self.scrapes[format as usize].lock();
            if let Some(page) = &state.running {
                page.clone()
            } else {
                state.held.retain(|page| page.strong_count() > 0);
                let newest = state.held.last().and_then(Weak::upgrade);
                // With no room in the budget for another page of the newest one's size, it is shared.
                let no_room = match (&newest, self.governor.get()) {
                    (Some(page), Some(governor)) => {
                        let pages = governor.pool(Budget::MetricsPages);
                        !Lease::on(pages, Client::Unknown).would_fit(page.page.len() as u64)
                    }
                    _ => false,
                };
                drop(newest);
                if state.held.len() >= PAGES_HELD || no_room {
                    if let Some(newest) = state.held.last().and_then(Weak::upgrade) {
                        return Some(Bytes::from_owner(Shared(newest)));
                    }
                }
                let (tx, page) = watch::channel(None);
                state.running = Some(page.clone());
                let guard = Running(self.clone(), format);
                tokio::task::spawn_blocking(move || {
                    let page = guard.0.encode_page(format);
                    let lease = guard.0.governor.get().map(|governor| {
                        let pages = governor.pool(Budget::MetricsPages);
                        let mut lease = Lease::on(pages, Client::Unknown);
                        // Encoded already, and waited on: it is served, its use counted whole.
                        let _ = lease.grow_over(page.capacity() as u64);
                        lease
                    });
                    let encoded = Arc::new(Encoded { page, _room: lease });
                    {
                        // The next scrape starts a new encoding (or shares this page) before this page
                        // is handed out, so a scrape never gets a page encoded before it arrived and
                        // finished since.
                        let mut state = guard.0.scrapes[format as usize].lock();
                        state.running = None;
                        state.held.push(Arc::downgrade(&encoded));
                    }
                    drop(guard);
                    tx.send_replace(Some(Bytes::from_owner(Shared(encoded))));
                });
                page
            }
        };
        let ready = page.wait_for(Option::is_some).await.ok()?;
        ready.clone()
    }

    /// Retires idle model labels, then gathers and encodes every series, with the series count as of
    /// this very page.
    pub fn encode(&self) -> Bytes {
        Bytes::from(self.encode_page(Format::Text))
    }

    /// The page in `format`, encoded now (what a scrape gets, without sharing).
    pub fn encode_as(&self, format: Format) -> Bytes {
        Bytes::from(self.encode_page(format))
    }

    fn encode_page(&self, format: Format) -> Vec<u8> {
        self.retire();
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
        let joined = |name: &str| self.joined(name);
        match format {
            Format::Text => {
                if let Err(err) = TextEncoder::new().encode(&families, &mut out) {
                    tracing::error!(%err, "encoding metrics failed");
                }
            }
            Format::OpenMetrics => super::openmetrics::encode(&families, joined, &mut out),
            Format::Protobuf => super::protobuf::encode(&families, joined, &mut out),
        }
        out
    }

    /// The registered histogram family named `name`, when it is native or carries exemplars.
    fn joined(&self, name: &str) -> Option<&Rebucketable> {
        let figures = self.figure_histograms.iter().flatten();
        figures.chain([&self.itl]).find(|h| h.family().name == name)
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
        let label = metrics.model_label(Some("m"), None, true);
        let mut series = metrics.series(label, Api::Chat);
        series.observe(&metrics, crate::record::figure::Figure::E2e, 0.5);
        let encodes = || metrics.encodes.get();
        let before = encodes();
        let mut scrapes: Vec<_> = (0..16)
            .map(|_| Box::pin(metrics.scrape(Format::Text)))
            .collect();
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
        let later = metrics.scrape(Format::Text).await.expect("a page");
        assert_eq!(
            encodes() - before,
            2,
            "a scrape after the encoding ended gets a new one"
        );
        assert!(std::str::from_utf8(&later)
            .unwrap()
            .contains("tokentap_metrics_encodes_total 2\n"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn while_two_pages_are_being_sent_a_scrape_shares_the_newest_instead_of_encoding() {
        let metrics = Arc::new(Metrics::new(&Config::default()).unwrap());
        let encodes = || metrics.encodes.get();
        // The encoding thread lets go of its page a moment after handing it out.
        let settle = || tokio::time::sleep(std::time::Duration::from_millis(20));
        let first = metrics.scrape(Format::Text).await.expect("a page");
        settle().await;
        let second = metrics.scrape(Format::Text).await.expect("a page");
        settle().await;
        assert_eq!(
            encodes(),
            2,
            "one page held: the next scrape encodes its own"
        );
        let third = metrics.scrape(Format::Text).await.expect("a page");
        assert_eq!(
            encodes(),
            2,
            "two pages held: the third scrape shares the newest"
        );
        assert_eq!(
            (third.as_ptr(), third.len()),
            (second.as_ptr(), second.len())
        );
        drop(first);
        let fourth = metrics.scrape(Format::Text).await.expect("a page");
        assert_eq!(encodes(), 3, "one of the two let go: a new encoding");
        assert!(std::str::from_utf8(&fourth)
            .unwrap()
            .contains("tokentap_metrics_encodes_total 3\n"));
        settle().await;
        drop((second, third, fourth));
        let _fresh = metrics.scrape(Format::Text).await.expect("a page");
        assert_eq!(encodes(), 4);
    }

    #[test]
    fn the_series_gauge_counts_every_sample_on_its_own_page() {
        let metrics = Metrics::new(&Config::default()).unwrap();
        let label = metrics.model_label(Some("m"), None, true);
        metrics.series(label, Api::Chat);
        let page = metrics.encode();
        let text = std::str::from_utf8(&page).unwrap();
        let samples = text.lines().filter(|l| !l.starts_with('#')).count();
        let gauge = format!("{SERIES} {samples}\n");
        assert!(text.contains(&gauge), "{gauge:?} missing");
    }
}
