//! OpenAI's Chat Completions at the HTTP edge: `POST /v1/chat/completions`,
//! the model list every unmarked client gets at `GET /v1/models`, the
//! bearer key, and OpenAI's error shape `{"error": {"message", "type",
//! "param", "code"}}` (the Responses API shares it).

use http::Method;
use serde_json::{Value, json};
use understudy_types::error::ClientRefusal;
use understudy_types::{Error, Protocol};

use crate::endpoint::{Endpoint, Envelope, Fault, Key, MODELS_PATH, Model, Route};

/// The Chat Completions front end's edge.
#[derive(Debug)]
pub struct ChatCompletionsEdge;

/// `POST /v1/chat/completions`.
pub const COMPLETIONS: Route = Route {
    method: Method::POST,
    path: "/v1/chat/completions",
};

/// `GET /v1/models`, the list an unmarked client gets.
pub const MODELS: Route = Route {
    method: Method::GET,
    path: MODELS_PATH,
};

impl Endpoint for ChatCompletionsEdge {
    const PROTOCOL: Protocol = Protocol::ChatCompletions;
    const ROUTES: &'static [Route] = &[COMPLETIONS, MODELS];
    const SPAN_ROUTE: &'static str = COMPLETIONS.path;
    const KEYS: &'static [Key] = &[Key::Bearer];
    const MODEL_MARKS: Option<&'static [Key]> = Some(&[]);

    fn envelope(fault: &Fault<'_>) -> Envelope {
        envelope(fault)
    }

    /// `{"object": "list", "data": [{"id", "object": "model", "created": 0,
    /// "owned_by", "supports"}]}`, a route's entry with its `targets`.
    fn model_list(models: &[Model<'_>]) -> Value {
        let data: Vec<Value> = models
            .iter()
            .map(|m| {
                let mut entry = json!({
                    "id": m.id, "object": "model", "created": 0, "owned_by": m.owner,
                    "supports": m.supports,
                });
                if let Some(targets) = m.targets {
                    entry["targets"] = json!(targets);
                }
                entry
            })
            .collect();
        json!({"object": "list", "data": data})
    }
}

/// `fault` in OpenAI's shape: a client record's refusal typed as OpenAI
/// types its own limits (`requests`, `tokens`, `insufficient_quota`), an
/// unknown route or provider `model_not_found`, else the status's type.
pub fn envelope(fault: &Fault<'_>) -> Envelope {
    let mut code = fault.code;
    if matches!(
        fault.engine,
        Some(Error::UnknownProvider(_) | Error::UnknownRoute(_))
    ) {
        code = "model_not_found";
    }
    // A prompt no target's window holds: OpenAI's own code and param for
    // it, which clients key their truncation on.
    let mut param = fault.param;
    if let Some(Error::ContextTooLong { .. }) = fault.engine {
        code = "context_length_exceeded";
        param = Some("messages");
    }
    let kind = match fault.engine {
        Some(Error::Client(r)) => match r {
            ClientRefusal::Requests { .. } => "requests",
            ClientRefusal::Tokens { .. } | ClientRefusal::TooLarge { .. } => "tokens",
            ClientRefusal::Budget { .. } => "insufficient_quota",
            _ => super::error::error_type(fault.status),
        },
        _ => super::error::error_type(fault.status),
    };
    let body = json!({"error": {
        "message": fault.message, "type": kind, "param": param, "code": code,
    }});
    Envelope::json(fault.status, &body)
}
