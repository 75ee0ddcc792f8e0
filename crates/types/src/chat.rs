//! Neutral chat types: what a client asks for and what a provider answers,
//! independent of any wire protocol.
//!
//! Adapters translate these to and from each provider's format; the engine
//! never sees provider JSON.
//!
//! A request's validation is in `chat/validate.rs`, its token estimate in
//! `chat/estimate.rs`.

use serde::{Deserialize, Serialize};

mod estimate;
mod validate;
pub use estimate::{estimate_bound, estimate_tokens};

/// The largest accepted `max_tokens`; anything above is a client mistake.
pub const MAX_TOKENS_LIMIT: u32 = 1_000_000;

/// Who wrote a turn. The system prompt is not a turn: it lives in
/// [`ChatRequest::system`], because two of the three wire protocols carry it
/// outside the message list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    /// A tool's result, answering one of the assistant's tool calls.
    Tool,
    /// A system message in the middle of the conversation (Anthropic's
    /// mid-conversation system messages, which Claude Code sends): it stays
    /// where it was said. Protocols with such a role get it in place; the
    /// others get its text marked as a system message in a user turn (see
    /// [`Message::marked_system_text`]).
    System,
}

/// One piece of a message's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text {
        text: String,
    },
    /// An image by URL: `https:` (fetched by the provider, never by the
    /// gateway) or a `data:` URL with base64 content.
    Image {
        url: String,
        /// OpenAI's `detail` (`auto`, `low`, `high`), passed where it means
        /// something.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
}

/// One turn of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    /// Text and images, in order (a tool result's content is its text).
    pub content: Vec<Part>,
    /// The tools an assistant turn called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool turn answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A call of one tool, as the assistant made it. The id is the one the
/// client sees; adapters map it to whatever a provider needs (Gemini has
/// none, Anthropic allows only `[a-zA-Z0-9_-]`), never changing its meaning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text (OpenAI's shape: a string that parses).
    pub arguments: String,
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments (an object schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    Auto,
    None,
    Required,
    /// This function, by name.
    Function(String),
}

/// The shape the answer's text must have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON valid against `schema`.
    JsonSchema {
        name: String,
        schema: serde_json::Value,
        #[serde(default)]
        strict: bool,
    },
}

/// A provider-neutral chat request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The system prompt, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    pub messages: Vec<Message>,
    /// Sampling temperature, 0.0 to 2.0; `None` leaves the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f32>,
    /// The end user, for the provider's abuse monitoring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The request exactly as the client sent it in a provider's own
    /// protocol: targets speaking that protocol get it unchanged but for the
    /// model (and the softened retry's system prompt and temperature);
    /// others get the neutral fields above, translated.
    #[serde(skip)]
    pub native: Option<std::sync::Arc<NativeRequest>>,
    /// What the neutral fields above could not carry of [`Self::native`]
    /// (a content block or tool only its protocol knows): targets of other
    /// protocols cannot serve the request, and are told so as
    /// `unsupported` attempts.
    #[serde(skip)]
    pub native_only: Option<&'static str>,
    /// What [`Self::native`] would switch on at a provider on the
    /// operator's key (server tools that fetch URLs or run code, MCP,
    /// betas): targets of its protocol serve it only where the provider's
    /// `passthrough` setting allows all of it.
    #[serde(skip)]
    pub native_gated: crate::passthrough::GatedSet,
    /// The routing the request asked for in its body or headers (usually
    /// none): the engine plans with it only where the operator allows.
    /// Kept here, behind the request's `Arc`, so that a request without
    /// it carries one pointer's worth of nothing.
    #[serde(skip)]
    pub routing: Option<Box<crate::caller::CallerRouting>>,
    /// The length in bytes of the JSON body the request was read from,
    /// set by a front end when that body holds the whole request (no
    /// stored history joined to it). Every text is at least as long
    /// written in JSON as read, so the body bounds [`estimate_tokens`]
    /// without walking the request ([`estimate_bound`]) — but
    /// for images, which it counts at a thousand tokens whatever their
    /// URL's length.
    #[serde(skip)]
    pub body_len: Option<u32>,
}

