//! How long a request may wait on credentials, and who fetches them.
//!
//! A [`CredentialGate`] sits beside credentials that are fetched (a Vertex
//! access token) or read (AWS keys from a profile) by the provider's actor.
//! It records whether a fetch is under way and when the last one failed,
//! and it is what a request asks before it signs:
//!
//! - credentials held: go at once;
//! - a fetch under way: wait for it, but never past [`CREDENTIAL_WAIT`]
//!   after it began (a fetch that has taken longer than that is hanging,
//!   and a request arriving then passes the target over at once);
//! - the last fetch failed less than [`CREDENTIAL_RETRY`] ago (an
//!   exchange that timed out included): pass the target over at once, as
//!   behind an open breaker;
//! - otherwise: ask the actor for a fetch and wait for it, at most
//!   [`CREDENTIAL_WAIT`].
//!
//! However many fetches begin and end while a request waits (one that
//! ends well but leaves nothing usable begins another), one wait ends at
//! most [`CREDENTIAL_WAIT`] after it began: an attempt on a target waits
//! once before it is sent, and once more for credentials renewed after a
//! refusal.
//!
//! The fetch itself always runs on a task the actor spawns, under its own
//! timeout (`refresh`): a request that stops waiting never cancels it,
//! and its outcome serves the requests that come after.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The longest a request waits for credentials: well under any target's
/// first-token timeout, long enough for a token endpoint that answers to
/// answer (an exchange takes tens of milliseconds).
pub const CREDENTIAL_WAIT: Duration = Duration::from_millis(500);

/// After a failed fetch, requests pass the target over at once for this
/// long rather than each asking for another fetch (the actor goes on
/// trying on its own schedule meanwhile).
pub const CREDENTIAL_RETRY: Duration = Duration::from_secs(5);

/// Credentials that expire or change. The provider's actor calls
/// [`Credentials::refresh`] when [`Credentials::refresh_in`] says, or when
/// a request finds none usable (through the [`CredentialGate`]); the
/// adapter reads the current ones on every request and never fetches them
/// on the request's task.
pub trait Credentials: Send + Sync + fmt::Debug + 'static {
    /// Fetches (or reads again) the credentials now; on an error the ones
    /// held stay in use until they expire.
    fn refresh(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;

    /// How long until the next refresh is due (`None`: never, they do not
    /// change).
    fn refresh_in(&self) -> Option<Duration>;

    /// Where they come from and when they expire, for `understudy
    /// providers`. Never the secret.
    fn status(&self) -> CredentialStatus;

    /// Whether a request could sign with them now (credentials held that
    /// have not expired).
    fn usable(&self) -> bool {
        true
    }

    /// The gate that bounds how long a request waits for them to be
    /// fetched, when they are fetched at all (see this module).
    fn gate(&self) -> Option<&CredentialGate> {
        None
    }
}

/// What [`Credentials::status`] reports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CredentialStatus {
    /// Where they come from: `environment`, a file and a profile, a
    /// service account's e-mail address, …
    pub source: String,
    /// When the ones held expire (Unix seconds), if they do.
    pub expires_at: Option<u64>,
    /// The last refresh's error (while the held ones are still in use, or
    /// why there are none). Names no file and no value from one.
    pub error: Option<String>,
}

/// Whether a fetch is under way and how the last one went, shared by the
/// provider's actor (which fetches) and the requests (which wait, bounded).
#[derive(Default)]
pub struct CredentialGate {
    state: Mutex<GateState>,
    /// Woken when a fetch ends.
    ended: Notify,
    /// Asks the provider's actor for a fetch the caller has begun
    /// ([`CredentialGate::try_begin`]); `false` when the actor is gone.
    kick: OnceLock<Kick>,
}

/// See [`CredentialGate::attach`].
pub type Kick = Box<dyn Fn() -> bool + Send + Sync>;

/// What a request does about credentials now: see the module's docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Credentials are held: sign with them.
    Go,
    /// Pass the target over.
    Skip,
    /// Begin a fetch, then wait for it until the bound.
    Fetch,
    /// A fetch is under way: wait for it until this moment.
    WaitUntil(Instant),
}

#[derive(Debug, Default, Clone, Copy)]
struct GateState {
    /// When the fetch under way began.
    flight: Option<Instant>,
    /// When the last fetch failed (cleared by one that succeeds).
    failed: Option<Instant>,
}

impl std::fmt::Debug for CredentialGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialGate")
            .field("state", &self.snapshot())
            .finish_non_exhaustive()
    }
}

// === impl CredentialGate ===

