//! OpenAI's Responses API at the HTTP edge: `POST /v1/responses` and the
//! stored responses under `/v1/responses/`, the bearer key, and OpenAI's
//! error shape (Chat Completions'). Its clients list models at OpenAI's
//! list.

use http::Method;
use serde_json::Value;
use understudy_types::Protocol;

use crate::endpoint::{Endpoint, Envelope, Fault, Key, Model, Route};

/// The Responses front end's edge.
#[derive(Debug)]
pub struct ResponsesEdge;

/// `POST /v1/responses`.
pub const CREATE: Route = Route {
    method: Method::POST,
    path: "/v1/responses",
};

/// `GET /v1/responses/{id}`: a stored response.
pub const RETRIEVE: Route = Route {
    method: Method::GET,
    path: "/v1/responses/{id}",
};

/// `DELETE /v1/responses/{id}`.
pub const DELETE: Route = Route {
    method: Method::DELETE,
    path: RETRIEVE.path,
};

/// `GET /v1/responses/{id}/input_items`.
pub const INPUT_ITEMS: Route = Route {
    method: Method::GET,
    path: "/v1/responses/{id}/input_items",
};

impl Endpoint for ResponsesEdge {
    const PROTOCOL: Protocol = Protocol::Responses;
    const ROUTES: &'static [Route] = &[CREATE, RETRIEVE, DELETE, INPUT_ITEMS];
    const SPAN_ROUTE: &'static str = CREATE.path;
    const PREFIXES: &'static [&'static str] = &["/v1/responses/"];
    const KEYS: &'static [Key] = &[Key::Bearer];

    fn envelope(fault: &Fault<'_>) -> Envelope {
        crate::chat_completions::endpoint::envelope(fault)
    }

    fn model_list(models: &[Model<'_>]) -> Value {
        <crate::chat_completions::endpoint::ChatCompletionsEdge as Endpoint>::model_list(models)
    }
}
