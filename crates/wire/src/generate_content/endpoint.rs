//! Google's Gemini API at the HTTP edge: `models` and
//! `models/{model}:{method}` under `/v1beta/` and `/v1/` (google-genai
//! calls `/v1`, the Gemini CLI `/v1beta`), its keys (`x-goog-api-key`, or
//! `?key=`), the model list its clients' marks ask for at `GET /v1/models`,
//! and Google's error shape `{"error": {"code", "message", "status"}}`.

use http::Method;
use serde_json::{Value, json};
use understudy_types::error::ClientRefusal;
use understudy_types::{Error, Protocol};

use crate::endpoint::{Endpoint, Envelope, Fault, Key, Metered, Model, Route};

/// The Gemini front end's edge.
#[derive(Debug)]
pub struct GenerateContentEdge;

/// `GET /v1beta/models`: Google's model list.
pub const MODELS: Route = Route {
    method: Method::GET,
    path: "/v1beta/models",
};

/// `GET` (one model) and `POST` (`{model}:{method}`) under each version.
pub const MODEL: [&str; 2] = ["/v1beta/models/{target}", "/v1/models/{target}"];

/// The methods a model's path names, the generating ones first.
pub const METHODS: [&str; 3] = ["generateContent", "streamGenerateContent", "countTokens"];

/// Google's key header.
pub const KEY_HEADER: &str = "x-goog-api-key";

impl Endpoint for GenerateContentEdge {
    const PROTOCOL: Protocol = Protocol::GenerateContent;
    const ROUTES: &'static [Route] = &[
        MODELS,
        Route {
            method: Method::GET,
            path: MODEL[0],
        },
        Route {
            method: Method::POST,
            path: MODEL[0],
        },
        Route {
            method: Method::GET,
            path: MODEL[1],
        },
        Route {
            method: Method::POST,
            path: MODEL[1],
        },
    ];
    const SPAN_ROUTE: &'static str = "/v1beta/models/{model}:generateContent";
    const PREFIXES: &'static [&'static str] = &["/v1beta/", "/v1/models/"];
    const KEYS: &'static [Key] = &[Key::Header(KEY_HEADER), Key::Query("key")];
    const MODEL_MARKS: Option<&'static [Key]> = Some(&[
        Key::Header(KEY_HEADER),
        Key::Header("x-goog-api-client"),
        Key::Query("key"),
    ]);
    const METERED: Metered = Metered::Only(&[":generateContent", ":streamGenerateContent"]);

    /// Google's status for the error. When every target failed, the last
    /// failure decides, as Google's clients read it: an outage (5xx,
    /// connection) is 503 `UNAVAILABLE` and a rate limit 429
    /// `RESOURCE_EXHAUSTED` (the Gemini CLI and the SDKs retry both), a
    /// timeout or the deadline 504 `DEADLINE_EXCEEDED`, anything the
    /// request caused (an upstream 400, context length, a missing
    /// capability, a content filter) 400 `INVALID_ARGUMENT`, anything else
    /// 500 `INTERNAL`. A spent fallback budget or no available provider is
    /// 503. Google has no 402 of its own: a spent quota is its
    /// `RESOURCE_EXHAUSTED`.
    fn envelope(fault: &Fault<'_>) -> Envelope {
        let status = match fault.engine {
            None | Some(Error::Client(_)) => fault.status,
            Some(Error::ProvidersFailed { code, .. }) => super::answer::status_of(*code),
            Some(Error::DeadlineExceeded { .. }) => 504,
            Some(Error::FallbackBudgetExceeded { .. } | Error::NoProviderAvailable(_)) => 503,
            Some(Error::Engine(_)) => 500,
            Some(
                Error::Refused { .. } | Error::InvalidRequest { .. } | Error::ContextTooLong { .. },
            ) => 400,
            Some(Error::UnknownProvider(_) | Error::UnknownRoute(_) | Error::UnknownModel(_)) => {
                404
            }
        };
        let mut body = super::answer::error_body(status, fault.message);
        if let Some(Error::Client(ClientRefusal::Budget { .. })) = fault.engine {
            body["error"]["status"] = "RESOURCE_EXHAUSTED".into();
        }
        Envelope::json(status, &body)
    }

    /// `{"models": [...]}`: every name as `models/<name>`, all on one page.
    fn model_list(models: &[Model<'_>]) -> Value {
        let models: Vec<Value> = models.iter().map(model_entry).collect();
        json!({ "models": models })
    }
}

/// A `Model` resource.
pub fn model_entry(m: &Model<'_>) -> Value {
    json!({
        "name": format!("models/{}", m.id),
        "baseModelId": m.id,
        "version": "understudy",
        "displayName": m.display,
        "description": format!("served by Understudy: {}", m.display),
        "supportedGenerationMethods": METHODS,
    })
}
