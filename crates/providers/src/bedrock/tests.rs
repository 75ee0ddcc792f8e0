//! The Bedrock adapter's own checks: URLs, bodies, betas, the signature
//! over the bytes sent, and streams in AWS's event stream split anywhere.

#![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

use base64::Engine as _;
use serde_json::{Value, json};
use understudy_settings::Settings;
use understudy_types::{
    ChatRequest, FailureKind, FinishReason, NativeRequest, Protocol, StreamEvent,
};
use understudy_wire::eventstream::{HeaderValue as EsValue, Message};
use understudy_wire::framing::Framing;
use understudy_wire::framing::parse_framed_bytes;

use super::*;

pub(super) fn bedrock(extra: &str) -> (ProviderSettings, Bedrock) {
    let toml = format!(
        "[providers.b]\nkind = \"bedrock\"\nregion = \"us-east-1\"\nmodel = \"us.anthropic.claude-haiku-4-5-20251001-v1:0\"\naws_access_key_id = \"AKIDEXAMPLE\"\naws_secret_access_key = \"wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\"\n{extra}"
    );
    let s = Settings::from_toml_str(&toml, |_| None).unwrap();
    let p = s.providers["b"].clone();
    let understudy_settings::Platform::Bedrock(b) = p.platform.clone() else {
        panic!("not bedrock")
    };
    (p, b)
}

fn protocol() -> BedrockMessages {
    let (p, b) = bedrock("");
    BedrockMessages {
        account: Account {
            base: crate::http::endpoint(&p.base_url).unwrap(),
            region: b.region.clone(),
            headers: HeaderMap::new(),
            auth: Auth::SigV4(Arc::new(AwsKeys::of(b.credentials.as_ref().unwrap()))),
            limits: crate::OutputLimits::of(&p),
        },
    }
}

#[test]
fn the_model_goes_in_the_path_encoded_as_the_sdks_write_it() {
    let p = protocol();
    assert_eq!(
        p.url("us.anthropic.claude-sonnet-4-5-20250929-v1:0", false)
            .as_str(),
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke"
    );
    // The anthropic SDK's own test: an ARN's `/` is `%2F`.
    assert_eq!(
        p.url(
            "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/jf2sje1c0jnb",
            true
        )
        .path(),
        "/model/arn:aws:bedrock:us-east-1:123456789012:application-inference-profile%2Fjf2sje1c0jnb/invoke-with-response-stream"
    );
}

#[test]
fn a_translated_body_has_the_bedrock_version_and_no_model_or_stream() {
    let p = protocol();
    let body = p
        .body(
            "us.anthropic.claude-haiku-4-5-20251001-v1:0",
            &ChatRequest::user("hi"),
            true,
        )
        .unwrap();
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["anthropic_version"], BEDROCK_VERSION);
    assert!(v.get("model").is_none() && v.get("stream").is_none(), "{v}");
    assert!(v["messages"][0].to_string().contains("\"hi\""), "{v}");
}

#[test]
fn a_native_body_keeps_its_bytes_and_only_betas_bedrock_takes() {
    let p = protocol();
    let client = r#"{"model":"claude-haiku-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"u1"}}"#;
    let mut native = NativeRequest::new(Protocol::Messages, client);
    native.headers = vec![(
        "anthropic-beta".into(),
        "claude-code-20250219,interleaved-thinking-2025-05-14, fine-grained-tool-streaming-2025-05-14".into(),
    )];
    let mut request = ChatRequest::user("hi");
    request.native = Some(std::sync::Arc::new(native));
    let body = p
        .body(
            "us.anthropic.claude-haiku-4-5-20251001-v1:0",
            &request,
            true,
        )
        .unwrap();
    assert_eq!(
        body,
        r#"{"anthropic_version":"bedrock-2023-05-31","anthropic_beta":["interleaved-thinking-2025-05-14"],"max_tokens":100,"messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"u1"}}"#
    );
}

