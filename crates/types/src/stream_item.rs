//! What a committed stream yields, as plain data: text and tool-call
//! fragments, then exactly one [`StreamDone`] or [`StreamError`].

use serde::{Deserialize, Serialize};

use crate::attempt::Attempt;
use crate::chat::{FinishReason, NativeEvent, ToolCallDelta, Usage};
use crate::failure::FailureCode;

/// What a streamed generation yields: text and tool-call fragments, then
/// exactly one `Done` or `Error`.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    Delta(String),
    /// A piece of the model's reasoning, for front ends whose API carries
    /// it (the others skip it). Held with the rest until the commit.
    Reasoning(String),
    /// A piece of a tool call (boxed like the ends, for the channel's size).
    ToolCall(Box<ToolCallDelta>),
    /// An event exactly as the provider sent it, for a natively forwarded
    /// request (the neutral items parsed from it follow it; a front end in
    /// the same protocol relays these and ignores the neutral ones).
    Native(Box<NativeEvent>),
    /// Boxed so that the channel's slots stay the size of a `String`: the
    /// run's channel holds 16 items for every open stream.
    Done(Box<StreamDone>),
    Error(Box<StreamError>),
}

/// The end of a complete stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamDone {
    pub request_id: String,
    pub provider: String,
    pub model: String,
    pub finish_reason: FinishReason,
    pub fell_back: bool,
    pub content_filtered: bool,
    pub usage: Option<Usage>,
    pub attempts: Vec<Attempt>,
    pub latency_ms: f64,
    pub ttft_ms: f64,
    /// The provider that continued the answer after the committed one was
    /// cut (`continue_after_cut`); `provider` began it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_by: Option<String>,
}

/// The end of a stream that failed after its commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamError {
    pub request_id: String,
    pub code: FailureCode,
    pub message: String,
    /// The provider committed to (who sent the partial text).
    pub provider: String,
    pub model: String,
    pub fell_back: bool,
    pub content_filtered: bool,
    pub attempts: Vec<Attempt>,
    pub latency_ms: f64,
    pub ttft_ms: f64,
}

// === impl StreamError ===

impl StreamError {
    /// An error of a held stream that no target completed: the request's
    /// error, in-band (the client already has the response's headers).
    pub fn from_error(request_id: String, error: &crate::Error, latency_ms: f64) -> Self {
        let attempts = error.attempts().to_vec();
        let last = attempts.last();
        Self {
            request_id,
            code: error.code(),
            message: error.client_message(),
            provider: last.map_or_else(String::new, |a| a.provider.to_string()),
            model: last.map_or_else(String::new, |a| a.model.to_string()),
            fell_back: attempts.len() > 1,
            content_filtered: error.code() == FailureCode::ContentFilter,
            attempts,
            latency_ms,
            ttft_ms: latency_ms,
        }
    }
}
