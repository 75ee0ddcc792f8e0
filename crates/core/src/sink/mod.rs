//! Where events go: a non-blocking fan-out ([`fanout::EventBus`]) to one
//! bounded channel per sink, a Prometheus metrics writer, the recent history
//! behind the status page, and a Redis Stream writer. A request never waits on a sink; anything dropped is counted.

pub mod fanout;
pub mod metrics;
pub mod recent;
pub mod redis;
