//! Where events go: a non-blocking fan-out ([`fanout::EventBus`]) that
//! records each event in memory as it is published (the Prometheus
//! metrics with the GenAI client metrics, the recent history behind the
//! status page) and queues it on one bounded channel per sink that does
//! I/O (a Redis Stream writer, and any [`Sink`] whoever starts the engine
//! hands it: the span exporter lives above core). A request never waits
//! on a sink's I/O; anything dropped is counted.

pub mod fanout;
pub mod genai;
pub mod metrics;
pub mod recent;
pub mod redis;

use std::fmt;
use std::sync::Arc;

use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};

use crate::event::GenerationEvent;
use understudy_settings::Settings;

/// A boxed, sendable future (object-safe async trait methods).
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A sink handed to the engine by whoever starts it
/// (`Engine::start_with`): one that lives in a crate above core.
/// The engine gives it a bounded channel of its own off the bus (full: the
/// newest event is dropped and counted under its [`Sink::name`]), tells it
/// to flush and stop on shutdown, and joins its task as it does its own
/// sinks'.
pub trait Sink: Send + fmt::Debug + 'static {
    /// The `sink` label of the events it loses
    /// (`understudy_events_dropped_total`).
    fn name(&self) -> &'static str;

    /// Whether it exports requests' spans: requests then get a trace
    /// context that records, sampled by the configured sampler.
    fn exports_spans(&self) -> bool {
        false
    }

    /// Registers its own metrics, shown after the engine's on `/metrics`
    /// (called once, before it runs).
    fn register(&self, _registry: &mut Registry) {}

    /// Runs until the bus is dropped or `stop` turns true, then flushes
    /// what it holds (bounded: shutdown waits for it).
    fn run(
        self: Box<Self>,
        settings: Arc<Settings>,
        events: mpsc::Receiver<Arc<GenerationEvent>>,
        stop: watch::Receiver<bool>,
    ) -> BoxFuture<'static, ()>;
}
