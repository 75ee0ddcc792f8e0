//! The Azure adapter's own checks: its URLs (v1 and classic), its key
//! header, its error table, and its answers and streams as OpenAI's
//! parsers read them (the preamble, the filter verdicts, the missing
//! `[DONE]`).

#![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

use std::time::Duration;

use reqwest::header::HeaderValue;
use understudy_settings::Settings;
use understudy_types::{ChatRequest, FailureKind, StreamEvent};

use super::*;
use crate::http::Upstream as _;

const KEY: &str = "azure-key-0123456789abcdef";

fn azure(extra: &str) -> (ProviderSettings, Azure) {
    let toml = format!(
        "[providers.az]\nkind = \"azure\"\nbase_url = \"https://res.openai.azure.com/\"\nmodel = \"my-deployment\"\napi_key = \"{KEY}\"\n{extra}"
    );
    let s = Settings::from_toml_str(&toml, |_| None).unwrap();
    let p = s.providers["az"].clone();
    let understudy_settings::Platform::Azure(a) = p.platform.clone() else {
        panic!("not azure")
    };
    (p, a)
}

/// The Chat Completions request the provider sends for `model`.
fn chat_request(extra: &str, model: &str) -> reqwest::Request {
    crate::install_tls_provider();
    let (settings, a) = azure(extra);
    let endpoint = chat_endpoint(
        resource(&settings.base_url).unwrap(),
        a.api_version.as_deref(),
    )
    .unwrap();
    let p = OpenAiProtocol::with(
        &settings,
        endpoint,
        headers(&settings, &a).unwrap(),
        Dialect::Azure("az".into()),
    );
    p.request(
        &reqwest::Client::new(),
        model,
        &ChatRequest::user("hi"),
        true,
    )
    .unwrap()
    .build()
    .unwrap()
}

fn body(request: &reqwest::Request) -> serde_json::Value {
    serde_json::from_slice(request.body().unwrap().as_bytes().unwrap()).unwrap()
}

#[test]
fn the_v1_api_puts_the_deployment_in_the_body() {
    let r = chat_request("", "my-deployment");
    assert_eq!(
        r.url().as_str(),
        "https://res.openai.azure.com/openai/v1/chat/completions"
    );
    assert_eq!(body(&r)["model"], "my-deployment");
    assert_eq!(body(&r)["stream"], true);
    let h = r.headers();
    assert_eq!(h["api-key"], KEY);
    assert!(h["api-key"].is_sensitive());
    assert!(!h.contains_key("authorization"));
}

#[test]
fn classic_deployments_go_in_the_path_with_the_api_version() {
    let r = chat_request("api_version = \"2024-10-21\"\n", "my deployment/2");
    assert_eq!(
        r.url().as_str(),
        "https://res.openai.azure.com/openai/deployments/my%20deployment%2F2/chat/completions?api-version=2024-10-21"
    );
    let res = resource("https://res.openai.azure.com/openai/v1/").unwrap();
    assert_eq!(
        responses_url(&res, Some("2025-04-01-preview"))
            .unwrap()
            .as_str(),
        "https://res.openai.azure.com/openai/responses?api-version=2025-04-01-preview"
    );
    assert_eq!(
        responses_url(&res, None).unwrap().as_str(),
        "https://res.openai.azure.com/openai/v1/responses"
    );
    assert!(resource("https://res.openai.azure.com/?x=1").is_err());
}

#[test]
fn an_entra_token_is_a_bearer() {
    let r = chat_request("auth = \"entra\"\n", "my-deployment");
    let h = r.headers();
    assert_eq!(h["authorization"], format!("Bearer {KEY}").as_str());
    assert!(h["authorization"].is_sensitive());
    assert!(!h.contains_key("api-key"));
}

#[test]
fn the_key_is_in_no_debug_output_and_its_absence_is_an_error() {
    let (settings, a) = azure("");
    let built = adapter(&settings, &a).unwrap();
    assert!(!format!("{built:?}").contains(KEY));
    let r = chat_request("", "my-deployment");
    assert!(!format!("{r:?}").contains(KEY));
    let (mut settings, a) = azure("");
    settings.api_key = None;
    let err = adapter(&settings, &a).unwrap_err();
    assert!(err.contains("AZURE_OPENAI_API_KEY"), "{err}");
}

