//! The `understudy` binary's integration tests, one binary (`it`) with a
//! module per behaviour: the real binary against simulated providers, and
//! the real Claude Code, Codex and Gemini CLIs through `understudy serve`.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod admin_state;
mod claude_code;
mod cli;
mod codex;
mod common;
mod credit;
mod gemini_cli;
mod malloc;
mod readiness;
mod ready_and_drain;
mod reload;
mod shipping;
mod traces;
