//! Where events go: a non-blocking fan-out ([`fanout::EventBus`]) to one
//! bounded channel per sink, a Prometheus metrics writer, the recent history
//! behind the status page, a Redis Stream writer and the span exporter (OTLP). A request never waits on a sink; anything dropped is counted.

pub mod fanout;
pub(crate) mod genai;
pub mod metrics;
pub mod otlp;
pub mod recent;
pub mod redis;
