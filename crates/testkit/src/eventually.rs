//! [`eventually`]: waits for something that happens in the background — a
//! fire-and-forget Redis write lands, a restarted actor answers, an
//! upstream connection closes — by checking it again and again until a
//! deadline, then fails the test saying what it waited for and what it last
//! saw. A bare `sleep` before an assertion is both slow (it always waits the
//! worst case) and flaky (a loaded machine needs longer). After
//! ractor's `periodic_check`.
//!
//! ```no_run
//! # async fn demo(sim: &understudy_testkit::SimProvider) {
//! use understudy_testkit::eventually;
//!
//! // A bool: true when settled.
//! eventually("the upstream stream to close", async || sim.open_connections() == 0).await;
//! // An Option or a Result: the value when settled; `Err` says what was seen.
//! let n = eventually("two requests", async || match sim.request_count() {
//!     n @ 2.. => Ok(n),
//!     n => Err(format!("{n} so far")),
//! })
//! .await;
//! # let _ = n;
//! # }
//! ```
//!
//! Time is tokio's, so the helper also works under paused time.

use std::fmt;
use std::panic::Location;
use std::time::Duration;

use tokio::time::Instant;

/// How long [`eventually`] waits before it fails the test: generous, because
/// a condition that holds returns at once and only a broken one waits it out.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// How often the condition is checked.
const POLL_EVERY: Duration = Duration::from_millis(10);

/// What a condition returns: settled (with a value), or not yet (with what
/// it saw, for the failure message).
pub trait Settled {
    /// What [`eventually`] returns once the condition holds.
    type Value;

    /// The value, or a description of the state that is not settled yet.
    fn settled(self) -> Result<Self::Value, String>;
}

/// Polls `check` until it is settled, for at most [`PATIENCE`]; returns its
/// value, or panics with `what` (the thing awaited) and the last state seen.
#[track_caller]
pub fn eventually<C: Settled>(
    what: &str,
    check: impl AsyncFnMut() -> C,
) -> impl Future<Output = C::Value> {
    eventually_within(PATIENCE, what, check)
}

/// [`eventually`] with its own deadline, for waits that are slow when the
/// behaviour is right (a Redis writer reconnecting with backoff).
#[track_caller]
pub fn eventually_within<C: Settled>(
    patience: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> C,
) -> impl Future<Output = C::Value> {
    // Captured here, outside the future, so the failure names the test line.
    let caller = Location::caller();
    async move {
        let deadline = Instant::now() + patience;
        loop {
            let last = match check().await.settled() {
                Ok(value) => return value,
                Err(seen) => seen,
            };
            assert!(
                Instant::now() < deadline,
                "{caller}: waited {patience:?} for {what}; last seen: {last}"
            );
            tokio::time::sleep(POLL_EVERY).await;
        }
    }
}

// === impl Settled ===

impl Settled for bool {
    type Value = ();

    fn settled(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("the condition was false".into())
        }
    }
}

impl<T> Settled for Option<T> {
    type Value = T;

    fn settled(self) -> Result<T, String> {
        self.ok_or_else(|| "nothing yet".into())
    }
}

impl<T, E: fmt::Display> Settled for Result<T, E> {
    type Value = T;

    fn settled(self) -> Result<T, String> {
        self.map_err(|e| e.to_string())
    }
}
