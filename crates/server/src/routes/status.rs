//! The status page: `GET /` serves one self-contained HTML page (no CDN, no
//! build step) that polls `GET /v1/status` every two seconds — providers,
//! breakers and outcomes, the members of groups of equivalent targets
//! (smoothed time to first output, in flight, cache-read share, ejected),
//! traffic per second for the last ten minutes, each probed target's
//! readiness (ready, not ready and why, unchecked), the last events, and
//! the configuration file in force (its hash and load time).
//!
//! The page is sent with a strict `Content-Security-Policy`: its one inline
//! script by hash (edit the script, update its hash in [`CSP`]: the security
//! test and the browser test fail otherwise), inline styles (it sets colours
//! in `style` attributes), `fetch` to its own origin only, no frames of it
//! anywhere (`frame-ancestors 'none'`, and `X-Frame-Options: DENY` for older
//! browsers).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::{ApiError, AppState};

const PAGE: &str = include_str!("../static/status.html");

/// The page's `Content-Security-Policy`; `script-src` is the SHA-256
/// (base64) of the page's one inline script.
const CSP: &str = concat!(
    "default-src 'none'; script-src 'sha256-",
    "/hfzum5ICGEUBtWjLnRDiPS2kS33l1jccKiKugA1MPU=",
    "'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; ",
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
);

/// `GET /` (open: the page holds no data) .
pub(crate) fn page_router() -> Router<AppState> {
    Router::new().route("/", get(page))
}

/// `GET /v1/status` (behind client auth, like the rest of the API).
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/v1/status", get(status))
}

async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        PAGE,
    )
}

async fn status(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let providers = state.engine.providers().await?;
    let routing = state.engine.routing().await?;
    let recent = state.engine.recent();
    Ok(Json(json!({
        "now": understudy_core::shared::unix_ms() / 1000,
        "routing": routing,
        // The configuration file in force: its bytes' SHA-256 and when it
        // was loaded (absent without a file).
        "config": state.engine.config_stamp(),
        "providers": providers,
        "targets": state.engine.target_stats(),
        "readiness": state.engine.target_readiness(),
        "seconds": recent.seconds(),
        "events": recent.events(),
    })))
}
