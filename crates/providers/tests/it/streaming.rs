//! Streamed mode of every adapter through real HTTP to the testkit's
//! simulators: each way a stream can end, for each protocol.

use std::time::Duration;

use understudy_core::AdapterFactory;
use understudy_providers::Providers;
use understudy_testkit::{
    Protocol, Refusal, Reply, SimProvider, StreamEnd, StreamSpec, TestGateway,
};
use understudy_types::{ChatRequest, StreamEvent};

const ALL: [Protocol; 3] = [
    Protocol::ChatCompletions,
    Protocol::GenerateContent,
    Protocol::Messages,
];

/// Streams one request from a simulator of `protocol` answering `reply`;
/// returns the text and how it ended (`ok` or a failure code).
async fn run(protocol: Protocol, reply: Reply) -> (String, String) {
    run_with_patience(protocol, reply, Duration::from_secs(5)).await
}

/// As [`run`], giving up as `stalled` after `patience` of silence.
async fn run_with_patience(
    protocol: Protocol,
    reply: Reply,
    patience: Duration,
) -> (String, String) {
    let sim = SimProvider::start(protocol).await.unwrap();
    sim.push(reply);
    let settings = TestGateway::builder()
        .provider("p", &sim)
        .settings()
        .unwrap();
    let adapter = Providers.build(&settings.providers["p"]).unwrap();
    let request = ChatRequest::user("tell me a story").with_system("Be brief.");
    let mut stream = match adapter
        .stream(
            "p-model",
            &request,
            &understudy_core::CallOptions::connect(std::time::Duration::from_secs(5)),
        )
        .await
    {
        Ok(s) => s,
        Err(f) => return (String::new(), f.code().as_str().to_owned()),
    };
    let mut text = String::new();
    loop {
        let next = tokio::time::timeout(patience, stream.next()).await;
        match next {
            Err(_) => return (text, "stalled".to_owned()),
            Ok(None) => return (text, "no terminal event".to_owned()),
            Ok(Some(Ok(StreamEvent::Delta(t)))) => text.push_str(&t),
            Ok(Some(Ok(StreamEvent::Native(_) | StreamEvent::Reasoning(_)))) => {}
            Ok(Some(Ok(StreamEvent::ToolCall(c)))) => {
                text.push_str(&format!("[tool {} {:?} {}]", c.index, c.name, c.arguments));
            }
            Ok(Some(Ok(StreamEvent::Finish { .. }))) => {
                assert!(stream.next().await.is_none(), "events after the finish");
                return (text, "ok".to_owned());
            }
            Ok(Some(Err(f))) => {
                assert!(stream.next().await.is_none(), "events after the error");
                return (text, f.code().as_str().to_owned());
            }
        }
    }
}

async fn check(end: StreamEnd, want: &str, want_text: &str) {
    for protocol in ALL {
        let reply = StreamSpec::new(&["Once", " upon", " a time"])
            .ending(end)
            .reply();
        let (text, got) = run(protocol, reply).await;
        assert_eq!(
            (text.as_str(), got.as_str()),
            (want_text, want),
            "{protocol:?} {end:?}"
        );
    }
}

#[tokio::test]
async fn complete_streams() {
    check(StreamEnd::Complete, "ok", "Once upon a time").await;
}

#[tokio::test]
async fn openai_finish_without_done_is_complete() {
    let (text, got) = run(
        Protocol::ChatCompletions,
        StreamSpec::new(&["a", "b"])
            .ending(StreamEnd::FinishWithoutDone)
            .reply(),
    )
    .await;
    assert_eq!((text.as_str(), got.as_str()), ("ab", "ok"));
}

#[tokio::test]
async fn failures_after_text() {
    check(
        StreamEnd::EndWithoutMarker,
        "stream_interrupted",
        "Once upon a time",
    )
    .await;
    check(StreamEnd::Cut, "stream_interrupted", "Once upon a time").await;
    check(
        StreamEnd::Malformed,
        "malformed_response",
        "Once upon a time",
    )
    .await;
    check(StreamEnd::ErrorEvent, "unavailable", "Once upon a time").await;
    check(StreamEnd::Refusal, "content_filter", "Once upon a time").await;
}

#[tokio::test]
async fn a_stall_goes_silent_and_is_left_to_the_caller_s_idle_timeout() {
    for protocol in ALL {
        let reply = StreamSpec::new(&["x"]).ending(StreamEnd::Stall).reply();
        let (text, got) = run_with_patience(protocol, reply, Duration::from_millis(300)).await;
        assert_eq!(
            (text.as_str(), got.as_str()),
            ("x", "stalled"),
            "{protocol:?}"
        );
    }
}

#[tokio::test]
async fn failures_before_any_text() {
    for protocol in ALL {
        for (reply, want) in [
            (Reply::status(503), "unavailable"),
            (Reply::status(401), "auth"),
            (Reply::rate_limited("1"), "rate_limited"),
            (Reply::Reset, "connection"),
            (Reply::Refuse(Refusal::FinishReason), "content_filter"),
            (Reply::Refuse(Refusal::PromptBlocked), "content_filter"),
            (
                Reply::Refuse(Refusal::Message("I can't.".into())),
                "content_filter",
            ),
        ] {
            let (text, got) = run(protocol, reply.clone()).await;
            assert_eq!(
                (text.as_str(), got.as_str()),
                ("", want),
                "{protocol:?} {reply:?}"
            );
        }
    }
}

#[tokio::test]
async fn plain_text_replies_stream_word_by_word() {
    for protocol in ALL {
        let (text, got) = run(protocol, Reply::text("three little words")).await;
        assert_eq!(
            (text.as_str(), got.as_str()),
            ("three little words", "ok"),
            "{protocol:?}"
        );
    }
}

#[tokio::test]
async fn the_request_is_in_each_protocol_s_streamed_form() {
    for protocol in ALL {
        let sim = SimProvider::start(protocol).await.unwrap();
        let settings = TestGateway::builder()
            .provider("p", &sim)
            .settings()
            .unwrap();
        let adapter = Providers.build(&settings.providers["p"]).unwrap();
        let mut stream = adapter
            .stream(
                "m-1",
                &ChatRequest::user("hi"),
                &understudy_core::CallOptions::connect(std::time::Duration::from_secs(5)),
            )
            .await
            .unwrap();
        while stream.next().await.is_some() {}
        let got = &sim.received()[0];
        match protocol {
            Protocol::ChatCompletions => {
                assert_eq!(got.path, "/v1/chat/completions");
                assert_eq!(got.json()["stream"], true);
                assert_eq!(got.json()["stream_options"]["include_usage"], true);
            }
            Protocol::GenerateContent => {
                assert_eq!(got.path, "/v1beta/models/m-1:streamGenerateContent?alt=sse")
            }
            Protocol::Messages => {
                assert_eq!(got.path, "/v1/messages");
                assert_eq!(got.json()["stream"], true);
            }
            Protocol::Responses => {
                assert_eq!(got.path, "/v1/responses");
                assert_eq!(got.json()["stream"], true);
            }
            // Converse is not a kind: only a Bedrock provider speaks it
            // (bedrock tests); no other protocol is in `ALL`.
            other => unreachable!("{other} is not in ALL"),
        }
    }
}
