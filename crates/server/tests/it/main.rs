//! The server's integration tests, one binary (`cargo test -p
//! understudy-server --test it`): the real server on a free loopback port
//! (`common::TestServer`) over simulated providers, reached by a real HTTP
//! client, raw TCP, or the official Python SDKs (the scripts sit in
//! `tests/`, the recorded requests in `tests/data/`). One module per
//! behaviour; one binary links once instead of once per file, which on a
//! busy two-core machine is most of the build.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod common;

mod affinity;
mod agent_workload;
mod anthropic_api;
mod anthropic_sdk;
mod azure;
mod bedrock;
mod bedrock_converse;
mod before_the_body;
mod caller_routing;
mod claude_code;
mod claude_code_session;
mod client_budget;
mod client_writes;
mod clients;
mod cloud_twins;
mod credentials;
mod events;
mod fit;
mod front_ends;
mod gemini_api;
mod generate;
mod google_genai;
mod openai_agents;
mod openai_compat;
mod openai_responses_sdk;
mod openai_sdk;
mod openai_sdk_tools;
mod operations;
mod responses_api;
mod responses_native;
mod security;
mod stream_modes;
mod streaming;
mod strict_json;
mod thought_signatures;
mod tiers;
mod traces;
mod trust_boundaries;
mod url_userinfo;
mod vertex;
