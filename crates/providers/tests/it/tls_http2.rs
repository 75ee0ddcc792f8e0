//! Providers over TLS, through the real engine to the testkit's TLS
//! simulator (certificates made at test time): HTTP/2 negotiated by ALPN,
//! `http1_only`, a private CA trusted through `ca_file` (and refused
//! without it), and connection reuse under load — concurrent requests and
//! concurrent streams multiplexed over one connection, no TLS handshake
//! after warm-up.

use std::time::Duration;

use reqwest::Version;
use understudy_core::GenerateRequest;
use understudy_testkit::{
    Protocol, Reply, StreamSpec, TestCerts, TestGateway, TlsOptions, TlsSimProvider, eventually,
};
use understudy_types::{ChatRequest, Error, FailureCode, Outcome, StreamItem};

/// A gateway whose only provider, `corp`, is `sim`, trusting its CA.
async fn gateway(sim: &TlsSimProvider, extra: &[&str]) -> TestGateway {
    let mut builder = TestGateway::builder()
        .provider("corp", sim)
        .provider_option(
            "corp",
            &format!("ca_file = {:?}", sim.ca_file().display().to_string()),
        );
    for line in extra {
        builder = builder.provider_option("corp", line);
    }
    builder.build().await.unwrap()
}

async fn ask(gw: &TestGateway) -> Result<understudy_core::Generation, Error> {
    gw.engine
        .generate(GenerateRequest::new(ChatRequest::user("hi")))
        .await
}

/// Runs `n` non-streamed requests at once; all must succeed.
async fn wave(gw: &TestGateway, n: usize) {
    let engine = gw.engine.clone();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let engine = engine.clone();
            tokio::spawn(async move {
                engine
                    .generate(GenerateRequest::new(ChatRequest::user("hi")))
                    .await
            })
        })
        .collect();
    for t in tasks {
        let g = t.await.unwrap().unwrap();
        assert_eq!(g.provider, "corp");
    }
}

/// `n` streamed requests at once, each task returning its text.
fn streams(gw: &TestGateway, n: usize) -> Vec<tokio::task::JoinHandle<String>> {
    (0..n)
        .map(|_| {
            let engine = gw.engine.clone();
            tokio::spawn(async move {
                let mut s = engine
                    .generate_stream(GenerateRequest::new(ChatRequest::user("stream")))
                    .await
                    .unwrap();
                let mut text = String::new();
                while let Some(item) = s.next().await {
                    match item {
                        StreamItem::Delta(t) => text.push_str(&t),
                        StreamItem::Done(_) => return text,
                        StreamItem::Error(e) => panic!("stream failed: {e:?}"),
                        _ => {}
                    }
                }
                panic!("the stream ended without Done");
            })
        })
        .collect()
}

/// Waits until the simulator has `n` streams open at once.
async fn all_open(sim: &TlsSimProvider, n: usize, what: &str) {
    eventually(what, async || match sim.streams_open() {
        open if open == n => Ok(()),
        open => Err(format!("{open} open")),
    })
    .await;
}

#[tokio::test]
async fn a_provider_with_its_ca_file_is_reached_over_http2() {
    let sim = TlsSimProvider::start(Protocol::ChatCompletions)
        .await
        .unwrap();
    sim.push(Reply::text("over TLS"));
    assert!(sim.base_url().starts_with("https://"));
    let gw = gateway(&sim, &[]).await;
    let g = ask(&gw).await.unwrap();
    assert_eq!(g.text, "over TLS");
    assert_eq!(sim.versions(), [Version::HTTP_2]);
    assert_eq!((sim.connections(), sim.handshakes()), (1, 1));
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

#[tokio::test]
async fn without_the_ca_file_the_certificate_is_refused_as_a_connection_failure() {
    let sim = TlsSimProvider::start(Protocol::ChatCompletions)
        .await
        .unwrap();
    let gw = TestGateway::builder()
        .provider("corp", &sim)
        .build()
        .await
        .unwrap();
    let Err(Error::ProvidersFailed { code, attempts }) = ask(&gw).await else {
        panic!("an untrusted certificate was accepted");
    };
    assert_eq!(code, FailureCode::Connection);
    let attempt = &attempts[0];
    assert_eq!(attempt.outcome, Outcome::Failed(FailureCode::Connection));
    let detail = attempt.detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains("certificate") && detail.contains("UnknownIssuer"),
        "{detail}"
    );
    // The key never appears in what is reported.
    assert!(!detail.contains(&TestGateway::key_for("corp")), "{detail}");
    assert_eq!(sim.request_count(), 0);
    assert_eq!(sim.handshakes(), 0);
    eventually("the refused handshake", async || {
        sim.failed_handshakes() >= 1
    })
    .await;
}

