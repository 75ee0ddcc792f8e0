//! Now and elapsed time on tokio's clock (paused in tests), as the std
//! `Instant`s that `understudy-policy` takes: the policies never read a
//! clock, so the engine reads this one and passes the time in.

use std::time::{Duration, Instant};

/// Now, on tokio's clock (paused in tests), as the std `Instant` the pure
/// policies take (the conversion is free).
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// How long since `t`, on tokio's clock (see [`now`]).
pub(crate) fn since(t: Instant) -> Duration {
    now().saturating_duration_since(t)
}
