//! The two modes behave alike where nothing forces them apart:
//! whitespace-only text and a nameless tool call are no answer
//! whether streamed or not, and a client that leaves stops a non-streamed
//! run from walking more fallbacks, as it stops a streamed one. (Written
//! against the engine's public API only, so that it also runs on the code
//! before the change, where it fails.)

use std::time::Duration;

use understudy_core::GenerateRequest;
use understudy_testkit::{Reply, StreamSpec, TestGateway, eventually};
use understudy_types::{ChatRequest, StreamItem};

#[tokio::test]
async fn whitespace_and_nameless_tool_calls_are_no_answer_in_either_mode() {
    use understudy_testkit::SimToolCall;
    for (reply, what) in [
        (StreamSpec::new(&["  ", "\n"]).reply(), "whitespace"),
        (
            Reply::ToolCalls(vec![SimToolCall::new("", serde_json::json!({"a": 1}))]),
            "a nameless tool call",
        ),
    ] {
        for streamed in [false, true] {
            let (groq, openai, gw) = TestGateway::groq_and_openai().await.unwrap();
            groq.push(reply.clone());
            openai.push(Reply::stream(&["From", " the", " fallback."]));
            let request = GenerateRequest::new(ChatRequest::user("hi"));
            let (text, provider, trail) = if streamed {
                let (text, end) = {
                    let mut s = gw.engine.generate_stream(request).await.unwrap();
                    let mut text = String::new();
                    loop {
                        match s.next().await {
                            Some(StreamItem::Delta(t)) => text.push_str(&t),
                            Some(StreamItem::ToolCall(_)) => text.push_str("<call>"),
                            Some(end) => break (text, end),
                            None => panic!("no end"),
                        }
                    }
                };
                let StreamItem::Done(d) = end else {
                    panic!("{what}: {end:?}")
                };
                let trail: Vec<String> = d.attempts.iter().map(|a| a.outcome.to_string()).collect();
                (text, d.provider, trail)
            } else {
                let g = gw.engine.generate(request).await.unwrap();
                let trail: Vec<String> = g.attempts.iter().map(|a| a.outcome.to_string()).collect();
                (g.text, g.provider, trail)
            };
            assert_eq!(text, "From the fallback.", "{what}, streamed {streamed}");
            assert_eq!(provider, "openai", "{what}, streamed {streamed}");
            assert_eq!(
                trail,
                ["empty_response", "ok"],
                "{what}, streamed {streamed}"
            );
        }
    }
}

#[tokio::test]
async fn a_client_that_leaves_stops_a_non_streamed_run_from_walking_fallbacks() {
    let (groq, openai, gw) = TestGateway::groq_and_openai().await.unwrap();
    groq.push(Reply::status(503).after(Duration::from_millis(400)));
    openai.always(Reply::text("nobody reads this"));
    // The client gives up while the primary's call is in flight.
    let engine = gw.engine.clone();
    let asked = tokio::spawn(async move {
        engine
            .generate(GenerateRequest::new(ChatRequest::user("hi")))
            .await
    });
    eventually("the primary's call", async || groq.request_count() == 1).await;
    asked.abort();
    assert!(
        asked.await.is_err_and(|e| e.is_cancelled()),
        "the client gave up first"
    );
    // The left client's run dropped its call to the primary, which closes
    // that connection (a request dropped mid-flight leaves it unusable). A
    // run still walking would instead read the 503 at 0.4 s, keep the
    // connection for reuse (so this never settles) and call the fallback.
    eventually("the primary's connection to close", async || {
        match groq.open_connections() {
            0 => Ok(()),
            n => Err(format!("{n} open")),
        }
    })
    .await;
    assert_eq!(groq.request_count(), 1);
    assert_eq!(
        openai.request_count(),
        0,
        "no fallback for a client that left"
    );
}
