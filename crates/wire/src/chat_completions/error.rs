//! OpenAI-style error bodies classified into a [`FailureKind`]: an HTTP
//! error's body, an error object in a 200 answer, and an error event
//! mid-stream. The Responses protocol reads its errors with these too;
//! [`error_type`] names a status the other way, for the gateway's own errors.

use std::time::SystemTime;

use http::HeaderMap;
use serde::Deserialize;
use understudy_types::{Failure, FailureKind};

use crate::classify;

/// Error codes that mean the model's own output was unusable: Groq's
/// malformed tool call and its JSON mode's invalid JSON (see
/// groq/groq-typescript#28, Bklieger/infinite-bookshelf#42). Not the
/// client's fault, and another target may well succeed.
const OUTPUT_FAILURE_CODES: [&str; 2] = ["tool_use_failed", "json_validate_failed"];

/// Error codes that mean a content policy refused the request: in
/// `error.code`, or Azure's `error.innererror.code` (its older
/// `ResponsibleAIPolicyViolation`, its newer `ContentFiltered`),
/// never read from the message, whose wording changes.
const CONTENT_POLICY_CODES: [&str; 5] = [
    "content_filter",
    "content_policy_violation",
    "ResponsibleAIPolicyViolation",
    "ContentFiltered",
    "moderation_blocked",
];

/// The error `type` OpenAI gives a status (its clients branch on it).
pub fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        429 => "rate_limit_error",
        500.. => "server_error",
        _ => "invalid_request_error",
    }
}

/// Classifies an error status with its body.
pub fn classify_error(status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
    match serde_json::from_slice::<WireErrorEnvelope>(body) {
        Ok(WireErrorEnvelope { error: Some(error) }) => {
            classify_error_body(status, headers, &error)
        }
        _ => classify::unreadable(status, headers, body),
    }
}

pub(crate) fn classify_error_body(status: u16, headers: &HeaderMap, error: &WireError) -> Failure {
    let (message, code, inner, kind_field) = match error {
        WireError::Text(message) => (message.as_str(), None, None, None),
        WireError::Object {
            message,
            code,
            kind,
            innererror,
        } => {
            let inner = innererror
                .as_ref()
                .and_then(|i| i.get("code"))
                .and_then(|c| c.as_str());
            (
                message.as_deref().unwrap_or_default(),
                code.as_ref().and_then(|c| c.as_str()),
                inner,
                kind.as_deref(),
            )
        }
    };
    let is = |want: &str| code == Some(want) || inner == Some(want) || kind_field == Some(want);
    let code = code.or(inner);
    let kind = if CONTENT_POLICY_CODES.iter().any(|c| is(c)) {
        FailureKind::ContentFilter
    } else if OUTPUT_FAILURE_CODES.iter().any(|c| is(c)) {
        FailureKind::InvalidOutput
    } else if is("insufficient_quota") || is("billing_hard_limit_reached") {
        FailureKind::QuotaExceeded
    } else if is("context_length_exceeded")
        || contains_ignoring_case(message, "maximum context length")
        || contains_ignoring_case(message, "context_length_exceeded")
    {
        FailureKind::ContextLength
    } else if status == 413 && is("rate_limit_exceeded") {
        // Groq: this one request is larger than the tokens-per-minute budget,
        // so waiting cannot help; an unbounded wait makes the plan move on.
        FailureKind::RateLimited {
            retry_after: Some(std::time::Duration::MAX),
        }
    } else {
        match classify::hinted(classify::status(status), headers, SystemTime::now()) {
            FailureKind::RateLimited { retry_after: None } => FailureKind::RateLimited {
                retry_after: classify::hint_in_message(message),
            },
            other => other,
        }
    };
    let detail = match code {
        Some(code) => format!("{code}: {message}"),
        None => message.to_owned(),
    };
    Failure::new(kind, detail).with_status(status)
}

/// Whether `text` holds `lower` (ASCII lowercase) in any ASCII case, as
/// `text.to_ascii_lowercase().contains(lower)` does without the copy.
fn contains_ignoring_case(text: &str, lower: &str) -> bool {
    text.as_bytes()
        .windows(lower.len())
        .any(|w| w.eq_ignore_ascii_case(lower.as_bytes()))
}

/// A raw JSON value seen mid-stream that may be an error object.
pub(crate) fn mid_stream_error(value: &serde_json::Value) -> Option<Failure> {
    let error: WireError = serde_json::from_value(value.get("error")?.clone()).ok()?;
    Some(mid_stream_error_body(&error))
}

/// An error object inside a 200 stream: classified as the status its type
/// implies, so that a rate limit or an overload before any text still
/// leads where it would have as an HTTP error.
pub(crate) fn mid_stream_error_body(error: &WireError) -> Failure {
    let status = match error {
        WireError::Object { code, kind, .. } => {
            let code = code.as_ref().and_then(|c| c.as_str()).unwrap_or_default();
            let kind = kind.as_deref().unwrap_or_default();
            if code.contains("rate_limit") || kind.contains("rate_limit") {
                429
            } else if kind == "invalid_request_error" || CONTENT_POLICY_CODES.contains(&code) {
                400
            } else {
                500
            }
        }
        WireError::Text(_) => 500,
    };
    let mut f = classify_error_body(status, &HeaderMap::new(), error);
    f.status = None;
    f.detail = format!("error event mid-stream: {}", f.detail);
    f
}

