//! The gateway's routing fields (`models`, `provider`, `fallbacks`) in a
//! request body, refused as each API refuses a field it does not know:
//! OpenAI's Chat Completions "Unrecognized request argument supplied",
//! the Responses API's "Unknown parameter", Anthropic's "Extra inputs are
//! not permitted" (but for `fallbacks` sent with its
//! `server-side-fallback-…` beta, which the API takes), Gemini's "Unknown
//! name". A gateway that forwards them fails here as it would upstream.

use super::{Dialect, Received, Violation};

/// The fields no provider here takes.
const FIELDS: [&str; 3] = ["models", "provider", "fallbacks"];

/// The API's 400 for the first routing field `req`'s body carries.
pub(super) fn check(req: &Received, dialect: Dialect) -> Result<(), Violation> {
    if req.method != "POST" {
        return Ok(());
    }
    let body = req.json();
    let Some(field) = FIELDS.iter().find(|f| body.get(**f).is_some()) else {
        return Ok(());
    };
    Err(match dialect {
        Dialect::ChatCompletions => Violation::openai(
            format!("Unrecognized request argument supplied: {field}"),
            None,
            None,
        ),
        Dialect::Responses => Violation::openai(
            format!("Unknown parameter: '{field}'."),
            Some((*field).to_owned()),
            Some("unknown_parameter"),
        ),
        Dialect::Messages | Dialect::Converse => {
            if *field == "fallbacks"
                && server_side_fallback(req)
                && body.get("models").is_none()
                && body.get("provider").is_none()
            {
                return Ok(());
            }
            Violation::anthropic(format!("{field}: Extra inputs are not permitted"))
        }
        Dialect::GenerateContent => Violation::gemini(format!(
            "Invalid JSON payload received. Unknown name \"{field}\": Cannot find field."
        )),
    })
}

/// Whether `req` switched Anthropic's server-side fallbacks on.
fn server_side_fallback(req: &Received) -> bool {
    req.headers
        .iter()
        .filter(|(name, _)| name == "anthropic-beta")
        .flat_map(|(_, v)| v.split(','))
        .any(|b| b.trim().starts_with("server-side-fallback-"))
}
