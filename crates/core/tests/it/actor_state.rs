//! What a provider's actor owns beyond its counts: an adapter whose panic
//! makes the supervisor build a fresh one (and its pool), and credentials
//! that the actor refreshes ahead of their expiry on its own schedule, so
//! that no request waits on a refresh.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use understudy_core::{
    Adapter, AdapterFactory, BoxEventStream, BoxFuture, CredentialStatus, Credentials, Engine,
    GenerateRequest,
};
use understudy_settings::{ProviderSettings, Settings};
use understudy_testkit::eventually;
use understudy_types::{ChatRequest, Completion, Failure, FailureKind, FinishReason, Protocol};

/// Builds adapters that count themselves; the first one built for `groq`
/// panics on every call.
#[derive(Debug, Default)]
struct Counting {
    builds: AtomicUsize,
    refreshes: Arc<AtomicU32>,
    /// Hand the actor credentials that want refreshing every this long.
    refresh_every: Option<Duration>,
    /// Their first refresh panics (a bug in a credentials source).
    first_refresh_panics: bool,
}

#[derive(Debug)]
struct Answering {
    name: String,
    generation: usize,
    credentials: Option<Arc<dyn Credentials>>,
}

#[derive(Debug)]
struct Token {
    refreshes: Arc<AtomicU32>,
    every: Duration,
    first_panics: bool,
}

impl Credentials for Token {
    fn refresh(&self) -> BoxFuture<'_, Result<(), String>> {
        let n = self.refreshes.fetch_add(1, Ordering::SeqCst);
        assert!(
            !(self.first_panics && n == 0),
            "a bug in a credentials source"
        );
        Box::pin(async { Ok(()) })
    }

    fn refresh_in(&self) -> Option<Duration> {
        Some(self.every)
    }

    fn status(&self) -> CredentialStatus {
        CredentialStatus {
            source: "a test token".into(),
            expires_at: None,
            error: None,
        }
    }
}

impl AdapterFactory for Counting {
    fn supports(&self, _: Protocol) -> bool {
        true
    }

    fn build(&self, settings: &ProviderSettings) -> Result<Arc<dyn Adapter>, String> {
        let generation = if settings.name == "groq" {
            self.builds.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            0
        };
        let credentials = self.refresh_every.map(|every| {
            Arc::new(Token {
                refreshes: Arc::clone(&self.refreshes),
                every,
                first_panics: self.first_refresh_panics,
            }) as Arc<dyn Credentials>
        });
        Ok(Arc::new(Answering {
            name: settings.name.clone(),
            generation,
            credentials,
        }))
    }
}

impl Adapter for Answering {
    fn complete<'a>(
        &'a self,
        model: &'a str,
        _: &'a ChatRequest,
        _: &'a understudy_core::CallOptions,
    ) -> BoxFuture<'a, Result<Completion, Failure>> {
        Box::pin(async move {
            assert!(
                !(self.name == "groq" && self.generation == 1),
                "the first groq adapter is broken"
            );
            Ok(Completion {
                text: format!("{} #{}", self.name, self.generation),
                tool_calls: Vec::new(),
                model: model.to_owned(),
                finish_reason: FinishReason::Stop,
                usage: None,
                response_id: None,
                native: None,
                rate_limits: None,
                fallback_credit: None,
            })
        })
    }

    fn stream<'a>(
        &'a self,
        _: &'a str,
        _: &'a ChatRequest,
        _: &'a understudy_core::CallOptions,
    ) -> BoxFuture<'a, Result<BoxEventStream, Failure>> {
        Box::pin(async { Err(Failure::new(FailureKind::BadRequest, "not streamed here")) })
    }

    fn credentials(&self) -> Option<Arc<dyn Credentials>> {
        self.credentials.clone()
    }
}

fn settings() -> Settings {
    Settings::from_toml_str(
        "[providers.groq]\napi_key = \"k\"\n[providers.openai]\napi_key = \"k\"\n[routing]\norder = [\"groq\", \"openai\"]",
        |_| None,
    )
    .unwrap()
}

