//! The endpoints, one module per group.

pub(crate) mod generate;
pub(crate) mod health;

use axum::http::Uri;

use crate::ApiError;

/// Any path that is not an endpoint.
pub(crate) async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no endpoint at {}", uri.path()))
}
