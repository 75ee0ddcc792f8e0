//! Streamed generation end to end over all three protocols:
//! commit on the first text, never stitch two providers together.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use understudy_core::stream::STREAM_BUFFER;
use understudy_core::{
    Adapter, AdapterFactory, BoxEventStream, BoxFuture, Engine, EventStream, GenerateRequest,
};
use understudy_settings::Settings;
use understudy_testkit::{
    Refusal, Reply, SimProvider, StreamEnd, StreamSpec, TestGateway, eventually,
};
use understudy_types::{
    ChatRequest, Completion, Failure, FailureKind, Protocol, StreamEvent, StreamItem,
};

const ALL: [Protocol; 3] = [
    Protocol::ChatCompletions,
    Protocol::GenerateContent,
    Protocol::Messages,
];

fn name(p: Protocol) -> &'static str {
    match p {
        Protocol::ChatCompletions => "groq",
        Protocol::GenerateContent => "gemini",
        Protocol::Messages => "claude",
        Protocol::Converse => "bedrock",
        // Responses and every other protocol: its own name.
        other => other.as_str(),
    }
}

/// A primary speaking `protocol` and a fallback speaking another one.
async fn pair(protocol: Protocol) -> (SimProvider, SimProvider, TestGateway) {
    let fallback_protocol = match protocol {
        Protocol::ChatCompletions => Protocol::Messages,
        _ => Protocol::ChatCompletions,
    };
    let primary = SimProvider::start(protocol).await.unwrap();
    let fallback = SimProvider::start(fallback_protocol).await.unwrap();
    let fallback_name = if fallback_protocol == Protocol::ChatCompletions {
        "openai"
    } else {
        "claude"
    };
    let gw = TestGateway::builder()
        .provider(name(protocol), &primary)
        .provider(fallback_name, &fallback)
        // Short enough for the cases that wait them out (a first token
        // after 2 s, a hang, a stall), long enough that a failure sent at
        // once reaches the gateway in time on a loaded machine.
        .toml("[timeouts]\nfirst_token = 1.5\nstream_idle = 1")
        .build()
        .await
        .unwrap();
    (primary, fallback, gw)
}

/// The text received, and the final item.
async fn collect(gw: &TestGateway) -> Result<(String, StreamItem), understudy_types::Error> {
    let mut s = gw
        .engine
        .generate_stream(GenerateRequest::new(ChatRequest::user("tell me a story")))
        .await?;
    let mut text = String::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.next())
            .await
            .expect("the stream stalled")
        {
            Some(StreamItem::Delta(t)) => text.push_str(&t),
            Some(end) => {
                assert!(s.next().await.is_none(), "items after the end");
                return Ok((text, end));
            }
            None => panic!("the stream ended without Done or Error"),
        }
    }
}

#[tokio::test]
async fn failures_before_the_first_text_move_to_the_next_provider() {
    for protocol in ALL {
        for (reply, code) in [
            (Reply::status(503), "unavailable"),
            (Reply::Reset, "connection"),
            (Reply::Refuse(Refusal::FinishReason), "content_filter"),
            (Reply::Refuse(Refusal::PromptBlocked), "content_filter"),
            (
                StreamSpec::new(&[]).ending(StreamEnd::Malformed).reply(),
                "malformed_response",
            ),
            (
                StreamSpec::new(&[]).ending(StreamEnd::ErrorEvent).reply(),
                "unavailable",
            ),
            (
                StreamSpec::new(&["late"])
                    .every(Duration::from_secs(2))
                    .reply(),
                "timeout",
            ),
            (Reply::Hang, "timeout"),
        ] {
            let (primary, fallback, gw) = pair(protocol).await;
            primary.push(reply.clone());
            fallback.push(Reply::stream(&["From", " the", " fallback."]));
            let (text, end) = collect(&gw).await.unwrap();
            assert_eq!(
                text, "From the fallback.",
                "{protocol:?} {reply:?}: text from exactly one provider"
            );
            let StreamItem::Done(done) = end else {
                panic!("{protocol:?} {reply:?}: {end:?}")
            };
            let outcomes: Vec<String> = done
                .attempts
                .iter()
                .map(|a| format!("{}/{}", a.kind.as_str(), a.outcome))
                .collect();
            assert_eq!(
                outcomes,
                [format!("primary/{code}"), "fallback/ok".to_owned()],
                "{protocol:?} {reply:?}"
            );
            assert!(done.fell_back);
            assert_eq!(done.content_filtered, code == "content_filter");
            assert_eq!(primary.request_count(), 1, "no softened retry for streams");
        }
    }
}

