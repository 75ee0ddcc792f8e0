//! Anthropic's fallback credit: a refusal's credit (in the answer, or in
//! a stream's `message_delta`) goes with the next attempt on the same
//! Anthropic provider and key (never the softened retry, never another
//! provider), and the event says whether it was redeemed, never what it
//! was.

use std::time::Duration;

use understudy_core::{GenerateRequest, GenerationStream};
use understudy_testkit::eventually::eventually;
use understudy_testkit::{Refusal, Reply, SimProvider, TestGateway};
use understudy_types::{ChatRequest, RouteSelector, StreamItem};

const BETA: &str = "fallback-credit-2026-07-01";

/// An Anthropic simulator whose `claude-fable-5` refuses and whose other
/// models answer (after `before`, run on each answer's request).
async fn anthropic(before: impl Fn() + Send + Sync + 'static) -> SimProvider {
    let sim = SimProvider::anthropic().await.unwrap();
    sim.respond_with(move |req| {
        if req.json()["model"] == "claude-fable-5" {
            Reply::Refuse(Refusal::Message("I can't help with that.".into()))
        } else {
            before();
            Reply::text("here you go")
        }
    });
    sim
}

/// Runs one request through route `credit` of a gateway over `sims`
/// (`name`, simulator) with `toml`; returns the event as JSON.
async fn run(sims: &[(&str, &SimProvider)], toml: &str) -> serde_json::Value {
    let mut builder = TestGateway::builder();
    for (name, sim) in sims {
        builder = builder.provider(name, sim);
    }
    let gw = builder.toml(toml).build().await.unwrap();
    let g = gw
        .engine
        .generate(
            GenerateRequest::new(ChatRequest::user("tell me").with_system("be brief"))
                .route(RouteSelector::Named("credit".into())),
        )
        .await
        .unwrap();
    assert_eq!(g.text, "here you go");
    first_event(&gw).await
}

/// The gateway's first event, as JSON, once it is written.
async fn first_event(gw: &TestGateway) -> serde_json::Value {
    let events = eventually("the event", async || {
        let events = gw.engine.recent().events();
        (!events.is_empty()).then_some(events)
    })
    .await;
    serde_json::to_value(&events[0]).unwrap()
}

/// The text of a stream and its last item.
async fn drain(mut s: GenerationStream) -> (String, StreamItem) {
    let mut text = String::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), s.next())
            .await
            .expect("the stream stalled")
        {
            Some(StreamItem::Delta(t)) => text.push_str(&t),
            Some(end @ (StreamItem::Done(_) | StreamItem::Error(_))) => return (text, end),
            Some(_) => {}
            None => panic!("the stream ended without Done or Error"),
        }
    }
}

fn betas(req: &understudy_testkit::Received) -> String {
    req.header("anthropic-beta").unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_fallback_on_the_same_account_redeems_and_the_softened_retry_never_carries_it() {
    let sim = anthropic(|| {}).await;
    let event = run(
        &[("anthropic", &sim)],
        "[routes]\ncredit = [\"anthropic:claude-fable-5\", \"anthropic:claude-opus-4-8\"]",
    )
    .await;
    let received = sim.received();
    assert_eq!(received.len(), 3, "refused, softened, fallback");
    // The refused request asked for a credit; it carried none itself.
    assert!(betas(&received[0]).contains(BETA));
    assert!(received[0].json().get("fallback_credit_token").is_none());
    // The softened retry's body differs: it never carries the credit.
    assert!(received[1].json().get("fallback_credit_token").is_none());
    // The fallback on the same provider and key carries it, with the beta.
    let token = received[2].json()["fallback_credit_token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(token.starts_with("fct_sim_"), "{token:?}");
    assert!(betas(&received[2]).contains(BETA));
    assert_eq!(event["fallback_credit"], "redeemed");
    assert_eq!(event["attempts"][2]["fallback_credit"], "redeemed");
    // The credit itself is nowhere in the event.
    assert!(!event.to_string().contains(&token));
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

#[tokio::test]
async fn a_credit_in_a_refused_stream_goes_with_the_streamed_fallback() {
    let sim = anthropic(|| {}).await;
    let gw = TestGateway::builder()
        .provider("anthropic", &sim)
        .toml("[routes]\ncredit = [\"anthropic:claude-fable-5\", \"anthropic:claude-opus-4-8\"]")
        .build()
        .await
        .unwrap();
    let s = gw
        .engine
        .generate_stream(
            GenerateRequest::new(ChatRequest::user("tell me").with_system("be brief"))
                .route(RouteSelector::Named("credit".into())),
        )
        .await
        .unwrap();
    let (text, end) = drain(s).await;
    assert_eq!(text, "here you go");
    let StreamItem::Done(done) = end else {
        panic!("{end:?}")
    };
    let received = sim.received();
    assert_eq!(received.len(), 2, "refused, fallback (no softened stream)");
    // The refused stream asked for a credit; its refusal carried one in
    // `message_delta`.
    assert!(received[0].json()["stream"] == true);
    assert!(betas(&received[0]).contains(BETA));
    assert!(received[0].json().get("fallback_credit_token").is_none());
    // The streamed fallback on the same provider and key carries it.
    assert_eq!(received[1].json()["model"], "claude-opus-4-8");
    assert!(received[1].json()["stream"] == true);
    let token = received[1].json()["fallback_credit_token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(token.starts_with("fct_sim_"), "{token:?}");
    assert!(betas(&received[1]).contains(BETA));
    assert_eq!(
        done.attempts[1].fallback_credit.as_deref(),
        Some("redeemed")
    );
    let event = first_event(&gw).await;
    assert_eq!(event["fallback_credit"], "redeemed", "{event}");
    assert_eq!(event["attempts"][1]["fallback_credit"], "redeemed");
    assert!(!event.to_string().contains(&token));
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

#[tokio::test]
async fn a_fallback_to_another_provider_never_carries_it() {
    let first = anthropic(|| {}).await;
    let second = anthropic(|| {}).await;
    let event = run(
        &[("anthropic", &first), ("anthropic_b", &second)],
        "[routes.credit]\ntargets = [\"anthropic:claude-fable-5\", \"anthropic_b:claude-opus-4-8\"]\nrefusal_policy = \"fallback_only\"",
    )
    .await;
    // No later target on the same account: no credit was asked for.
    assert!(!betas(&first.received()[0]).contains(BETA));
    let sent = second.received()[0].json();
    assert!(sent.get("fallback_credit_token").is_none());
    assert!(!betas(&second.received()[0]).contains(BETA));
    assert!(event.get("fallback_credit").is_none(), "{event}");
}

#[tokio::test]
async fn an_expired_credit_is_not_applied_and_says_why() {
    let key = TestGateway::key_for("anthropic");
    let sim = anthropic(move || {
        understudy_testkit::sim::age_credits(&key, Duration::from_secs(6 * 60));
    })
    .await;
    let event = run(
        &[("anthropic", &sim)],
        "[routes.credit]\ntargets = [\"anthropic:claude-fable-5\", \"anthropic:claude-opus-4-8\"]\nrefusal_policy = \"fallback_only\"",
    )
    .await;
    assert_eq!(sim.received().len(), 2);
    assert_eq!(event["fallback_credit"], "not_applied:expired");
}