/// A request body as a client sent it in a provider's protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeRequest {
    /// The protocol it is written in.
    pub kind: crate::protocol::Protocol,
    /// The JSON body, as received. Replaced only through
    /// [`Self::with_body`] (which drops the spans found in this one),
    /// never edited in place.
    pub body: String,
    /// The protocol's own headers to forward (`anthropic-version`,
    /// `anthropic-beta`).
    pub headers: Vec<(String, String)>,
    /// The query string to forward (Claude Code's `beta=true`): only
    /// parameters the protocol defines, never the client's whole query.
    pub query: Option<String>,
    /// The protocol forbids changing this body's sampling (Anthropic with
    /// extended thinking on takes only temperature 1): a softened retry
    /// leaves the temperature as the client set it. Set by the front end,
    /// which reads the body in its protocol.
    pub fixed_sampling: bool,
    /// This is the softened retry's body: the adapter that forwards it puts
    /// the softening suffix into the protocol's system prompt and this
    /// temperature (when set) into its sampling, where the protocol keeps
    /// them (the wire crate knows; core never edits a body).
    pub softened: Option<Softened>,
    /// Where the members a target edits sit in `body`, when the front end
    /// found them as it read it. Private, so that no body is ever paired
    /// with another's: [`Self::with_body`] drops them.
    spans: Option<Spans>,
}

/// Where a Chat Completions body's `model`, `max_tokens` and
/// `max_completion_tokens` values sit (byte ranges of `body`, `None` for
/// a member it does not hold), read by the front end with the body so
/// that a target's edit need not read it again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spans {
    pub model: Option<std::ops::Range<usize>>,
    pub max_tokens: Option<std::ops::Range<usize>>,
    pub max_completion_tokens: Option<std::ops::Range<usize>>,
}

/// Appended, word for word, to the system prompt of a softened retry (read
/// by the softening policy and by the adapters that soften a native body).
pub const SOFTENING_SUFFIX: &str = "\n\nIMPORTANT: Keep it light, playful, and safe for all audiences. Avoid anything offensive, mean-spirited, or inappropriate.";

/// The softened retry of a natively written body, for the adapter to apply
/// (see [`NativeRequest::softened`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Softened {
    /// The softened temperature, or `None` to leave the sampling alone.
    pub temperature: Option<f32>,
}

impl Eq for Softened {}

impl NativeRequest {
    /// A body written in `kind`'s protocol, with no headers or query to
    /// forward.
    pub fn new(kind: crate::protocol::Protocol, body: impl Into<String>) -> Self {
        Self {
            kind,
            body: body.into(),
            headers: Vec::new(),
            query: None,
            fixed_sampling: false,
            softened: None,
            spans: None,
        }
    }

    /// This request with `spans`: where its body's edited members sit, as
    /// the reader of exactly this body found them.
    #[must_use]
    pub fn with_spans(mut self, spans: Spans) -> Self {
        self.spans = Some(spans);
        self
    }

    /// Where the body's edited members sit, when its reader said.
    pub fn spans(&self) -> Option<&Spans> {
        self.spans.as_ref()
    }

    /// The same request with another body (its spans, which were the old
    /// body's, dropped).
    #[must_use]
    pub fn with_body(&self, body: String) -> Self {
        Self {
            kind: self.kind,
            body,
            headers: self.headers.clone(),
            query: self.query.clone(),
            fixed_sampling: self.fixed_sampling,
            softened: self.softened,
            spans: None,
        }
    }
}

/// One server-sent event exactly as a provider sent it, for a client that
/// speaks the same protocol (a natively forwarded request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NativeEvent {
    /// The `event:` name (empty when the provider sent none).
    pub event: String,
    /// The `data:` payload.
    pub data: String,
}

/// What a request needs of a target beyond plain text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// Tools are offered, or the history holds tool calls or results.
    pub tools: bool,
    /// Some message holds an image.
    pub vision: bool,
    /// Some image is a remote (`https:`) URL, not inline data.
    pub remote_images: bool,
    /// A JSON answer (`json_object` or `json_schema`) is asked for.
    pub json: bool,
    /// Part of the request only its own protocol can carry (the client
    /// wrote it natively): only targets speaking that protocol can serve
    /// it, and the others lack what is named.
    pub native_only: Option<(crate::protocol::Protocol, &'static str)>,
    /// What the natively written request would switch on at a provider of
    /// its protocol (see [`ChatRequest::native_gated`]).
    pub gated: Option<(crate::protocol::Protocol, crate::passthrough::GatedSet)>,
}

/// Why a provider stopped generating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end or a stop sequence.
    Stop,
    /// The token limit cut the answer short.
    Length,
    /// The answer is a set of tool calls.
    ToolCalls,
    /// Anything else the provider reported (kept verbatim).
    Other(String),
}

