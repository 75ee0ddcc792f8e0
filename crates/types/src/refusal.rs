//! What the engine does when a provider's content filter refuses.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The refusal policy. `content_filtered` is recorded under
/// every policy; the policy only decides what is tried next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalPolicy {
    /// One softened retry on the same target, then the fallbacks.
    #[default]
    SoftenThenFallback,
    /// One softened retry on the same target, and nothing else.
    SoftenOnly,
    /// Straight to the fallbacks with the original request.
    FallbackOnly,
    /// Return the refusal to the caller; no retry, no fallback.
    Surface,
}

impl RefusalPolicy {
    pub const ALL: [RefusalPolicy; 4] = [
        Self::SoftenThenFallback,
        Self::SoftenOnly,
        Self::FallbackOnly,
        Self::Surface,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SoftenThenFallback => "soften_then_fallback",
            Self::SoftenOnly => "soften_only",
            Self::FallbackOnly => "fallback_only",
            Self::Surface => "surface",
        }
    }

    /// Whether a refusal on the primary earns one softened retry.
    pub fn softens(self) -> bool {
        matches!(self, Self::SoftenThenFallback | Self::SoftenOnly)
    }

    /// Whether a refusal may lead to the fallbacks.
    pub fn falls_back(self) -> bool {
        matches!(self, Self::SoftenThenFallback | Self::FallbackOnly)
    }
}

impl fmt::Display for RefusalPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RefusalPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown refusal policy `{s}` (expected one of: soften_then_fallback, soften_only, fallback_only, surface)"
                )
            })
    }
}
