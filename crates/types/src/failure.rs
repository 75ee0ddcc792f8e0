//! What one attempt's failure means: the stable [`FailureCode`]s, the
//! [`FailureKind`] an adapter classifies (with the data the decision table
//! needs), and the one [`Disposition`] that both the decision machine and the
//! circuit breaker read, so that "outage" is defined once.
//!
//! A leaf module: it imports nothing from the crate.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The stable, snake_case failure codes. They appear in
/// attempts, events, metric labels and error bodies, so renaming one is a
/// breaking change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    ContentFilter,
    RateLimited,
    QuotaExceeded,
    Auth,
    BadRequest,
    ContextLength,
    Unavailable,
    Timeout,
    Connection,
    MalformedResponse,
    EmptyResponse,
    StreamInterrupted,
    /// The answer's JSON (or a tool call's arguments) does not parse, or
    /// breaks the request's schema.
    InvalidOutput,
    /// The target lacks a capability the request needs; it was not called.
    Unsupported,
    NoProviderAvailable,
    FallbackBudgetExceeded,
    DeadlineExceeded,
    InvalidRequest,
    Internal,
}

/// What went wrong in one attempt, with the data the decision table needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureKind {
    /// A safety or content filter refused: caused by the request.
    ContentFilter,
    /// A transient rate limit; `retry_after` is the provider's hint.
    RateLimited {
        retry_after: Option<Duration>,
    },
    /// Billing or quota exhaustion: retrying will not help.
    QuotaExceeded,
    Auth,
    BadRequest,
    ContextLength,
    /// 5xx, 529, overloaded, capacity exceeded. `retry_after` is the
    /// provider's hint of when it can serve again (an overload's
    /// `Retry-After`): an outage all the same, but one a pinned session
    /// may weigh waiting out against leaving its prompt cache.
    Unavailable {
        retry_after: Option<Duration>,
    },
    Timeout,
    /// Refused, reset or closed connection; DNS or TLS failure.
    Connection,
    MalformedResponse,
    EmptyResponse,
    StreamInterrupted,
    /// JSON output or tool-call arguments that do not parse or do not
    /// match the request's schema.
    InvalidOutput,
    /// The target cannot serve what the request needs (never called).
    Unsupported,
}

/// What a failure means, decided once for everything that reads it: the
/// decision machine (what to try next) and the circuit breaker (whether the
/// target is failing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// A safety or content filter refused: caused by the request. The
    /// provider is healthy (resets the breaker's count); the refusal policy
    /// decides what comes next.
    Refusal,
    /// A transient rate limit: one retry after the wait, then fall back.
    /// The provider is answering (resets the breaker's count).
    RateLimit,
    /// The provider is down or broken: connection, timeout, 5xx, 529,
    /// answers that are not the protocol, a stream cut short. Falls back at
    /// once and counts towards the breaker.
    Outage,
    /// The provider answered but cannot serve this request (auth, quota, a
    /// bad request, context length, an empty answer): fall back at once,
    /// never retried here, never trips the breaker.
    Rejected,
}

/// One attempt's failure as classified by an adapter.
///
/// `detail` is a human-readable explanation. Adapters build it from the
/// provider's error message, never from request headers, so it cannot carry
/// an API key; it is still bounded to [`DETAIL_LIMIT`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    /// The upstream HTTP status, when there was a response.
    pub status: Option<u16>,
    pub detail: String,
    /// A refusal's fallback credit (Anthropic), for the next attempt on
    /// the same account; never shown (see [`crate::credit`]).
    pub credit: Option<Box<crate::credit::CreditToken>>,
}

/// The longest detail kept, in bytes; provider error bodies can be huge.
pub const DETAIL_LIMIT: usize = 512;

// === impl FailureCode ===

impl FailureCode {
    /// Every code, for metric pre-registration and documentation.
    pub const ALL: [FailureCode; 19] = [
        Self::ContentFilter,
        Self::RateLimited,
        Self::QuotaExceeded,
        Self::Auth,
        Self::BadRequest,
        Self::ContextLength,
        Self::Unavailable,
        Self::Timeout,
        Self::Connection,
        Self::MalformedResponse,
        Self::EmptyResponse,
        Self::StreamInterrupted,
        Self::InvalidOutput,
        Self::Unsupported,
        Self::NoProviderAvailable,
        Self::FallbackBudgetExceeded,
        Self::DeadlineExceeded,
        Self::InvalidRequest,
        Self::Internal,
    ];

    /// The code named `s` (as [`FailureCode::as_str`] writes it).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ContentFilter => "content_filter",
            Self::RateLimited => "rate_limited",
            Self::QuotaExceeded => "quota_exceeded",
            Self::Auth => "auth",
            Self::BadRequest => "bad_request",
            Self::ContextLength => "context_length",
            Self::Unavailable => "unavailable",
            Self::Timeout => "timeout",
            Self::Connection => "connection",
            Self::MalformedResponse => "malformed_response",
            Self::EmptyResponse => "empty_response",
            Self::StreamInterrupted => "stream_interrupted",
            Self::InvalidOutput => "invalid_output",
            Self::Unsupported => "unsupported",
            Self::NoProviderAvailable => "no_provider_available",
            Self::FallbackBudgetExceeded => "fallback_budget_exceeded",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::InvalidRequest => "invalid_request",
            Self::Internal => "internal",
        }
    }
}

