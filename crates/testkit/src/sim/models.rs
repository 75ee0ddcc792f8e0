//! The simulators' model lookups, the calls a readiness probe makes: each
//! API's own (`GET /v1/models/{model}` for OpenAI, Groq and Anthropic,
//! `GET /v1beta/models/{model}` for Gemini; a cloud's are its own, in its
//! file: [`super::Cloud::lookup`]) in its real shape, with a retired
//! model's 404 and a revoked key's 401 (Gemini: its 400 `API_KEY_INVALID`).
//!
//! A lookup is counted ([`super::SimProvider::lookups`]) and never
//! recorded with the generation calls ([`super::SimProvider::received`]),
//! so a test can tell that a prober generated nothing. A retired model or
//! a revoked key fails generation calls too, in the protocol's shape.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use hyper::Response;
use serde_json::json;

use super::{Dialect, Received, Shared, SimBody, lock, response};

/// What the lookups answer, and how many came.
#[derive(Default)]
pub(super) struct Models {
    /// Models the provider no longer serves.
    retired: Mutex<HashSet<String>>,
    /// The key is refused (every call answers 401).
    revoked: AtomicBool,
    /// Keys refused one by one (a pool's), by their secret.
    revoked_keys: Mutex<HashSet<String>>,
    /// The server has no model lookup route (a bare 404, as an
    /// OpenAI-compatible server without `GET /models/{id}` answers).
    no_lookup: AtomicBool,
    lookups: AtomicUsize,
}

impl Models {
    pub(super) fn retire(&self, model: &str) {
        lock(&self.retired).insert(model.to_owned());
    }

    pub(super) fn restore(&self, model: &str) {
        lock(&self.retired).remove(model);
    }

    pub(super) fn revoke(&self) {
        self.revoked.store(true, Ordering::SeqCst);
    }

    pub(super) fn revoke_one(&self, key: &str) {
        lock(&self.revoked_keys).insert(key.to_owned());
    }

    /// Whether `req`'s key is refused: every key, or this one.
    fn refuses(&self, req: &Received) -> bool {
        self.revoked()
            || req
                .api_key()
                .is_some_and(|k| lock(&self.revoked_keys).contains(k))
    }

    pub(super) fn drop_lookups(&self) {
        self.no_lookup.store(true, Ordering::SeqCst);
    }

    pub(super) fn lookups(&self) -> usize {
        self.lookups.load(Ordering::SeqCst)
    }

    /// Counts a lookup (a cloud's too).
    pub(super) fn counted(&self) {
        self.lookups.fetch_add(1, Ordering::SeqCst);
    }

    pub(super) fn revoked(&self) -> bool {
        self.revoked.load(Ordering::SeqCst)
    }

    pub(super) fn retired(&self, model: &str) -> bool {
        lock(&self.retired).contains(model)
    }

    /// Whether `req` (a generation call) names a retired model: in its
    /// body's `model` or as a segment of its path.
    fn names_retired(&self, req: &Received) -> Option<String> {
        let retired = lock(&self.retired);
        let body = req.json();
        let named = body.get("model").and_then(|m| m.as_str());
        retired
            .iter()
            .find(|m| {
                named == Some(m.as_str())
                    || req
                        .path
                        .split(['/', '?', ':'])
                        .any(|segment| segment == m.as_str())
            })
            .cloned()
    }
}

/// The models state of the simulator that received `req`, if known.
pub(super) fn of(req: &Received) -> Option<&Models> {
    req.shared.as_deref().map(|s| &s.models)
}

/// A lookup's answer (the cloud's, or the direct provider's), counted;
/// `None` when `req` is no lookup.
pub(super) fn lookup(shared: &Shared, req: &Received) -> Option<Response<SimBody>> {
    let models = &shared.models;
    let answer = match &shared.cloud {
        Some(cloud) => cloud
            .lookup(req)?
            .unwrap_or_else(|refused| refused.response),
        None if models.no_lookup.load(Ordering::SeqCst) => {
            lookup_path(shared.dialect, req)?;
            json_response(404, &json!({"detail": "Not Found"}))
        }
        None => {
            let model = lookup_path(shared.dialect, req)?;
            if models.refuses(req) {
                auth_error(shared.dialect)
            } else {
                direct(shared.dialect, models, &model)
            }
        }
    };
    models.counted();
    Some(answer)
}

