//! A scripted OTLP/HTTP receiver on loopback, as an OpenTelemetry Collector would be: it decodes each
//! export with the OpenTelemetry project's own messages (`opentelemetry-proto`), spans at `/v1/traces`
//! and metrics at `/v1/metrics`, keeps what it accepted and the head of every export, and answers as
//! the test scripts it (at once, late, with a status, or a partial success).

use std::convert::Infallible;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;

/// How the scripted collector answers an export.
#[derive(Clone, Copy)]
pub enum Reply {
    /// 200 with an empty export response.
    Accept,
    /// This status, at once.
    Status(u16),
    /// 200, after this long.
    After(Duration),
    /// 200 with a partial success rejecting this many spans of each export.
    Partial(i64),
}

/// What the receiver accepted, and each export's head and the spans (or data points) it carried.
#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    metrics: Vec<ExportMetricsServiceRequest>,
    exports: Vec<(http::HeaderMap, usize)>,
}

/// An OTLP/HTTP receiver on loopback.
pub struct Collector {
    addr: SocketAddr,
    received: Arc<Mutex<Received>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Collector {
    pub async fn start(answer: Reply) -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let received = Arc::new(Mutex::new(Received::default()));
        let kept = received.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = kept.clone();
                let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let kept = kept.clone();
                    async move { Ok::<_, Infallible>(receive(request, answer, &kept).await) }
                });
                tokio::spawn(async move {
                    let io = TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        Collector {
            addr,
            received,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The spans accepted so far.
    pub fn spans(&self) -> Vec<Span> {
        self.received.lock().unwrap().spans.clone()
    }

    /// The metrics exports accepted so far, in order.
    pub fn metrics(&self) -> Vec<ExportMetricsServiceRequest> {
        self.received.lock().unwrap().metrics.clone()
    }

    /// Each export's head and how many spans (or data points) it carried.
    pub fn exports(&self) -> Vec<(http::HeaderMap, usize)> {
        self.received.lock().unwrap().exports.clone()
    }
}

async fn receive(
    request: http::Request<hyper::body::Incoming>, answer: Reply, kept: &Mutex<Received>,
) -> http::Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let plain = match parts.headers.get("content-encoding") {
        Some(v) if v == "gzip" => {
            let mut plain = Vec::new();
            let mut gz = flate2::read::GzDecoder::new(&bytes[..]);
            gz.read_to_end(&mut plain).expect("gzip");
            plain
        }
        _ => bytes.to_vec(),
    };
    let status = match answer {
        Reply::Accept | Reply::Partial(_) => 200,
        Reply::Status(status) => status,
        Reply::After(wait) => {
            tokio::time::sleep(wait).await;
            200
        }
    };
    let accepted = status == 200;
    let answer_body = match parts.uri.path() {
        "/v1/traces" => {
            let decoded = ExportTraceServiceRequest::decode(&plain[..]).expect("OTLP traces");
            let spans: Vec<Span> = (decoded.resource_spans.into_iter())
                .flat_map(|r| r.scope_spans)
                .flat_map(|s| s.spans)
                .collect();
            let mut kept = kept.lock().unwrap();
            kept.exports.push((parts.headers, spans.len()));
            if accepted {
                kept.spans.extend(spans);
            }
            let partial_success = match answer {
                Reply::Partial(rejected) => Some(ExportTracePartialSuccess {
                    rejected_spans: rejected,
                    error_message: "too old".into(),
                }),
                _ => None,
            };
            ExportTraceServiceResponse { partial_success }.encode_to_vec()
        }
        "/v1/metrics" => {
            let decoded = ExportMetricsServiceRequest::decode(&plain[..]).expect("OTLP metrics");
            let points = (decoded.resource_metrics.iter())
                .flat_map(|r| &r.scope_metrics)
                .flat_map(|s| &s.metrics)
                .count();
            let mut kept = kept.lock().unwrap();
            kept.exports.push((parts.headers, points));
            if accepted {
                kept.metrics.push(decoded);
            }
            ExportMetricsServiceResponse::default().encode_to_vec()
        }
        other => panic!("an export to {other}"),
    };
    http::Response::builder()
        .status(status)
        .header("content-type", "application/x-protobuf")
        .body(Full::new(Bytes::from(answer_body)))
        .expect("response")
}