impl FailureCode {
    /// What the failure means for the plan and the breaker. Request-level
    /// codes (which no attempt has) count as `Rejected`.
    pub fn disposition(self) -> Disposition {
        match self {
            Self::ContentFilter => Disposition::Refusal,
            Self::RateLimited => Disposition::RateLimit,
            Self::Unavailable
            | Self::Timeout
            | Self::Connection
            | Self::MalformedResponse
            | Self::StreamInterrupted => Disposition::Outage,
            Self::QuotaExceeded
            | Self::Auth
            | Self::BadRequest
            | Self::ContextLength
            | Self::EmptyResponse
            | Self::InvalidOutput
            | Self::Unsupported
            | Self::NoProviderAvailable
            | Self::FallbackBudgetExceeded
            | Self::DeadlineExceeded
            | Self::InvalidRequest
            | Self::Internal => Disposition::Rejected,
        }
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl FailureKind ===

impl FailureKind {
    pub fn code(&self) -> FailureCode {
        match self {
            Self::ContentFilter => FailureCode::ContentFilter,
            Self::RateLimited { .. } => FailureCode::RateLimited,
            Self::QuotaExceeded => FailureCode::QuotaExceeded,
            Self::Auth => FailureCode::Auth,
            Self::BadRequest => FailureCode::BadRequest,
            Self::ContextLength => FailureCode::ContextLength,
            Self::Unavailable { .. } => FailureCode::Unavailable,
            Self::Timeout => FailureCode::Timeout,
            Self::Connection => FailureCode::Connection,
            Self::MalformedResponse => FailureCode::MalformedResponse,
            Self::EmptyResponse => FailureCode::EmptyResponse,
            Self::StreamInterrupted => FailureCode::StreamInterrupted,
            Self::InvalidOutput => FailureCode::InvalidOutput,
            Self::Unsupported => FailureCode::Unsupported,
        }
    }

    /// What this failure means for the plan and the breaker.
    pub fn disposition(&self) -> Disposition {
        self.code().disposition()
    }

    /// Whether the provider, not the request, is at fault in a way that a
    /// circuit breaker counts (see [`Disposition::Outage`]).
    pub fn is_outage(&self) -> bool {
        self.disposition() == Disposition::Outage
    }

    pub fn is_refusal(&self) -> bool {
        matches!(self, Self::ContentFilter)
    }
}

// === impl Failure ===

impl Failure {
    pub fn new(kind: FailureKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            status: None,
            detail: bounded(detail.into()),
            credit: None,
        }
    }

    /// This failure, carrying a refusal's fallback credit.
    pub fn with_credit(mut self, credit: Option<crate::credit::CreditToken>) -> Self {
        self.credit = credit.map(Box::new);
        self
    }

    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    pub fn code(&self) -> FailureCode {
        self.kind.code()
    }

    /// The detail with the upstream status, without the code (an attempt
    /// records the code separately).
    pub fn describe(&self) -> String {
        let Some(status) = self.status else {
            return self.detail.clone();
        };
        // Written out rather than `format!`: every failed attempt records
        // this, and the formatting machinery costs several times the copy.
        let mut s = String::with_capacity(self.detail.len() + 11);
        s.push_str("HTTP ");
        s.push_str(itoa::Buffer::new().format(status));
        s.push_str(": ");
        s.push_str(&self.detail);
        s
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(status) => write!(f, "{} (HTTP {status}): {}", self.code(), self.detail),
            None => write!(f, "{}: {}", self.code(), self.detail),
        }
    }
}

/// Cuts `s` to at most [`DETAIL_LIMIT`] bytes on a character boundary.
pub fn bounded(mut s: String) -> String {
    if s.len() > DETAIL_LIMIT {
        let mut end = DETAIL_LIMIT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_snake_case() {
        for code in FailureCode::ALL {
            let json = serde_json::to_string(&code).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
    }

    #[test]
    fn described_with_the_status() {
        for (status, want) in [
            (Some(503), "HTTP 503: over capacity"),
            (Some(42), "HTTP 42: over capacity"),
            (Some(0), "HTTP 0: over capacity"),
            (Some(u16::MAX), "HTTP 65535: over capacity"),
            (None, "over capacity"),
        ] {
            let mut f = Failure::new(FailureKind::Connection, "over capacity");
            f.status = status;
            assert_eq!(f.describe(), want);
        }
    }

    #[test]
    fn outage_class() {
        assert!(FailureKind::Unavailable { retry_after: None }.is_outage());
        assert!(FailureKind::Timeout.is_outage());
        assert!(!FailureKind::ContentFilter.is_outage());
        assert!(!FailureKind::RateLimited { retry_after: None }.is_outage());
        assert!(!FailureKind::BadRequest.is_outage());
        assert!(!FailureKind::Auth.is_outage());
    }

    #[test]
    fn detail_is_bounded_on_a_char_boundary() {
        let f = Failure::new(FailureKind::BadRequest, "é".repeat(DETAIL_LIMIT));
        assert!(f.detail.len() <= DETAIL_LIMIT + '…'.len_utf8());
    }
}
