//! `GET` and `PUT /v1/admin/routing`: read and change the routing table at
//! run time (guarded by the admin token; off without one).

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::routing::get;
use axum::{Json, Router};
use understudy_core::{RoutingTable, RoutingUpdate};

use super::parse_json;
use crate::{ApiError, AppState};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/v1/admin/routing", get(read).put(write))
}

async fn read(State(state): State<AppState>) -> Result<Json<RoutingTable>, ApiError> {
    Ok(Json(state.engine.routing().await?))
}

async fn write(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RoutingTable>, ApiError> {
    let update: RoutingUpdate = parse_json(body)?;
    let table = state.engine.set_routing(update).await?;
    tracing::info!(default = %table.default, order = ?table.order, policy = %table.refusal_policy, "routing changed by the admin API");
    Ok(Json(table))
}
