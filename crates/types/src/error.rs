//! The failure taxonomy.
//!
//! Two levels: a [`Failure`] is what one attempt on one provider produced
//! (classified by the adapter, carrying what the decision table needs), and
//! an [`Error`] is what a whole request produced once the plan gave up. The
//! two are kept apart because a refusal is caused by the request and an
//! outage by the provider, and the engine treats them differently.

use std::fmt;
use std::time::Duration;

use crate::attempt::Attempt;
pub use crate::failure::{DETAIL_LIMIT, Disposition, Failure, FailureCode, FailureKind, bounded};

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
    /// A client's model name that is no route and no provider.
    #[error("the model `{0}` names no route and no provider")]
    UnknownModel(String),
    /// The prompt fits no target the request may use: every one's known
    /// context window is smaller than its estimated tokens (the input,
    /// plus the output it reserves where the provider counts it). Nothing
    /// was called.
    #[error(
        "prompt is too long: about {tokens} tokens > {limit} maximum (the largest context window of the targets that may serve it; estimated at 4 characters a token)"
    )]
    ContextTooLong { tokens: u64, limit: u32 },
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
    /// The client's record refused the request (its rates, budget, models
    /// or expiry), before any provider saw it.
    #[error("{0}")]
    Client(ClientRefusal),
}

// === impl Error ===

impl Error {
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Self::InvalidRequest {
            field,
            message: message.into(),
        }
    }

    /// The request-level failure code.
    pub fn code(&self) -> FailureCode {
        match self {
            Self::InvalidRequest { .. }
            | Self::UnknownProvider(_)
            | Self::UnknownRoute(_)
            | Self::UnknownModel(_) => FailureCode::InvalidRequest,
            Self::ContextTooLong { .. } => FailureCode::ContextLength,
            Self::NoProviderAvailable(_) => FailureCode::NoProviderAvailable,
            Self::ProvidersFailed { code, .. } => *code,
            Self::Refused { .. } => FailureCode::ContentFilter,
            Self::DeadlineExceeded { .. } => FailureCode::DeadlineExceeded,
            Self::FallbackBudgetExceeded { .. } => FailureCode::FallbackBudgetExceeded,
            Self::Engine(_) => FailureCode::Internal,
            Self::Client(r) => match r {
                ClientRefusal::Requests { .. }
                | ClientRefusal::Tokens { .. }
                | ClientRefusal::TooLarge { .. } => FailureCode::RateLimited,
                _ => FailureCode::InvalidRequest,
            },
        }
    }

    /// The error's message as a client reads it: the engine's own words
    /// (an actor, a task, a setting) stay in the log, and a client learns
    /// only that the gateway cannot serve now.
    pub fn client_message(&self) -> String {
        match self {
            Self::Engine(_) => "the gateway cannot serve requests right now".to_owned(),
            e => e.to_string(),
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

/// Why a client's request was refused before any provider saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientRefusal {
    /// The key's record has expired (401).
    Expired,
    /// The record's `models` do not cover what was asked (403).
    Model { asked: String },
    /// The minute's requests are spent (429 until the minute ends).
    Requests { limit: u64, retry_after: Duration },
    /// The minute's tokens cannot take this request's estimate (429 until
    /// the minute ends).
    Tokens { limit: u64, retry_after: Duration },
    /// The request alone is estimated above the whole `tpm` (429 that is
    /// not worth retrying).
    TooLarge { estimate: u64, limit: u64 },
    /// The budget of the window cannot take the request's worst case: it
    /// is spent, what is left of it (less the reservations of requests in
    /// flight) is less, or the worst case is more than the whole budget
    /// (402, not worth retrying before the window ends).
    Budget {
        budget_usd: f64,
        resets_in: Duration,
        /// What the window has left, in USD.
        left_usd: f64,
        /// The request's worst case: its estimated prompt and `max_tokens`
        /// at the price of the dearest target its route can reach.
        worst_usd: f64,
    },
}

// === impl ClientRefusal ===

impl ClientRefusal {
    /// The limit that tripped, as metrics and error codes name it.
    pub fn limit(&self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Model { .. } => "models",
            Self::Requests { .. } => "rpm",
            Self::Tokens { .. } | Self::TooLarge { .. } => "tpm",
            Self::Budget { .. } => "budget",
        }
    }

    /// How long a client should wait before trying again, when waiting
    /// helps.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Requests { retry_after, .. } | Self::Tokens { retry_after, .. } => {
                Some(*retry_after)
            }
            _ => None,
        }
    }
}

impl fmt::Display for ClientRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Expired => f.write_str("this client key has expired"),
            Self::Model { asked } => write!(
                f,
                "this client key may not use `{asked}` (the record's `models` leave it out)"
            ),
            Self::Requests { limit, retry_after } => write!(
                f,
                "rate limit reached: {limit} requests per minute (rpm); retry in {:.1} s",
                retry_after.as_secs_f64()
            ),
            Self::Tokens { limit, retry_after } => write!(
                f,
                "rate limit reached: {limit} tokens per minute (tpm); retry in {:.1} s",
                retry_after.as_secs_f64()
            ),
            Self::TooLarge { estimate, limit } => write!(
                f,
                "the request is estimated at {estimate} tokens, more than this key's {limit} \
                 tokens per minute (tpm): lower max_tokens or shorten the prompt"
            ),
            Self::Budget {
                budget_usd,
                worst_usd,
                ..
            } if worst_usd > budget_usd => write!(
                f,
                "this request's worst case, USD {worst_usd:.6} (its prompt and max_tokens at the \
                 price of the dearest target its route can reach), is more than this key's whole \
                 budget of USD {budget_usd} (budget_usd): lower max_tokens or shorten the prompt"
            ),
            Self::Budget {
                budget_usd,
                resets_in,
                left_usd,
                worst_usd,
            } if *left_usd > 0.0 => write!(
                f,
                "budget nearly spent: USD {left_usd:.6} of USD {budget_usd} (budget_usd) is left \
                 for this window, less than this request's worst case of USD {worst_usd:.6} (its \
                 prompt and max_tokens at the price of the dearest target its route can reach); \
                 lower max_tokens, or wait: it renews in {} s",
                resets_in.as_secs()
            ),
            Self::Budget {
                budget_usd,
                resets_in,
                ..
            } => write!(
                f,
                "budget spent: USD {budget_usd} for this window (budget_usd); it renews in {} s",
                resets_in.as_secs()
            ),
        }
    }
}