#[derive(Deserialize)]
struct WireErrorEnvelope {
    error: Option<WireError>,
}

/// Groq can send the error as a bare string.
///
/// Read by looking at the value once (a string, or an object's fields):
/// serde's `untagged` would first copy the whole value into a buffer, then
/// fail to read an object as a string (building that error's message)
/// before reading it as an object.
pub(crate) enum WireError {
    Text(String),
    Object {
        message: Option<String>,
        code: Option<serde_json::Value>,
        kind: Option<String>,
        innererror: Option<serde_json::Value>,
    },
}

/// An error object's fields, as [`WireError::Object`] reads them.
#[derive(Deserialize)]
struct WireErrorObject {
    message: Option<String>,
    code: Option<serde_json::Value>,
    #[serde(rename = "type")]
    kind: Option<String>,
    innererror: Option<serde_json::Value>,
}

impl From<WireErrorObject> for WireError {
    fn from(o: WireErrorObject) -> Self {
        Self::Object {
            message: o.message,
            code: o.code,
            kind: o.kind,
            innererror: o.innererror,
        }
    }
}

impl<'de> Deserialize<'de> for WireError {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::value::MapAccessDeserializer;

        struct Either;

        impl<'de> serde::de::Visitor<'de> for Either {
            type Value = WireError;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an error message or an error object")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<WireError, E> {
                Ok(WireError::Text(text.to_owned()))
            }

            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<WireError, E> {
                Ok(WireError::Text(text))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<WireError, A::Error> {
                WireErrorObject::deserialize(MapAccessDeserializer::new(map)).map(Into::into)
            }
        }

        deserializer.deserialize_any(Either)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each shape of error body, and the kind, detail and status it is read
    /// as.
    #[test]
    fn error_bodies() {
        let overloaded = FailureKind::Unavailable { retry_after: None };
        for (status, body, kind, detail) in [
            (
                503,
                r#"{"error":{"message":"over capacity","type":"internal_server_error"}}"#,
                overloaded.clone(),
                "over capacity",
            ),
            (
                400,
                r#"{"error":{"message":"This model's Maximum Context Length is 8k","type":"invalid_request_error","param":null,"code":null}}"#,
                FailureKind::ContextLength,
                "This model's Maximum Context Length is 8k",
            ),
            (
                429,
                r#"{"error":{"message":"You exceeded your quota","code":"insufficient_quota"}}"#,
                FailureKind::QuotaExceeded,
                "insufficient_quota: You exceeded your quota",
            ),
            (
                400,
                r#"{"error":{"message":"blocked","code":400,"innererror":{"code":"ResponsibleAIPolicyViolation"}}}"#,
                FailureKind::ContentFilter,
                "ResponsibleAIPolicyViolation: blocked",
            ),
            (
                400,
                r#"{"error":{"message":"bad tool call","type":"tool_use_failed"}}"#,
                FailureKind::InvalidOutput,
                "bad tool call",
            ),
            // Groq's bare string.
            (
                503,
                r#"{"error":"model overloaded"}"#,
                overloaded.clone(),
                "model overloaded",
            ),
            (
                503,
                r#"{"error":"escaped \"quote\""}"#,
                overloaded.clone(),
                "escaped \"quote\"",
            ),
            // A list is not an error object (even one listing its fields).
            (
                400,
                r#"{"error":["too long","context_length_exceeded",null,null]}"#,
                FailureKind::BadRequest,
                r#"{"error":["too long","context_length_exceeded",null,null]}"#,
            ),
            // Not the error shape: the start of the body is the detail.
            (
                503,
                r#"{"error":42}"#,
                overloaded.clone(),
                r#"{"error":42}"#,
            ),
            (
                503,
                r#"{"error":{"message":7}}"#,
                overloaded.clone(),
                r#"{"error":{"message":7}}"#,
            ),
            (
                503,
                r#"{"error":{"message":"a","message":"b"}}"#,
                overloaded.clone(),
                r#"{"error":{"message":"a","message":"b"}}"#,
            ),
            (
                503,
                r#"{"error":null}"#,
                overloaded.clone(),
                r#"{"error":null}"#,
            ),
            (
                502,
                "<html>bad gateway</html>",
                overloaded,
                "<html>bad gateway</html>",
            ),
        ] {
            let f = classify_error(status, &HeaderMap::new(), body.as_bytes());
            assert_eq!((&f.kind, f.detail.as_str()), (&kind, detail), "{body}");
            assert_eq!(f.status, Some(status), "{body}");
        }
    }

    /// An error object inside a stream's JSON reads the same way.
    #[test]
    fn mid_stream_errors() {
        let value: serde_json::Value =
            serde_json::from_str(r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#)
                .unwrap();
        let f = mid_stream_error(&value).unwrap();
        assert!(matches!(f.kind, FailureKind::RateLimited { .. }), "{f:?}");
        assert_eq!(f.detail, "error event mid-stream: slow down");
        let text: serde_json::Value = serde_json::from_str(r#"{"error":"gone"}"#).unwrap();
        assert_eq!(
            mid_stream_error(&text).unwrap().detail,
            "error event mid-stream: gone"
        );
        let number: serde_json::Value = serde_json::from_str(r#"{"error":3}"#).unwrap();
        assert!(mid_stream_error(&number).is_none());
    }
}
