//! Streams walk the same decision table as answers (one machine drives
//! both): a streamed rate limit gets its one retry after `Retry-After`, and
//! a route's own timeouts bound its targets' streams, through real HTTP.

use std::time::Duration;

use understudy_core::{GenerateRequest, GenerationStream};
use understudy_testkit::{Reply, SimProvider, StreamSpec, TestGateway};
use understudy_types::{Attempt, ChatRequest, RouteSelector, StreamItem};

/// The text and the final item of a stream.
async fn drain(mut s: GenerationStream) -> (String, StreamItem) {
    let mut text = String::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), s.next())
            .await
            .expect("the stream stalled")
        {
            Some(StreamItem::Delta(t)) => text.push_str(&t),
            Some(end) => return (text, end),
            None => panic!("the stream ended without Done or Error"),
        }
    }
}

/// `provider kind outcome` for each attempt.
fn trail(attempts: &[Attempt]) -> Vec<String> {
    attempts
        .iter()
        .map(|a| format!("{} {} {}", a.provider, a.kind.as_str(), a.outcome))
        .collect()
}

#[tokio::test]
async fn a_streamed_rate_limit_is_retried_once_after_retry_after() {
    let (groq, openai, gw) = TestGateway::groq_and_openai().await.unwrap();
    groq.push(Reply::rate_limited("2"))
        .push(Reply::stream(&["Hello", " again"]));
    openai.always(Reply::stream(&["from the fallback"]));
    let s = gw
        .engine
        .generate_stream(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap();
    assert_eq!(s.provider, "groq", "served by the primary after its retry");
    assert!(!s.fell_back);
    let (text, end) = drain(s).await;
    assert_eq!(text, "Hello again");
    let StreamItem::Done(done) = end else {
        panic!("{end:?}")
    };
    assert_eq!(
        trail(&done.attempts),
        ["groq primary rate_limited", "groq rate_limit_retry ok"]
    );
    let received = groq.received();
    assert_eq!(received.len(), 2);
    let gap = received[1].at.duration_since(received[0].at);
    assert!(gap >= Duration::from_secs(2), "retried after {gap:?}");
    assert_eq!(openai.request_count(), 0);
}

#[tokio::test]
async fn a_streamed_rate_limit_longer_than_the_cap_falls_back_at_once() {
    let (groq, openai, gw) = TestGateway::groq_and_openai().await.unwrap();
    groq.always(Reply::rate_limited("30"));
    openai.always(Reply::stream(&["from", " the fallback"]));
    let s = gw
        .engine
        .generate_stream(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap();
    assert_eq!(s.provider, "openai");
    assert!(s.fell_back);
    let (text, end) = drain(s).await;
    assert_eq!(text, "from the fallback");
    let StreamItem::Done(done) = end else {
        panic!("{end:?}")
    };
    // No retry was made or waited for: one attempt on the primary.
    assert_eq!(
        trail(&done.attempts),
        ["groq primary rate_limited", "openai fallback ok"]
    );
    assert_eq!(groq.request_count(), 1);
}

#[tokio::test]
async fn a_route_s_first_token_timeout_bounds_its_streams() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    // The first token takes 3 s: within the global 10 s, past the route's 1 s.
    groq.always(
        StreamSpec::new(&["slow", " answer"])
            .every(Duration::from_secs(3))
            .reply(),
    );
    openai.always(Reply::stream(&["quick", " answer"]));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        .toml(concat!(
            "[timeouts]\nfirst_token = 10\n",
            "[routes.quick]\ntargets = [\"groq\", \"openai\"]\n",
            "timeouts = { first_token = 1 }\n",
        ))
        .build()
        .await
        .unwrap();
    let routed =
        GenerateRequest::new(ChatRequest::user("x")).route(RouteSelector::Named("quick".into()));
    let s = gw.engine.generate_stream(routed).await.unwrap();
    assert_eq!(
        s.provider, "openai",
        "the route's 1 s first-token timeout moved on"
    );
    let (text, end) = drain(s).await;
    assert_eq!(text, "quick answer");
    let StreamItem::Done(done) = end else {
        panic!("{end:?}")
    };
    assert_eq!(
        trail(&done.attempts),
        ["groq primary timeout", "openai fallback ok"]
    );
    let detail = done.attempts[0].detail.clone().unwrap_or_default();
    assert!(detail.contains("within 1.0 s"), "{detail}");
    // The same targets without the route: the global 10 s lets groq answer.
    let s = gw
        .engine
        .generate_stream(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap();
    assert_eq!(s.provider, "groq");
    let (text, _) = drain(s).await;
    assert_eq!(text, "slow answer");
}

#[tokio::test]
async fn a_route_s_stream_idle_and_attempt_timeouts_are_honoured() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    // The first token after 1 s, then 1 s of silence before the next.
    groq.always(
        StreamSpec::new(&["a", "b"])
            .every(Duration::from_millis(1000))
            .reply(),
    );
    openai.always(Reply::text("fallback").after(Duration::from_secs(2)));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        .toml(concat!(
            "[timeouts]\nstream_idle = 15\nattempt = 60\n",
            "[routes.tight]\ntargets = [\"groq\", \"openai\"]\n",
            "timeouts = { stream_idle = 0.5, attempt = 0.5 }\n",
        ))
        .build()
        .await
        .unwrap();
    let tight =
        || GenerateRequest::new(ChatRequest::user("x")).route(RouteSelector::Named("tight".into()));
    // stream_idle: the committed stream is cut after 0.5 s of silence.
    let s = gw.engine.generate_stream(tight()).await.unwrap();
    let (_, end) = drain(s).await;
    let StreamItem::Error(e) = end else {
        panic!("{end:?}")
    };
    assert_eq!(e.code.as_str(), "stream_interrupted");
    assert!(e.message.contains("no data for 0.5 s"), "{}", e.message);
    // attempt: an answer that takes 2 s is abandoned at 0.5 s.
    groq.always(Reply::status(503));
    let err = gw.engine.generate(tight()).await.unwrap_err();
    let attempts = err.attempts();
    assert_eq!(
        trail(attempts),
        ["groq primary unavailable", "openai fallback timeout"]
    );
}
