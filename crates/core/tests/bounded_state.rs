//! Client-chosen names cannot grow the gateway's state: a model name that
//! is too long or has control characters is refused before any work, and
//! the breakers (and their metric labels) of targets only clients pinned
//! are bounded by `server.max_pinned_targets`, least recently used out;
//! configured targets are never forgotten. Through real HTTP to a failing
//! simulator.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use understudy_core::{ChatRequest, Error, GenerateRequest, RouteSelector};
use understudy_testkit::{Reply, SimProvider, TestGateway};

/// The process's resident set, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The tests of this file one at a time: the RSS is the whole process's,
/// so the other test's gateway growing meanwhile (5 to 11 MB) would count
/// against the one that measures it (about 1.3 MB alone).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn pinned(model: &str) -> GenerateRequest {
    GenerateRequest::new(ChatRequest::user("x")).route(RouteSelector::pin(&format!("groq:{model}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_or_odd_model_names_are_refused_before_any_work() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let groq = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .build()
        .await
        .unwrap();
    // The probe: 400 pins of half a megabyte each.
    let before = rss_kib();
    for i in 0..400 {
        let model = format!("{i}{}", "m".repeat(500_000));
        let err = gw.engine.generate(pinned(&model)).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidRequest { field: "model", .. }),
            "{err:?}"
        );
    }
    let grown = rss_kib().saturating_sub(before);
    assert!(grown < 10 * 1024, "RSS grew by {grown} KiB");
    for odd in ["line\nbreak", "tab\there", "nul\0"] {
        let err = gw.engine.generate(pinned(odd)).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidRequest { field: "model", .. }),
            "{odd:?}"
        );
    }
    assert_eq!(groq.request_count(), 0, "no provider saw any of them");
    // A long but sane name is fine.
    groq.always(Reply::text("ok"));
    let g = gw.engine.generate(pinned(&"m".repeat(200))).await.unwrap();
    assert_eq!(g.provider, "groq");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_breakers_and_their_labels_are_bounded() {
    let _alone = ONE_AT_A_TIME.lock().await;
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
