//! A simulator starts for every provider protocol (each of
//! `Protocol::KINDS`, and Converse): a new provider protocol that the
//! simulator does not speak fails here, not in some other crate's test.

use understudy_testkit::{Protocol, SimProvider};

#[tokio::test]
async fn a_simulator_starts_for_every_provider_protocol() {
    for protocol in Protocol::KINDS.into_iter().chain([Protocol::Converse]) {
        let sim = SimProvider::start(protocol)
            .await
            .unwrap_or_else(|e| panic!("{protocol}: {e}"));
        assert_eq!(sim.protocol(), protocol);
        assert!(
            sim.base_url().starts_with("http://127.0.0.1:"),
            "{protocol}"
        );
    }
}
