//! What Bedrock's errors mean. Bedrock names its error in the
//! `x-amzn-errortype` header (`ThrottlingException:http://internal…`),
//! sometimes in the body's `__type`, and puts a `message` (or `Message`)
//! in the body; inside a stream an exception message names it in
//! `:exception-type` (`throttlingException`). The statuses alone mislead:
//! a quota is a 400, a throttle and a model not ready are both 429.

use std::time::Duration;

use reqwest::header::HeaderMap;
use understudy_types::{Failure, FailureKind};

/// The prefix of an expired-credentials failure's detail, by which the
/// adapter knows to read its credentials again.
pub(crate) const EXPIRED: &str = "ExpiredTokenException";

/// The wait before the one retry of a model that is not ready yet (AWS's
/// SDKs retry it at once, with backoff).
const NOT_READY_WAIT: Duration = Duration::from_secs(1);

/// An error answer (any status but 2xx) as a failure.
pub(crate) fn classify(status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(alias = "Message")]
        message: Option<String>,
        #[serde(rename = "__type")]
        kind: Option<String>,
    }
    let parsed: Option<Body> = serde_json::from_slice(body).ok();
    let header = headers
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let name = header
        .or_else(|| parsed.as_ref().and_then(|b| b.kind.clone()))
        .map(|t| error_name(&t).to_owned());
    let message = parsed.and_then(|b| b.message).unwrap_or_default();
    let Some(name) = name else {
        return crate::classify::unreadable(status, headers, body);
    };
    let mut failure = named(&name, &message);
    failure.kind =
        understudy_wire::classify::hinted(failure.kind, headers, std::time::SystemTime::now());
    failure.with_status(status)
}

/// An exception message inside a 200 stream (`:exception-type`, its
/// payload `{"message": …}`): the stream's failure.
pub(crate) fn exception(kind: &str, payload: &[u8]) -> Failure {
    #[derive(serde::Deserialize)]
    struct Payload {
        #[serde(alias = "Message")]
        message: Option<String>,
    }
    let message = serde_json::from_slice::<Payload>(payload)
        .ok()
        .and_then(|p| p.message)
        .unwrap_or_default();
    named(kind, &message)
}

/// `ThrottlingException:http://internal.amazon.com/…` → `ThrottlingException`;
/// a namespaced `__type` (`com.amazon…#ThrottlingException`) too.
fn error_name(t: &str) -> &str {
    let t = t.split(':').next().unwrap_or(t);
    t.rsplit('#').next().unwrap_or(t).trim()
}

/// The failure an error of this name (either case of its first letter)
/// and message is.
fn named(name: &str, message: &str) -> Failure {
    let mut chars = name.chars();
    let name: String = chars
        .next()
        .map(|c| c.to_ascii_uppercase())
        .into_iter()
        .chain(chars)
        .collect();
    let kind = match name.as_str() {
        "ThrottlingException" | "TooManyRequestsException" => {
            FailureKind::RateLimited { retry_after: None }
        }
        // Transient by AWS's own account (its SDKs retry it): one retry
        // after a moment, then the fallbacks.
        "ModelNotReadyException" => FailureKind::RateLimited {
            retry_after: Some(NOT_READY_WAIT),
        },
        // A 400 on the wire, but the account's quota: retrying will not help.
        "ServiceQuotaExceededException" => FailureKind::QuotaExceeded,
        "ModelTimeoutException" => FailureKind::Timeout,
        "ModelErrorException"
        | "ModelStreamErrorException"
        | "InternalServerException"
        | "InternalFailure"
        | "ServiceUnavailableException"
        | "ServiceUnavailable" => FailureKind::Unavailable { retry_after: None },
        "AccessDeniedException"
        | "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "IncompleteSignatureException"
        | "MissingAuthenticationTokenException"
        | "ExpiredTokenException"
        | "InvalidClientTokenId"
        | "SignatureDoesNotMatch" => FailureKind::Auth,
        "ValidationException" => return validation(message),
        "ResourceNotFoundException" => FailureKind::BadRequest,
        _ => FailureKind::Unavailable { retry_after: None },
    };
    let name = if name == "InvalidClientTokenId" && message.contains("expired") {
        EXPIRED.to_owned()
    } else {
        name
    };
    Failure::new(kind, detail(&name, message))
}

/// A `ValidationException`: a bad request, unless its message is Anthropic's
/// own error passed through (`The model returned the following errors: …`),
/// which is read as Anthropic's (a prompt too long is the context length).
fn validation(message: &str) -> Failure {
    let inner = message
        .strip_prefix("The model returned the following errors:")
        .map(str::trim)
        .unwrap_or(message);
    let lower = inner.to_ascii_lowercase();
    let kind = if lower.contains("too long")
        || lower.contains("context window")
        || lower.contains("too many tokens")
        || lower.contains("exceed context limit")
    {
        FailureKind::ContextLength
    } else {
        FailureKind::BadRequest
    };
    Failure::new(kind, detail("ValidationException", inner))
}

fn detail(name: &str, message: &str) -> String {
    if message.is_empty() {
        name.to_owned()
    } else {
        format!("{name}: {message}")
    }
}

