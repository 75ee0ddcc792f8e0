//! The record of one call to one target: its [`AttemptKind`] (the role it
//! played in the plan), its [`Outcome`], and the [`Attempt`] itself.
//!
//! A leaf module beside `failure`: errors, events and the decision machine
//! all speak of attempts.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::failure::FailureCode;

/// The role an attempt played in the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptKind {
    Primary,
    Softened,
    RateLimitRetry,
    Fallback,
    /// A committed stream that was cut, continued on another target with
    /// the text sent so far as an assistant prefill (`continue_after_cut`).
    Continuation,
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Ok,
    Failed(FailureCode),
    /// Cancelled unfinished: a hedge's other attempt showed output first.
    Cancelled,
}

/// The record of one call to one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub provider: std::sync::Arc<str>,
    pub model: std::sync::Arc<str>,
    pub kind: AttemptKind,
    pub outcome: Outcome,
    pub latency_ms: f64,
    /// Why it failed, bounded and free of keys; `None` on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The upstream HTTP status of a failure that came as an HTTP error
    /// (`None` for one inside a 200, a transport failure, or a success): a
    /// surfaced refusal keeps the form the provider gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The name of the pool key it went to (never the key itself); `None`
    /// for a provider with one key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// When the attempt began, in milliseconds from the engine's start of
    /// the request (its span's start).
    #[serde(default)]
    pub started_ms: f64,
    /// The attempt's span, made when the call went out (its
    /// `traceparent` may have told the provider); `None` when the request
    /// is not traced or no call was made.
    #[serde(skip)]
    pub span_id: Option<[u8; 8]>,
    /// What became of the fallback credit the attempt carried (Anthropic):
    /// `redeemed` or `not_applied:<reason>`; `None` when it carried none or
    /// the answer did not say. Never the credit itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_credit: Option<String>,
}

// === impl AttemptKind ===

impl AttemptKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Softened => "softened",
            Self::RateLimitRetry => "rate_limit_retry",
            Self::Fallback => "fallback",
            Self::Continuation => "continuation",
        }
    }
}

// === impl Outcome ===

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Failed(code) => code.as_str(),
            Self::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Outcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "ok" {
            return Ok(Self::Ok);
        }
        if s == "cancelled" {
            return Ok(Self::Cancelled);
        }
        FailureCode::ALL
            .iter()
            .find(|c| c.as_str() == s)
            .map(|c| Self::Failed(*c))
            .ok_or_else(|| serde::de::Error::custom(format!("unknown outcome `{s}`")))
    }
}
