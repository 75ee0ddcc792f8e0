//! A simulator's script: what it does with one request ([`Reply`]: an
//! answer, a stream, tool calls, a refusal, or a fault), and the pieces a
//! reply is made of.

use std::time::Duration;

/// A refusal, rendered in each protocol's own shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The answer stopped by a filter. OpenAI: `finish_reason:
    /// "content_filter"`; Gemini: `finishReason: "SAFETY"` with no content;
    /// Anthropic: `stop_reason: "refusal"` with no text.
    FinishReason,
    /// A refusal with words. OpenAI: `message.refusal` (stream: `delta.refusal`);
    /// Gemini: `finishReason: "SAFETY"` with this `finishMessage`; Anthropic:
    /// this partial text, then `stop_reason: "refusal"` with `stop_details`.
    Message(String),
    /// Refused with an HTTP 400. OpenAI (Azure): error code `content_filter`;
    /// Anthropic: `invalid_request_error` "Output blocked by content filtering
    /// policy"; Gemini (which has no such status): the prompt is blocked.
    Status400,
    /// The prompt was blocked. Gemini: `promptFeedback.blockReason:
    /// "PROHIBITED_CONTENT"` and no candidates; OpenAI: as [`Refusal::Status400`];
    /// Anthropic: `stop_reason: "refusal"` with `stop_details`.
    PromptBlocked,
    /// Gemini's 200 with no usable text: a candidate `{"role":"model"}` with
    /// no parts and `finishReason: "STOP"`. Other protocols answer with empty
    /// text.
    NoText,
}

/// A streamed answer: the text chunks, the pause before each, and how the
/// stream ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    pub chunks: Vec<String>,
    pub interval: Duration,
    pub end: StreamEnd,
}

/// How a scripted stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// The protocol's normal ending (`[DONE]`, the `finishReason` chunk, `message_stop`).
    Complete,
    /// OpenAI: the finish reason is sent but `data: [DONE]` never comes
    /// (a complete answer). Other protocols: as `Complete`.
    FinishWithoutDone,
    /// The connection closes cleanly without the terminal marker.
    EndWithoutMarker,
    /// The connection is cut (an error mid-body).
    Cut,
    /// The stream goes silent and stays open.
    Stall,
    /// A malformed event.
    Malformed,
    /// The protocol's mid-stream error (OpenAI: a `data: {"error":…}` event;
    /// Gemini: a raw pretty-printed JSON error without `data:`; Anthropic:
    /// `event: error` with `overloaded_error`).
    ErrorEvent,
    /// A refusal after the text (OpenAI: `finish_reason: "content_filter"`;
    /// Gemini: `finishReason: "SAFETY"`; Anthropic: `stop_reason: "refusal"`).
    Refusal,
}

/// What the simulator does with one request. Faults are data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A normal answer with this text.
    Text(String),
    /// A content-filter refusal.
    Refuse(Refusal),
    /// Any status, body and headers; an empty body gets the protocol's
    /// usual error body for the status.
    Status {
        status: u16,
        body: String,
        headers: Vec<(String, String)>,
    },
    /// Waits, then does the inner reply.
    Delay(Duration, Box<Reply>),
    /// Closes the connection without an answer.
    Reset,
    /// Never answers (until the client gives up or the simulator stops).
    Hang,
    /// HTTP 200 with this body, whatever it is.
    Garbage(String),
    /// HTTP 200 announcing a longer body than it sends, then the
    /// connection closes.
    Truncated,
    /// A streamed answer (for a streamed request; a non-streamed request
    /// gets the chunks joined as text).
    Stream(StreamSpec),
    /// The model calls these tools (several: parallel calls), in the
    /// protocol's own shape; streamed when the request asked for a stream
    /// (OpenAI and Anthropic send each call's arguments in several
    /// fragments; Gemini sends each call whole).
    ToolCalls(Vec<SimToolCall>),
    /// The model thinks first, then does `then` (a [`Reply::Text`],
    /// [`Reply::Stream`] or [`Reply::ToolCalls`]). Anthropic: a `thinking`
    /// block with a signature this simulator mints and remembers, before
    /// the text or tool calls (streamed: `thinking_delta`, then
    /// `signature_delta`). OpenAI's Responses API: a `reasoning` item
    /// (its `encrypted_content` minted and remembered when the request's
    /// `include` asks for it). Other protocols: `then` alone.
    Thinking { thinking: String, then: Box<Reply> },
}

