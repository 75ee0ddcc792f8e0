//! `POST /v1/wit`: the humour API this failover design was first built for.
//! A topic and a style become a short joke through the default route; roasts
//! are the classic refusal trigger, and the softened retry is what keeps
//! this endpoint answering.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use understudy_core::GenerateRequest;
use understudy_types::ChatRequest;

use super::parse_json;
use crate::frames::{Framed, Framing, KeepAlive};
use crate::front::Preamble;
use crate::sse::Neutral;
use crate::{ApiError, AppState};

/// The longest topic or audience accepted, in characters.
const MAX_FIELD: usize = 500;

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/v1/wit", post(wit))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Style {
    Pun,
    OneLiner,
    Roast,
    DadJoke,
    Limerick,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WitBody {
    topic: String,
    style: Style,
    audience: Option<String>,
    #[serde(default)]
    stream: bool,
}

impl Style {
    fn as_str(self) -> &'static str {
        match self {
            Self::Pun => "pun",
            Self::OneLiner => "one-liner",
            Self::Roast => "roast",
            Self::DadJoke => "dad-joke",
            Self::Limerick => "limerick",
        }
    }

    /// The system prompt for this style.
    pub(crate) fn system_prompt(self) -> &'static str {
        match self {
            Self::Pun => {
                "You are a quick-witted comedian who lives for puns. Reply with one short pun about the topic: one or two sentences, no preamble, no explanation."
            }
            Self::OneLiner => {
                "You are a stand-up comedian. Reply with a single punchy one-liner about the topic. No preamble, no explanation."
            }
            Self::Roast => {
                "You are a roast comic at a celebrity roast. Roast the topic with sharp, biting wit in at most three sentences. No preamble."
            }
            Self::DadJoke => {
                "You are everyone's favourite dad. Reply with one groan-worthy dad joke about the topic, setup and punchline. No preamble."
            }
            Self::Limerick => {
                "You are a playful poet. Write one limerick about the topic: five lines, rhyme scheme AABBA. No title, no preamble."
            }
        }
    }
}

async fn wit(
    State(state): State<AppState>,
    preamble: Preamble,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: WitBody = parse_json(body, state.engine.settings().server.max_parts)?;
    let topic = body.topic.trim();
    if topic.is_empty() {
        return Err(ApiError::invalid("topic", "the topic is empty"));
    }
    if topic.chars().count() > MAX_FIELD
        || body
            .audience
            .as_ref()
            .is_some_and(|a| a.chars().count() > MAX_FIELD)
    {
        return Err(ApiError::invalid(
            "topic",
            format!("the topic and audience are limited to {MAX_FIELD} characters"),
        ));
    }
    let mut prompt = format!("Topic: {topic}");
    if let Some(audience) = body
        .audience
        .as_deref()
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        prompt.push_str(&format!("\nAudience: {audience}"));
    }
    let chat = ChatRequest::user(prompt)
        .with_system(body.style.system_prompt())
        .with_temperature(0.9);
    let mut request = GenerateRequest::new(chat);
    preamble.apply(&mut request)?;
    if body.stream {
        let stream = state.engine.generate_stream(request).await?;
        return Ok(Framed::new(stream, Neutral, Framing::Sse(KeepAlive::Comment)).into_response());
    }
    let g = state.engine.generate(request).await?;
    tracing::info!(style = body.style.as_str(), provider = %g.provider, fell_back = g.fell_back, content_filtered = g.content_filtered, "wit served");
    Ok(Json(json!({
        "text": g.text,
        "style": body.style.as_str(),
        "topic": topic,
        "provider": g.provider,
        "model": g.model,
        "fell_back": g.fell_back,
        "content_filtered": g.content_filtered,
        "request_id": g.request_id,
    }))
    .into_response())
}
