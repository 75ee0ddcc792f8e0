//! Posts encoded spans to an OTLP/HTTP collector (`POST …/v1/traces`,
//! `application/x-protobuf`), with the configured headers (a vendor's key:
//! marked sensitive, never logged). A collector's error is named by its
//! status, never by the URL (it may hold a token).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use understudy_core::settings::TelemetrySettings;
use understudy_core::trace::SpanSender;

pub(crate) struct OtlpSender {
    client: reqwest::Client,
    url: String,
    headers: HeaderMap,
}

impl std::fmt::Debug for OtlpSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a token; the headers are a vendor's keys.
        f.debug_struct("OtlpSender")
            .field("url", &understudy_core::settings::redact_url(&self.url))
            .finish_non_exhaustive()
    }
}

/// The sender for `telemetry`'s endpoint.
pub(crate) fn sender(telemetry: &TelemetrySettings) -> Result<Arc<dyn SpanSender>, String> {
    let url = telemetry
        .traces_endpoint
        .clone()
        .ok_or("no OTLP endpoint is set")?;
    let mut headers = HeaderMap::new();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-protobuf"),
    );
    for (name, value) in &telemetry.headers {
        let name = HeaderName::try_from(name.as_str())
            .map_err(|_| format!("`{name}` is not a header name (OTEL_EXPORTER_OTLP_HEADERS)"))?;
        let mut value = HeaderValue::try_from(value.expose())
            .map_err(|_| format!("the value of `{name}` is not a header value"))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    crate::install_tls_provider();
    let client = reqwest::Client::builder()
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
    }))
}

impl SpanSender for OtlpSender {
    fn send(&self, body: Vec<u8>) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            let response = self
                .client
                .post(&self.url)
                .headers(self.headers.clone())
                .body(body)
                .send()
                .await
                .map_err(|e| format!("the collector did not answer: {}", e.without_url()))?;
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
