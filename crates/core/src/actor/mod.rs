//! The actors. They own state; spawned tasks own I/O: no
//! `handle` here ever awaits a provider call or another actor's `call`.
//!
//! - [`router::RouterActor`] owns the routing state and publishes it as the
//!   view each request plans from (runs are not actors: see `crate::run`).
//! - [`provider::ProviderActor`] owns one provider's adapter and outcomes.
//! - `target_stats.rs`: the stats of each member of a group of equivalent
//!   targets (smoothed time to first output, in flight, error rate, cache
//!   tokens), atomics the router's view holds and requests update.
//! - [`supervisor::SupervisorActor`] starts provider actors lazily, linked to
//!   itself, and restarts them with fresh state when they fail.

pub(crate) mod provider;
pub(crate) mod router;
pub(crate) mod supervisor;
pub(crate) mod target_stats;