#[tokio::test]
async fn failures_after_the_first_text_end_the_stream_and_never_switch() {
    for protocol in ALL {
        for (end, code) in [
            (StreamEnd::Cut, "stream_interrupted"),
            (StreamEnd::EndWithoutMarker, "stream_interrupted"),
            (StreamEnd::Stall, "stream_interrupted"),
            (StreamEnd::ErrorEvent, "stream_interrupted"),
            (StreamEnd::Malformed, "stream_interrupted"),
            (StreamEnd::Refusal, "content_filter"),
        ] {
            let (primary, fallback, gw) = pair(protocol).await;
            primary.push(
                StreamSpec::new(&["Once", " upon", " a time"])
                    .ending(end)
                    .reply(),
            );
            let (text, last) = collect(&gw).await.unwrap();
            assert_eq!(text, "Once upon a time", "{protocol:?} {end:?}");
            let StreamItem::Error(error) = last else {
                panic!("{protocol:?} {end:?}: {last:?}")
            };
            assert_eq!(
                error.code.as_str(),
                code,
                "{protocol:?} {end:?}: {}",
                error.message
            );
            assert_eq!(error.provider, name(protocol));
            assert_eq!(error.attempts.len(), 1);
            assert_eq!(error.content_filtered, code == "content_filter");
            assert_eq!(
                fallback.request_count(),
                0,
                "{protocol:?} {end:?}: no second provider is contacted"
            );
        }
    }
}

#[tokio::test]
async fn complete_streams_report_usage_and_model() {
    for protocol in ALL {
        let (primary, _fallback, gw) = pair(protocol).await;
        primary.push(Reply::stream(&["Hello", " world"]));
        let (text, end) = collect(&gw).await.unwrap();
        assert_eq!(text, "Hello world");
        let StreamItem::Done(done) = end else {
            panic!("{end:?}")
        };
        assert_eq!(done.provider, name(protocol));
        assert!(!done.fell_back && !done.content_filtered);
        assert!(
            done.usage.is_some_and(|u| u.output_tokens == 2),
            "{protocol:?}: {:?}",
            done.usage
        );
        assert!(done.ttft_ms > 0.0 && done.latency_ms >= done.ttft_ms);
    }
}

#[tokio::test]
async fn a_finish_reason_without_done_completes() {
    let (primary, _fallback, gw) = pair(Protocol::ChatCompletions).await;
    primary.push(
        StreamSpec::new(&["a", "b"])
            .ending(StreamEnd::FinishWithoutDone)
            .reply(),
    );
    let (text, end) = collect(&gw).await.unwrap();
    assert_eq!(text, "ab");
    assert!(matches!(end, StreamItem::Done(_)), "{end:?}");
}

#[tokio::test]
async fn every_target_failing_before_text_is_an_ordinary_error() {
    let (primary, fallback, gw) = pair(Protocol::ChatCompletions).await;
    primary.push(Reply::status(503));
    fallback.push(Reply::status(529));
    let err = collect(&gw).await.unwrap_err();
    assert_eq!(err.code().as_str(), "unavailable");
    assert_eq!(err.attempts().len(), 2);
}

#[tokio::test]
async fn surface_policy_returns_a_refusal_at_the_start() {
    let (primary, fallback, gw) = pair(Protocol::GenerateContent).await;
    primary.push(Reply::Refuse(Refusal::PromptBlocked));
    let req = GenerateRequest::new(ChatRequest::user("x"))
        .refusal_policy(understudy_types::RefusalPolicy::Surface);
    let err = gw.engine.generate_stream(req).await.unwrap_err();
    assert_eq!(err.code().as_str(), "content_filter");
    assert_eq!(fallback.request_count(), 0);
}

