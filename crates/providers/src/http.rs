//! The pieces every adapter shares: building the pooled client, sending,
//! and reading a body without trusting its size.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use reqwest::header::HeaderMap;
use understudy_core::{Failure, FailureKind, ProviderSettings};

use crate::classify;

/// The largest non-streamed answer accepted; a bigger body is garbage.
pub(crate) const BODY_LIMIT: usize = 8 * 1024 * 1024;

/// The most of an error body read for classification.
pub(crate) const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// One client per provider, pooled; the engine applies attempt deadlines,
/// so only the connect timeout is set here.
pub(crate) fn client(settings: &ProviderSettings) -> Result<reqwest::Client, String> {
    crate::install_tls_provider();
    reqwest::Client::builder()
        .connect_timeout(settings.timeouts.connect)
        .pool_idle_timeout(Duration::from_secs(90))
        .tcp_nodelay(true)
        .user_agent(concat!("understudy/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {}", e.without_url()))
}

/// A response read in full: status, headers, and body bytes.
pub(crate) struct Received {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Sends `request` and reads the answer, bounded by [`BODY_LIMIT`] (or
/// [`ERROR_BODY_LIMIT`] for an error status).
pub(crate) async fn send(request: reqwest::RequestBuilder) -> Result<Received, Failure> {
    let response = request.send().await.map_err(classify::transport)?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let limit = if (200..300).contains(&status) {
        BODY_LIMIT
    } else {
        ERROR_BODY_LIMIT
    };
    let body = read_limited(response, limit, status).await?;
    Ok(Received {
        status,
        headers,
        body,
    })
}

async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
    status: u16,
) -> Result<Bytes, Failure> {
    let too_big = || {
        Failure::new(
            FailureKind::MalformedResponse,
            format!("the response body is larger than {} KiB", limit / 1024),
        )
        .with_status(status)
    };
    if response.content_length().is_some_and(|n| n > limit as u64) {
        if (200..300).contains(&status) {
            return Err(too_big());
        }
        // An error status with a huge body: classify by status alone.
        return Ok(Bytes::new());
    }
    let mut buf = BytesMut::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > limit {
                    if (200..300).contains(&status) {
                        return Err(too_big());
                    }
                    let room = limit - buf.len();
                    buf.extend_from_slice(&chunk[..room]);
                    return Ok(buf.freeze());
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(buf.freeze()),
            Err(e) => {
                let mut f = classify::transport(e);
                f.status = Some(status);
                f.detail = format!("the body was cut short: {}", f.detail);
                return Err(f);
            }
        }
    }
}
