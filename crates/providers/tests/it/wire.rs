//! Every documented signal of every protocol, from
//! recorded payloads in `tests/data/<provider>/`: non-streamed bodies and
//! streamed bytes, each to its failure code or its text.

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use understudy_providers::{decode_response, decode_stream};
use understudy_types::{FailureKind, FinishReason, Protocol, StreamEvent, Usage};

fn fixture(provider: &str, name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/data/{provider}/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The fixtures' folder of `kind`: its name (`openai`, `responses`,
/// `gemini`, `anthropic`, `converse`).
fn dir(kind: Protocol) -> &'static str {
    kind.as_str()
}

/// A non-streamed body with `status` and `headers` classifies as `want`:
/// `Ok(text)` or `Err(failure code)`.
fn got(
    kind: Protocol,
    file: &str,
    status: u16,
    headers: &[(&str, &str)],
    want: Result<&str, &str>,
) -> Result<understudy_types::Completion, understudy_types::Failure> {
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.insert(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    let got = decode_response(kind, "asked-model", status, h, &fixture(dir(kind), file));
    match (&got, want) {
        (Ok(c), Ok(text)) => assert_eq!(c.text, text, "{file}"),
        (Err(f), Err(code)) => assert_eq!(f.code().as_str(), code, "{file}: {f}"),
        _ => panic!("{file}: got {got:?}, wanted {want:?}"),
    }
    got
}

fn check(
    kind: Protocol,
    file: &str,
    status: u16,
    headers: &[(&str, &str)],
    want: Result<&str, &str>,
) {
    let _ = got(kind, file, status, headers, want);
}

fn retry_after(
    result: Result<understudy_types::Completion, understudy_types::Failure>,
) -> Option<Duration> {
    match result {
        Err(f) => match f.kind {
            FailureKind::RateLimited { retry_after } => retry_after,
            other => panic!("not a rate limit: {other:?}"),
        },
        Ok(c) => panic!("not a failure: {c:?}"),
    }
}

#[test]
fn gemini_answers_and_usage() {
    let c = got(
        Protocol::GenerateContent,
        "text.json",
        200,
        &[],
        Ok("Why don't skeletons fight? They don't have the guts."),
    )
    .unwrap();
    assert_eq!(c.model, "gemini-2.5-flash");
    assert_eq!(
        c.usage,
        Some(Usage {
            input_tokens: 9,
            output_tokens: 28 + 244,
            reasoning_output_tokens: 244,
            ..Usage::default()
        }),
        "thoughts are output tokens"
    );
    assert_eq!(c.response_id.as_deref(), Some("abc"));
    assert_eq!(c.finish_reason, FinishReason::Stop);
}

#[test]
fn gemini_refusals() {
    for file in [
        "prompt_blocked.json",
        "finish_safety.json",
        "finish_recitation.json",
        "no_parts_stop.json",
        "finish_other_no_content.json",
        "empty_text.json",
        "no_candidates.json",
    ] {
        let f = got(
            Protocol::GenerateContent,
            file,
            200,
            &[],
            Err("content_filter"),
        )
        .unwrap_err();
        assert!(!f.detail.is_empty());
    }
    let blocked = got(
        Protocol::GenerateContent,
        "prompt_blocked.json",
        200,
        &[],
        Err("content_filter"),
    )
    .unwrap_err();
    assert!(
        blocked.detail.contains("blockReason PROHIBITED_CONTENT"),
        "{blocked}"
    );
    let empty = got(
        Protocol::GenerateContent,
        "no_parts_stop.json",
        200,
        &[],
        Err("content_filter"),
    )
    .unwrap_err();
    assert!(
        empty.detail.contains("empty response") && empty.detail.contains("STOP"),
        "{empty}"
    );
    let safety = got(
        Protocol::GenerateContent,
        "finish_safety.json",
        200,
        &[],
        Err("content_filter"),
    )
    .unwrap_err();
    assert!(safety.detail.contains("SAFETY"), "{safety}");
}

#[test]
fn gemini_errors() {
    check(
        Protocol::GenerateContent,
        "invalid_key_400.json",
        400,
        &[],
        Err("auth"),
    );
    check(
        Protocol::GenerateContent,
        "array_error_400.json",
        400,
        &[],
        Err("auth"),
    );
    check(
        Protocol::GenerateContent,
        "permission_403.json",
        403,
        &[],
        Err("auth"),
    );
    check(
        Protocol::GenerateContent,
        "bad_request_400.json",
        400,
        &[],
        Err("bad_request"),
    );
    check(
        Protocol::GenerateContent,
        "overloaded_503.json",
        503,
        &[],
        Err("unavailable"),
    );
    check(
        Protocol::GenerateContent,
        "internal_500.json",
        500,
        &[],
        Err("unavailable"),
    );
    check(
        Protocol::GenerateContent,
        "deadline_504.json",
        504,
        &[],
        Err("timeout"),
    );
    check(
        Protocol::GenerateContent,
        "daily_quota_429.json",
        429,
        &[],
        Err("quota_exceeded"),
    );
    let r = got(
        Protocol::GenerateContent,
        "rate_limit_429.json",
        429,
        &[],
        Err("rate_limited"),
    );
    assert_eq!(
        retry_after(r),
        Some(Duration::from_secs(26)),
        "RetryInfo.retryDelay"
    );
    let r = got(
        Protocol::GenerateContent,
        "overloaded_503.json",
        429,
        &[("retry-after", "3")],
        Err("rate_limited"),
    );
    assert_eq!(retry_after(r), Some(Duration::from_secs(3)));
}

#[test]
fn anthropic_answers_and_usage() {
    let c = got(
        Protocol::Messages,
        "text.json",
        200,
        &[],
        Ok("Here is a gentle joke."),
    )
    .unwrap();
    assert_eq!(c.model, "claude-haiku-4-5-20251001");
    assert_eq!(
        c.usage,
        Some(Usage {
            input_tokens: 12 + 3 + 5,
            output_tokens: 7,
            cache_read_input_tokens: 5,
            cache_write_input_tokens: 3,
            ..Usage::default()
        }),
        "cache tokens are input"
    );
    assert_eq!(c.response_id.as_deref(), Some("msg_01"));
}

#[test]
fn anthropic_refusals() {
    let f = got(
        Protocol::Messages,
        "refusal.json",
        200,
        &[],
        Err("content_filter"),
    )
    .unwrap_err();
    assert!(f.detail.contains("cyber"), "{f}");
    check(
        Protocol::Messages,
        "refusal_no_details.json",
        200,
        &[],
        Err("content_filter"),
    );
    check(
        Protocol::Messages,
        "content_filtering_400.json",
        400,
        &[],
        Err("content_filter"),
    );
}

#[test]
fn anthropic_errors() {
    check(
        Protocol::Messages,
        "overloaded_529.json",
        529,
        &[],
        Err("unavailable"),
    );
    check(
        Protocol::Messages,
        "api_error_500.json",
        500,
        &[],
        Err("unavailable"),
    );
    check(Protocol::Messages, "auth_401.json", 401, &[], Err("auth"));
    check(
        Protocol::Messages,
        "permission_403.json",
        403,
        &[],
        Err("auth"),
    );
    check(
        Protocol::Messages,
        "prompt_too_long_400.json",
        400,
        &[],
        Err("context_length"),
    );
    check(
        Protocol::Messages,
        "bad_request_400.json",
        400,
        &[],
        Err("bad_request"),
    );
    check(
        Protocol::Messages,
        "too_large_413.json",
        413,
        &[],
        Err("bad_request"),
    );
    check(
        Protocol::Messages,
        "billing_402.json",
        402,
        &[],
        Err("quota_exceeded"),
    );
    check(
        Protocol::Messages,
        "spend_limit_429.json",
        429,
        &[("retry-after", "1")],
        Err("quota_exceeded"),
    );
    let r = got(
        Protocol::Messages,
        "rate_limit_429.json",
        429,
        &[("retry-after", "7")],
        Err("rate_limited"),
    );
    assert_eq!(retry_after(r), Some(Duration::from_secs(7)));
    let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
    let r = got(
        Protocol::Messages,
        "rate_limit_429.json",
        429,
        &[("retry-after", &later)],
        Err("rate_limited"),
    );
    let wait = retry_after(r).unwrap();
    assert!(
        wait > Duration::from_secs(115) && wait <= Duration::from_secs(120),
        "{wait:?}"
    );
    let r = got(
        Protocol::Messages,
        "rate_limit_429.json",
        429,
        &[],
        Err("rate_limited"),
    );
    assert_eq!(retry_after(r), None);
}

#[test]
fn openai_retry_after_forms() {
    let r = got(
        Protocol::ChatCompletions,
        "rate_limit_429.json",
        429,
        &[("retry-after-ms", "250")],
        Err("rate_limited"),
    );
    assert_eq!(retry_after(r), Some(Duration::from_millis(250)));
    let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(60));
    let r = got(
        Protocol::ChatCompletions,
        "rate_limit_429.json",
        429,
        &[("retry-after", &later)],
        Err("rate_limited"),
    );
    assert!(retry_after(r).unwrap() > Duration::from_secs(55));
}

