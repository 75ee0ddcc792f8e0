//! The gate's table as data, and — in paused time, nothing sleeping in
//! wall-clock time — a request that returns within the bound while a fetch
//! hangs, the fetch that goes on after the request gave up, and a fetch
//! that times out opening the fall-back-at-once window.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::*;
use crate::adapter::{BoxFuture, CredentialStatus};

#[test]
fn the_table() {
    let t0 = Instant::now();
    let ms = |n: u64| Duration::from_millis(n);
    let state = |flight: Option<u64>, failed: Option<u64>| GateState {
        flight: flight.map(|n| t0 + ms(n)),
        failed: failed.map(|n| t0 + ms(n)),
    };
    // (usable, state, now in ms after t0, verdict)
    let cases = [
        (true, state(None, None), 0, Verdict::Go),
        // Held credentials win over a failed or hanging fetch.
        (true, state(Some(0), Some(0)), 60_000, Verdict::Go),
        (false, state(None, None), 0, Verdict::Fetch),
        (
            false,
            state(Some(0), None),
            100,
            Verdict::WaitUntil(t0 + CREDENTIAL_WAIT),
        ),
        // A fetch older than the bound is hanging: no wait at all.
        (false, state(Some(0), None), 500, Verdict::Skip),
        (false, state(Some(0), None), 14_000, Verdict::Skip),
        // A failure opens the window; past it, a new fetch.
        (false, state(None, Some(0)), 4_999, Verdict::Skip),
        (false, state(None, Some(0)), 5_000, Verdict::Fetch),
    ];
    for (usable, state, now, want) in cases {
        assert_eq!(
            verdict(usable, state, t0 + ms(now)),
            want,
            "usable {usable}, {state:?}, at {now} ms"
        );
    }
}

/// Credentials whose fetch hangs until told to answer.
#[derive(Debug, Default)]
struct Slow {
    gate: CredentialGate,
    held: AtomicBool,
    /// Fetches begun, and whether a fetch answers (else it hangs).
    fetches: AtomicU32,
    answers: AtomicBool,
    done: AtomicU32,
}

impl Credentials for Slow {
    fn refresh(&self) -> BoxFuture<'_, Result<(), String>> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            while !self.answers.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            self.held.store(true, Ordering::SeqCst);
            self.done.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }

    fn refresh_in(&self) -> Option<Duration> {
        Some(Duration::from_secs(3600))
    }

    fn status(&self) -> CredentialStatus {
        CredentialStatus {
            source: "a slow test token".into(),
            expires_at: None,
            error: None,
        }
    }

    fn usable(&self) -> bool {
        self.held.load(Ordering::SeqCst)
    }

    fn gate(&self) -> Option<&CredentialGate> {
        Some(&self.gate)
    }
}

/// `Slow` credentials whose gate's fetches run as the actor runs them: on
/// a task of their own, under `timeout`.
fn slow(timeout: Duration) -> Arc<Slow> {
    let creds = Arc::new(Slow::default());
    let weak = Arc::downgrade(&creds);
    creds.gate.attach(Box::new(move || {
        let Some(creds) = weak.upgrade() else {
            return false;
        };
        tokio::spawn(refresh(creds, timeout));
        true
    }));
    creds
}

async fn ready(creds: &Arc<Slow>) -> bool {
    creds.gate.ready(|| creds.usable()).await
}