#[tokio::test]
async fn http1_only_gets_http1_and_a_provider_without_http2_is_reached_over_http1() {
    let sim = TlsSimProvider::start(Protocol::Messages).await.unwrap();
    let gw = gateway(&sim, &["http1_only = true"]).await;
    ask(&gw).await.unwrap();
    ask(&gw).await.unwrap();
    assert_eq!(sim.versions(), [Version::HTTP_11, Version::HTTP_11]);
    assert_eq!(sim.handshakes(), 1, "the HTTP/1.1 connection is kept alive");

    let old = TlsSimProvider::start_with(
        Protocol::GenerateContent,
        TlsOptions {
            http2: false,
            ..TlsOptions::default()
        },
    )
    .await
    .unwrap();
    let gw = gateway(&old, &[]).await;
    ask(&gw).await.unwrap();
    assert_eq!(old.versions(), [Version::HTTP_11]);
}

#[tokio::test]
async fn sixty_four_concurrent_requests_share_one_connection_and_warm_ones_shake_no_hands() {
    let sim = TlsSimProvider::start(Protocol::ChatCompletions)
        .await
        .unwrap();
    let gw = gateway(&sim, &[]).await;
    // Warm-up: one request opens the connection.
    ask(&gw).await.unwrap();
    assert_eq!((sim.connections(), sim.handshakes()), (1, 1));

    wave(&gw, 64).await;
    let (connections, handshakes) = (sim.connections(), sim.handshakes());
    assert!(
        connections <= 2,
        "{connections} connections for 64 requests"
    );
    assert_eq!(handshakes, connections);

    // A second wave: every request on a warm connection.
    wave(&gw, 64).await;
    assert_eq!(
        sim.handshakes(),
        handshakes,
        "a TLS handshake after warm-up"
    );
    assert_eq!(sim.connections(), connections);
    assert!(sim.versions().iter().all(|v| *v == Version::HTTP_2));
    assert_eq!(sim.request_count(), 129);
}

