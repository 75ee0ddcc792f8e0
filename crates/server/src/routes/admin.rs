//! The admin API (guarded by the admin token; off without one):
//! - `GET` and `PUT /v1/admin/routing`: read and change the routing table
//!   at run time (with Redis, for every instance of the fleet).
//! - `GET` / `POST /v1/admin/clients`, `PUT` / `DELETE
//!   /v1/admin/clients/{name}`: list, create (a key the gateway makes is
//!   shown once), change and revoke client records (with Redis, for every
//!   instance within a second).
//!
//! A change is kept before it is answered: in Redis when it is configured,
//! else in the state file (`server.state_file`); the client answers say
//! which (`kept_in`). A change that cannot be kept is a 503 and is not
//! made.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde_json::json;
use understudy_core::tenants::AdminError;
use understudy_settings::RawClient;
use understudy_settings::{RoutingTable, RoutingUpdate};
use understudy_types::Error;

use super::parse_json;
use crate::{ApiError, AppState};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/admin/routing", get(read).put(write))
        .route("/v1/admin/clients", get(list_clients).post(create_client))
        .route(
            "/v1/admin/clients/{name}",
            put(update_client).delete(delete_client),
        )
}

async fn read(State(state): State<AppState>) -> Result<Json<RoutingTable>, ApiError> {
    Ok(Json(state.engine.routing().await?))
}

async fn write(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RoutingTable>, ApiError> {
    let update: RoutingUpdate = parse_json(body, state.engine.settings().server.max_parts)?;
    let table = state
        .engine
        .set_routing(update)
        .await
        .map_err(|e| match e {
            // The admin is the operator: a change not kept says why (the state
            // file's path is the operator's own setting), where a client would
            // get a generic message.
            Error::Engine(message) => ApiError::Body {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message,
            },
            e => e.into(),
        })?;
    tracing::info!(default = %table.default, order = ?table.order, policy = %table.refusal_policy, "routing changed by the admin API");
    Ok(Json(table))
}

async fn list_clients(State(state): State<AppState>) -> Response {
    Json(json!({
        "clients": state.engine.list_clients(),
        "kept_in": state.engine.kept_in(),
    }))
    .into_response()
}

async fn create_client(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw: RawClient = parse_json(body, state.engine.settings().server.max_parts)?;
    let saved = state.engine.create_client(raw).await.map_err(admin_error)?;
    tracing::info!(client = %saved.client.name, "client record created by the admin API");
    Ok((StatusCode::CREATED, Json(saved)).into_response())
}

async fn update_client(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw: RawClient = parse_json(body, state.engine.settings().server.max_parts)?;
    let saved = state
        .engine
        .update_client(&name, raw)
        .await
        .map_err(admin_error)?;
    tracing::info!(client = %name, "client record changed by the admin API");
    Ok(Json(saved).into_response())
}

async fn delete_client(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    state
        .engine
        .delete_client(&name)
        .await
        .map_err(admin_error)?;
    tracing::info!(client = %name, "client record revoked by the admin API");
    Ok(Json(json!({ "deleted": name, "kept_in": state.engine.kept_in() })).into_response())
}

fn admin_error(e: AdminError) -> ApiError {
    match e {
        AdminError::Invalid { field, message } => ApiError::Invalid { field, message },
        AdminError::Conflict(message) => ApiError::Body {
            status: StatusCode::CONFLICT,
            message,
        },
        AdminError::NotFound(message) => ApiError::NotFound(message),
        AdminError::Unavailable(message) => ApiError::Body {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message,
        },
    }
}
