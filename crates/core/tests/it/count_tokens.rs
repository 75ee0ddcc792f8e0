//! `Engine::count_tokens` goes through the same plan and breakers as a
//! generation: its failures are recorded on the
//! target's breaker, and a target whose breaker is open is not called.
//! Through real HTTP to a simulated Anthropic.

use std::sync::Arc;

use understudy_core::GenerateRequest;
use understudy_testkit::{Reply, SimProvider, TestGateway};
use understudy_types::{ChatRequest, NativeRequest, Protocol};

const BODY: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#;

fn count_request() -> GenerateRequest {
    GenerateRequest::new(ChatRequest {
        native: Some(Arc::new({
            let mut n = NativeRequest::new(Protocol::Messages, BODY);
            n.headers = vec![("anthropic-version".into(), "2023-06-01".into())];
            n
        })),
        ..ChatRequest::user("hi")
    })
}

async fn claude_only() -> (SimProvider, TestGateway) {
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .order(&["claude"])
        .toml("[breaker]\nfailure_threshold = 3\ncooldown = 60\n")
        .build()
        .await
        .unwrap();
    (claude, gw)
}

#[tokio::test]
async fn count_tokens_failures_open_the_breaker_and_an_open_breaker_is_not_called() {
    let (claude, gw) = claude_only().await;
    claude.always(Reply::status(503));
    for _ in 0..3 {
        let counted = gw.engine.count_tokens(count_request()).await.unwrap();
        assert_eq!(
            counted, None,
            "a failed count leaves the caller to estimate"
        );
    }
    assert_eq!(claude.request_count(), 3);
    // The three outages opened the breaker: neither a count nor a
    // generation calls the target now.
    let counted = gw.engine.count_tokens(count_request()).await;
    assert!(matches!(counted, Ok(None) | Err(_)), "{counted:?}");
    assert_eq!(claude.request_count(), 3, "a count past an open breaker");
}

#[tokio::test]
async fn a_breaker_opened_by_generations_keeps_counts_away() {
    let (claude, gw) = claude_only().await;
    claude.always(Reply::status(503));
    for _ in 0..3 {
        assert!(gw.engine.generate(count_request()).await.is_err());
    }
    let before = claude.request_count();
    let counted = gw.engine.count_tokens(count_request()).await;
    assert!(matches!(counted, Ok(None) | Err(_)), "{counted:?}");
    assert_eq!(claude.request_count(), before, "the open target was called");
    // A healthy target counts.
    let (healthy, gw) = claude_only().await;
    healthy.push(Reply::Garbage(r#"{"input_tokens": 42}"#.into()));
    let counted = gw.engine.count_tokens(count_request()).await.unwrap();
    assert_eq!(counted, Some((42, "claude".to_owned())));
}