#[test]
fn a_request_is_signed_over_its_exact_body_with_the_session_token() {
    let (settings, b) = bedrock("aws_session_token = \"FQoGZXIvYXdzEXAMPLE\"\n");
    let adapter = adapter(&settings, &b).unwrap();
    let _ = adapter;
    let p = BedrockMessages {
        account: Account {
            auth: Auth::SigV4(Arc::new(AwsKeys::of(b.credentials.as_ref().unwrap()))),
            ..protocol().account
        },
    };
    let client = reqwest::Client::new();
    let built = p
        .request(
            &client,
            "us.anthropic.claude-haiku-4-5-20251001-v1:0",
            &ChatRequest::user("hi"),
            false,
        )
        .unwrap();
    let mut request = built.build().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(p.authorize(&mut request)).unwrap();
    let h = request.headers();
    let auth = h["authorization"].to_str().unwrap();
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"),
        "{auth}"
    );
    assert!(auth.contains("/us-east-1/bedrock/aws4_request"), "{auth}");
    assert!(
        auth.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"),
        "{auth}"
    );
    assert_eq!(h["x-amz-security-token"], "FQoGZXIvYXdzEXAMPLE");
    assert!(h["authorization"].is_sensitive() && h["x-amz-security-token"].is_sensitive());
    assert_eq!(h["accept"], "application/json");
    // The signature verifies over the bytes that go.
    let date = h["x-amz-date"].to_str().unwrap();
    let time = parse_amz_date(date);
    let body = request.body().unwrap().as_bytes().unwrap();
    let again = sigv4::sign(
        &sigv4::Request {
            method: "POST",
            path: request.url().path(),
            query: "",
            headers: &[
                ("host", "bedrock-runtime.us-east-1.amazonaws.com"),
                ("content-type", "application/json"),
            ],
            body,
        },
        &sigv4::Scope {
            region: "us-east-1",
            service: "bedrock",
            time,
            normalize_path: true,
            double_encode_path: true,
            content_sha256_header: false,
        },
        &sigv4::Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: Some("FQoGZXIvYXdzEXAMPLE".into()),
        },
    );
    assert!(auth.ends_with(&format!("Signature={}", again.signature)));
    // Nothing in the adapter's Debug shows a secret.
    let shown = format!("{p:?}");
    assert!(
        !shown.contains("wJalr") && !shown.contains("FQoG"),
        "{shown}"
    );
}

pub(super) fn parse_amz_date(d: &str) -> std::time::SystemTime {
    // YYYYMMDDTHHMMSSZ, within a day of now: find the second it names.
    let now = std::time::SystemTime::now();
    let secs = now.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    (secs - 86_400..secs + 86_400)
        .map(|s| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s))
        .find(|t| sigv4::amz_dates(*t).0 == d)
        .unwrap()
}

/// One Anthropic stream event as Bedrock sends it: a `chunk` event whose
/// `bytes` is the event's JSON, with padding.
fn chunk(event: Value) -> Vec<u8> {
    let bytes = base64::engine::general_purpose::STANDARD.encode(event.to_string());
    Message {
        headers: vec![
            (":event-type".into(), EsValue::String("chunk".into())),
            (
                ":content-type".into(),
                EsValue::String("application/json".into()),
            ),
            (":message-type".into(), EsValue::String("event".into())),
        ],
        payload: json!({"bytes": bytes, "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKL"})
            .to_string()
            .into_bytes(),
    }
    .encode()
}

pub(super) fn exception(kind: &str, message: &str) -> Vec<u8> {
    Message {
        headers: vec![
            (":exception-type".into(), EsValue::String(kind.into())),
            (
                ":content-type".into(),
                EsValue::String("application/json".into()),
            ),
            (":message-type".into(), EsValue::String("exception".into())),
        ],
        payload: json!({"message": message}).to_string().into_bytes(),
    }
    .encode()
}

