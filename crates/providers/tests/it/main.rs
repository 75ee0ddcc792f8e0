//! The providers' integration tests, one binary (`cargo test -p
//! understudy-providers --test it`): the wire adapters against recorded
//! payloads (`tests/data/`) and against the testkit's simulators over real
//! HTTP (and TLS), and property-based fuzzing of every parser (its
//! regression seeds in `tests/proptest-regressions/`, where proptest looks
//! for a module of a binary rooted at `tests/it/main.rs`). One module per
//! behaviour; one binary links once instead of once per file.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod common;

mod debug_secrets;
mod fuzz;
mod native;
mod reasoning;
mod streaming;
mod tls_http2;
mod too_long;
mod tool_ids;
mod tools_anthropic;
mod tools_gemini;
mod tools_openai;
mod usage;
mod wire;
