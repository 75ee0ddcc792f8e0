//! Anthropic's fallback credit: the opaque token a refusal may carry
//! (`stop_details.fallback_credit_token`), which the next attempt on the
//! same account sends back so that its cache writes are billed at the
//! cache-read rate, and what the answer says became of it
//! (`usage.fallback_credit.status`).
//!
//! The token is a bearer of value: its `Debug` shows nothing of it, and
//! nothing here writes it anywhere but into the request that redeems it.

use std::fmt;

/// A refusal's credit token, as the provider issued it.
#[derive(Clone, PartialEq, Eq)]
pub struct CreditToken(Box<str>);

/// What the answer to an attempt that carried a credit says of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditStatus {
    /// The retry was billed as if the conversation had been on its model
    /// all along.
    Redeemed,
    /// No reprice was applied, for this reason.
    NotApplied(NotApplied),
}

/// Why a credit was not applied (the API's closed list; a reason it adds
/// later reads as [`NotApplied::Other`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotApplied {
    BodyMismatch,
    ContinuationExcluded,
    ContinuationOnly,
    Expired,
    InvalidTargetModel,
    NotEnabled,
    RepriceUnavailable,
    TemporarilyUnavailable,
    VariantFieldsPresent,
    WrongOrganization,
    WrongPlatform,
    WrongWorkspace,
    Other,
}

// === impl CreditToken ===

impl CreditToken {
    /// A token as the provider sent it; `None` for an empty one.
    pub fn new(token: &str) -> Option<Self> {
        (!token.is_empty()).then(|| Self(token.into()))
    }

    /// The token, for the one request that redeems it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for CreditToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CreditToken(…)")
    }
}

// === impl CreditStatus ===

impl CreditStatus {
    /// The status read from `usage.fallback_credit.status`: its `type`
    /// and, when not applied, its `reason`.
    pub fn parse(kind: &str, reason: Option<&str>) -> Option<Self> {
        match kind {
            "redeemed" => Some(Self::Redeemed),
            "not_applied" => Some(Self::NotApplied(NotApplied::parse(
                reason.unwrap_or_default(),
            ))),
            _ => None,
        }
    }

    /// `redeemed`, or `not_applied:<reason>`: the event's field.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Redeemed => "redeemed",
            Self::NotApplied(why) => why.as_str(),
        }
    }
}

// === impl NotApplied ===

impl NotApplied {
    const ALL: [(Self, &'static str, &'static str); 13] = [
        (
            Self::BodyMismatch,
            "body_mismatch",
            "not_applied:body_mismatch",
        ),
        (
            Self::ContinuationExcluded,
            "continuation_excluded",
            "not_applied:continuation_excluded",
        ),
        (
            Self::ContinuationOnly,
            "continuation_only",
            "not_applied:continuation_only",
        ),
        (Self::Expired, "expired", "not_applied:expired"),
        (
            Self::InvalidTargetModel,
            "invalid_target_model",
            "not_applied:invalid_target_model",
        ),
        (Self::NotEnabled, "not_enabled", "not_applied:not_enabled"),
        (
            Self::RepriceUnavailable,
            "reprice_unavailable",
            "not_applied:reprice_unavailable",
        ),
        (
            Self::TemporarilyUnavailable,
            "temporarily_unavailable",
            "not_applied:temporarily_unavailable",
        ),
        (
            Self::VariantFieldsPresent,
            "variant_fields_present",
            "not_applied:variant_fields_present",
        ),
        (
            Self::WrongOrganization,
            "wrong_organization",
            "not_applied:wrong_organization",
        ),
        (
            Self::WrongPlatform,
            "wrong_platform",
            "not_applied:wrong_platform",
        ),
        (
            Self::WrongWorkspace,
            "wrong_workspace",
            "not_applied:wrong_workspace",
        ),
        (Self::Other, "other", "not_applied:other"),
    ];

    /// The reason the API named (an unknown one is [`NotApplied::Other`]).
    pub fn parse(reason: &str) -> Self {
        Self::ALL
            .iter()
            .find(|(_, name, _)| *name == reason)
            .map_or(Self::Other, |(why, _, _)| *why)
    }

    /// `not_applied:<reason>`.
    fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(why, _, _)| *why == self)
            .map_or("not_applied:other", |(_, _, s)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_never_shows_in_debug() {
        let token = CreditToken::new("fct_secret").expect("not empty");
        assert!(!format!("{token:?}").contains("fct_secret"));
        assert_eq!(token.expose(), "fct_secret");
        assert!(CreditToken::new("").is_none());
    }

    #[test]
    fn statuses_read_and_write_as_the_event_shows_them() {
        for (kind, reason, shown) in [
            ("redeemed", None, "redeemed"),
            ("not_applied", Some("expired"), "not_applied:expired"),
            (
                "not_applied",
                Some("body_mismatch"),
                "not_applied:body_mismatch",
            ),
            (
                "not_applied",
                Some("wrong_workspace"),
                "not_applied:wrong_workspace",
            ),
            (
                "not_applied",
                Some("wrong_platform"),
                "not_applied:wrong_platform",
            ),
            ("not_applied", Some("something_new"), "not_applied:other"),
        ] {
            let status = CreditStatus::parse(kind, reason).expect("a known type");
            assert_eq!(status.as_str(), shown);
        }
        assert!(CreditStatus::parse("pending", None).is_none());
    }
}
