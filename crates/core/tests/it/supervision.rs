//! Supervision and concurrency: a crashed provider actor comes back, and
//! the router never serialises requests.

use std::time::{Duration, Instant};

use understudy_core::{GenerateRequest, ProviderInfo};
use understudy_testkit::{Reply, SimProvider, TestGateway, eventually};
use understudy_types::ChatRequest;

fn ask() -> GenerateRequest {
    GenerateRequest::new(ChatRequest::user("x"))
}

async fn groq_info(gw: &TestGateway) -> ProviderInfo {
    gw.engine
        .providers()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == "groq")
        .unwrap()
}

#[tokio::test]
async fn a_panicking_provider_actor_is_restarted() {
    let (_groq, _openai, gw) = TestGateway::groq_and_openai().await.unwrap();
    let g = gw.engine.generate(ask()).await.unwrap();
    assert_eq!(g.provider, "groq");

    gw.engine.inject_provider_panic("groq").await.unwrap();
    // The restart: the running actor is a new one, with fresh counts.
    eventually("the restart", async || {
        groq_info(&gw)
            .await
            .stats
            .is_some_and(|s| s.ok == 0 && s.in_flight == 0)
    })
    .await;
    // The next requests are served by groq again, through the new actor.
    let mut served_since = 0;
    eventually("groq to serve again", async || {
        let g = gw.engine.generate(ask()).await.unwrap();
        served_since += usize::from(g.provider == "groq");
        if g.provider == "groq" && g.attempts.len() == 1 {
            Ok(())
        } else {
            Err(format!("{:?}", g.attempts))
        }
    })
    .await;
    // With fresh state: the outcome counts start again from the restart
    // (the old actor's would include the answer from before the crash).
    eventually("the new actor's counts", async || {
        let groq = groq_info(&gw).await;
        let ok = groq.stats.as_ref().map_or(0, |s| s.ok);
        if groq.available && groq.started && ok == served_since as u64 {
            Ok(())
        } else {
            Err(format!(
                "{ok} ok, {served_since} served since the crash: {groq:?}"
            ))
        }
    })
    .await;
}

#[tokio::test]
async fn attempts_under_way_when_the_actor_crashes_still_answer() {
    // An attempt runs on the request's own task with the actor's lease,
    // not in the actor's handler, so a crash does not cut requests whose
    // provider call is already under way: each gets groq's answer, once.
    let (groq, _openai, gw) = TestGateway::groq_and_openai().await.unwrap();
    groq.always(Reply::text("slow").after(Duration::from_millis(300)));
    // Start the actor, then crash it while requests are in flight.
    gw.engine.generate(ask()).await.unwrap();
    let requests: Vec<_> = (0..10)
        .map(|_| {
            let engine = gw.engine.clone();
            tokio::spawn(async move { engine.generate(ask()).await })
        })
        .collect();
    eventually("ten requests to reach groq", async || {
        groq.request_count() == 11
    })
    .await;
    gw.engine.inject_provider_panic("groq").await.unwrap();
    assert!(
        requests.iter().all(|r| !r.is_finished()),
        "the requests were still waiting on groq when it crashed"
    );
    // It did crash: a new actor, whose counts start from nothing (the old
    // one had counted the first answer).
    eventually("a new groq actor", async || {
        let groq = groq_info(&gw).await;
        match &groq.stats {
            Some(stats) if groq.started && stats.ok == 0 => Ok(()),
            _ => Err(format!("{groq:?}")),
        }
    })
    .await;
    for r in requests {
        let g = r.await.unwrap().unwrap();
        let attempts: Vec<String> = g
            .attempts
            .iter()
            .map(|a| format!("{}/{}/{}", a.provider, a.kind.as_str(), a.outcome))
            .collect();
        assert_eq!(
            (g.provider.as_str(), g.text.as_str(), &attempts[..]),
            ("groq", "slow", &["groq/primary/ok".to_owned()][..]),
        );
    }
    assert_eq!(groq.request_count(), 11, "none was sent twice");
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
    // Serialised, 200 × 200 ms would take 40 s; the bound leaves a loaded
    // machine room.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert_eq!(groq.request_count(), 200);
    // What the bound stood for, counted rather than timed: each answer
    // takes 200 ms, so the requests that reached groq within 200 ms of
    // one another were all in flight at once. Serialised, that is one.
    let mut arrived: Vec<Instant> = groq.received().iter().map(|r| r.at).collect();
    arrived.sort();
    let in_flight = (0..arrived.len())
        .map(|i| {
            arrived[i..]
                .iter()
                .take_while(|t| t.duration_since(arrived[i]) < Duration::from_millis(200))
                .count()
        })
        .max()
        .unwrap();
    eprintln!("{in_flight} requests in flight at once, all 200 in {took:?}");
    assert!(
        in_flight >= 20,
        "only {in_flight} requests in flight at once"
    );
}
