//! Neutral chat types: what a client asks for and what a provider answers,
//! independent of any wire protocol.
//!
//! Adapters translate these to and from each provider's format; the engine
//! never sees provider JSON.

use serde::{Deserialize, Serialize};

use crate::error::Error;

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
}

/// One turn of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
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
}

/// Why a provider stopped generating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end or a stop sequence.
    Stop,
    /// The token limit cut the answer short.
    Length,
    /// Anything else the provider reported (kept verbatim).
    Other(String),
}

/// Token counts as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A successful answer from one provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub text: String,
    /// The model that answered, as the provider named it.
    pub model: String,
    pub finish_reason: FinishReason,
    pub usage: Option<Usage>,
}

/// One event of a streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// More text.
    Delta(String),
    /// The provider ended the answer normally.
    Finish {
        finish_reason: FinishReason,
        usage: Option<Usage>,
        /// The model that answered, when the stream named it.
        model: Option<String>,
    },
}

// === impl ChatRequest ===

impl ChatRequest {
    /// A request with one user message.
    pub fn user(prompt: impl Into<String>) -> Self {
        Self {
            messages: vec![Message {
                role: Role::User,
                content: prompt.into(),
            }],
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

    /// Rejects input that no provider could serve, before any provider is
    /// called (DESIGN §2: invalid-for-everyone input never costs an attempt).
    pub fn validate(&self) -> Result<(), Error> {
        if self.messages.is_empty() {
            return Err(Error::invalid(
                "messages",
                "at least one message is required",
            ));
        }
        if self.messages.iter().all(|m| m.content.trim().is_empty()) {
            return Err(Error::invalid("messages", "every message is empty"));
        }
        if let Some(t) = self.temperature {
            if !t.is_finite() || !(0.0..=2.0).contains(&t) {
                return Err(Error::invalid(
                    "temperature",
                    "temperature must be between 0 and 2",
                ));
            }
        }
        if let Some(n) = self.max_tokens {
            if n == 0 || n > MAX_TOKENS_LIMIT {
                return Err(Error::invalid(
                    "max_tokens",
                    format!("max_tokens must be between 1 and {MAX_TOKENS_LIMIT}"),
                ));
            }
        }
        if self.stop.len() > 4 {
            return Err(Error::invalid(
                "stop",
                "at most 4 stop sequences are accepted",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(req: ChatRequest, field: Option<&str>) {
        match (req.validate(), field) {
            (Ok(()), None) => {}
            (Err(Error::InvalidRequest { field: got, .. }), Some(want)) => assert_eq!(got, want),
            (other, want) => panic!("validate() = {other:?}, wanted an error on {want:?}"),
        }
    }

    #[test]
    fn validation() {
        check(ChatRequest::user("hi"), None);
        check(ChatRequest::user("hi").with_temperature(2.0), None);
        check(ChatRequest::default(), Some("messages"));
        check(ChatRequest::user("  "), Some("messages"));
        check(
            ChatRequest::user("hi").with_temperature(2.5),
            Some("temperature"),
        );
        check(
            ChatRequest::user("hi").with_temperature(f32::NAN),
            Some("temperature"),
        );
        check(
            ChatRequest {
                max_tokens: Some(0),
                ..ChatRequest::user("hi")
            },
            Some("max_tokens"),
        );
    }
}