fn answer() -> Vec<u8> {
    let model = "claude-haiku-4-5-20251001";
    [
        chunk(json!({"type":"message_start","message":{"id":"msg_bdrk_01","type":"message","role":"assistant","model":model,"content":[],"stop_reason":null,"usage":{"input_tokens":12,"output_tokens":1}}})),
        chunk(json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})),
        chunk(json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}})),
        chunk(json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" world"}})),
        chunk(json!({"type":"content_block_stop","index":0})),
        chunk(json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}})),
        chunk(json!({"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":12,"outputTokenCount":3,"invocationLatency":400,"firstByteLatency":100}})),
    ]
    .concat()
}

fn run(chunks: &[&[u8]]) -> Vec<Result<StreamEvent, Failure>> {
    parse_framed_bytes(
        Framing::aws_event_stream(chunk_item),
        SignedStream::new(
            AnthropicStream::for_model("us.anthropic.claude-haiku-4-5-20251001-v1:0"),
            PLATFORM,
        ),
        chunks,
    )
}

fn texts(events: &[Result<StreamEvent, Failure>]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Ok(StreamEvent::Delta(t)) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_stream_reads_the_same_split_anywhere_or_whole() {
    let bytes = answer();
    let whole = run(&[&bytes]);
    assert_eq!(texts(&whole), "Hello world");
    assert!(
        matches!(whole.last(), Some(Ok(StreamEvent::Finish { finish_reason: FinishReason::Stop, usage: Some(u), .. })) if u.output_tokens == 3),
        "{whole:?}"
    );
    // Every split point, and one byte at a time.
    for at in 1..bytes.len() {
        assert_eq!(run(&[&bytes[..at], &bytes[at..]]), whole, "split at {at}");
    }
    let bytes_one_by_one: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(run(&bytes_one_by_one), whole);
}

#[test]
fn an_exception_inside_a_200_stream_is_its_failure_after_the_text() {
    // After the first text delta, a throttle.
    let first = chunk(
        json!({"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"x","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}),
    );
    let start = chunk(
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
    );
    let delta = chunk(
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}),
    );
    let bytes = [
        first,
        start,
        delta,
        exception(
            "throttlingException",
            "Too many tokens, please wait before trying again.",
        ),
    ]
    .concat();
    let events = run(&[&bytes]);
    assert_eq!(texts(&events), "Hel");
    let Some(Err(f)) = events.last() else {
        panic!("{events:?}")
    };
    assert_eq!(f.kind, FailureKind::RateLimited { retry_after: None });
    assert!(f.detail.contains("ThrottlingException"), "{}", f.detail);
    // Before any text: the failure alone (the run falls back).
    let events = run(&[&exception("modelStreamErrorException", "boom")]);
    assert!(
        matches!(events.as_slice(), [Err(f)] if f.kind == FailureKind::Unavailable { retry_after: None }),
        "{events:?}"
    );
}

#[test]
fn a_corrupt_or_cut_frame_ends_the_stream_as_a_failure() {
    let mut bytes = answer();
    let crc_at = bytes.len() - 1;
    bytes[crc_at] ^= 0xff; // the last message's CRC
    let events = run(&[&bytes]);
    assert_eq!(texts(&events), "Hello world");
    assert!(
        matches!(events.last(), Some(Err(f)) if f.kind == FailureKind::MalformedResponse),
        "{events:?}"
    );
    let bytes = answer();
    let events = run(&[&bytes[..bytes.len() - 5]]);
    assert!(
        matches!(events.last(), Some(Err(f)) if f.kind == FailureKind::StreamInterrupted),
        "{events:?}"
    );
    // A length past the limit is refused before anything is kept.
    let mut huge = vec![0u8; 12];
    huge[..4].copy_from_slice(&(64u32 << 20).to_be_bytes());
    let events = run(&[&huge]);
    assert!(
        matches!(events.last(), Some(Err(f)) if f.kind == FailureKind::MalformedResponse),
        "{events:?}"
    );
}
