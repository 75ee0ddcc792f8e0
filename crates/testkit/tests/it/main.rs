//! The testkit's integration tests, one binary (`it`) with a module per
//! behaviour: the simulators as the oracle of the other crates' tests.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod credit;
mod kinds;
mod prompt_cache;
mod rules;
