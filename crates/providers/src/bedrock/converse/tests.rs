//! The Converse upstream's own checks: its URLs, the signature over the
//! bytes sent, what it cannot carry, and its streams in AWS's event
//! stream, split anywhere, with exception messages in them.

#![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

use std::sync::Arc;

use serde_json::{Value, json};
use understudy_types::{FinishReason, NativeRequest, Protocol, StreamEvent};
use understudy_wire::eventstream::HeaderValue as EsValue;
use understudy_wire::framing::parse_framed_bytes;

use super::super::auth::AwsKeys;
use super::super::tests::{bedrock, exception, parse_amz_date};
use super::super::{Account, Auth};
use super::*;
use crate::sigv4;

const LLAMA: &str = "meta.llama3-1-8b-instruct-v1:0";

fn protocol() -> BedrockConverse {
    let (p, b) = bedrock("aws_session_token = \"FQoGZXIvYXdzEXAMPLE\"\n");
    BedrockConverse {
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
fn the_operations_are_converse_and_converse_stream_under_the_model() {
    let p = protocol();
    assert_eq!(
        p.url(LLAMA, false).as_str(),
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/meta.llama3-1-8b-instruct-v1:0/converse"
    );
    assert_eq!(
        p.url(
            "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/jf2sje1c0jnb",
            true
        )
        .path(),
        "/model/arn:aws:bedrock:us-east-1:123456789012:application-inference-profile%2Fjf2sje1c0jnb/converse-stream"
    );
}

#[test]
fn a_request_is_the_translation_signed_over_its_exact_bytes() {
    let p = protocol();
    crate::install_tls_provider();
    let client = reqwest::Client::new();
    let mut request = p
        .request(&client, LLAMA, &ChatRequest::user("hi"), false)
        .unwrap()
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(p.authorize(&mut request)).unwrap();
    let body = request.body().unwrap().as_bytes().unwrap().to_vec();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v,
        json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]})
    );
    let h = request.headers();
    assert_eq!(h["accept"], "application/json");
    let auth = h["authorization"].to_str().unwrap();
    assert!(
        auth.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"),
        "{auth}"
    );
    let again = sigv4::sign(
        &sigv4::Request {
            method: "POST",
            path: request.url().path(),
            query: "",
            headers: &[
                ("host", "bedrock-runtime.us-east-1.amazonaws.com"),
                ("content-type", "application/json"),
            ],
            body: &body,
        },
        &sigv4::Scope {
            region: "us-east-1",
            service: "bedrock",
            time: parse_amz_date(h["x-amz-date"].to_str().unwrap()),
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
    let shown = format!("{p:?}");
    assert!(
        !shown.contains("wJalr") && !shown.contains("FQoG"),
        "{shown}"
    );
}

#[test]
fn a_native_body_with_what_only_its_protocol_carries_cannot_go() {
    let p = protocol();
    let mut request = ChatRequest::user("hi");
    request.native = Some(Arc::new(NativeRequest::new(Protocol::Messages, "{}")));
    // A native body the neutral fields carry whole is translated.
    assert!(p.body(LLAMA, &request).is_ok());
    request.native_only = Some("server tools");
    let f = p.body(LLAMA, &request).unwrap_err();
    assert_eq!(f.kind, FailureKind::Unsupported);
    assert!(f.detail.contains("server tools"), "{}", f.detail);
}

/// One ConverseStream event as Bedrock frames it, with padding.
fn event(name: &str, mut payload: Value) -> Vec<u8> {
    payload["p"] = json!("abcdefghijklmnopqrstuvwxyzABCDEF");
    Message {
        headers: vec![
            (":event-type".into(), EsValue::String(name.into())),
            (
                ":content-type".into(),
                EsValue::String("application/json".into()),
            ),
            (":message-type".into(), EsValue::String("event".into())),
        ],
        payload: payload.to_string().into_bytes(),
    }
    .encode()
}

fn run(chunks: &[&[u8]]) -> Vec<Result<StreamEvent, Failure>> {
    parse_framed_bytes(
        Framing::aws_event_stream(event_item),
        ConverseStream::for_model(LLAMA),
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

fn start_and(text: &str) -> Vec<u8> {
    [
        event("messageStart", json!({"role": "assistant"})),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": text}}),
        ),
    ]
    .concat()
}

#[test]
fn a_stream_reads_the_same_split_anywhere_or_whole() {
    let bytes = [
        start_and("Hello"),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": " world"}}),
        ),
        event("contentBlockStop", json!({"contentBlockIndex": 0})),
        event("messageStop", json!({"stopReason": "end_turn"})),
        event(
            "metadata",
            json!({"usage": {"inputTokens": 5, "outputTokens": 2, "totalTokens": 7}, "metrics": {"latencyMs": 80}}),
        ),
    ]
    .concat();
    let whole = run(&[&bytes]);
    assert_eq!(texts(&whole), "Hello world");
    assert!(
        matches!(whole.last(), Some(Ok(StreamEvent::Finish { finish_reason: FinishReason::Stop, usage: Some(u), .. })) if u.output_tokens == 2),
        "{whole:?}"
    );
    for at in 1..bytes.len() {
        assert_eq!(run(&[&bytes[..at], &bytes[at..]]), whole, "split at {at}");
    }
}

#[test]
fn an_exception_frame_is_the_streams_failure_before_or_after_text() {
    // Before any text (the only frame, or after `messageStart`): the
    // failure alone, so the run falls back.
    for bytes in [
        exception("throttlingException", "Too many tokens"),
        [
            event("messageStart", json!({"role": "assistant"})),
            exception("throttlingException", "Too many tokens"),
        ]
        .concat(),
    ] {
        let events = run(&[&bytes]);
        assert!(
            matches!(events.as_slice(), [Err(f)] if f.kind == FailureKind::RateLimited { retry_after: None }),
            "{events:?}"
        );
    }
    // After text: the text, then the failure.
    let cases = [
        (
            "modelStreamErrorException",
            FailureKind::Unavailable { retry_after: None },
        ),
        ("validationException", FailureKind::BadRequest),
        (
            "serviceUnavailableException",
            FailureKind::Unavailable { retry_after: None },
        ),
        (
            "internalServerException",
            FailureKind::Unavailable { retry_after: None },
        ),
    ];
    for (kind, expected) in cases {
        let bytes = [start_and("Hel"), exception(kind, "boom")].concat();
        let events = run(&[&bytes]);
        assert_eq!(texts(&events), "Hel", "{kind}");
        assert!(
            matches!(events.last(), Some(Err(f)) if f.kind == expected),
            "{kind}: {events:?}"
        );
    }
}
