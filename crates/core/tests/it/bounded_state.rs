//! The breakers (and their metric labels) of targets only clients pinned
//! are bounded by `server.max_pinned_targets`, least recently used out;
//! configured targets are never forgotten. Through real HTTP to a failing
//! simulator. (That a huge or odd model name is refused before any work,
//! measured by the process's RSS, is the `rss` test binary: alone in its
//! process, since every other test here would grow the RSS meanwhile.)

use understudy_core::GenerateRequest;
use understudy_testkit::{Reply, SimProvider, TestGateway};
use understudy_types::{ChatRequest, RouteSelector};

fn pinned(model: &str) -> GenerateRequest {
    GenerateRequest::new(ChatRequest::user("x")).route(RouteSelector::pin(&format!("groq:{model}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_breakers_and_their_labels_are_bounded() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::status(503));
    openai.always(Reply::text("ok"));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        .toml("[server]\nmax_pinned_targets = 16\n[breaker]\nfailure_threshold = 1\ncooldown = 600")
        .build()
        .await
        .unwrap();
    // The configured primary opens too, and must stay listed.
    gw.engine
        .generate(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap();
    for i in 0..300 {
        let g = gw
            .engine
            .generate(pinned(&format!("pin-{i}")))
            .await
            .unwrap();
        assert_eq!(g.provider, "openai");
    }
    let breakers: Vec<String> = gw
        .engine
        .providers()
        .await
        .unwrap()
        .into_iter()
        .flat_map(|p| {
            p.breakers
                .into_iter()
                .map(move |b| format!("{}:{}", p.name, b.model))
        })
        .collect();
    assert!(
        breakers.contains(&"groq:groq-model".to_owned()),
        "{breakers:?}"
    );
    let pins = breakers
        .iter()
        .filter(|b| b.starts_with("groq:pin-"))
        .count();
    assert_eq!(pins, 16, "{breakers:?}");
    // The newest pins are the ones kept.
    assert!(breakers.contains(&"groq:pin-299".to_owned()));
    assert!(!breakers.contains(&"groq:pin-0".to_owned()));
    // /metrics keeps a label set for the kept ones only.
    let metrics = gw.engine.metrics_text(false).await;
    let labelled = metrics
        .lines()
        .filter(|l| l.starts_with("understudy_breaker_open{"))
        .count();
    assert!(
        labelled <= 16 + 2,
        "{labelled} breaker label sets:\n{metrics}"
    );
}
