//! Pure decision logic, no I/O, no clock reads, no randomness (time and
//! jitter are inputs): what happens next in a request (`decide`), which
//! targets it walks (`plan`), which timeouts bound an attempt (`timeouts`),
//! what a target's streamed events mean (`stream`: progress, commitment,
//! the end of an attempt), how a refused request is softened, what a refusal policy allows, how
//! long a rate limit is waited out, when a target is benched, which spend
//! window a moment falls in. A tidy test (`xtask/src/tidy.rs`) fails if a
//! module here imports anything that does I/O.

pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod decide;
pub mod keys;
pub mod output;
pub mod plan;
pub mod refusal;
pub mod softening;
pub mod stream;
pub mod timeouts;