/// Token details a simulator reports beside its word counts
/// ([`super::SimProvider::with_usage_detail`]), each where its provider reports
/// it: the cached tokens come on top of the prompt's words and the
/// reasoning tokens on top of the answer's, counted as the provider counts
/// them.
///
/// - OpenAI's Chat Completions: `prompt_tokens` (words plus `cache_read`)
///   with `prompt_tokens_details.cached_tokens`, `completion_tokens`
///   (words plus `reasoning`) with `completion_tokens_details.reasoning_tokens`;
///   the details are always there, zeros included, as OpenAI sends them.
///   No cache writes are reported.
/// - OpenAI's Responses API: the same counts as `input_tokens_details` and
///   `output_tokens_details`.
/// - Anthropic's Messages (and Claude on Bedrock's InvokeModel and on
///   Vertex, which send its bodies): `input_tokens` (the words: Anthropic counts the
///   cache apart), `cache_creation_input_tokens` and
///   `cache_read_input_tokens` on every usage, zeros included;
///   `output_tokens` (words plus `reasoning`) with
///   `output_tokens_details.thinking_tokens` when there is reasoning. A
///   stream's `message_start` and `message_delta` both carry them
///   (`message_delta`'s cumulative).
/// - Gemini: `promptTokenCount` (words plus `cache_read`) with
///   `cachedContentTokenCount`, `candidatesTokenCount` (the words) with
///   `thoughtsTokenCount` (`reasoning`), each detail only when it is not
///   zero. No cache writes are reported.
/// - Bedrock's Converse: `inputTokens` (the words) with
///   `cacheReadInputTokens` and `cacheWriteInputTokens` when they are not
///   zero, `outputTokens` (words plus `reasoning`, never broken out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageDetail {
    /// Prompt tokens read from the provider's prompt cache.
    pub cache_read: u64,
    /// Prompt tokens written to the prompt cache.
    pub cache_write: u64,
    /// Output tokens the model spent reasoning.
    pub reasoning: u64,
}

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimToolCall {
    /// The id the provider mints (`None`: the simulator mints one in the
    /// protocol's style; Gemini sends none at all).
    pub id: Option<String>,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

impl SimToolCall {
    /// A call of `name` with these JSON arguments.
    pub fn new(name: &str, arguments: serde_json::Value) -> Self {
        Self {
            id: None,
            name: name.to_owned(),
            arguments: arguments.to_string(),
        }
    }

    /// The same call with a provider-minted id.
    pub fn with_id(mut self, id: &str) -> Self {
        self.id = Some(id.to_owned());
        self
    }
}

// === impl Reply ===

impl Reply {
    /// A normal answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(text.into())
    }

    /// An error status with the protocol's usual body for it.
    pub fn status(status: u16) -> Self {
        Self::Status {
            status,
            body: String::new(),
            headers: Vec::new(),
        }
    }

    /// A 429 with a `retry-after` header.
    pub fn rate_limited(retry_after: &str) -> Self {
        Self::Status {
            status: 429,
            body: String::new(),
            headers: vec![("retry-after".into(), retry_after.into())],
        }
    }

    /// An overload (Anthropic's 529, a 503 elsewhere: the protocol's
    /// usual body for `status`) with a `retry-after` header.
    pub fn overloaded(status: u16, retry_after: &str) -> Self {
        Self::Status {
            status,
            body: String::new(),
            headers: vec![("retry-after".into(), retry_after.into())],
        }
    }

    /// Delays this reply.
    pub fn after(self, delay: Duration) -> Self {
        Self::Delay(delay, Box::new(self))
    }

    /// A complete stream of these chunks, sent at once.
    pub fn stream(chunks: &[&str]) -> Self {
        Self::Stream(StreamSpec::new(chunks))
    }

    /// This reply, preceded by a signed thinking block (Anthropic).
    pub fn thinking_first(self, thinking: impl Into<String>) -> Self {
        Self::Thinking {
            thinking: thinking.into(),
            then: Box::new(self),
        }
    }
}

// === impl StreamSpec ===

impl StreamSpec {
    /// A complete stream of these chunks, sent without pauses.
    pub fn new(chunks: &[&str]) -> Self {
        Self {
            chunks: chunks.iter().map(|c| (*c).to_owned()).collect(),
            interval: Duration::ZERO,
            end: StreamEnd::Complete,
        }
    }

    /// Pauses `interval` before each chunk.
    pub fn every(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Ends the stream this way.
    pub fn ending(mut self, end: StreamEnd) -> Self {
        self.end = end;
        self
    }

    /// As a reply.
    pub fn reply(self) -> Reply {
        Reply::Stream(self)
    }
}