#[tokio::test(start_paused = true)]
async fn a_request_returns_within_the_bound_while_a_fetch_hangs_and_the_fetch_goes_on() {
    let creds = slow(Duration::from_secs(60));
    let asked = Instant::now();
    assert!(!ready(&creds).await, "nothing is held");
    assert_eq!(asked.elapsed(), CREDENTIAL_WAIT);
    assert_eq!(creds.fetches.load(Ordering::SeqCst), 1);
    // The fetch began more than the bound ago: the next requests do not
    // wait at all, and start no other fetch.
    for _ in 0..8 {
        let asked = Instant::now();
        assert!(!ready(&creds).await);
        assert_eq!(asked.elapsed(), Duration::ZERO);
    }
    assert_eq!(creds.fetches.load(Ordering::SeqCst), 1);
    // The fetch went on after the request gave up: once it answers, the
    // credentials are held and requests go at once.
    creds.answers.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(creds.done.load(Ordering::SeqCst), 1);
    let asked = Instant::now();
    assert!(ready(&creds).await);
    assert_eq!(asked.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn requests_arriving_during_a_quick_fetch_share_it() {
    let creds = slow(Duration::from_secs(60));
    creds.answers.store(true, Ordering::SeqCst);
    // Sixteen requests at once: one fetch, and all of them go with it.
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let creds = Arc::clone(&creds);
            tokio::spawn(async move { ready(&creds).await })
        })
        .collect();
    for task in tasks {
        assert!(task.await.unwrap());
    }
    assert_eq!(creds.fetches.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_fetch_opens_the_fall_back_at_once_window() {
    let creds = slow(Duration::from_secs(15));
    assert!(!ready(&creds).await);
    // The fetch times out (its own timeout, on its own task).
    tokio::time::sleep(Duration::from_secs(15)).await;
    tokio::task::yield_now().await;
    assert!(
        creds.gate.snapshot().failed.is_some(),
        "the timeout failed it"
    );
    assert!(!creds.gate.fetching());
    // Within the window: at once, no new fetch.
    let asked = Instant::now();
    assert!(!ready(&creds).await);
    assert_eq!(asked.elapsed(), Duration::ZERO);
    assert_eq!(creds.fetches.load(Ordering::SeqCst), 1);
    // Past it, a request asks again; this one answers.
    tokio::time::sleep(CREDENTIAL_RETRY).await;
    creds.answers.store(true, Ordering::SeqCst);
    let asked = Instant::now();
    assert!(ready(&creds).await);
    assert!(asked.elapsed() < CREDENTIAL_WAIT);
    assert_eq!(creds.fetches.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn with_nobody_to_fetch_the_target_is_passed_over() {
    let creds = Slow::default();
    assert!(!creds.gate.ready(|| creds.usable()).await);
    // The failed kick opened the window.
    assert!(creds.gate.snapshot().failed.is_some());
    assert!(creds.gate.try_begin());
    assert!(!creds.gate.try_begin(), "one fetch at a time");
    creds.gate.finish(true);
    creds.gate.settled().await;
}

/// Credentials whose fetch ends well after [`FORGETFUL_FETCH`] but leaves
/// nothing usable, as a token that a 401 cleared again at once.
#[derive(Debug, Default)]
struct Forgetful {
    gate: CredentialGate,
    fetches: AtomicU32,
}

const FORGETFUL_FETCH: Duration = Duration::from_millis(200);

impl Credentials for Forgetful {
    fn refresh(&self) -> BoxFuture<'_, Result<(), String>> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            tokio::time::sleep(FORGETFUL_FETCH).await;
            Ok(())
        })
    }

    fn refresh_in(&self) -> Option<Duration> {
        Some(Duration::from_secs(3600))
    }

    fn status(&self) -> CredentialStatus {
        CredentialStatus {
            source: "a forgetful test token".into(),
            expires_at: None,
            error: None,
        }
    }

    fn usable(&self) -> bool {
        false
    }

    fn gate(&self) -> Option<&CredentialGate> {
        Some(&self.gate)
    }
}

#[tokio::test(start_paused = true)]
async fn fetches_that_leave_nothing_usable_do_not_stretch_the_bound() {
    let creds = Arc::new(Forgetful::default());
    let weak = Arc::downgrade(&creds);
    creds.gate.attach(Box::new(move || {
        let Some(creds) = weak.upgrade() else {
            return false;
        };
        tokio::spawn(refresh(creds, Duration::from_secs(60)));
        true
    }));
    let asked = Instant::now();
    // Each fetch ends well, so the gate never opens its window: a wait
    // bounded per fetch would begin one after another for ever.
    let ready =
        tokio::time::timeout(Duration::from_secs(10), creds.gate.ready(|| creds.usable())).await;
    assert_eq!(ready, Ok(false), "the wait outlived the bound");
    assert_eq!(asked.elapsed(), CREDENTIAL_WAIT);
    // Fetches began at 0, 200 and 400 ms; none after the bound.
    assert_eq!(creds.fetches.load(Ordering::SeqCst), 3);
}
