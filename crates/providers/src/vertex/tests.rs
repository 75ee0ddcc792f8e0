//! The Vertex adapter's own checks: Google's error shapes (the JSON
//! array, quotas with and without a retry hint, a model not enabled, an
//! expired token) and Anthropic's, and Claude's bodies as rawPredict
//! takes them.

#![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

use std::time::Duration;

use serde_json::{Value, json};
use understudy_settings::Settings;
use understudy_types::NativeRequest;

use super::*;

fn classify(status: u16, body: &Value) -> Failure {
    error::classify(status, &HeaderMap::new(), body.to_string().as_bytes())
}

#[test]
fn a_quota_in_a_json_array_without_a_retry_hint_is_the_quota() {
    let body = json!([{"error": {
        "code": 429,
        "message": "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: anthropic-claude-3-5-sonnet-v2. Please submit a quota increase request.",
        "status": "RESOURCE_EXHAUSTED"
    }}]);
    let f = classify(429, &body);
    assert_eq!(f.kind, FailureKind::QuotaExceeded, "{f:?}");
    assert!(
        f.detail.starts_with("RESOURCE_EXHAUSTED: Quota exceeded"),
        "{}",
        f.detail
    );
    assert_eq!(f.status, Some(429));
}

#[test]
fn resource_exhausted_with_a_retry_delay_is_a_rate_limit() {
    let body = json!({"error": {
        "code": 429, "message": "Resource exhausted. Please try again later.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}]
    }});
    assert_eq!(
        classify(429, &body).kind,
        FailureKind::RateLimited {
            retry_after: Some(Duration::from_secs(7))
        }
    );
    // A `Retry-After` header is a hint too.
    let mut headers = HeaderMap::new();
    headers.insert("retry-after", HeaderValue::from_static("3"));
    let bare =
        json!({"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}});
    let f = error::classify(429, &headers, bare.to_string().as_bytes());
    assert_eq!(
        f.kind,
        FailureKind::RateLimited {
            retry_after: Some(Duration::from_secs(3))
        }
    );
}

#[test]
fn a_model_not_enabled_is_a_configuration_error_that_falls_back() {
    let body = json!({"error": {
        "code": 400,
        "message": "Project `1234` is not allowed to use Publisher Model `projects/p/locations/us-east5/publishers/anthropic/models/claude-haiku-4-5@20251001`",
        "status": "FAILED_PRECONDITION"
    }});
    let f = classify(400, &body);
    assert_eq!(f.kind, FailureKind::Auth, "not a bad request: {f:?}");
    assert!(!error::unauthenticated(&f), "no token renewal for it");
}

#[test]
fn an_expired_token_is_unauthenticated_and_renews() {
    let body = json!({"error": {
        "code": 401,
        "message": "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        "status": "UNAUTHENTICATED",
        "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "ACCESS_TOKEN_EXPIRED"}]
    }});
    let f = classify(401, &body);
    assert_eq!(f.kind, FailureKind::Auth);
    assert!(error::unauthenticated(&f), "{}", f.detail);
    // A bare 401 too; a 403 (permission) is auth but renews nothing.
    let bare = error::classify(401, &HeaderMap::new(), b"");
    assert!(error::unauthenticated(&bare), "{}", bare.detail);
    let denied = json!({"error": {"code": 403, "message": "Permission denied", "status": "PERMISSION_DENIED"}});
    let f = classify(403, &denied);
    assert_eq!(f.kind, FailureKind::Auth);
    assert!(!error::unauthenticated(&f));
}

#[test]
fn anthropic_shaped_errors_mean_what_they_mean_on_anthropic() {
    let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded", "details": null}});
    assert_eq!(
        classify(529, &overloaded).kind,
        FailureKind::Unavailable { retry_after: None }
    );
    let invalid = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "Unexpected value(s) `oauth-2025-04-20` for the `anthropic-beta` header"}});
    assert_eq!(classify(400, &invalid).kind, FailureKind::BadRequest);
    let unavailable = json!({"error": {"code": 503, "message": "The service is currently unavailable.", "status": "UNAVAILABLE"}});
    assert_eq!(
        classify(503, &unavailable).kind,
        FailureKind::Unavailable { retry_after: None }
    );
}

fn claude() -> VertexClaude {
    let toml = "[providers.v]\nkind = \"vertex\"\nproject = \"p\"\nregion = \"us-east5\"\nmodel = \"claude-haiku-4-5@20251001\"\napi_key = \"ya29.static\"\n";
    let s = Settings::from_toml_str(toml, |_| None).unwrap();
    let p = s.providers["v"].clone();
    VertexClaude {
        models: format!(
            "{}/v1/projects/p/locations/us-east5/publishers/anthropic/models",
            p.base_url
        ),
        headers: HeaderMap::new(),
        token: Arc::new(GoogleToken::fixed("ya29.static").unwrap()),
        limits: crate::OutputLimits::of(&p),
    }
}

#[test]
fn a_translated_body_has_the_vertex_version_no_model_and_its_stream() {
    let c = claude();
    for stream in [true, false] {
        let body = c
            .body(
                "claude-haiku-4-5@20251001",
                &ChatRequest::user("hi"),
                stream,
            )
            .unwrap();
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["anthropic_version"], VERTEX_VERSION);
        assert!(v.get("model").is_none(), "{v}");
        assert_eq!(v.get("stream").is_some(), stream, "{v}");
    }
}

#[test]
fn a_native_body_keeps_its_bytes_and_sends_betas_in_the_header() {
    let c = claude();
    let client = r#"{"model":"claude-haiku-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut native = NativeRequest::new(Protocol::Messages, client);
    native.headers = vec![(
        "anthropic-beta".into(),
        "interleaved-thinking-2025-05-14, mid-conversation-tool-changes-2026-01-01".into(),
    )];
    let mut request = ChatRequest::user("hi");
    request.native = Some(Arc::new(native));
    let body = c.body("claude-haiku-4-5@20251001", &request, true).unwrap();
    assert_eq!(
        body,
        r#"{"stream":true,"anthropic_version":"vertex-2023-10-16","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#
    );
    let unstreamed = c
        .body("claude-haiku-4-5@20251001", &request, false)
        .unwrap();
    assert!(!unstreamed.contains("stream"), "{unstreamed}");
    let headers = c.headers(&request);
    assert_eq!(headers["anthropic-beta"], "interleaved-thinking-2025-05-14");
    assert!(valid_model("claude-haiku-4-5@20251001").is_ok());
    assert!(valid_model("../x").is_err());
}
