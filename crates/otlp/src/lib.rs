//! Understudy's span export (OpenTelemetry, OTLP): each recorded request's
//! event becomes a SERVER span and a CLIENT span per attempt, in the GenAI
//! semantic conventions, written as OTLP/protobuf by hand and posted to a
//! collector over HTTP or gRPC.
//!
//! The crate sits above core. The engine records what a request's spans
//! need while it runs (`understudy_core::trace`: the `TraceContext` and the
//! `TraceNotes`), and knows nothing of OTLP; whoever starts the engine (the
//! CLI, the testkit) hands it the exporter as a
//! [`Sink`]:
//!
//! ```no_run
//! # async fn start(settings: understudy_settings::Settings,
//! #     factory: std::sync::Arc<dyn understudy_core::AdapterFactory>)
//! #     -> Result<(), understudy_types::Error> {
//! let sinks = understudy_otlp::sinks(&settings)?;
//! let engine = understudy_core::Engine::start_with(settings, factory, sinks).await?;
//! # drop(engine); Ok(()) }
//! ```
//!
//! Spans are made and sent off the request path: the exporter holds the
//! events and makes their spans when a batch goes, so a collector that is
//! down or slow costs counted drops, never a request's time.
//!
//! # Layout
//! - [`exporter`]: [`SpanExporter`], the sink that holds sampled requests'
//!   events and sends them in bounded batches, and its span counts.
//! - [`spans`]: the spans made of one request's event.
//! - [`proto`]: the OTLP/protobuf writer (`ExportTraceServiceRequest`),
//!   checked against the official decoder by the gateway's trace tests.
//! - [`sender`]: [`SpanSender`], and the one that posts to a collector
//!   over HTTP or gRPC with the configured headers.

pub mod exporter;
pub mod proto;
pub mod sender;
pub mod spans;

pub use exporter::SpanExporter;
pub use sender::SpanSender;

use understudy_core::sink::Sink;
use understudy_settings::Settings;
use understudy_types::Error;

/// The sinks this crate adds to an engine that `settings` configure: the
/// span exporter when a traces endpoint is set, else none. An error when
/// the exporter cannot be built (a header that is not one).
pub fn sinks(settings: &Settings) -> Result<Vec<Box<dyn Sink>>, Error> {
    Ok(SpanExporter::for_settings(settings)?
        .into_iter()
        .map(|x| Box::new(x) as Box<dyn Sink>)
        .collect())
}