fn classify(status: u16, headers: &[(&'static str, &str)], body: &str) -> Failure {
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    error::classify_error("az", status, &h, body.as_bytes())
}

use understudy_types::Failure;

#[test]
fn a_deployment_too_small_for_the_prompt_is_the_context_length() {
    let too_long = r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 139514 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded","status":400}}"#;
    assert_eq!(
        classify(400, &[], too_long).kind,
        understudy_types::FailureKind::ContextLength
    );
    let output_too_large = r#"{"error":{"message":"max_tokens is too large: 32000. This model supports at most 16384 completion tokens, whereas you provided 32000.","type":"invalid_request_error","param":"max_tokens","code":null}}"#;
    assert_eq!(
        classify(400, &[], output_too_large).kind,
        understudy_types::FailureKind::BadRequest
    );
}

#[test]
fn content_filters_old_and_new_are_refusals() {
    let old = r#"{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400,"innererror":{"code":"ResponsibleAIPolicyViolation","content_filter_result":{"hate":{"filtered":false,"severity":"safe"},"jailbreak":{"filtered":true,"detected":true}}}}}"#;
    let new = r#"{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI’s content management policy.","type":"invalid_request_error","param":"prompt","code":"invalid_prompt","content_filters":[{"blocked":true,"source_type":"prompt"}],"innererror":{"code":"ContentFiltered"}}}"#;
    let inner_only = r#"{"error":{"message":"blocked","code":null,"innererror":{"code":"ResponsibleAIPolicyViolation"}}}"#;
    for body in [old, new, inner_only] {
        let f = classify(400, &[], body);
        assert_eq!(f.kind, FailureKind::ContentFilter, "{body}");
        assert!(f.kind.is_refusal());
    }
}

#[test]
fn a_missing_deployment_is_a_config_error_not_an_outage() {
    let f = classify(
        404,
        &[],
        r#"{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."}}"#,
    );
    assert_eq!(f.kind, FailureKind::BadRequest);
    assert!(!f.kind.is_outage());
    assert!(f.detail.contains("deployment's name"), "{}", f.detail);
    assert_eq!(f.status, Some(404));
}

#[test]
fn rate_limit_hints_in_azures_order() {
    let body = r#"{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 45 seconds."}}"#;
    let wait =
        |headers: &[(&'static str, &str)], body: &str| match classify(429, headers, body).kind {
            FailureKind::RateLimited { retry_after } => retry_after,
            other => panic!("{other:?}"),
        };
    let all = [
        ("retry-after-ms", "1500"),
        ("x-ms-retry-after-ms", "2500"),
        ("retry-after", "3"),
        ("x-ratelimit-reset-tokens", "55"),
    ];
    assert_eq!(wait(&all, body), Some(Duration::from_millis(1500)));
    assert_eq!(wait(&all[1..], body), Some(Duration::from_millis(2500)));
    assert_eq!(wait(&all[2..], body), Some(Duration::from_secs(3)));
    assert_eq!(wait(&all[3..], body), Some(Duration::from_secs(55)));
    assert_eq!(wait(&[], body), Some(Duration::from_secs(45)));
    let daily = body.replace("45 seconds", "86400 seconds");
    assert_eq!(wait(&[], &daily), Some(Duration::from_secs(86400)));
    assert_eq!(
        wait(&[], r#"{"error":{"code":"429","message":"slow down"}}"#),
        None
    );
}

fn decoded(status: u16, body: &str) -> Result<understudy_types::Completion, Failure> {
    crate::decode_response(
        Protocol::ChatCompletions,
        "my-deployment",
        status,
        HeaderMap::new(),
        body.as_bytes(),
    )
}

#[test]
fn a_filtered_answer_is_a_refusal_and_a_filter_error_a_success() {
    let filtered = r#"{"id":"x","object":"chat.completion","created":1,"model":"gpt-4o","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}],"choices":[{"index":0,"finish_reason":"content_filter","message":{"role":"assistant","content":null},"content_filter_results":{"sexual":{"filtered":true,"severity":"medium"}}}]}"#;
    assert_eq!(
        decoded(200, filtered).unwrap_err().kind,
        FailureKind::ContentFilter
    );
    let filter_down = r#"{"id":"x","object":"chat.completion","created":1,"model":"gpt-4o","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"error":{"code":"content_filter_error","message":"The contents are not filtered"}}}],"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Hello"},"content_filter_results":{"error":{"code":"content_filter_error","message":"The contents are not filtered"}}}]}"#;
    assert_eq!(decoded(200, filter_down).unwrap().text, "Hello");
}

const PREAMBLE: &str = "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{\"hate\":{\"filtered\":false,\"severity\":\"safe\"}}}]}\n\n";

fn chunk(delta: &str, finish: &str) -> String {
    format!(
        "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish},\"content_filter_results\":{{\"hate\":{{\"filtered\":false,\"severity\":\"safe\"}}}}}}]}}\n\n"
    )
}

/// An asynchronous filter's verdict: a choice with no `delta`.
const ASYNC_VERDICT: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"finish_reason\":null,\"content_filter_results\":{\"violence\":{\"filtered\":false,\"severity\":\"safe\"}},\"content_filter_offsets\":{\"check_offset\":0,\"start_offset\":0,\"end_offset\":5}}]}\n\n";

fn stream(parts: &[&str]) -> Vec<Result<StreamEvent, Failure>> {
    let bytes: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
    crate::decode_stream(Protocol::ChatCompletions, "my-deployment", &bytes)
}

#[test]
fn the_preamble_and_filter_verdicts_are_no_text_and_no_error() {
    let events = stream(&[
        PREAMBLE,
        &chunk(r#"{"role":"assistant","content":""}"#, "null"),
    ]);
    assert!(
        events
            .iter()
            .all(|e| !matches!(e, Ok(StreamEvent::Delta(_)))),
        "{events:?}"
    );
    // Only the EOF without a finish is a failure: the preamble is not one.
    assert!(
        matches!(events.as_slice(), [Err(f)] if f.kind == FailureKind::StreamInterrupted),
        "{events:?}"
    );
    let events = stream(&[
        PREAMBLE,
        &chunk(r#"{"role":"assistant","content":"Hello"}"#, "null"),
        ASYNC_VERDICT,
        &chunk("{}", "\"stop\""),
        ASYNC_VERDICT,
        "data: [DONE]\n\n",
    ]);
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            Ok(StreamEvent::Delta(t)) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Hello");
    assert!(
        matches!(events.last(), Some(Ok(StreamEvent::Finish { .. }))),
        "{events:?}"
    );
    assert!(events.iter().all(Result::is_ok), "{events:?}");
}

#[test]
fn a_stream_ending_on_the_content_filter_without_done_is_a_refusal() {
    let events = stream(&[
        PREAMBLE,
        &chunk(r#"{"role":"assistant","content":"Part"}"#, "null"),
        &chunk("{}", "\"content_filter\""),
    ]);
    let last = events.last().unwrap().as_ref().unwrap_err();
    assert_eq!(last.kind, FailureKind::ContentFilter);
    assert_eq!(
        events.iter().filter(|e| e.is_err()).count(),
        1,
        "the finish is terminal: no interrupted stream after it: {events:?}"
    );
}
