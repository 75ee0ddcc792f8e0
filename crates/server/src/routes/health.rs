//! `GET /healthz` (open, for load balancers: the process is alive, and
//! stays 200 while it drains) and `GET /readyz` (open: whether it should
//! get traffic — the configuration loaded, every route has a target that
//! can take a request now, a configured Redis reachable unless the
//! operator says it may be missing, and no shutdown begun).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::{ApiError, AppState};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

async fn healthz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let providers = state.engine.providers().await?;
    let available: Vec<&str> = providers
        .iter()
        .filter(|p| p.available)
        .map(|p| p.name.as_str())
        .collect();
    Ok(Json(
        json!({"status": "ok", "available_providers": available}),
    ))
}

/// 200 when the gateway can take traffic, else 503: each condition is one
/// entry of `checks`, with `ok` and a short reason (never an address or a
/// key). See [`verdict`] for how they combine.
async fn readyz(State(state): State<AppState>) -> Response {
    let engine = &state.engine;
    let routes = match engine.readiness().await {
        Ok(unready) => json!(unready),
        Err(e) => {
            tracing::warn!(error = %e, "readiness cannot be told");
            json!([{"route": null, "targets": [], "reason": "the engine is not running"}])
        }
    };
    let unready = routes.as_array().map_or(1, Vec::len);
    let redis = engine.redis_reach().await.map(|r| r.problem());
    let without_redis = engine.settings().server.ready_without_redis;
    let draining = engine.draining();
    let (status, word) = verdict(&Checks {
        routes: unready == 0,
        redis: redis.map(|problem| problem.is_none()),
        without_redis,
        draining,
    });
    let routes_reason = match unready {
        0 => "every route has a target that can serve".to_owned(),
        1 => "1 route has no target that can serve".to_owned(),
        n => format!("{n} routes have no target that can serve"),
    };
    let redis_check = match redis {
        None => json!({"ok": true, "reason": "not configured"}),
        Some(None) => json!({"ok": true, "reason": "reachable", "required": !without_redis}),
        Some(Some(problem)) => {
            let reason = if without_redis {
                format!("{problem} (serving on local state: server.ready_without_redis)")
            } else {
                problem.to_owned()
            };
            json!({"ok": false, "reason": reason, "required": !without_redis})
        }
    };
    let body = json!({
        "status": word,
        "checks": {
            "config": {"ok": true, "reason": "loaded"},
            "routes": {"ok": unready == 0, "reason": routes_reason, "unready": routes},
            "redis": redis_check,
            "draining": if draining {
                json!({"ok": false, "reason": "shutting down: finishing requests in flight"})
            } else {
                json!({"ok": true, "reason": "not shutting down"})
            },
        },
    });
    (status, Json(body)).into_response()
}

/// What `/readyz` weighs.
#[derive(Debug, Clone, Copy)]
struct Checks {
    /// Every route has a target that can serve.
    routes: bool,
    /// Whether the configured Redis is reachable (`None`: none configured).
    redis: Option<bool>,
    /// `server.ready_without_redis`.
    without_redis: bool,
    /// A shutdown has begun.
    draining: bool,
}

/// The status and its word: `draining` (503) from the first signal on,
/// whatever else holds; `not_ready` (503) while a route has no target that
/// can serve, or a configured Redis is unreachable and the operator has
/// not said the gateway is ready without it; `degraded` (200) when they
/// have (it serves on local state); else `ready` (200).
fn verdict(c: &Checks) -> (StatusCode, &'static str) {
    if c.draining {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining");
    }
    if !c.routes {
        return (StatusCode::SERVICE_UNAVAILABLE, "not_ready");
    }
    match c.redis {
        Some(false) if c.without_redis => (StatusCode::OK, "degraded"),
        Some(false) => (StatusCode::SERVICE_UNAVAILABLE, "not_ready"),
        _ => (StatusCode::OK, "ready"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_verdicts() {
        // (routes, redis, ready_without_redis, draining) -> status, word
        type Case = (bool, Option<bool>, bool, bool, u16, &'static str);
        let cases: [Case; 9] = [
            (true, None, false, false, 200, "ready"),
            (true, Some(true), false, false, 200, "ready"),
            (true, Some(false), false, false, 503, "not_ready"),
            (true, Some(false), true, false, 200, "degraded"),
            (false, None, false, false, 503, "not_ready"),
            (false, Some(false), true, false, 503, "not_ready"),
            (true, None, false, true, 503, "draining"),
            (true, Some(false), true, true, 503, "draining"),
            (false, Some(true), false, true, 503, "draining"),
        ];
        for (routes, redis, without_redis, draining, status, word) in cases {
            let c = Checks {
                routes,
                redis,
                without_redis,
                draining,
            };
            let (got, got_word) = verdict(&c);
            assert_eq!((got.as_u16(), got_word), (status, word), "{c:?}");
        }
    }
}
