//! What instances share and what clients are held to: the Redis link, the
//! fleet's state in Redis, the fallback spend meter, and client records
//! with their budgets and rates. The engine (`understudy-core`) holds one
//! of each and asks them at admission and settlement; they run no request
//! and know no provider.
//!
//! # Layout
//! - [`redis_link`]: a self-healing Redis connection for the request path.
//! - [`shared`]: a fleet's shared breakers, half-open probe lock, held-out
//!   pool keys and spend, in Redis, every call bounded.
//! - [`spend`]: the fallback spend meter (fleet-wide with Redis).
//! - [`tenants`]: client records held to their budgets, rates, models and
//!   expiry (`tenants/fleet.rs`: across the fleet with Redis, and the
//!   fleet's records and routing kept in step; `tenants/state.rs`: the
//!   state file without Redis; `tenants/admin.rs`: the admin API's
//!   changes; `tenants/counting.rs`: the counts' arithmetic, verdicts and
//!   refusals; `tenants/unsent.rs`: spend kept until the fleet takes it).

pub mod redis_link;
pub mod shared;
pub mod spend;
pub mod tenants;