// === streams ===

/// What a stream yields: the text, then how it ended (`ok` or a code).
fn stream(kind: Protocol, file: &str) -> (String, String, Option<StreamEvent>) {
    let bytes = fixture(dir(kind), file);
    // Feed it in awkward pieces to exercise framing across chunk bounds.
    let pieces: Vec<&[u8]> = bytes.chunks(7).collect();
    let events = decode_stream(kind, "asked-model", &pieces);
    let whole = decode_stream(kind, "asked-model", &[&bytes]);
    assert_eq!(
        format!("{events:?}"),
        format!("{whole:?}"),
        "{file}: chunking changed the result"
    );
    let mut text = String::new();
    let mut end = None;
    let mut last = None;
    for e in events {
        match e {
            Ok(StreamEvent::Delta(t)) => text.push_str(&t),
            Ok(finish) => {
                end = Some("ok".to_owned());
                last = Some(finish);
            }
            Err(f) => end = Some(f.code().as_str().to_owned()),
        }
    }
    (
        text,
        end.unwrap_or_else(|| panic!("{file}: no terminal event")),
        last,
    )
}

fn check_stream(
    kind: Protocol,
    file: &str,
    want_text: &str,
    want_end: &str,
) -> Option<StreamEvent> {
    let (text, end, last) = stream(kind, file);
    assert_eq!(
        (text.as_str(), end.as_str()),
        (want_text, want_end),
        "{file}"
    );
    last
}

