//! The metrics port under scrapers that ask for a large `/metrics` page and never read it: they hold two
//! pages at most, not one each, until `timeouts.metrics_send` closes them (counted in
//! `tokentap_metrics_port_refused_total{reason="send_timeout"}`). Its own test binary with one test: the
//! figure is the resident memory of this process, which no other test may move.
//! `metrics_port_limits.rs` has the live views, the connection cap and the allowed hosts.

mod support;

use std::time::Duration;

use support::*;
use tokentap::record::metrics::family;

/// Room for 400 model labels: a multi-LoRA deployment's page.
const MANY_MODELS: &str = "max_models: 400\nmetrics: {max_series: 5000000}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_scrapers_that_never_read_a_large_page_hold_two_copies_at_most_until_the_send_timeout(
) {
    let _slot = slot();
    let upstream = upstream(|_| ok_stream()).await;
    // 20 s to send a page: the forty asks below take a second or two, and all of them must have their
    // pages held before the first is closed for not reading (at load 10, 5 s was not enough).
    let extra = format!("{MANY_MODELS}timeouts: {{metrics_send: 20s}}\n");
    let proxy = proxy(&upstream.url(), &extra).await;
    send_distinct_models(&proxy, 400).await;
    settle(&proxy).await;
    // Two whole scrapes first, so the allocator has its working set for one page.
    let page = scrape(&proxy).await.text.len();
    let _ = scrape(&proxy).await;
    assert!(page > 5 << 20, "a page of {page} bytes");
    let before = rss_kib();
    let encodes_before = scrape(&proxy).await.get(family::ENCODES.name, &[]);
    let mut stuck = Vec::new();
    for _ in 0..40 {
        let (stream, status) = ask_and_never_read(proxy.metrics_addr(), "/metrics").await;
        assert_eq!(status, 200);
        stuck.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let grown = rss_kib().saturating_sub(before);
    println!(
        "40 non-reading scrapers of a {:.1} MiB page: RSS +{:.1} MiB",
        page as f64 / (1 << 20) as f64,
        mib(grown)
    );
    // While they hang on, a scraper that reads gets a whole page.
    let m = scrape(&proxy).await;
    assert!(m.text.ends_with("\n") && m.text.len() > 5 << 20);
    let encodes = m.get(family::ENCODES.name, &[]) - encodes_before;
    assert!(
        encodes <= 3.0,
        "{encodes} encodings for 41 scrapes while two pages were held"
    );
    // Two pages held, one being encoded, and the allocator's slack: under three pages on a quiet
    // machine (+10 to +11 MiB here); on a loaded one the encodings land on more blocking threads,
    // each with its own malloc arena, and it was seen at 4.5 pages. The bound is six, far below the
    // one copy a connection (40 pages, +290 MiB) it is here to catch.
    assert!(
        grown < 6 * (page as u64 >> 10),
        "RSS grew by {:.1} MiB for 40 scrapers of a {:.1} MiB page",
        mib(grown),
        page as f64 / (1 << 20) as f64
    );
    // `timeouts.metrics_send` after their socket filled, each is closed with its page unsent: once
    // all forty are counted, read what each got.
    let closed = |m: &Metrics| {
        m.get(
            family::METRICS_PORT_REFUSED.name,
            &[("reason", "send_timeout")],
        )
    };
    let since = std::time::Instant::now();
    while closed(&scrape(&proxy).await) < 40.0 && since.elapsed() < HANG {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for stream in &mut stuck {
        let (got, ended) = drain(stream, HANG).await;
        assert!(ended, "a scraper that never read was not closed");
        assert!(got < page, "{got} bytes of a {page}-byte page");
    }
    let m = scrape(&proxy).await;
    assert_eq!(
        m.get(
            family::METRICS_PORT_REFUSED.name,
            &[("reason", "send_timeout")]
        ),
        40.0
    );
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