/// A request never asked before (the response cache is on by default).
fn ask() -> GenerateRequest {
    static N: AtomicUsize = AtomicUsize::new(0);
    GenerateRequest::new(ChatRequest::user(format!(
        "x{}",
        N.fetch_add(1, Ordering::SeqCst)
    )))
}

#[tokio::test]
async fn an_adapter_panic_fails_the_attempt_and_the_supervisor_builds_a_fresh_adapter() {
    let factory = Arc::new(Counting::default());
    let engine = Engine::start(settings(), Arc::clone(&factory) as Arc<dyn AdapterFactory>)
        .await
        .unwrap();
    // The broken adapter's attempt is an outage: the fallback serves.
    let g = engine.generate(ask()).await.unwrap();
    assert_eq!(g.provider, "openai");
    assert_eq!(
        g.attempts[0].outcome.as_str(),
        "unavailable",
        "{:?}",
        g.attempts
    );
    // The actor heard of it and failed; its supervisor built groq anew.
    eventually("a fresh groq adapter", async || {
        factory.builds.load(Ordering::SeqCst) == 2
    })
    .await;
    eventually("groq to serve with it", async || {
        let g = engine.generate(ask()).await.unwrap();
        if g.provider == "groq" && g.text == "groq #2" {
            Ok(())
        } else {
            Err(format!(
                "{} served {:?} after {:?}",
                g.provider, g.text, g.attempts
            ))
        }
    })
    .await;
}

// Paused time: the actor's schedule is the only clock that moves, so
// "refreshed six times in a minute" is its schedule, not the machine's
// speed.
#[tokio::test(start_paused = true)]
async fn the_actor_refreshes_credentials_on_their_schedule() {
    let factory = Arc::new(Counting {
        refresh_every: Some(Duration::from_secs(10)),
        ..Counting::default()
    });
    let refreshes = Arc::clone(&factory.refreshes);
    let engine = Engine::start(settings(), Arc::clone(&factory) as Arc<dyn AdapterFactory>)
        .await
        .unwrap();
    // Providers start on first use; the first fetch is at the start, not
    // in a request.
    let _ = engine.generate(ask()).await;
    eventually("the first fetch", async || {
        refreshes.load(Ordering::SeqCst) >= 1
    })
    .await;
    let first = refreshes.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(61)).await;
    let after = refreshes.load(Ordering::SeqCst);
    // groq's and openai's actors each refresh every 10 s.
    assert!(
        (first + 10..=first + 14).contains(&after),
        "{first} then {after}"
    );
    let status = engine
        .providers()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == "openai")
        .and_then(|p| p.stats)
        .and_then(|s| s.credentials);
    assert_eq!(status.map(|s| s.source), Some("a test token".to_owned()));
}

// Paused time, as above: a refresh that panics is a failed one, and the
// actor's schedule goes on (2 s later, then every 10 s).
#[tokio::test(start_paused = true)]
async fn a_refresh_that_panics_is_retried_and_the_schedule_goes_on() {
    let factory = Arc::new(Counting {
        refresh_every: Some(Duration::from_secs(10)),
        first_refresh_panics: true,
        ..Counting::default()
    });
    let refreshes = Arc::clone(&factory.refreshes);
    let mut settings = settings();
    settings.providers.retain(|name, _| name == "groq");
    let engine = Engine::start(settings, Arc::clone(&factory) as Arc<dyn AdapterFactory>)
        .await
        .unwrap();
    let _ = engine.generate(ask()).await;
    eventually("the first, panicking, refresh", async || {
        refreshes.load(Ordering::SeqCst) >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_secs(33)).await;
    // At 0 s (panics), 2 s, 12 s, 22 s, 32 s.
    let after = refreshes.load(Ordering::SeqCst);
    assert!((4..=6).contains(&after), "{after} refreshes");
}
