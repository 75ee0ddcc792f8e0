//! Understudy's pure decisions: no I/O, no clock reads, no randomness
//! (time and jitter are inputs). The engine in `understudy-core` asks these
//! functions what to do and does it.
//!
//! # Layout
//! - `decide.rs`: the decision machine, what happens next in a request
//!   (`decide/tests.rs`: its table of cases, with the refusals in
//!   `decide/tests/refusals.rs` and a pinned session's in
//!   `decide/tests/sessions.rs`).
//! - `plan.rs`: which targets a request walks; `plan/groups.rs`: its
//!   groups of equivalent targets put in the group choice's order.
//! - `caller.rs`: the routing a request asked for (its `models`, provider
//!   preferences, `x-understudy-targets`) as the targets it walks
//!   (`caller/tests.rs`: its cases).
//! - `fit.rs`: whether a prompt fits a target's context window, and where
//!   a prompt too long for one goes next.
//! - `balance.rs`: which member of a group of equivalent targets goes
//!   first, and when a member is ejected for its error rate.
//! - `timeouts.rs`: which timeouts bound an attempt.
//! - `stream.rs`: what a target's streamed events mean (progress,
//!   commitment, the end of an attempt).
//! - `output.rs`: whether an answer meets the structured output asked for.
//! - `softening.rs`: how a refused request is softened.
//! - `backoff.rs`: how long a rate limit is waited out.
//! - `breaker.rs`: one target's circuit breaker, its state machine.
//! - `key_choice.rs`: which key of a pool serves a call, and when a key is
//!   benched.
//! - `budget.rs`: which spend window a moment falls in.
//! - `hedge.rs`: hedging's p95 estimate, which hedging applies (a group's
//!   own between its members, else the route's), when a backup starts, the
//!   share cap and why a backup is skipped.
//! - `affinity.rs`: a session's prompt cache (its kind, prices, lifetime,
//!   the prefix it holds) and the wait-or-switch rule
//!   (`affinity/tests.rs`: its table).
//!
//! Purity is held by Cargo and clippy: the dependency list names
//! `understudy-types`, `understudy-settings` and pure libraries only (a
//! tidy fence reads it), and `clippy.toml` bans clock reads, the
//! environment, files, threads and sockets.

pub mod affinity;
pub mod backoff;
pub mod balance;
pub mod breaker;
pub mod budget;
pub mod caller;
pub mod decide;
pub mod fit;
pub mod hedge;
pub mod key_choice;
pub mod output;
pub mod plan;
pub mod softening;
pub mod stream;
pub mod timeouts;

/// A base instant for tests (time is an input everywhere else).
#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests pick a base instant")]
pub(crate) fn test_now() -> std::time::Instant {
    std::time::Instant::now()
}
