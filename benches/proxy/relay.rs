//! The null relay: the harness's own binary run again as `--relay LISTEN UPSTREAM`, a process that does
//! nothing but copy bytes between each client connection and a connection of its own to the upstream
//! (tokio, one thread, `copy_bidirectional`, TCP_NODELAY), pinned to the proxies' core. It is the floor
//! of the wire's added delay: the second loopback hop, the kernel waking a process on another core to
//! read, and the client's core being woken for what it writes — what any proxy in a separate process
//! pays before doing anything. A proxy's added delay beyond the relay's is its own work.

use std::net::SocketAddr;
use std::process::ExitCode;

use tokio::net::{TcpListener, TcpStream};

pub fn main(listen: &str, upstream: &str) -> ExitCode {
    let (Ok(listen), Ok(upstream)) = (listen.parse::<SocketAddr>(), upstream.parse::<SocketAddr>())
    else {
        eprintln!("relay: --relay LISTEN UPSTREAM, two socket addresses");
        return ExitCode::FAILURE;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let Ok(runtime) = runtime else {
        return ExitCode::FAILURE;
    };
    runtime.block_on(async move {
        let Ok(listener) = TcpListener::bind(listen).await else {
            eprintln!("relay: cannot bind {listen}");
            return ExitCode::FAILURE;
        };
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let Ok(mut server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    })
}
