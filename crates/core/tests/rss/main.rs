//! Client-chosen names cannot grow the gateway's state: a model name that
//! is too long or has control characters is refused before any work, which
//! a probe (400 pins of half a megabyte each) measures by the
//! process's resident set. The RSS is the whole process's, so this binary
//! holds this one test and nothing else: in the crate's `it` binary every
//! other test's gateway growing meanwhile (5 to 11 MB) would count against
//! the one that measures it (about 1.3 MB alone). The breakers of pinned
//! targets are bounded too: `it::bounded_state`.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use understudy_core::GenerateRequest;
use understudy_testkit::{Reply, SimProvider, TestGateway};
use understudy_types::{ChatRequest, Error, RouteSelector};

/// The process's resident set, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn pinned(model: &str) -> GenerateRequest {
    GenerateRequest::new(ChatRequest::user("x")).route(RouteSelector::pin(&format!("groq:{model}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_or_odd_model_names_are_refused_before_any_work() {
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
