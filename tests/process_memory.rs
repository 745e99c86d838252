//! The binary's memory after a burst, as an operator's container limit meets it: the memory 400 held-open
//! streams took goes back to the kernel in the lull after them (jemalloc's background thread), instead of
//! staying resident until the next burst (as it did with glibc's malloc, and with jemalloc without the
//! thread: 2,000 streams left 57 MiB resident through 30 s of lull either way).
#![cfg(all(target_os = "linux", feature = "jemalloc"))]

use crate::support;

use std::time::{Duration, Instant};

use support::{chunk, content_chunk, last_chunk, ms, rss_kib_of, sse_head, start_binary, Step};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const STREAMS: usize = 400;

/// A streamed request whose answer has begun (its head and first chunk read); the connection is held.
async fn open_stream(proxy: &str) -> TcpStream {
    let mut stream = TcpStream::connect(proxy).await.expect("connect");
    stream
        .write_all(&support::raw_chat("m", false))
        .await
        .expect("ask");
    let mut first = [0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut first))
        .await
        .expect("the answer begins")
        .expect("read");
    assert!(first[..n].starts_with(b"HTTP/1.1 200"));
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_a_burst_of_streams_took_goes_back_to_the_kernel_in_the_lull_after_it() {
    // Streams that stay open (a chunk every 200 ms for a minute) until their clients leave.
    let upstream = support::upstream(|_| {
        let mut steps = vec![sse_head(), chunk(content_chunk("a").as_bytes())];
        for _ in 0..300 {
            steps.push(Step::Sleep(ms(200)));
            steps.push(chunk(content_chunk("b").as_bytes()));
        }
        steps.push(last_chunk());
        steps
    })
    .await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {}\n",
        upstream.url()
    );
    let process = start_binary("process-memory", &yaml, None);
    let pid = process.child.id();
    // One stream first, so what is made once (pools, caches, the first connection's buffers) is made.
    drop(open_stream(&process.proxy).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = rss_kib_of(pid);
    let mut held = Vec::new();
    for _ in 0..STREAMS {
        held.push(open_stream(&process.proxy).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let peak = rss_kib_of(pid);
    let grown = peak.saturating_sub(idle);
    assert!(
        grown > 4 << 10,
        "{STREAMS} held-open streams took only {grown} KiB (idle {idle} KiB): the test measures nothing"
    );
    drop(held);
    let left = Instant::now();
    let mut now = peak;
    let mut seen = Vec::new();
    while left.elapsed() < Duration::from_secs(40) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        now = rss_kib_of(pid);
        seen.push(now);
        if now <= idle + grown / 2 {
            break;
        }
    }
    println!(
        "idle {idle} KiB, {STREAMS} streams {peak} KiB, then {now} KiB {:.1} s after they left",
        left.elapsed().as_secs_f64()
    );
    assert!(
        now <= idle + grown / 2,
        "idle {idle} KiB, {STREAMS} held-open streams {peak} KiB; 40 s after they left still {now} KiB (every 500 ms: {seen:?})"
    );
    process.signal("TERM");
    let (exit, log) = process.wait();
    assert!(exit.success(), "exit {exit:?}:\n{log}");
}

/// A held body is one buffer the size of the body, whatever frames its client sent it in: a client
/// uploads 1 MiB in one-byte chunks (six bytes on the wire each: `1\r\nx\r\n`) and stops one byte
/// short, so tokentap holds it. Before, every chunk stayed a frame of its own pinning hyper's read
/// buffer, about 75 bytes each: +78 MiB a body, against 1 MiB counted in the `held_bodies` budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_in_one_byte_chunks_is_held_in_one_buffer_of_its_size() {
    const BODY: usize = 1 << 20;
    let upstream = support::upstream(|_| vec![support::json_response(200, "OK", "{}")]).await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {}\nmodel_list: {{enabled: false}}\n",
        upstream.url()
    );
    let process = start_binary("held-body-memory", &yaml, None);
    let pid = process.child.id();
    let head =
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n";
    let chunks: Vec<u8> = b"1\r\nx\r\n".repeat(BODY - 1);
    // One request first, so what is made once (pools, the first connection's buffers) is made.
    let mut warm = TcpStream::connect(&process.proxy).await.expect("connect");
    warm.write_all(head.as_bytes()).await.expect("head");
    warm.write_all(b"2\r\n{}\r\n0\r\n\r\n").await.expect("body");
    let mut answer = [0u8; 12];
    warm.read_exact(&mut answer).await.expect("answer");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = rss_kib_of(pid);
    let mut clients = Vec::new();
    for _ in 0..1 {
        let mut stream = TcpStream::connect(&process.proxy).await.expect("connect");
        stream.write_all(head.as_bytes()).await.expect("head");
        stream.write_all(&chunks).await.expect("chunks");
        clients.push(stream);
    }
    // Wait (bounded) until tokentap has read what was sent: its RSS stops growing.
    let mut held = idle;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = rss_kib_of(pid);
        if now == held {
            break;
        }
        held = now;
    }
    let grown = held.saturating_sub(idle);
    println!("idle {idle} KiB, a 1 MiB body in one-byte chunks held: {held} KiB (+{grown} KiB)");
    assert!(
        grown < 8 << 10,
        "a held 1 MiB body took {grown} KiB (idle {idle} KiB, held {held} KiB)"
    );
    for mut stream in clients {
        stream
            .write_all(b"1\r\nx\r\n0\r\n\r\n")
            .await
            .expect("the last byte");
        let mut answer = [0u8; 12];
        tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut answer))
            .await
            .expect("answered")
            .expect("read");
        assert_eq!(&answer, b"HTTP/1.1 200");
    }
    let sent: Vec<usize> = upstream.requests().iter().map(|r| r.body.len()).collect();
    assert_eq!(sent, vec![2, BODY]);
    process.signal("TERM");
    let (exit, log) = process.wait();
    assert!(exit.success(), "exit {exit:?}:\n{log}");
}
