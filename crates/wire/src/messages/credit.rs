//! Anthropic's fallback credit on the wire (a beta): the refusal's
//! `stop_details.fallback_credit_token` is read by [`super::response`] and
//! [`super::stream`], the retry's `usage.fallback_credit.status` likewise;
//! here, what the retry sends: the token as the body's top-level
//! `fallback_credit_token` and the beta in `anthropic-beta`, merged with
//! any betas the client sent. The request that may be refused goes with
//! the beta too: a refusal carries a credit only when it was asked for.

use understudy_types::credit::CreditToken;

/// The beta that switches the credit on, on the refused request and on
/// the retry alike.
pub const BETA: &str = "fallback-credit-2026-07-01";

/// `betas` (an `anthropic-beta` value, if any) with the credit's beta
/// added, unless a `fallback-credit-*` beta is already there.
pub fn with_beta(betas: Option<&str>) -> String {
    match betas.map(str::trim).filter(|b| !b.is_empty()) {
        None => BETA.to_owned(),
        Some(b)
            if b.split(',')
                .any(|v| v.trim().starts_with("fallback-credit-")) =>
        {
            b.to_owned()
        }
        Some(b) => format!("{b},{BETA}"),
    }
}

/// `body` (a JSON object's text) with `fallback_credit_token` as its first
/// member: the rest of the body is left byte for byte as it was, so that
/// it still matches the refused one. `None` when `body` is not an object.
pub fn with_token(body: &str, token: &CreditToken) -> Option<String> {
    let open = body.find('{')?;
    if !body[..open].trim().is_empty() {
        return None;
    }
    let rest = &body[open + 1..];
    let value = serde_json::to_string(token.expose()).ok()?;
    let comma = if rest.trim_start().starts_with('}') {
        ""
    } else {
        ","
    };
    Some(format!(
        "{}{{\"fallback_credit_token\":{value}{comma}{rest}",
        &body[..open]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_beta_joins_the_clients_own() {
        assert_eq!(with_beta(None), BETA);
        assert_eq!(with_beta(Some(" ")), BETA);
        assert_eq!(
            with_beta(Some("context-1m-2025-08-07")),
            format!("context-1m-2025-08-07,{BETA}")
        );
        assert_eq!(
            with_beta(Some("a-1, fallback-credit-2026-06-01")),
            "a-1, fallback-credit-2026-06-01"
        );
    }

    #[test]
    fn the_token_goes_first_and_the_rest_is_untouched() {
        let token = CreditToken::new("fct_\"x").expect("not empty");
        let body = r#"{"model":"m","messages":[]}"#;
        let sent = with_token(body, &token).expect("an object");
        assert_eq!(
            sent,
            r#"{"fallback_credit_token":"fct_\"x","model":"m","messages":[]}"#
        );
        let v: serde_json::Value = serde_json::from_str(&sent).expect("valid JSON");
        assert_eq!(v["fallback_credit_token"], "fct_\"x");
        assert_eq!(
            with_token("{ }", &token).as_deref(),
            Some(r#"{"fallback_credit_token":"fct_\"x" }"#)
        );
        assert_eq!(with_token("[1]", &token), None);
    }
}
