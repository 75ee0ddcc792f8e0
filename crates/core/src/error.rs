//! The failure taxonomy.
//!
//! Two levels: a [`Failure`] is what one attempt on one provider produced
//! (classified by the adapter, carrying what the decision table needs), and
//! an [`Error`] is what a whole request produced once the plan gave up. The
//! two are kept apart because a refusal is caused by the request and an
//! outage by the provider, and the engine treats them differently.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::generation::Attempt;

/// The stable, snake_case failure codes of DESIGN §2. They appear in
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
    /// 5xx, 529, overloaded, capacity exceeded.
    Unavailable,
    Timeout,
    /// Refused, reset or closed connection; DNS or TLS failure.
    Connection,
    MalformedResponse,
    EmptyResponse,
    StreamInterrupted,
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
}

/// The longest detail kept, in bytes; provider error bodies can be huge.
pub const DETAIL_LIMIT: usize = 512;

/// What a whole request produced when it did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The request is invalid for every provider; nothing was called.
    #[error("invalid request: {field}: {message}")]
    InvalidRequest {
        field: &'static str,
        message: String,
    },
    #[error("unknown provider `{0}`")]
    UnknownProvider(String),
    #[error("unknown route `{0}`")]
    UnknownRoute(String),
    /// The plan was empty: no provider had a key (or all were disabled).
    #[error("no provider available: {0}")]
    NoProviderAvailable(String),
    /// Every attempt of the plan failed; `attempts` keeps them in order.
    #[error("{}", summarize("every provider failed", attempts))]
    ProvidersFailed {
        code: FailureCode,
        attempts: Vec<Attempt>,
    },
    /// A refusal returned to the caller by the `surface` refusal policy.
    #[error(
        "{}",
        summarize("the request was refused by a content filter", attempts)
    )]
    Refused { attempts: Vec<Attempt> },
    /// The primary failed and fallback targets have spent the configured
    /// cap in the current window.
    #[error(
        "{}",
        summarize("the fallback budget is spent for this window", attempts)
    )]
    FallbackBudgetExceeded { attempts: Vec<Attempt> },
    /// The request deadline ran out before any attempt succeeded.
    #[error("{}", summarize("the request deadline was exceeded", attempts))]
    DeadlineExceeded { attempts: Vec<Attempt> },
    /// The engine's actors are gone (shutting down, or a bug).
    #[error("engine unavailable: {0}")]
    Engine(String),
}

// === impl FailureCode ===

impl FailureCode {
    /// Every code, for metric pre-registration and documentation.
    pub const ALL: [FailureCode; 17] = [
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
        Self::NoProviderAvailable,
        Self::FallbackBudgetExceeded,
        Self::DeadlineExceeded,
        Self::InvalidRequest,
        Self::Internal,
    ];

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
            Self::NoProviderAvailable => "no_provider_available",
            Self::FallbackBudgetExceeded => "fallback_budget_exceeded",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::InvalidRequest => "invalid_request",
            Self::Internal => "internal",
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
            Self::Unavailable => FailureCode::Unavailable,
            Self::Timeout => FailureCode::Timeout,
            Self::Connection => FailureCode::Connection,
            Self::MalformedResponse => FailureCode::MalformedResponse,
            Self::EmptyResponse => FailureCode::EmptyResponse,
            Self::StreamInterrupted => FailureCode::StreamInterrupted,
        }
    }

    /// Whether the provider, not the request, is at fault in a way that a
    /// circuit breaker should count: connection, timeout, 5xx, 529, and
    /// answers that are not the protocol at all. Refusals, bad requests,
    /// auth and rate limits never count.
    pub fn is_outage(&self) -> bool {
        matches!(
            self,
            Self::Unavailable
                | Self::Timeout
                | Self::Connection
                | Self::MalformedResponse
                | Self::StreamInterrupted
        )
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
        }
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
        match self.status {
            Some(status) => format!("HTTP {status}: {}", self.detail),
            None => self.detail.clone(),
        }
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

// === impl Error ===

impl Error {
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Self::InvalidRequest {
            field,
            message: message.into(),
        }
    }

    /// The request-level failure code (DESIGN §2).
    pub fn code(&self) -> FailureCode {
        match self {
            Self::InvalidRequest { .. } | Self::UnknownProvider(_) | Self::UnknownRoute(_) => {
                FailureCode::InvalidRequest
            }
            Self::NoProviderAvailable(_) => FailureCode::NoProviderAvailable,
            Self::ProvidersFailed { code, .. } => *code,
            Self::Refused { .. } => FailureCode::ContentFilter,
            Self::DeadlineExceeded { .. } => FailureCode::DeadlineExceeded,
            Self::FallbackBudgetExceeded { .. } => FailureCode::FallbackBudgetExceeded,
            Self::Engine(_) => FailureCode::Internal,
        }
    }

    /// Every attempt made before the request gave up, in order.
    pub fn attempts(&self) -> &[Attempt] {
        match self {
            Self::ProvidersFailed { attempts, .. }
            | Self::Refused { attempts }
            | Self::FallbackBudgetExceeded { attempts }
            | Self::DeadlineExceeded { attempts } => attempts,
            _ => &[],
        }
    }
}

fn summarize(head: &str, attempts: &[Attempt]) -> String {
    let mut out = String::from(head);
    for (i, a) in attempts.iter().enumerate() {
        out.push_str(if i == 0 { ": " } else { "; " });
        out.push_str(&format!(
            "{}:{} ({}) {}",
            a.provider,
            a.model,
            a.kind.as_str(),
            a.outcome
        ));
        if let Some(detail) = &a.detail {
            out.push_str(&format!(" — {detail}"));
        }
    }
    out
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
    fn outage_class() {
        assert!(FailureKind::Unavailable.is_outage());
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
