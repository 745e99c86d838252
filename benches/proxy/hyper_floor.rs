//! The stack's floor: the harness's own binary run again as `--hyper-floor LISTEN UPSTREAM`, the plain
//! reverse proxy a Rust engineer writes with the stack tokentap is built on, and nothing else: tokio's
//! multi-thread runtime (one worker when pinned to one core, as tokentap's), hyper 1.x's HTTP/1 server on
//! each client connection and hyper-util's pooled client (`client::legacy`, TCP_NODELAY, keep-alive) to
//! the upstream; each request goes upstream with its path, and the response body comes back frame by
//! frame as hyper reads it. No metering, no logs, no limits. What tokentap costs beyond it is tokentap's
//! own: metering, its upstream pool, its checks and its logs; what it costs beyond nginx is what the stack
//! costs.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;

use bytes::Bytes;
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

type Upstream = Client<HttpConnector, Incoming>;
/// The upstream's body, or nothing (an error answer).
type Body = Either<Incoming, Empty<Bytes>>;

pub fn main(listen: &str, upstream: &str) -> ExitCode {
    let (Ok(listen), Ok(upstream)) = (listen.parse::<SocketAddr>(), upstream.parse::<SocketAddr>())
    else {
        eprintln!("hyper floor: --hyper-floor LISTEN UPSTREAM, two socket addresses");
        return ExitCode::FAILURE;
    };
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    else {
        return ExitCode::FAILURE;
    };
    runtime.block_on(async move {
        let Ok(listener) = TcpListener::bind(listen).await else {
            eprintln!("hyper floor: cannot bind {listen}");
            return ExitCode::FAILURE;
        };
        serve(listener, upstream).await;
        ExitCode::SUCCESS
    })
}

/// Serves every connection `listener` accepts, forwarding to `upstream`, for as long as it is polled.
pub async fn serve(listener: TcpListener, upstream: SocketAddr) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Upstream = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(usize::MAX)
        .build(connector);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, most likely: give the open streams a moment to end.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let client = client.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| forward(client.clone(), upstream, request));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn forward(
    client: Upstream, upstream: SocketAddr, request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = format!("http://{upstream}{path}").parse() else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    parts.uri = uri;
    match client.request(Request::from_parts(parts, body)).await {
        Ok(response) => Ok(response.map(Either::Left)),
        Err(_) => Ok(status(StatusCode::BAD_GATEWAY)),
    }
}

fn status(code: StatusCode) -> Response<Body> {
    let mut response = Response::new(Either::Right(Empty::new()));
    *response.status_mut() = code;
    response
}