/// Token counts as the provider reported them.
///
/// `input_tokens` and `output_tokens` are the totals that costs and client
/// budgets are computed from, the same whichever protocol answered. The
/// other three are parts of those totals (never to be added to them), for
/// traces; each is 0 where the provider does not report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Every input token, cached ones included. Chat Completions'
    /// `prompt_tokens`, the Responses API's `input_tokens` and Gemini's
    /// `promptTokenCount` already include cached ones; Anthropic's
    /// `input_tokens` and Converse's `inputTokens` leave the cache out, so
    /// for those this is their sum with the cache reads and writes.
    pub input_tokens: u64,
    /// Every output token, reasoning included. Chat Completions'
    /// `completion_tokens`, the Responses API's `output_tokens` and
    /// Anthropic's `output_tokens` already include reasoning; Gemini's
    /// `candidatesTokenCount` leaves thoughts out, so for Gemini this is
    /// its sum with `thoughtsTokenCount`.
    pub output_tokens: u64,
    /// Of `input_tokens`, those read from the provider's prompt cache:
    /// Chat Completions' `prompt_tokens_details.cached_tokens`, the
    /// Responses API's `input_tokens_details.cached_tokens`, Anthropic's
    /// `cache_read_input_tokens`, Gemini's `cachedContentTokenCount`,
    /// Converse's `cacheReadInputTokens`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_input_tokens: u64,
    /// Of `input_tokens`, those written to the provider's prompt cache:
    /// Anthropic's `cache_creation_input_tokens`, Converse's
    /// `cacheWriteInputTokens` (OpenAI and Gemini report no writes).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_input_tokens: u64,
    /// Of `output_tokens`, those spent on reasoning: Chat Completions'
    /// `completion_tokens_details.reasoning_tokens`, the Responses API's
    /// `output_tokens_details.reasoning_tokens`, Gemini's
    /// `thoughtsTokenCount`, Anthropic's `output_tokens_details.thinking_tokens`
    /// (where its answer breaks them out; Converse never does).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_output_tokens: u64,
}

/// Whether a count is zero: a count the provider did not report stays out
/// of serialised usage, which then reads as it did before the count existed.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A successful answer from one provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub text: String,
    /// The tools the model called, in order (ids as the client will see
    /// them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The model that answered, as the provider named it.
    pub model: String,
    pub finish_reason: FinishReason,
    pub usage: Option<Usage>,
    /// The provider's own id for this answer (Chat Completions' `id`,
    /// Messages' `msg_…`, generateContent's `responseId`, the Responses
    /// API's `resp_…`); `None` where the protocol has none (Converse) or
    /// the provider left it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// The answer's body exactly as the provider sent it, when the request
    /// was forwarded natively (see [`ChatRequest::native`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<String>,
    /// The rate-limit budget the answer reported, read only for a pool's
    /// key (`ProviderSettings::key_name`), for the pool to steer by. Boxed:
    /// an answer is moved several times, and most have none.
    #[serde(skip)]
    pub rate_limits: Option<Box<crate::ratelimit::RateLimits>>,
    /// What the provider says became of the fallback credit the attempt
    /// carried (Anthropic's `usage.fallback_credit.status`).
    #[serde(skip)]
    pub fallback_credit: Option<crate::credit::CreditStatus>,
}

/// A fragment of a streamed tool call. The first fragment of each `index`
/// carries its `id` and `name`; the arguments arrive as pieces of JSON text
/// to be concatenated in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    /// Which call (0, 1, … in the order the calls began).
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

/// One event of a streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// More text.
    Delta(String),
    /// A piece of a tool call.
    ToolCall(ToolCallDelta),
    /// A piece of the model's reasoning (Anthropic `thinking_delta`,
    /// OpenAI-compatible `reasoning_content`/`reasoning`, Gemini thought
    /// parts): progress, not an answer (see `policy::stream`).
    Reasoning(String),
    /// An event exactly as the provider sent it (natively forwarded
    /// requests only), ahead of the neutral events parsed from it.
    Native(NativeEvent),
    /// The provider ended the answer normally.
    Finish {
        finish_reason: FinishReason,
        usage: Option<Usage>,
        /// The model that answered, when the stream named it.
        model: Option<String>,
    },
}

// === impl Message ===

impl Message {
    /// A turn of plain text.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: vec![Part::Text { text: text.into() }],
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// A user turn of plain text.
    pub fn user(text: impl Into<String>) -> Self {
        Self::text(Role::User, text)
    }

