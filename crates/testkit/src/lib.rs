//! Test kit for failover tests: simulated LLM providers that are real HTTP
//! servers speaking each provider's wire format, scripted per request, and
//! a [`TestGateway`] that wires an engine to them in one call.
//!
//! It is a library for your own failover tests as much as ours:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use understudy_testkit::{Reply, SimProvider, TestGateway};
//! use understudy_core::{ChatRequest, GenerateRequest};
//!
//! let groq = SimProvider::openai().await?;
//! let openai = SimProvider::openai().await?;
//! groq.push(Reply::status(503));                 // the primary is down once
//! let gw = TestGateway::builder()
//!     .provider("groq", &groq)
//!     .provider("openai", &openai)
//!     .build()
//!     .await?;
//! let answer = gw.engine.generate(GenerateRequest::new(ChatRequest::user("hi"))).await?;
//! assert_eq!(answer.provider, "openai");
//! assert_eq!(groq.received().len(), 1);
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`sim`]: the simulated providers ([`SimProvider`]) and their script ([`Reply`]).
//! - [`gateway`]: [`TestGateway`], an engine over simulators.
//! - [`redis`]: [`RedisServer`], a real `redis-server` on a free port.
//! - [`eventually`](mod@eventually): [`eventually()`], polling a condition until a
//!   deadline instead of sleeping before an assertion.

pub mod eventually;
pub mod gateway;
pub mod redis;
pub mod sim;

pub use eventually::{Settled, eventually, eventually_within};
pub use gateway::{TestGateway, TestGatewayBuilder};
pub use redis::RedisServer;
pub use sim::{
    Protocol, Received, Refusal, Reply, SimProvider, SimToolCall, StreamEnd, StreamSpec,
};

/// A plain HTTP client for tests that talk to a gateway (installs the TLS
/// crypto provider reqwest is built to expect).
pub fn http_client() -> reqwest::Client {
    understudy_providers::install_tls_provider();
    reqwest::Client::new()
}