/// A generation call refused for a revoked key or a retired model, in
/// the protocol's shape; `None` when neither applies.
pub(super) fn refusal(shared: &Shared, req: &Received) -> Option<Response<SimBody>> {
    let models = &shared.models;
    if models.refuses(req) {
        return Some(auth_error(shared.dialect));
    }
    let retired = models.names_retired(req)?;
    Some(missing(shared.dialect, &retired))
}

/// The model a direct provider's lookup asks for: `GET …/models/{model}`
/// (the rest of the path after `models/`, a Groq model's `/` included).
fn lookup_path(dialect: Dialect, req: &Received) -> Option<String> {
    if req.method != "GET" {
        return None;
    }
    let path = req.path.split('?').next().unwrap_or_default();
    let prefix = match dialect {
        Dialect::ChatCompletions | Dialect::Responses | Dialect::Messages => "/v1/models/",
        Dialect::GenerateContent => "/v1beta/models/",
        Dialect::Converse => return None,
    };
    let model = path.strip_prefix(prefix)?;
    (!model.is_empty()).then(|| model.to_owned())
}

/// A direct provider's answer to a lookup of `model`.
fn direct(dialect: Dialect, models: &Models, model: &str) -> Response<SimBody> {
    if models.revoked() {
        return auth_error(dialect);
    }
    if models.retired(model) {
        return missing(dialect, model);
    }
    let body = match dialect {
        Dialect::ChatCompletions | Dialect::Responses | Dialect::Converse => json!({
            "id": model, "object": "model", "created": 1_700_000_000, "owned_by": "system",
        }),
        Dialect::Messages => json!({
            "type": "model", "id": model, "display_name": model,
            "created_at": "2025-09-29T00:00:00Z",
        }),
        Dialect::GenerateContent => json!({
            "name": format!("models/{model}"), "version": "001", "displayName": model,
            "inputTokenLimit": 1_048_576, "outputTokenLimit": 65_536,
            "supportedGenerationMethods": ["generateContent", "countTokens"],
        }),
    };
    json_response(200, &body)
}

/// A refused key, in the protocol's shape.
fn auth_error(dialect: Dialect) -> Response<SimBody> {
    match dialect {
        Dialect::ChatCompletions | Dialect::Responses => json_response(
            401,
            &json!({"error": {
                "message": "Incorrect API key provided: sk-rev***oked. You can find your API key at https://platform.openai.com/account/api-keys.",
                "type": "invalid_request_error", "param": null, "code": "invalid_api_key",
            }}),
        ),
        Dialect::Messages | Dialect::Converse => json_response(
            401,
            &json!({"type": "error", "error": {
                "type": "authentication_error", "message": "invalid x-api-key",
            }}),
        ),
        Dialect::GenerateContent => json_response(
            400,
            &json!({"error": {
                "code": 400, "message": "API key not valid. Please pass a valid API key.",
                "status": "INVALID_ARGUMENT",
                "details": [{
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID", "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"},
                }],
            }}),
        ),
    }
}

/// A model the provider does not serve, in the protocol's shape.
fn missing(dialect: Dialect, model: &str) -> Response<SimBody> {
    match dialect {
        Dialect::ChatCompletions | Dialect::Responses => json_response(
            404,
            &json!({"error": {
                "message": format!("The model `{model}` does not exist or you do not have access to it."),
                "type": "invalid_request_error", "param": null, "code": "model_not_found",
            }}),
        ),
        Dialect::Messages | Dialect::Converse => json_response(
            404,
            &json!({"type": "error", "error": {
                "type": "not_found_error", "message": format!("model: {model}"),
            }}),
        ),
        Dialect::GenerateContent => json_response(
            404,
            &json!({"error": {
                "code": 404,
                "message": format!("models/{model} is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods."),
                "status": "NOT_FOUND",
            }}),
        ),
    }
}

pub(super) fn json_response(status: u16, body: &serde_json::Value) -> Response<SimBody> {
    response(
        status,
        &[("content-type", "application/json")],
        body.to_string(),
    )
}
