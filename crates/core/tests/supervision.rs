//! Supervision and concurrency: a crashed provider actor comes back, and
//! the router never serialises requests.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::time::{Duration, Instant};

use understudy_core::{ChatRequest, GenerateRequest};
use understudy_testkit::{Reply, SimProvider, TestGateway};

#[tokio::test]
async fn a_panicking_provider_actor_is_restarted() {
    let (_groq, _openai, gw) = TestGateway::groq_and_openai().await.unwrap();
    let g = gw
        .engine
        .generate(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap();
    assert_eq!(g.provider, "groq");

    gw.engine.inject_provider_panic("groq").await.unwrap();
    // The next requests are served by groq again, through the new actor.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let g = gw
            .engine
            .generate(GenerateRequest::new(ChatRequest::user("x")))
            .await
            .unwrap();
        if g.provider == "groq" && g.attempts.len() == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "groq never came back: {g:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let groq_info = gw
        .engine
        .providers()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == "groq")
        .unwrap();
    assert!(groq_info.available && groq_info.started);
}

#[tokio::test]
async fn in_flight_requests_on_a_crashing_actor_fall_back() {
    let (groq, _openai, gw) = TestGateway::groq_and_openai().await.unwrap();
    groq.always(Reply::text("slow").after(Duration::from_millis(300)));
    // Start the actor, then crash it while requests are in flight.
    gw.engine
        .generate(GenerateRequest::new(ChatRequest::user("warm")))
        .await
        .unwrap();
    let engine = gw.engine.clone();
    let requests: Vec<_> = (0..10)
        .map(|_| {
            let engine = engine.clone();
            tokio::spawn(async move {
                engine
                    .generate(GenerateRequest::new(ChatRequest::user("x")))
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    gw.engine.inject_provider_panic("groq").await.unwrap();
    for r in requests {
        let g = r.await.unwrap().unwrap();
        assert!(g.provider == "groq" || g.provider == "openai");
    }
}

#[tokio::test]
async fn two_hundred_concurrent_requests_are_not_serialised() {
    let groq = SimProvider::openai().await.unwrap();
    groq.always(Reply::text("done").after(Duration::from_millis(200)));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .order(&["groq"])
        .build()
        .await
        .unwrap();
    let started = Instant::now();
    let requests: Vec<_> = (0..200)
        .map(|i| {
            let engine = gw.engine.clone();
            tokio::spawn(async move {
                engine
                    .generate(GenerateRequest::new(ChatRequest::user(format!("n{i}"))))
                    .await
            })
        })
        .collect();
    for r in requests {
        assert_eq!(r.await.unwrap().unwrap().text, "done");
    }
    let took = started.elapsed();
    // Serialised, 200 × 200 ms would take 40 s.
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_eq!(groq.request_count(), 200);
}
