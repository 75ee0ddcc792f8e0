//! The fleet crate's integration tests, one binary (`it`) with a module
//! per behaviour, against a real `redis-server` (and, where the engine's
//! sync is the subject, the real engine through `TestGateway`).

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod client_fleet;
