//! The bursty soak (`--burst N`): rounds of N streams started at once, each round followed by a lull of
//! 2 to 8 s, until the deadline. With `--keep-alive-ms` the upstream closes idle connections as a server's
//! keep-alive does, so every lull leaves tokentap's pool facing closed or expiring connections, the case
//! that once failed requests. Each round prints its failures so far, tokentap's descriptors at the end of
//! the lull (they must come back down, not grow) and its upstream connection counters.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{fds, one_stream, sample, scrape, HttpClient, Tally};

/// Runs rounds until `deadline`; returns the highest descriptor count seen at the end of a lull.
pub async fn run(
    client: HttpClient, url: String, expected: Arc<Vec<u8>>, tally: Arc<Tally>, deadline: Instant,
    burst: usize, (pid, metrics): (u32, SocketAddr),
) -> usize {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let (mut round, mut fds_after_lulls) = (0u64, 0usize);
    while Instant::now() < deadline {
        round += 1;
        let streams: Vec<_> = (0..burst)
            .map(|_| {
                let (client, url, expected, tally) =
                    (client.clone(), url.clone(), expected.clone(), tally.clone());
                tokio::spawn(async move { one_stream(&client, &url, &expected, &tally).await })
            })
            .collect();
        for stream in streams {
            let _ = stream.await;
        }
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let lull = Duration::from_millis(2000 + (seed >> 33) % 6001);
        tokio::time::sleep(lull).await;
        let open = fds(pid);
        fds_after_lulls = fds_after_lulls.max(open);
        let text = scrape(&client, metrics).await;
        let counter = |name: &str| sample(&text, name, &[]);
        println!(
            "round {round:>4}: burst {burst}, lull {:.1} s, completed {:>7}, failed {}, fds after the lull {open}, idle upstream {}, closed by upstream {}, expired {}, resent {}",
            lull.as_secs_f64(),
            tally.completed.load(Relaxed),
            tally.failed.load(Relaxed),
            counter("tokentap_upstream_idle_connections"),
            counter("tokentap_upstream_idle_closed_by_upstream_total"),
            counter("tokentap_upstream_idle_expired_total"),
            counter("tokentap_upstream_requests_resent_total"),
        );
    }
    fds_after_lulls
}