#[tokio::test]
async fn a_client_that_leaves_closes_the_upstream_connection() {
    for protocol in ALL {
        let (primary, _fallback, gw) = pair(protocol).await;
        let words: Vec<String> = (0..200).map(|i| format!(" w{i}")).collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        primary.push(
            StreamSpec::new(&words)
                .every(Duration::from_millis(20))
                .reply(),
        );
        let mut s = gw
            .engine
            .generate_stream(GenerateRequest::new(ChatRequest::user("x")))
            .await
            .unwrap();
        assert!(matches!(s.next().await, Some(StreamItem::Delta(_))));
        drop(s);
        eventually(
            &format!("{protocol:?}: the upstream to close"),
            async || {
                let (cancelled, open) = (primary.streams_cancelled(), primary.open_connections());
                if cancelled == 1 && open == 0 {
                    Ok(())
                } else {
                    Err(format!(
                        "{cancelled} streams cancelled, {open} connections open"
                    ))
                }
            },
        )
        .await;
        assert_eq!(primary.streams_open(), 0);
    }
}

/// An adapter whose stream never ends and counts how much was pulled from
/// it: the precise instrument for backpressure (over a socket the kernel's
/// buffers, up to tens of MB on loopback, would hide what the gateway does).
/// With `finish_after`, a pull made that long after the stream opened
/// waits 0.1 s and then finishes the stream.
#[derive(Debug, Default)]
struct Endless {
    pulled: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
    finish_after: Option<Duration>,
}

struct EndlessStream {
    pulled: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
    /// Tokio's, so the tests that use it run in paused time.
    opened: tokio::time::Instant,
    finish_after: Option<Duration>,
}

impl EventStream for EndlessStream {
    fn next(&mut self) -> BoxFuture<'_, Option<Result<StreamEvent, Failure>>> {
        self.pulled.fetch_add(1, Ordering::SeqCst);
        if self
            .finish_after
            .is_some_and(|d| self.opened.elapsed() >= d)
        {
            return Box::pin(async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Some(Ok(StreamEvent::Finish {
                    finish_reason: understudy_types::FinishReason::Stop,
                    usage: None,
                    model: None,
                }))
            });
        }
        Box::pin(async { Some(Ok(StreamEvent::Delta("tok ".into()))) })
    }
}

impl Drop for EndlessStream {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

impl Adapter for Endless {
    fn complete<'a>(
        &'a self,
        _: &'a str,
        _: &'a ChatRequest,
        _: &'a understudy_core::CallOptions,
    ) -> BoxFuture<'a, Result<Completion, Failure>> {
        Box::pin(async { Err(Failure::new(FailureKind::BadRequest, "streams only")) })
    }

    fn stream<'a>(
        &'a self,
        _: &'a str,
        _: &'a ChatRequest,
        _: &'a understudy_core::CallOptions,
    ) -> BoxFuture<'a, Result<BoxEventStream, Failure>> {
        let s = EndlessStream {
            pulled: Arc::clone(&self.pulled),
            dropped: Arc::clone(&self.dropped),
            opened: tokio::time::Instant::now(),
            finish_after: self.finish_after,
        };
        Box::pin(async move { Ok(Box::new(s) as BoxEventStream) })
    }
}

#[derive(Debug)]
struct EndlessFactory(Arc<Endless>);

impl AdapterFactory for EndlessFactory {
    fn supports(&self, _: Protocol) -> bool {
        true
    }

    fn build(&self, _: &understudy_settings::ProviderSettings) -> Result<Arc<dyn Adapter>, String> {
        Ok(Arc::new(Endless {
            pulled: Arc::clone(&self.0.pulled),
            dropped: Arc::clone(&self.0.dropped),
            finish_after: self.0.finish_after,
        }))
    }
}

