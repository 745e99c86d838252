//! tokentap never fails a request the upstream would have answered because of its own connection reuse:
//! idle connections the upstream closed are noticed at once and never handed out, whatever their number.

mod support;

use std::sync::Arc;

use support::*;

/// Answers after `wait` (so a burst overlaps and opens one upstream connection per request), then closes
/// the connection `close_after` later, as a server's keep-alive timer does.
fn answer_then_close(wait: u64, close_after: u64) -> Vec<Step> {
    vec![
        Step::Sleep(ms(wait)),
        json_response(200, "OK", "{\"ok\":true}"),
        Step::KeepAliveFor(ms(close_after)),
    ]
}

async fn burst(proxy: &tokentap::Running, client: &TestClient, n: usize) -> Vec<u16> {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (client, request) = (client.clone(), post(proxy, "/v1/models", ""));
        tasks.push(tokio::spawn(async move {
            let g = send(&client, request).await;
            if g.status != 200 {
                eprintln!("{}", String::from_utf8_lossy(&g.body));
            }
            g.status
        }));
    }
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.expect("request task"));
    }
    statuses
}

/// The case of the issue: a burst leaves many idle connections, the upstream closes them all in the lull,
/// and the next requests must each go out on a connection that is open.
#[tokio::test]
async fn after_a_burst_and_a_lull_no_closed_connection_is_handed_out() {
    let upstream = Arc::new(upstream(|_| answer_then_close(1000, 300)).await);
    let proxy = proxy(&upstream.url(), "").await;
    let client = client();
    let statuses = burst(&proxy, &client, 200).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert!(
        upstream.connection_count() > 150,
        "{}",
        upstream.connection_count()
    );
    // The lull: every idle connection has been closed by the upstream.
    tokio::time::sleep(ms(1000)).await;
    let mut failed = Vec::new();
    for i in 0..5 {
        let got = send(&client, post(&proxy, "/v1/models", "")).await;
        if got.status != 200 {
            failed.push((
                i,
                got.status,
                String::from_utf8_lossy(&got.body).into_owned(),
            ));
        }
    }
    assert!(failed.is_empty(), "failed after the lull: {failed:?}");
}
