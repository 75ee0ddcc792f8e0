//! Test kit for failover tests: simulated LLM providers that are real HTTP
//! servers speaking each provider's wire format, scripted per request, and
//! a `TestGateway` that wires an engine to them in one call.
//!
//! It is a library for your own failover tests as much as ours. Depend on
//! it from `[dev-dependencies]` with the `test-support` feature:
//!
//! ```toml
//! understudy-testkit = { path = "…/crates/testkit", features = ["test-support"] }
//! ```
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use understudy_testkit::{Reply, SimProvider, TestGateway};
//! use understudy_types::ChatRequest;
//! use understudy_core::GenerateRequest;
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
//! # Features
//! Without features the crate is what `understudy demo` needs and no more:
//! the simulators and [`http_client`]. The CLI depends on it that way, so the
//! shipped binary carries no test-only code. `test-support` adds what only
//! tests use: `TestGateway`, `RedisServer`, `eventually`, and the
//! simulators' request-rule checks (`SimProvider::violations`, `lenient`,
//! `with_max_output_tokens`, `accept_signature`; without the feature a
//! simulator checks nothing). `fault-injection` (implies `test-support`)
//! passes core's on, for supervision tests. `tls` adds the TLS simulator
//! (and builds `rcgen`), for tests and the bench.
//!
//! # Layout
//! - [`sim`]: the simulated providers ([`SimProvider`]) and their script
//!   ([`Reply`], `sim/reply.rs`); Bedrock's credential checks in
//!   `sim/bedrock/auth.rs`.
//! - `sim::tls` (`tls`): `TlsSimProvider`, a simulator behind TLS offering
//!   HTTP/2 and HTTP/1.1 by ALPN, with a CA made at run time (`TestCerts`),
//!   counting connections, handshakes and each request's HTTP version.
//! - `gateway` (`test-support`): `TestGateway`, an engine over simulators.
//! - `redis` (`test-support`): `RedisServer`, a real `redis-server` on a free port.
//! - `collector` (`test-support`): `Receiver`, a real OTLP collector for
//!   trace tests (HTTP, optionally gRPC; the OpenTelemetry project's Python
//!   messages) and the spans it got.
//! - `python` (`test-support`): the Python (the provisioned venv) that the
//!   out-of-process checks run on.
//! - `eventually` (`test-support`): polling a condition until a deadline
//!   instead of sleeping before an assertion.
//! - `src/bin/sim.rs`: `understudy-sim`, simulators as a process of their
//!   own, for a gateway in a container (`cargo xtask container-test`).

#[cfg(feature = "test-support")]
pub mod collector;
#[cfg(feature = "test-support")]
pub mod eventually;
#[cfg(feature = "test-support")]
pub mod gateway;
#[cfg(feature = "test-support")]
pub mod python;
#[cfg(feature = "test-support")]
pub mod redis;
pub mod sim;

#[cfg(feature = "test-support")]
pub use eventually::{Settled, eventually, eventually_within};
#[cfg(feature = "test-support")]
pub use gateway::{TestGateway, TestGatewayBuilder};
#[cfg(feature = "test-support")]
pub use redis::RedisServer;
#[cfg(feature = "tls")]
pub use sim::tls::{TestCerts, TlsOptions, TlsSimProvider};
pub use sim::{
    AzureSim, BedrockSim, CacheTotals, Protocol, Received, Refusal, Reply, SimProvider,
    SimToolCall, StreamEnd, StreamSpec, UsageDetail,
};
#[cfg(feature = "test-support")]
pub use sim::{TEST_CLIENT_EMAIL, VertexSim};

/// A plain HTTP client for tests and the demo, which talk to a gateway
/// (installs the TLS crypto provider reqwest is built to expect).
pub fn http_client() -> reqwest::Client {
    understudy_providers::install_tls_provider();
    reqwest::Client::new()
}