#[test]
fn openai_streams() {
    let finish = check_stream(
        Protocol::ChatCompletions,
        "stream_text.sse",
        "Hello there",
        "ok",
    );
    assert_eq!(
        finish,
        Some(StreamEvent::Finish {
            finish_reason: FinishReason::Stop,
            usage: Some(Usage {
                input_tokens: 9,
                output_tokens: 3,
                ..Usage::default()
            }),
            model: Some("gpt-4o-mini-2024-07-18".into())
        })
    );
    check_stream(
        Protocol::ChatCompletions,
        "stream_no_done.sse",
        "Hello",
        "ok",
    );
    check_stream(
        Protocol::ChatCompletions,
        "stream_truncated.sse",
        "Hello",
        "stream_interrupted",
    );
    check_stream(
        Protocol::ChatCompletions,
        "stream_refusal.sse",
        "",
        "content_filter",
    );
    check_stream(
        Protocol::ChatCompletions,
        "stream_content_filter.sse",
        "Some",
        "content_filter",
    );
    check_stream(
        Protocol::ChatCompletions,
        "stream_error_event.sse",
        "Hel",
        "unavailable",
    );
    check_stream(
        Protocol::ChatCompletions,
        "stream_error_rate_limit.sse",
        "",
        "rate_limited",
    );
    check_stream(
        Protocol::ChatCompletions,
        "stream_malformed.sse",
        "",
        "malformed_response",
    );
    let finish = check_stream(
        Protocol::ChatCompletions,
        "groq_stream_text.sse",
        "Fast",
        "ok",
    );
    assert!(matches!(
        finish,
        Some(StreamEvent::Finish {
            usage: Some(Usage {
                input_tokens: 18,
                output_tokens: 1,
                ..
            }),
            ..
        })
    ));
    check_stream(
        Protocol::ChatCompletions,
        "groq_stream_x_groq_error.sse",
        "Fa",
        "unavailable",
    );
    check_stream(
        Protocol::ChatCompletions,
        "groq_stream_string_error.sse",
        "",
        "unavailable",
    );
}

