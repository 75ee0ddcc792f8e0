//! The endpoints, one module per group.

pub(crate) mod admin;
pub(crate) mod chat;
pub(crate) mod generate;
pub(crate) mod health;
pub(crate) mod metrics;
pub(crate) mod models;
pub(crate) mod wit;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{StatusCode, Uri};

use crate::ApiError;

/// Any path that is not an endpoint.
pub(crate) async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no endpoint at {}", uri.path()))
}

/// Reads a JSON body, turning every failure into a 4xx that names the
/// offending field where there is one.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|rejection| {
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            format!("the body is larger than {} bytes", crate::BODY_LIMIT)
        } else {
            rejection.body_text()
        };
        ApiError::Body { status, message }
    })?;
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            ApiError::Body {
                status: StatusCode::BAD_REQUEST,
                message: format!("invalid JSON body: {inner}"),
            }
        } else {
            ApiError::invalid(path, inner.to_string())
        }
    })
}

/// `Cache-Control: no-cache` (or `no-store`) opts a request out of the cache.
pub(crate) fn no_cache(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .any(|d| matches!(d.trim(), "no-cache" | "no-store"))
        })
}
