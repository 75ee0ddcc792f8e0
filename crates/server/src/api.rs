//! The JSON shapes of the neutral API: `POST /v1/generate` in and out. The
//! CLI's `ask --json` prints the same [`GenerateResponse`].

use serde::{Deserialize, Serialize};
use understudy_core::{GenerateRequest, GenerateResult};
use understudy_types::{
    Attempt, ChatRequest, Error, FinishReason, Message, RefusalPolicy, RouteSelector, ToolCall,
    Usage,
};

use crate::ApiError;

/// The body of `POST /v1/generate`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateBody {
    pub system: Option<String>,
    #[serde(default)]
    pub messages: Vec<MessageBody>,
    /// A shortcut for one user message.
    pub prompt: Option<String>,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    /// OpenAI's newer name for `max_tokens`.
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub stop: Vec<String>,
    /// Tools, tool choice and response format in OpenAI's shapes (see
    /// `POST /v1/chat/completions`).
    pub tools: Option<Vec<understudy_wire::chat_completions::inbound::ToolIn>>,
    pub tool_choice: Option<understudy_wire::chat_completions::inbound::ToolChoiceIn>,
    pub parallel_tool_calls: Option<bool>,
    pub response_format: Option<understudy_wire::chat_completions::inbound::ResponseFormatIn>,
    pub seed: Option<i64>,
    pub top_p: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub user: Option<String>,
    /// A named route (`default` is the configured order).
    pub route: Option<String>,
    /// `provider` or `provider:model` as the primary.
    pub provider: Option<String>,
    pub refusal_policy: Option<RefusalPolicy>,
    /// Answer as server-sent events (`delta`, then `done` or `error`).
    #[serde(default)]
    pub stream: bool,
    /// `false` skips the response cache (so does `Cache-Control: no-cache`).
    pub cache: Option<bool>,
    /// Only the primary may serve.
    #[serde(default)]
    pub no_fallback: bool,
    /// The whole request's deadline, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Models to try after the route or pin, in order, where the operator
    /// allows it (OpenRouter's `models`; `provider` here is the pin).
    pub models: Option<Vec<String>>,
    /// More models, after `models` (LiteLLM's `fallbacks`).
    pub fallbacks: Option<Vec<String>>,
}

/// One message of a [`GenerateBody`]: OpenAI's message shape (`content`
/// a string or parts, `tool_calls`, `tool_call_id`), roles `user`,
/// `assistant` and `tool` (the system prompt is the top-level `system`).
pub type MessageBody = understudy_wire::chat_completions::inbound::ChatMessage;

/// What `POST /v1/generate` and `understudy ask --json` return.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenerateResponse {
    pub success: bool,
    pub request_id: Option<String>,
    pub text: Option<String>,
    /// The tools the model called (`{id, name, arguments}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub finish_reason: Option<FinishReason>,
    pub fell_back: bool,
    pub content_filtered: bool,
    pub attempts: Vec<Attempt>,
    pub usage: Option<Usage>,
    pub latency_ms: Option<f64>,
    /// Served from the response cache.
    #[serde(default)]
    pub cached: bool,
    pub error_code: Option<String>,
    pub error_detail: Option<String>,
}

// === impl GenerateBody ===

impl GenerateBody {
    /// Turns the body into an engine request, rejecting what no provider
    /// could serve.
    pub fn into_request(self) -> Result<GenerateRequest, ApiError> {
        let mut messages = Vec::with_capacity(self.messages.len() + 1);
        for (i, m) in self.messages.into_iter().enumerate() {
            if matches!(m.role.as_str(), "system" | "developer") {
                return Err(ApiError::invalid(
                    "messages",
                    format!("messages[{i}]: put the system prompt in the top-level `system` field"),
                ));
            }
            messages.push(understudy_wire::chat_completions::inbound::message(i, m)?);
        }
        if let Some(prompt) = self.prompt {
            messages.push(Message::user(prompt));
        }
        let route = match (self.route, self.provider) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(
                    "route",
                    "give either `route` or `provider`, not both",
                ));
            }
            (Some(route), None) => RouteSelector::Named(route),
            (None, Some(pin)) => RouteSelector::pin(&pin),
            (None, None) => RouteSelector::Default,
        };
        let mut chat = ChatRequest {
            system: self.system,
            messages,
            temperature: self.temperature,
            max_tokens: self.max_completion_tokens.or(self.max_tokens),
            stop: self.stop,
            ..ChatRequest::default()
        };
        understudy_wire::chat_completions::inbound::Extras {
            tools: self.tools,
            tool_choice: self.tool_choice,
            parallel_tool_calls: self.parallel_tool_calls,
            response_format: self.response_format,
            seed: self.seed,
            top_p: self.top_p,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            user: self.user,
        }
        .apply(&mut chat)?;
        chat.validate()?;
        if self.models.is_some() || self.fallbacks.is_some() {
            use understudy_wire::caller::{FallbackIn, FallbacksIn, ModelsIn, routing};
            let fallbacks = self.fallbacks.map(|f| {
                Box::new(FallbacksIn::List(
                    f.into_iter().map(FallbackIn::Name).collect(),
                ))
            });
            let models = self.models.map(|m| Box::new(ModelsIn::List(m)));
            chat.routing = routing(models, None, fallbacks);
        }
        let mut request = GenerateRequest::new(chat).route(route);
        request.refusal_policy = self.refusal_policy;
        request.cache = self.cache.unwrap_or(true);
        request.no_fallback = self.no_fallback;
        if let Some(ms) = self.timeout_ms {
            request.timeout = Some(crate::headers::timeout_ms("timeout_ms", Some(ms))?);
        }
        Ok(request)
    }
}

// === impl GenerateResponse ===

impl GenerateResponse {
    pub fn from_result(result: &GenerateResult) -> Self {
        match result {
            Ok(g) => Self {
                success: true,
                request_id: Some(g.request_id.to_string()),
                text: Some(g.text.clone()),
                tool_calls: g.tool_calls.clone(),
                provider: Some(g.provider.clone()),
                model: Some(g.model.clone()),
                finish_reason: Some(g.finish_reason.clone()),
                fell_back: g.fell_back,
                content_filtered: g.content_filtered,
                attempts: g.attempts.clone(),
                usage: g.usage,
                latency_ms: Some(g.latency_ms),
                cached: g.cached,
                error_code: None,
                error_detail: None,
            },
            Err(e) => Self::from_error(e),
        }
    }

    pub fn from_error(e: &Error) -> Self {
        let attempts = e.attempts().to_vec();
        let served_by_none_but_refused = attempts.iter().any(|a| {
            a.outcome
                == understudy_types::Outcome::Failed(understudy_types::FailureCode::ContentFilter)
        });
        Self {
            success: false,
            request_id: None,
            text: None,
            tool_calls: Vec::new(),
            provider: None,
            model: None,
            finish_reason: None,
            fell_back: false,
            content_filtered: served_by_none_but_refused,
            attempts,
            usage: None,
            latency_ms: None,
            cached: false,
            error_code: Some(e.code().as_str().to_owned()),
            error_detail: Some(e.to_string()),
        }
    }
}