/// Whether `failure` says the credentials expired.
pub(crate) fn expired(failure: &Failure) -> bool {
    failure.kind == FailureKind::Auth && failure.detail.starts_with(EXPIRED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn with_type(t: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-amzn-errortype", HeaderValue::from_str(t).unwrap());
        h
    }

    #[test]
    fn each_error_type_is_what_it_means_not_what_its_status_says() {
        let cases: [(&str, u16, FailureKind); 10] = [
            (
                "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/",
                429,
                FailureKind::RateLimited { retry_after: None },
            ),
            (
                "ModelNotReadyException",
                429,
                FailureKind::RateLimited {
                    retry_after: Some(NOT_READY_WAIT),
                },
            ),
            (
                "ServiceQuotaExceededException",
                400,
                FailureKind::QuotaExceeded,
            ),
            ("ModelTimeoutException", 408, FailureKind::Timeout),
            (
                "ModelErrorException",
                424,
                FailureKind::Unavailable { retry_after: None },
            ),
            (
                "ModelStreamErrorException",
                424,
                FailureKind::Unavailable { retry_after: None },
            ),
            ("AccessDeniedException", 403, FailureKind::Auth),
            ("UnrecognizedClientException", 403, FailureKind::Auth),
            ("ValidationException", 400, FailureKind::BadRequest),
            (
                "ServiceUnavailableException",
                503,
                FailureKind::Unavailable { retry_after: None },
            ),
        ];
        for (t, status, kind) in cases {
            let f = classify(status, &with_type(t), br#"{"message":"m"}"#);
            assert_eq!(f.kind, kind, "{t}");
            assert_eq!(f.status, Some(status));
        }
    }

    #[test]
    fn too_long_is_the_context_length_and_other_limits_are_not() {
        // (the ValidationException's message, the context length)
        let cases = [
            // InvokeModel(-WithResponseStream).
            ("Input is too long for requested model.", true),
            // Converse, Anthropic's text wrapped.
            (
                "The model returned the following errors: prompt is too long: 200049 tokens > 200000 maximum",
                true,
            ),
            (
                "The model returned the following errors: Input is too long for requested model.",
                true,
            ),
            (
                "The model returned the following errors: input length and `max_tokens` exceed context limit: 189136 + 20000 > 204648, decrease input length or `max_tokens` and try again",
                true,
            ),
            // A body over Bedrock's size limit, an output budget too large:
            // no larger window helps.
            (
                "1 validation error detected: Value at 'body' failed to satisfy constraint: Member must have length less than or equal to 25000000",
                false,
            ),
            (
                "The maximum tokens you requested exceeds the model limit of 32768",
                false,
            ),
        ];
        for (message, too_long) in cases {
            let body = serde_json::json!({ "message": message }).to_string();
            let f = classify(400, &with_type("ValidationException"), body.as_bytes());
            let want = if too_long {
                FailureKind::ContextLength
            } else {
                FailureKind::BadRequest
            };
            assert_eq!(f.kind, want, "{message}");
        }
    }

    #[test]
    fn an_expired_token_is_told_apart_and_a_throttle_keeps_its_hint() {
        let f = classify(
            403,
            &with_type("ExpiredTokenException"),
            br#"{"message":"The security token included in the request is expired"}"#,
        );
        assert!(expired(&f), "{f:?}");
        let f = classify(403, &with_type("AccessDeniedException"), b"{}");
        assert!(!expired(&f));
        let mut h = with_type("ThrottlingException");
        h.insert("retry-after", HeaderValue::from_static("3"));
        let f = classify(
            429,
            &h,
            br#"{"message":"Too many requests, please wait before trying again."}"#,
        );
        assert_eq!(
            f.kind,
            FailureKind::RateLimited {
                retry_after: Some(Duration::from_secs(3))
            }
        );
    }

    #[test]
    fn anthropics_own_error_is_unwrapped_from_a_validation_exception() {
        let f = classify(
            400,
            &with_type("ValidationException"),
            br#"{"message":"The model returned the following errors: prompt is too long: 215000 tokens > 200000 maximum"}"#,
        );
        assert_eq!(f.kind, FailureKind::ContextLength);
        assert_eq!(
            f.detail,
            "ValidationException: prompt is too long: 215000 tokens > 200000 maximum"
        );
        // The type in the body when the header is missing; the status alone
        // when neither says.
        let f = classify(
            400,
            &HeaderMap::new(),
            br#"{"__type":"com.amazon.coral#ServiceQuotaExceededException","message":"q"}"#,
        );
        assert_eq!(f.kind, FailureKind::QuotaExceeded);
        let f = classify(502, &HeaderMap::new(), b"<html>bad gateway</html>");
        assert_eq!(f.kind, FailureKind::Unavailable { retry_after: None });
    }

    #[test]
    fn stream_exceptions_are_named_in_lower_camel_case() {
        assert_eq!(
            exception("throttlingException", br#"{"message":"slow down"}"#).kind,
            FailureKind::RateLimited { retry_after: None }
        );
        assert_eq!(
            exception("modelStreamErrorException", b"{}").kind,
            FailureKind::Unavailable { retry_after: None }
        );
        assert_eq!(
            exception("validationException", br#"{"message":"bad"}"#).kind,
            FailureKind::BadRequest
        );
        assert_eq!(
            exception("internalServerException", b"not json").kind,
            FailureKind::Unavailable { retry_after: None }
        );
    }
}