#[test]
fn gemini_streams() {
    let finish = check_stream(
        Protocol::GenerateContent,
        "stream_text.sse",
        "Why did the chicken cross?",
        "ok",
    );
    assert!(matches!(
        finish,
        Some(StreamEvent::Finish {
            usage: Some(Usage {
                input_tokens: 9,
                output_tokens: 5,
                ..
            }),
            ..
        })
    ));
    check_stream(
        Protocol::GenerateContent,
        "stream_truncated.sse",
        "Why did the chicken cross?",
        "stream_interrupted",
    );
    check_stream(
        Protocol::GenerateContent,
        "stream_raw_error_tail.sse",
        "Why did",
        "unavailable",
    );
    check_stream(
        Protocol::GenerateContent,
        "stream_raw_rate_limit_tail.sse",
        "Why did",
        "rate_limited",
    );
    check_stream(
        Protocol::GenerateContent,
        "stream_prompt_blocked.sse",
        "",
        "content_filter",
    );
    check_stream(
        Protocol::GenerateContent,
        "stream_safety_after_text.sse",
        "Why did",
        "content_filter",
    );
    check_stream(
        Protocol::GenerateContent,
        "stream_data_error.sse",
        "Why did",
        "unavailable",
    );
    check_stream(
        Protocol::GenerateContent,
        "stream_empty_stop.sse",
        "",
        "content_filter",
    );
}

#[test]
fn anthropic_streams() {
    let finish = check_stream(Protocol::Messages, "stream_text.sse", "Hello!", "ok");
    assert_eq!(
        finish,
        Some(StreamEvent::Finish {
            finish_reason: FinishReason::Stop,
            usage: Some(Usage {
                input_tokens: 25,
                output_tokens: 15,
                ..Usage::default()
            }),
            model: Some("claude-haiku-4-5-20251001".into())
        })
    );
    check_stream(
        Protocol::Messages,
        "stream_truncated.sse",
        "Hello",
        "stream_interrupted",
    );
    check_stream(
        Protocol::Messages,
        "stream_refusal_no_block.sse",
        "",
        "content_filter",
    );
    check_stream(
        Protocol::Messages,
        "stream_refusal_empty_block.sse",
        "",
        "content_filter",
    );
    check_stream(
        Protocol::Messages,
        "stream_refusal_after_text.sse",
        "Hello",
        "content_filter",
    );
    check_stream(
        Protocol::Messages,
        "stream_error_overloaded.sse",
        "Hello",
        "unavailable",
    );
    check_stream(
        Protocol::Messages,
        "stream_error_first.sse",
        "",
        "unavailable",
    );
    check_stream(
        Protocol::Messages,
        "stream_content_filter_error.sse",
        "Hello",
        "content_filter",
    );
}
