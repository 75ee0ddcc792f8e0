//! Posts encoded spans to an OTLP collector, with the configured headers
//! (a vendor's key: marked sensitive, never logged): over HTTP
//! (`POST …/v1/traces`, `application/x-protobuf`), or over gRPC (the
//! `TraceService/Export` call: the same message in gRPC's five-byte frame,
//! over HTTP/2 — cleartext with prior knowledge for `http://` — its outcome
//! in `grpc-status`, a header or a trailer). reqwest speaks HTTP/2 already,
//! so gRPC costs no crate. A collector's error is named by its status,
//! never by the URL (it may hold a token).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use understudy_settings::{OtlpProtocol, TelemetrySettings};

/// Posts one encoded export (`ExportTraceServiceRequest`) to the
/// collector.
pub trait SpanSender: Send + Sync + std::fmt::Debug + 'static {
    fn send(&self, body: Vec<u8>) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
}

pub(crate) struct OtlpSender {
    client: reqwest::Client,
    url: String,
    headers: HeaderMap,
    grpc: bool,
}

/// The gRPC method spans are exported with.
const GRPC_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// The most of a gRPC answer read (an `ExportTraceServiceResponse`: a
/// partial success's count and message).
const GRPC_ANSWER_LIMIT: usize = 64 * 1024;

impl std::fmt::Debug for OtlpSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a token; the headers are a vendor's keys.
        f.debug_struct("OtlpSender")
            .field("url", &understudy_settings::redact_url(&self.url))
            .finish_non_exhaustive()
    }
}

/// The sender for `telemetry`'s endpoint.
pub(crate) fn sender(telemetry: &TelemetrySettings) -> Result<Arc<dyn SpanSender>, String> {
    let endpoint = telemetry
        .traces_endpoint
        .clone()
        .ok_or("no OTLP endpoint is set")?;
    let grpc = telemetry.protocol == OtlpProtocol::Grpc;
    let mut headers = HeaderMap::new();
    let url = if grpc {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert("te", HeaderValue::from_static("trailers"));
        format!("{}{GRPC_EXPORT}", endpoint.trim_end_matches('/'))
    } else {
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        endpoint
    };
    for (name, value) in &telemetry.headers {
        let name = HeaderName::try_from(name.as_str())
            .map_err(|_| format!("`{name}` is not a header name (OTEL_EXPORTER_OTLP_HEADERS)"))?;
        let mut value = HeaderValue::try_from(value.expose())
            .map_err(|_| format!("the value of `{name}` is not a header value"))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    // reqwest is built without a crypto provider: ring is installed here,
    // as the adapters install it (the first to run wins; both are ring).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder();
    if grpc {
        // gRPC is HTTP/2 only; over `http://` there is no ALPN to ask, and
        // a proxy in between would not speak cleartext HTTP/2.
        builder = builder.http2_prior_knowledge();
        if url.starts_with("http://") {
            builder = builder.no_proxy();
        }
    }
    let client = builder
        .connect_timeout(Duration::from_secs(5))
        .timeout(telemetry.export_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("understudy/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot build the OTLP client: {}", e.without_url()))?;
    Ok(Arc::new(OtlpSender {
        client,
        url,
        headers,
        grpc,
    }))
}

impl SpanSender for OtlpSender {
    fn send(&self, body: Vec<u8>) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            let body = if self.grpc { grpc_frame(body) } else { body };
            let response = self
                .client
                .post(&self.url)
                .headers(self.headers.clone())
                .body(body)
                .send()
                .await
                .map_err(|e| format!("the collector did not answer: {}", e.without_url()))?;
            if self.grpc {
                return grpc_outcome(response).await;
            }
            let status = response.status();
            // The body (a partial success, or the error) is not read: the
            // connection is let go with it, whatever its size.
            drop(response);
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("the collector answered {status}"))
            }
        })
    }
}

/// `message` in gRPC's length-prefixed frame (not compressed).
fn grpc_frame(message: Vec<u8>) -> Vec<u8> {
    let mut framed = Vec::with_capacity(message.len() + 5);
    framed.push(0);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend(message);
    framed
}

/// How a gRPC call went: HTTP 200 and `grpc-status: 0`, found in the
/// headers (a trailers-only answer, as for most errors) or in the
/// trailers after the (bounded) body.
async fn grpc_outcome(response: reqwest::Response) -> Result<(), String> {
    let status = response.status();
    if status != reqwest::StatusCode::OK {
        return Err(format!("the collector answered {status}"));
    }
    if let Some(code) = grpc_status(response.headers()) {
        return grpc_code(code);
    }
    let body = ::http::Response::<reqwest::Body>::from(response).into_body();
    let collected = http_body_util::Limited::new(body, GRPC_ANSWER_LIMIT)
        .collect()
        .await
        .map_err(|_| "the collector's answer did not arrive whole".to_owned())?;
    match collected.trailers().and_then(grpc_status) {
        Some(code) => grpc_code(code),
        None => Err("the collector's answer has no grpc-status".into()),
    }
}

fn grpc_status(headers: &HeaderMap) -> Option<u32> {
    headers
        .get("grpc-status")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A gRPC status code as the export's outcome (its message is the
/// collector's words: left out).
fn grpc_code(code: u32) -> Result<(), String> {
    match code {
        0 => Ok(()),
        14 => Err("the collector is unavailable (grpc-status 14)".into()),
        other => Err(format!("the collector answered grpc-status {other}")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_grpc_frame_is_a_flag_a_length_and_the_message() {
        assert_eq!(super::grpc_frame(vec![7; 3]), [0, 0, 0, 0, 3, 7, 7, 7]);
        assert_eq!(super::grpc_code(0), Ok(()));
        assert!(super::grpc_code(14).is_err());
    }
}
