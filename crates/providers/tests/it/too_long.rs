//! "Too long" in every API's own shape classifies as the context length
//! (the walk then looks for a larger window), and the limits a larger
//! window does not lift (a body or a string over its size, an output
//! budget too large) do not. The bodies are the providers' own, as
//! recorded in the wild; Bedrock's and Azure's are in their adapters'
//! unit tests.

use reqwest::header::HeaderMap;
use understudy_providers::{decode_response, decode_stream};
use understudy_types::Protocol;

/// `(API, status, body, the failure's code)`.
const CASES: &[(Protocol, u16, &str, &str)] = &[
    (
        Protocol::ChatCompletions,
        400,
        r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 192041 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        "context_length",
    ),
    (
        Protocol::ChatCompletions,
        400,
        r#"{"error":{"message":"This model's maximum context length is 4097 tokens. However, you requested 4201 tokens (3177 in the messages, 1024 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":null}}"#,
        "context_length",
    ),
    // Groq.
    (
        Protocol::ChatCompletions,
        400,
        r#"{"error":{"message":"Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        "context_length",
    ),
    (
        Protocol::ChatCompletions,
        400,
        r#"{"error":{"message":"Invalid 'messages[17].content': string too long. Expected a string with maximum length 1048576, but got a string with length 1300000 instead.","type":"invalid_request_error","param":"messages[17].content","code":"string_above_max_length"}}"#,
        "bad_request",
    ),
    (
        Protocol::ChatCompletions,
        400,
        r#"{"error":{"message":"max_tokens is too large: 32000. This model supports at most 16384 completion tokens, whereas you provided 32000.","type":"invalid_request_error","param":"max_tokens","code":null}}"#,
        "bad_request",
    ),
    (
        Protocol::ChatCompletions,
        400,
        r#"{"error":{"message":"`max_completion_tokens` must be less than or equal to `16384`, the maximum value for `max_completion_tokens` is less than the `context_window` for this model","type":"invalid_request_error","param":"max_completion_tokens"}}"#,
        "bad_request",
    ),
    (
        Protocol::Responses,
        400,
        r#"{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#,
        "context_length",
    ),
    (
        Protocol::Messages,
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 205351 tokens > 200000 maximum"}}"#,
        "context_length",
    ),
    (
        Protocol::Messages,
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 189136 + 20000 > 204648, decrease input length or `max_tokens` and try again"}}"#,
        "context_length",
    ),
    (
        Protocol::Messages,
        413,
        r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#,
        "bad_request",
    ),
    (
        Protocol::Messages,
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 128000 > 64000, which is the maximum allowed number of output tokens for claude-haiku-4-5-20251001"}}"#,
        "bad_request",
    ),
    // Gemini and Vertex.
    (
        Protocol::GenerateContent,
        400,
        r#"{"error":{"code":400,"message":"The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#,
        "context_length",
    ),
    (
        Protocol::GenerateContent,
        400,
        r#"{"error":{"code":400,"message":"The input token count (140000) exceeds the maximum number of tokens allowed (131072).","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"badRequest"}]}}"#,
        "context_length",
    ),
];

#[test]
fn each_apis_too_long_is_the_context_length() {
    for (kind, status, body, want) in CASES {
        let got = decode_response(*kind, "m", *status, HeaderMap::new(), body.as_bytes());
        match got {
            Err(f) => assert_eq!(f.code().as_str(), *want, "{kind:?} {body}: {f}"),
            Ok(c) => panic!("{kind:?} {body}: answered {c:?}"),
        }
    }
}

/// A Responses stream that opened with a 200 and then said "too long",
/// in each shape a server sends it: the documented `error` event, the
/// same with its fields nested in `error`, and `response.failed`.
#[test]
fn a_responses_stream_too_long_after_its_200_is_the_context_length() {
    let created = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[]}}\n\n";
    let message = "Your input exceeds the context window of this model. Please adjust your input and try again.";
    let flat = format!(
        "event: error\ndata: {{\"type\":\"error\",\"sequence_number\":1,\"code\":\"context_length_exceeded\",\"message\":\"{message}\",\"param\":\"input\"}}\n\n"
    );
    let nested = format!(
        "event: error\ndata: {{\"type\":\"error\",\"sequence_number\":2,\"error\":{{\"type\":\"invalid_request_error\",\"code\":\"context_length_exceeded\",\"message\":\"{message}\",\"param\":\"input\"}}}}\n\n"
    );
    let failed = format!(
        "event: response.failed\ndata: {{\"type\":\"response.failed\",\"sequence_number\":1,\"response\":{{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"failed\",\"output\":[],\"error\":{{\"code\":\"context_length_exceeded\",\"message\":\"{message}\"}}}}}}\n\n"
    );
    for end in [flat, nested, failed] {
        let bytes = format!("{created}{end}");
        let events = decode_stream(Protocol::Responses, "m", &[bytes.as_bytes()]);
        let first_failure = events.iter().find_map(|e| e.as_ref().err());
        match first_failure {
            Some(f) => assert_eq!(f.code().as_str(), "context_length", "{end}: {f}"),
            None => panic!("{end}: no failure in {events:?}"),
        }
    }
}
