//! The endpoints, one module per group: a front end's in one module
//! (`chat`, `responses`, `messages`, `gemini`), its paths from its
//! protocol's table (`understudy_wire::front_ends`).

pub(crate) mod admin;
pub(crate) mod chat;
pub(crate) mod gemini;
pub(crate) mod generate;
pub(crate) mod health;
pub(crate) mod messages;
pub(crate) mod metrics;
pub(crate) mod models;
pub(crate) mod parts;
pub(crate) mod responses;
pub(crate) mod status;
pub(crate) mod wit;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use axum::Router;
use understudy_types::Protocol;

use crate::{ApiError, AppState};

/// Every front end's router (the paths of each from its protocol's table).
pub(crate) const FRONT_ENDS: [fn() -> Router<AppState>; 4] = [
    chat::router,
    responses::router,
    messages::router,
    gemini::router,
];

/// Any path that is not an endpoint: in the shape of the front end whose
/// path it is (Anthropic's under `/v1/messages/`, Google's under
/// `/v1beta/`, where their clients call); everywhere else in OpenAI's
/// (`{"error": {"message", "type", "param", "code"}}`, which holds the
/// neutral shape's `code` and `message` too), since OpenAI's clients
/// (Codex, the Agents SDK) are the ones that probe endpoints a gateway may
/// not have.
pub(crate) async fn not_found(uri: Uri) -> Response {
    let error = ApiError::NotFound(format!("no endpoint at {}", uri.path()));
    let owner = understudy_wire::front_ends::front_ends()
        .find(|e| e.owns(uri.path()))
        .map_or(Protocol::ChatCompletions, |e| e.protocol);
    crate::error::error_in(Some(owner), error)
}

/// Reads a JSON body, turning every failure into a 4xx that names the
/// offending field where there is one. Strict: the body is one JSON object
/// and nothing but white space may follow it. Its parts are counted first
/// (see [`parts`]): past `max_parts` (`server.max_parts`) it is refused
/// before anything of it is built.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    max_parts: usize,
) -> Result<T, ApiError> {
    let bytes = body.map_err(body_error)?;
    let not_json = |what: String| ApiError::Body {
        status: StatusCode::BAD_REQUEST,
        message: format!("the body is not a valid JSON object (no field is at fault): {what}"),
    };
    // Every body is an object (serde would also take a struct as an array).
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => {}
        None => return Err(not_json("the body is empty".into())),
        Some(_) => return Err(not_json("it does not start with `{`".into())),
    }
    check_parts(&bytes, max_parts)?;
    // The plain parse is the fast path (it rejects trailing characters
    // too); only a body that fails is parsed again to name the offending
    // field.
    if let Ok(value) = serde_json::from_slice(&bytes) {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = field_path(&e.path().to_string());
        let inner = e.into_inner();
        match path {
            Some(path) => ApiError::invalid(path, inner.to_string()),
            None => not_json(inner.to_string()),
        }
    })?;
    // The second parse must be as strict as the first: nothing after the
    // object.
    de.end()
        .map_err(|e| not_json(format!("{e} (after the JSON object)")))?;
    Ok(value)
}

/// A body that could not be read (too large, cut short) as the API's error.
pub(crate) fn body_error(rejection: BytesRejection) -> ApiError {
    let status = rejection.status();
    let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
        "the body is larger than the gateway accepts (server.max_body_bytes)".to_owned()
    } else {
        rejection.body_text()
    };
    ApiError::Body { status, message }
}

/// Counts `bytes`' parts (see [`parts`]): past `max_parts`
/// (`server.max_parts`), or nested too deep, the 400 that says so, before
/// anything of the body is built.
pub(crate) fn check_parts(bytes: &[u8], max_parts: usize) -> Result<(), ApiError> {
    parts::check(bytes, max_parts).map_err(|refused| too_many(refused, max_parts))
}

/// The 400 of a body refused by its parts, naming the limit and the
/// setting.
fn too_many(refused: parts::Refused, max_parts: usize) -> ApiError {
    let message = match refused {
        parts::Refused::Parts => format!(
            "the body holds more than {max_parts} JSON parts (objects, arrays and their \
             members), the most the gateway accepts (server.max_parts)"
        ),
        parts::Refused::Depth => format!(
            "the body nests JSON deeper than {} levels, the most the gateway accepts",
            parts::MAX_DEPTH
        ),
    };
    ApiError::Body {
        status: StatusCode::BAD_REQUEST,
        message,
    }
}

/// The field a serde path names: the path without the segments
/// serde_path_to_error could not name (`?`, as inside an untagged enum), or
/// `None` when no segment is named (the body itself is at fault).
fn field_path(path: &str) -> Option<String> {
    let mut named = path;
    loop {
        let trimmed = named
            .strip_suffix(".?")
            .or_else(|| named.strip_suffix("?"))
            .or_else(|| named.strip_suffix('.'));
        match trimmed {
            Some(t) => named = t,
            None => break,
        }
    }
    // A `?` left in the middle (`a.?.b`) names nothing the client sent.
    let named = match named.find(".?") {
        Some(i) => &named[..i],
        None => named,
    };
    (!named.is_empty() && !named.starts_with('?')).then(|| named.to_owned())
}

/// A token count's answer: `body`, with `x-understudy-provider` naming the
/// target that counted, or `x-understudy-estimate: true` when none could.
pub(crate) fn counted(body: impl serde::Serialize, counted_by: Option<String>) -> Response {
    let mut response = axum::Json(body).into_response();
    match counted_by.and_then(|p| HeaderValue::from_str(&p).ok()) {
        Some(provider) => {
            response
                .headers_mut()
                .insert("x-understudy-provider", provider);
        }
        None => {
            response
                .headers_mut()
                .insert("x-understudy-estimate", HeaderValue::from_static("true"));
        }
    }
    response
}
