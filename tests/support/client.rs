//! Well-behaved clients of the proxy port: pooled HTTP/1.1 and h2c clients, single connections a test
//! can drop mid-exchange, requests to send, and what the client got, frame by frame.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Body;
use hyper::client::conn::{http1, http2};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokentap::Running;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

pub type TestClient = Client<HttpConnector, Full<Bytes>>;

/// A pooled HTTP/1.1 client, as most applications use.
pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A pooled h2c client (HTTP/2 with prior knowledge), for any body type.
pub fn h2_client<B>() -> Client<HttpConnector, B>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// The task driving one client connection: it ends when the connection does, with hyper's verdict on
/// how. Abort it (and drop the sender) to leave as a client that goes away does.
pub type Connection = JoinHandle<hyper::Result<()>>;

/// One HTTP/1.1 connection to the proxy, not pooled, so the test decides when it ends.
pub async fn open<B>(proxy: &Running) -> (http1::SendRequest<B>, Connection)
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(proxy.proxy_addr())
        .await
        .expect("connect");
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    (sender, tokio::spawn(conn))
}

/// One h2c connection to the proxy, not pooled, so the test decides when it ends.
pub async fn open_h2<B>(proxy: &Running) -> (http2::SendRequest<B>, Connection)
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(proxy.proxy_addr())
        .await
        .expect("connect");
    let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .expect("h2 handshake");
    (sender, tokio::spawn(conn))
}

/// A chat request's answer, its head received and its body still to read.
pub type Answer = http::Response<hyper::body::Incoming>;

/// As [`open`], with one chat request for model `m` sent on the connection and its head received.
pub async fn open_chat(proxy: &Running) -> (http1::SendRequest<Full<Bytes>>, Connection, Answer) {
    let (mut sender, conn) = open(proxy).await;
    let request = post(proxy, "/v1/chat/completions", &chat_request("m"));
    let answer = sender.send_request(request).await.expect("head");
    (sender, conn, answer)
}

/// As [`open_h2`], with one chat request for model `m` sent on the connection and its head received.
pub async fn open_h2_chat(
    proxy: &Running,
) -> (http2::SendRequest<Full<Bytes>>, Connection, Answer) {
    let (mut sender, conn) = open_h2(proxy).await;
    let request = post(proxy, "/v1/chat/completions", &chat_request("m"));
    let answer = sender.send_request(request).await.expect("head");
    (sender, conn, answer)
}

/// The whole body of an answer whose head the test already has.
pub async fn body_bytes(answer: Answer) -> Bytes {
    answer.into_body().collect().await.expect("body").to_bytes()
}

/// What the client got.
#[derive(Debug)]
pub struct Received {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub frames: Vec<Bytes>,
    pub body: Vec<u8>,
    /// Err when the body broke off instead of ending cleanly.
    pub end: Result<(), String>,
    pub trailers: Option<http::HeaderMap>,
}

pub async fn send(client: &TestClient, request: http::Request<Full<Bytes>>) -> Received {
    let response = client.request(request).await.expect("response head");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let mut body = response.into_body();
    let (mut frames, mut all, mut trailers) = (Vec::new(), Vec::new(), None);
    let end = loop {
        match body.frame().await {
            None => break Ok(()),
            Some(Err(err)) => break Err(err.to_string()),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    all.extend_from_slice(&data);
                    frames.push(data);
                }
                Err(frame) => trailers = frame.into_trailers().ok(),
            },
        }
    };
    Received {
        status,
        headers,
        frames,
        body: all,
        end,
        trailers,
    }
}

pub fn post(proxy: &Running, path: &str, body: &str) -> http::Request<Full<Bytes>> {
    http::Request::post(format!("http://{}{path}", proxy.proxy_addr()))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request")
}

pub fn chat_request(model: &str) -> String {
    format!("{{\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}],\"model\":\"{model}\",\"stream\":true}}")
}

/// Sends one streamed request to `/v1/chat/completions` for each of `n` model names
/// (`adapter-000`…), 8 at a time; each must be answered 200 (so each name takes a label).
pub async fn send_distinct_models(proxy: &Running, n: usize) {
    let client = client();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let client = client.clone();
        let requests: Vec<_> = (worker..n)
            .step_by(8)
            .map(|i| {
                let body = chat_request(&format!("adapter-{i:03}"));
                post(proxy, "/v1/chat/completions", &body)
            })
            .collect();
        tasks.spawn(async move {
            for request in requests {
                assert_eq!(send(&client, request).await.status, 200);
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a worker");
    }
}
