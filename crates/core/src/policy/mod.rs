//! Pure decision logic, no I/O: which targets a request walks, how a
//! refused request is softened, what a refusal policy allows, how long a
//! rate limit is waited out, when a target is benched.

pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod plan;
pub mod refusal;
pub mod softening;