#[tokio::test]
async fn concurrent_streams_are_multiplexed_over_one_connection() {
    let sim = TlsSimProvider::start(Protocol::ChatCompletions)
        .await
        .unwrap();
    let words: Vec<String> = (0..20).map(|i| format!(" w{i}")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    sim.always(
        StreamSpec::new(&words)
            .every(Duration::from_millis(100))
            .reply(),
    );
    let gw = gateway(&sim, &[]).await;
    ask(&gw).await.unwrap();

    let n = 64;
    let tasks = streams(&gw, n);
    // All of them open at once (each lasts about 2 s, so that they overlap
    // on a loaded machine too), on one connection.
    all_open(&sim, n, "64 streams open at once").await;
    assert_eq!(sim.connections(), 1);
    for t in tasks {
        assert_eq!(t.await.unwrap(), words.concat());
    }
    assert_eq!((sim.connections(), sim.handshakes()), (1, 1));
    assert!(sim.versions().iter().all(|v| *v == Version::HTTP_2));
}

#[tokio::test]
async fn past_a_connection_s_stream_limit_requests_overflow_to_http1_instead_of_waiting() {
    let limit = 100;
    let sim = TlsSimProvider::start_with(
        Protocol::ChatCompletions,
        TlsOptions {
            max_concurrent_streams: Some(limit),
            ..TlsOptions::default()
        },
    )
    .await
    .unwrap();
    sim.always(
        StreamSpec::new(&[" a", " b", " c", " d", " e", " f", " g", " h"])
            .every(Duration::from_millis(250))
            .reply(),
    );
    let gw = gateway(&sim, &[]).await;
    ask(&gw).await.unwrap();

    let n = 150;
    let tasks = streams(&gw, n);
    // All open at once: none waits for a stream slot on the connection.
    all_open(&sim, n, "150 streams open at once").await;
    for t in tasks {
        t.await.unwrap();
    }
    let versions = sim.versions();
    let h2 = versions.iter().filter(|v| **v == Version::HTTP_2).count();
    assert_eq!(
        h2,
        1 + limit as usize,
        "the connection's streams are used first"
    );
    assert_eq!(versions.len() - h2, n - limit as usize);
    assert_eq!(sim.handshakes(), sim.connections());
}

#[tokio::test]
async fn a_ca_file_may_hold_several_certificates_and_a_broken_one_is_named() {
    let sim = TlsSimProvider::start(Protocol::ChatCompletions)
        .await
        .unwrap();
    let other = TestCerts::generate().unwrap();
    let dir = std::env::temp_dir();
    let bundle = dir.join(format!("understudy-tls-bundle-{}.pem", std::process::id()));
    std::fs::write(&bundle, format!("{}{}", other.ca_pem(), sim.ca_pem())).unwrap();
    let gw = TestGateway::builder()
        .provider("corp", &sim)
        .provider_option(
            "corp",
            &format!("ca_file = {:?}", bundle.display().to_string()),
        )
        .build()
        .await
        .unwrap();
    ask(&gw).await.unwrap();
    let _ = std::fs::remove_file(&bundle);

    // The PEM markers are there, the certificate inside is not.
    let broken = dir.join(format!("understudy-tls-broken-{}.pem", std::process::id()));
    std::fs::write(
        &broken,
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let err = TestGateway::builder()
        .provider("corp", &sim)
        .provider_option(
            "corp",
            &format!("ca_file = {:?}", broken.display().to_string()),
        )
        .build()
        .await
        .unwrap_err()
        .to_string();
    let _ = std::fs::remove_file(&broken);
    assert!(err.contains("providers.corp.ca_file"), "{err}");
    assert!(err.contains("understudy-tls-broken"), "{err}");
    assert!(err.contains("certificate 1"), "{err}");
    assert!(!err.contains(&TestGateway::key_for("corp")), "{err}");

    // Shaped like a certificate (a DER SEQUENCE), so the settings load; the
    // provider's client refuses it, naming the setting, when it is built.
    std::fs::write(
        &broken,
        "-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let gw = TestGateway::builder()
        .provider("corp", &sim)
        .provider_option(
            "corp",
            &format!("ca_file = {:?}", broken.display().to_string()),
        )
        .build()
        .await
        .unwrap();
    let _ = std::fs::remove_file(&broken);
    let Err(Error::ProvidersFailed { attempts, .. }) = ask(&gw).await else {
        panic!("a broken CA was used");
    };
    let detail = attempts[0].detail.as_deref().unwrap_or_default();
    assert!(detail.contains("providers.corp.ca_file"), "{detail}");
    assert!(
        detail.contains("certificate 1 is not a usable CA"),
        "{detail}"
    );
}

#[tokio::test]
async fn streams_whose_readers_stall_do_not_block_the_connection_for_the_others() {
    let sim = TlsSimProvider::start(Protocol::ChatCompletions)
        .await
        .unwrap();
    let gw = gateway(&sim, &[]).await;
    ask(&gw).await.unwrap();
    // Streams of 3 MB each that nobody reads: what the upstream sends piles
    // up in the gateway's HTTP/2 buffers, as behind a stalled client.
    let chunk = "x".repeat(1024);
    let chunks: Vec<&str> = std::iter::repeat_n(chunk.as_str(), 3 * 1024).collect();
    sim.push_n(4, StreamSpec::new(&chunks).reply());
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(
            gw.engine
                .generate_stream(GenerateRequest::new(ChatRequest::user("stream")))
                .await
                .unwrap(),
        );
    }
    // Until each stream has filled the window the gateway grants it (the
    // providers' `H2_STREAM_WINDOW`, 512 KiB), a request could still pass
    // a connection the stalled streams would block.
    let filled = 4 * 512 * 1024;
    eventually(
        "the unread streams to fill their windows",
        async || match sim.sim().streamed_bytes() {
            sent if sent >= filled => Ok(()),
            sent => Err(format!("{sent} of {filled} bytes sent")),
        },
    )
    .await;
    // Another request on the same connection still gets its answer.
    sim.push(Reply::text("still flowing"));
    let g = tokio::time::timeout(Duration::from_secs(5), ask(&gw))
        .await
        .expect("the connection is blocked by the stalled streams")
        .unwrap();
    assert_eq!(g.text, "still flowing");
    assert_eq!(sim.connections(), 1);
    drop(held);
}
