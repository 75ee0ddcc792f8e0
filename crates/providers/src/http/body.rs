//! Reading an upstream answer's body with a bound: [`BODY_LIMIT`] for a
//! success, [`ERROR_BODY_LIMIT`] for an error status, and a body cut short
//! classified as the transport failure it is.

use bytes::{Bytes, BytesMut};
use understudy_types::{Failure, FailureKind};

use super::Received;
use crate::classify;

/// The largest non-streamed answer accepted; a bigger body is garbage.
pub(crate) const BODY_LIMIT: usize = 8 * 1024 * 1024;

/// The most of an error body read for classification.
pub(crate) const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Reads an answer, bounded by [`BODY_LIMIT`] (or [`ERROR_BODY_LIMIT`]
/// for an error status).
pub(crate) async fn receive(mut response: reqwest::Response) -> Result<Received, Failure> {
    let status = response.status().as_u16();
    // Taken, not copied: the body is read from here on, without them.
    let headers = std::mem::take(response.headers_mut());
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

pub(super) async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
    status: u16,
) -> Result<Bytes, Failure> {
    let success = (200..300).contains(&status);
    let too_big = || {
        Failure::new(
            FailureKind::MalformedResponse,
            format!("the response body is larger than {} KiB", limit / 1024),
        )
        .with_status(status)
    };
    if response.content_length().is_some_and(|n| n > limit as u64) {
        if success {
            return Err(too_big());
        }
        // An error status with a huge body: classify by status alone.
        return Ok(Bytes::new());
    }
    // Most answers arrive in one chunk: it is kept as it came, uncopied;
    // a second one starts a buffer holding both.
    let mut first: Option<Bytes> = None;
    let mut buf = BytesMut::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Ok(first.unwrap_or_else(|| buf.freeze())),
            Err(e) => return Err(cut_short(e, status)),
        };
        let held = first.as_ref().map_or(buf.len(), Bytes::len);
        if held + chunk.len() > limit {
            if success {
                return Err(too_big());
            }
            if let Some(f) = first.take() {
                buf.extend_from_slice(&f);
            }
            buf.extend_from_slice(&chunk[..limit - held]);
            return Ok(buf.freeze());
        }
        match first.take() {
            None if buf.is_empty() => first = Some(chunk),
            held => {
                if let Some(f) = held {
                    buf.reserve(f.len() + chunk.len());
                    buf.extend_from_slice(&f);
                }
                buf.extend_from_slice(&chunk);
            }
        }
    }
}

/// A body whose reading failed after the status `status` came.
fn cut_short(e: reqwest::Error, status: u16) -> Failure {
    let mut f = classify::transport(e);
    f.status = Some(status);
    f.detail = format!("the body was cut short: {}", f.detail);
    f
}