// In paused time (no socket: the adapter is in process): the clock moves
// only when every task waits, so "nothing more pulled over 50 ms" means
// the run is parked on its full channel, not that a loaded machine did
// not get to it.
#[tokio::test(start_paused = true)]
async fn a_slow_reader_does_not_make_the_gateway_buffer_everything() {
    let endless = Arc::new(Endless::default());
    let settings = Settings::from_toml_str(
        "[providers.groq]\napi_key = \"k\"\n[routing]\norder = [\"groq\"]",
        |_| None,
    )
    .unwrap();
    let engine = Engine::start(settings, Arc::new(EndlessFactory(Arc::clone(&endless))))
        .await
        .unwrap();
    let mut s = engine
        .generate_stream(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap();
    assert!(matches!(s.next().await, Some(StreamItem::Delta(_))));
    // Read nothing more: the run fills its bounded channel, then waits. An
    // upper bound alone would also hold for a run that had not started yet,
    // so first see it get that far, then see it stop.
    let pulled = || endless.pulled.load(Ordering::SeqCst);
    eventually("the run to fill its channel", async || match pulled() {
        n if n >= STREAM_BUFFER => Ok(()),
        n => Err(format!("{n} pulled")),
    })
    .await;
    // Stopped: nothing more pulled over a while (an unbounded run pulls
    // this endless stream as fast as it can, and never settles).
    let pulled = eventually("the run to stop pulling", async || {
        let before = pulled();
        tokio::time::sleep(Duration::from_millis(50)).await;
        match pulled() {
            after if after == before => Ok(after),
            after => Err(format!("still pulling: {before} then {after}")),
        }
    })
    .await;
    assert!(
        pulled <= STREAM_BUFFER + 3,
        "pulled {pulled} events for a reader that took one"
    );
    // Reading resumes the flow.
    for _ in 0..100 {
        assert!(matches!(s.next().await, Some(StreamItem::Delta(_))));
    }
    assert!(endless.pulled.load(Ordering::SeqCst) > 100);
    // Leaving drops the upstream stream.
    drop(s);
    eventually("the upstream stream to be dropped", async || {
        endless.dropped.load(Ordering::SeqCst) == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_concurrent_streams_complete_intact() {
    let groq = SimProvider::openai().await.unwrap();
    let words: Vec<String> = (0..10).map(|i| format!(" t{i}")).collect();
    let expected: String = words.concat();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    groq.always(
        StreamSpec::new(&words)
            .every(Duration::from_millis(50))
            .reply(),
    );
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .order(&["groq"])
        .build()
        .await
        .unwrap();
    let tasks: Vec<_> = (0..500)
        .map(|_| {
            let engine = gw.engine.clone();
            tokio::spawn(async move {
                let mut s = engine
                    .generate_stream(GenerateRequest::new(ChatRequest::user("x")))
                    .await
                    .unwrap();
                let mut text = String::new();
                loop {
                    match s.next().await {
                        Some(StreamItem::Delta(t)) => text.push_str(&t),
                        Some(StreamItem::Done(_)) => return text,
                        other => panic!("{other:?}"),
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), expected);
    }
    assert_eq!(groq.request_count(), 500);
}

// In paused time (no socket: the adapter is in process), so the 0.3 s of
// stream_idle and the reader's 0.8 s pause are exact: in real time a
// loaded machine could stretch the 0.1 s answer past the idle bound.
#[tokio::test(start_paused = true)]
async fn time_spent_waiting_on_a_slow_reader_is_not_upstream_silence() {
    // stream_idle is 0.3 s. The reader takes one item and pauses 0.8 s, so
    // the run waits on its full channel; the first pull after the reader
    // resumes answers 0.1 s later. Counting the wait on the reader as
    // silence would end this healthy stream with "no data for 0.3 s".
    let endless = Arc::new(Endless {
        finish_after: Some(Duration::from_millis(500)),
        ..Endless::default()
    });
    let settings = Settings::from_toml_str(
        "[providers.groq]\napi_key = \"k\"\n[routing]\norder = [\"groq\"]\n[timeouts]\nstream_idle = 0.3",
        |_| None,
    )
    .unwrap();
    let engine = Engine::start(settings, Arc::new(EndlessFactory(Arc::clone(&endless))))
        .await
        .unwrap();
    let mut s = engine
        .generate_stream(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap();
    assert!(matches!(s.next().await, Some(StreamItem::Delta(_))));
    tokio::time::sleep(Duration::from_millis(800)).await;
    let end = loop {
        match s.next().await {
            Some(StreamItem::Delta(_)) => {}
            Some(end) => break end,
            None => panic!("the stream ended without Done or Error"),
        }
    };
    assert!(matches!(end, StreamItem::Done(_)), "{end:?}");
}