    /// An assistant turn of plain text.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::text(Role::Assistant, text)
    }

    /// A tool's result for the call `tool_call_id`.
    pub fn tool_result(tool_call_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(tool_call_id.into()),
            ..Self::text(Role::Tool, text)
        }
    }

    /// The text parts, joined (images left out).
    pub fn text_content(&self) -> String {
        match self.content.as_slice() {
            [Part::Text { text }] => text.clone(),
            parts => parts
                .iter()
                .filter_map(|p| match p {
                    Part::Text { text } => Some(text.as_str()),
                    Part::Image { .. } => None,
                })
                .collect(),
        }
    }

    /// A system message's text as other protocols get it inside a user
    /// turn: marked, so that the model reads it as the system's words.
    pub fn marked_system_text(&self) -> String {
        format!("<system>\n{}\n</system>", self.text_content())
    }

    /// Whether the turn says nothing: no text, no image, no tool call.
    pub fn is_empty(&self) -> bool {
        self.tool_calls.is_empty()
            && self.content.iter().all(|p| match p {
                Part::Text { text } => text.trim().is_empty(),
                Part::Image { .. } => false,
            })
    }
}

// === impl Part ===

impl Part {
    /// Whether `url` is a `data:` URL (the scheme is case-insensitive).
    pub fn is_data_url(url: &str) -> bool {
        url.get(..5)
            .is_some_and(|s| s.eq_ignore_ascii_case("data:"))
    }

    /// A `data:` URL's media type and base64 payload.
    /// `None` unless the URL is `data:image/<subtype>;base64,<data>` (scheme,
    /// `image` and `base64` in any case) with a bare media type and a
    /// non-empty payload that is base64 of a possible length (padding only
    /// at the end; anything else no provider accepts).
    pub fn inline_image(url: &str) -> Option<(&str, &str)> {
        if !Self::is_data_url(url) {
            return None;
        }
        let (meta, data) = url[5..].split_once(',')?;
        let split = meta.len().checked_sub(";base64".len())?;
        if !meta.is_char_boundary(split) || !meta[split..].eq_ignore_ascii_case(";base64") {
            return None;
        }
        let media = &meta[..split];
        let media = if media.is_empty() { "image/png" } else { media };
        let token = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
        };
        let image = media
            .split_once('/')
            .is_some_and(|(t, sub)| t.eq_ignore_ascii_case("image") && token(sub));
        (image && is_base64(data)).then_some((media, data))
    }
}

/// Whether `data` is standard base64 of a possible length: alphabet
/// characters, then at most two `=` of padding, and a length no encoding
/// gives (one character past a multiple of four) refused.
fn is_base64(data: &str) -> bool {
    let body = data.trim_end_matches('=');
    let padding = data.len() - body.len();
    let alphabet = body
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/');
    let length = match padding {
        0 => body.len() % 4 != 1,
        // Padded: the whole is a multiple of four.
        1 | 2 => data.len() % 4 == 0,
        _ => false,
    };
    !body.is_empty() && alphabet && length
}

// === impl ChatRequest ===

impl ChatRequest {
    /// A request with one user message.
    pub fn user(prompt: impl Into<String>) -> Self {
        Self {
            messages: vec![Message::user(prompt)],
            ..Self::default()
        }
    }

    /// Sets the system prompt.
    pub fn with_system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Sets the temperature.
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// What the request needs of a target beyond text.
    pub fn needs(&self) -> Needs {
        let native_only = match (&self.native, self.native_only) {
            (Some(native), Some(what)) => Some((native.kind, what)),
            _ => None,
        };
        let gated = match &self.native {
            Some(native) if !self.native_gated.is_empty() => Some((native.kind, self.native_gated)),
            _ => None,
        };
        let mut needs = Needs {
            native_only,
            gated,
            tools: !self.tools.is_empty(),
            json: matches!(
                self.response_format,
                Some(ResponseFormat::JsonObject | ResponseFormat::JsonSchema { .. })
            ),
            ..Needs::default()
        };
        for m in &self.messages {
            needs.tools |= !m.tool_calls.is_empty() || m.role == Role::Tool;
            for p in &m.content {
                if let Part::Image { url, .. } = p {
                    needs.vision = true;
                    needs.remote_images |= !Part::is_data_url(url);
                }
            }
        }
        needs
    }
}

#[cfg(test)]
#[path = "chat/tests.rs"]
mod tests;