impl CredentialGate {
    /// Where fetches are asked for: the provider's actor attaches a cast
    /// to itself when it starts (tests attach their own). Attached once;
    /// a later call is ignored.
    pub fn attach(&self, kick: Kick) {
        let _ = self.kick.set(kick);
    }

    /// Whether credentials will be held, given `usable` (whether they are
    /// now): at once, or after waiting for a fetch at most
    /// [`CREDENTIAL_WAIT`]. `false` means the target is passed over.
    ///
    /// The bound holds for the whole call, not for each fetch: a fetch
    /// that ends well but leaves nothing usable by the time this waiter
    /// wakes (a token a 401 had cleared again) begins another, but the
    /// waiting still ends [`CREDENTIAL_WAIT`] after the call began.
    pub async fn ready(&self, usable: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + CREDENTIAL_WAIT;
        loop {
            if Instant::now() >= deadline {
                // Woken at the bound: no other fetch is begun for a
                // waiter that is about to give up.
                return usable();
            }
            // Registered before the state is read: a fetch that ends in
            // between still wakes this waiter.
            let ended = self.ended.notified();
            let mut ended = std::pin::pin!(ended);
            ended.as_mut().enable();
            let until = {
                let now = Instant::now();
                let mut state = self.lock();
                match verdict(usable(), *state, now) {
                    Verdict::Go => return true,
                    Verdict::Skip => return false,
                    Verdict::WaitUntil(until) => until,
                    Verdict::Fetch => {
                        state.flight = Some(now);
                        drop(state);
                        if !self.kick.get().is_some_and(|kick| kick()) {
                            // Nobody to fetch: the target is out until one is.
                            self.finish(false);
                            return usable();
                        }
                        now + CREDENTIAL_WAIT
                    }
                }
            };
            if tokio::time::timeout_at(until.min(deadline), ended)
                .await
                .is_err()
            {
                return usable();
            }
        }
    }

    /// Begins a fetch unless one is under way (the actor's own schedule):
    /// whether the caller is to make it.
    pub fn try_begin(&self) -> bool {
        let mut state = self.lock();
        if state.flight.is_some() {
            return false;
        }
        state.flight = Some(Instant::now());
        true
    }

    /// A fetch ended: requests waiting on it are woken, and a failure
    /// opens the window in which requests pass the target over at once.
    pub fn finish(&self, ok: bool) {
        {
            let mut state = self.lock();
            state.flight = None;
            state.failed = (!ok).then(Instant::now);
        }
        self.ended.notify_waiters();
    }

    /// Whether a fetch is under way that has not failed before (the
    /// first one, or the first since credentials were last held).
    pub fn fetching(&self) -> bool {
        let state = self.snapshot();
        state.flight.is_some() && state.failed.is_none()
    }

    /// Waits until no fetch is under way (`understudy providers` shows
    /// how the first one ended).
    pub async fn settled(&self) {
        loop {
            let ended = self.ended.notified();
            let mut ended = std::pin::pin!(ended);
            ended.as_mut().enable();
            if self.snapshot().flight.is_none() {
                return;
            }
            ended.await;
        }
    }

    fn snapshot(&self) -> GateState {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a request does about credentials at `now`, given whether they are
/// `usable` and the gate's `state` (the module's table).
fn verdict(usable: bool, state: GateState, now: Instant) -> Verdict {
    if usable {
        return Verdict::Go;
    }
    if let Some(began) = state.flight {
        let until = began + CREDENTIAL_WAIT;
        return if now < until {
            Verdict::WaitUntil(until)
        } else {
            Verdict::Skip
        };
    }
    match state.failed {
        Some(at) if now.saturating_duration_since(at) < CREDENTIAL_RETRY => Verdict::Skip,
        _ => Verdict::Fetch,
    }
}

/// One fetch of `credentials`, as the provider's actor makes it on a task
/// of its own: bounded by `timeout` (past it, a failure like any other),
/// a panic caught as a failure, and the gate told how it ended.
pub(crate) async fn refresh(
    credentials: Arc<dyn Credentials>,
    timeout: Duration,
) -> Result<(), String> {
    let fetch = Arc::clone(&credentials);
    let mut task = tokio::spawn(async move { fetch.refresh().await });
    let result = match tokio::time::timeout(timeout, &mut task).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err("the refresh panicked".to_owned()),
        Err(_) => {
            task.abort();
            Err(format!(
                "the refresh took longer than {} s",
                timeout.as_secs()
            ))
        }
    };
    if let Some(gate) = credentials.gate() {
        gate.finish(result.is_ok());
    }
    result
}

#[cfg(test)]
#[path = "credentials_tests.rs"]
mod tests;
