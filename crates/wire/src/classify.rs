//! What HTTP statuses and rate-limit hints mean, shared by every protocol
//! (transport errors are the providers' `classify::transport`). Protocol-specific signals (refusal shapes, error codes in
//! bodies) are read by each adapter and fall back on these rules.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};
use understudy_types::{Failure, FailureKind};

/// The class of an HTTP error status when the body says nothing more
/// specific.
pub fn status(status: u16) -> FailureKind {
    match status {
        401 | 403 => FailureKind::Auth,
        402 => FailureKind::QuotaExceeded,
        408 | 504 => FailureKind::Timeout,
        429 => FailureKind::RateLimited { retry_after: None },
        // Groq's flex-tier "capacity exceeded" is an outage despite the 4xx.
        498 => FailureKind::Unavailable { retry_after: None },
        // The upstream saw the client go away: not a statement about the request.
        499 => FailureKind::Connection,
        400..=499 => FailureKind::BadRequest,
        _ => FailureKind::Unavailable { retry_after: None },
    }
}

/// The wait a rate-limited response asks for: `retry-after-ms` (or Azure's
/// `x-ms-retry-after-ms`), then `retry-after` in seconds or as an HTTP
/// date.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    // Names made once, not parsed from text at each lookup.
    const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");
    const MS_RETRY_AFTER_MS: HeaderName = HeaderName::from_static("x-ms-retry-after-ms");
    let text = |name: &HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let ms = text(&RETRY_AFTER_MS).or_else(|| text(&MS_RETRY_AFTER_MS));
    if let Some(ms) = ms.and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let value = text(&http::header::RETRY_AFTER)?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && (0.0..1e9).contains(&secs))
            .then(|| Duration::from_secs_f64(secs));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `kind` with the wait the response's headers ask for, where the kind
/// can carry one (a rate limit, an overload) and has none yet.
pub fn hinted(mut kind: FailureKind, headers: &HeaderMap, now: SystemTime) -> FailureKind {
    if let FailureKind::RateLimited { retry_after } | FailureKind::Unavailable { retry_after } =
        &mut kind
    {
        if retry_after.is_none() {
            *retry_after = self::retry_after(headers, now);
        }
    }
    kind
}

/// An error status whose body is not the provider's error shape (an HTML
/// page from a proxy, an empty body): classified by status alone, with the
/// start of the body as the detail.
pub fn unreadable(status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
    let kind = hinted(self::status(status), headers, SystemTime::now());
    let snippet = String::from_utf8_lossy(&body[..body.len().min(200)])
        .trim()
        .to_owned();
    let detail = if snippet.is_empty() {
        format!("HTTP {status}")
    } else {
        snippet
    };
    Failure::new(kind, detail).with_status(status)
}

/// A whole answer's body as `T`: an error status is `classify`'s failure,
/// and a body that does not parse is a malformed response ("the body is not
/// `what`"). Every protocol's answer is read from here.
pub fn answer_body<T: serde::de::DeserializeOwned>(
    (status, headers, body): (u16, &HeaderMap, &[u8]),
    what: &str,
    classify: impl FnOnce(u16, &HeaderMap, &[u8]) -> Failure,
) -> Result<T, Failure> {
    if !(200..300).contains(&status) {
        return Err(classify(status, headers, body));
    }
    serde_json::from_slice(body).map_err(|e| {
        Failure::new(
            FailureKind::MalformedResponse,
            format!("the body is not {what}: {e}"),
        )
        .with_status(status)
    })
}

/// The wait some rate-limit messages name: OpenAI's "Please try again in
/// 3.89s", Azure's "Please retry after 45 seconds".
pub fn hint_in_message(message: &str) -> Option<Duration> {
    if let Some(at) = message.find("try again in ") {
        let tail = &message[at + "try again in ".len()..];
        let end = tail
            .find(|c: char| c.is_whitespace() || c == ',' || c == ')')
            .unwrap_or(tail.len());
        return crate::go_duration::parse(tail[..end].trim_end_matches('.'));
    }
    // ASCII lowercasing keeps every byte where it was.
    let lower = message.to_ascii_lowercase();
    let at = lower.find("retry after ")? + "retry after ".len();
    let tail = &lower[at..];
    let digits = tail
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(tail.len());
    let secs: u64 = tail[..digits].parse().ok()?;
    tail[digits..]
        .trim_start()
        .starts_with("second")
        .then(|| Duration::from_secs(secs.min(1_000_000_000)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        for (pairs, want) in [
            (vec![("retry-after", "2")], Some(Duration::from_secs(2))),
            (
                vec![("retry-after", "0.5")],
                Some(Duration::from_millis(500)),
            ),
            (
                vec![("retry-after-ms", "1500"), ("retry-after", "9")],
                Some(Duration::from_millis(1500)),
            ),
            (
                vec![("x-ms-retry-after-ms", "250"), ("retry-after", "9")],
                Some(Duration::from_millis(250)),
            ),
            (
                vec![("retry-after", later.as_str())],
                Some(Duration::from_secs(7)),
            ),
            (
                vec![("retry-after", "Thu, 01 Jan 1970 00:00:00 GMT")],
                Some(Duration::ZERO),
            ),
            (vec![("retry-after", "soon")], None),
            (vec![("retry-after", "-3")], None),
            (vec![], None),
        ] {
            assert_eq!(retry_after(&headers(&pairs), now), want, "{pairs:?}");
        }
    }

    #[test]
    fn azure_retry_hints_in_messages() {
        let azure = "Requests to the ChatCompletions_Create Operation under Azure OpenAI API \
                     version 2024-10-21 have exceeded token rate limit of your current OpenAI \
                     S0 pricing tier. Please retry after 45 seconds. Please go here: …";
        assert_eq!(hint_in_message(azure), Some(Duration::from_secs(45)));
        assert_eq!(
            hint_in_message("Retry after 86400 seconds (daily quota)"),
            Some(Duration::from_secs(86400))
        );
        assert_eq!(
            hint_in_message("retry after 1 second"),
            Some(Duration::from_secs(1))
        );
        for none in [
            "retry after a while",
            "retry after 45",
            "retry after  seconds",
            "é retry after",
        ] {
            assert_eq!(hint_in_message(none), None, "{none}");
        }
    }

    #[test]
    fn hints_in_messages() {
        assert_eq!(
            hint_in_message("Rate limit reached ... Please try again in 3.89s. Visit")
                .map(|d| d.as_millis()),
            Some(3890)
        );
        assert_eq!(
            hint_in_message("Please try again in 399ms."),
            Some(Duration::from_millis(399))
        );
        assert_eq!(hint_in_message("no hint"), None);
    }

    #[test]
    fn statuses() {
        assert_eq!(status(401), FailureKind::Auth);
        assert_eq!(status(498), FailureKind::Unavailable { retry_after: None });
        assert_eq!(status(529), FailureKind::Unavailable { retry_after: None });
        assert_eq!(status(504), FailureKind::Timeout);
        assert_eq!(status(404), FailureKind::BadRequest);
    }
}
