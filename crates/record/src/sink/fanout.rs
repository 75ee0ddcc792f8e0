//! The event fan-out: `publish` hands each event to the in-memory sinks
//! where it is published ([`Inline`]: the metrics and the recent history,
//! each a short critical section that never waits on I/O) and does one
//! `try_send` per queued sink (Redis, the span exporter), never waiting.
//! A queued sink's channel is bounded ([`SINK_CHANNEL`]); full, the newest
//! event is dropped and counted per sink
//! (`understudy_events_dropped_total{sink}`); its writer task drains it
//! into whatever buffering the sink needs.

use std::fmt;
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

use crate::event::GenerationEvent;

/// Events queued between the bus and one sink's writer.
pub const SINK_CHANNEL: usize = 4096;

/// A sink that records an event where it is published, on the request's
/// task: in memory, bounded, and without waiting on anything but its own
/// short lock. A task of its own would cost each request two wake-ups
/// and a channel's round trip for what is a few counters.
pub trait Inline: Send + Sync + fmt::Debug {
    /// Records `event` (never panics: a request's task runs it).
    fn record(&self, event: &Arc<GenerationEvent>);
}

/// The fan-out to every sink.
#[derive(Debug, Default)]
pub struct EventBus {
    inline: Vec<Arc<dyn Inline>>,
    sinks: Vec<Sink>,
}

#[derive(Debug)]
struct Sink {
    name: &'static str,
    tx: mpsc::Sender<Arc<GenerationEvent>>,
    dropped: Counter,
}

impl EventBus {
    /// Adds a queued sink; returns the receiving end for its writer.
    pub fn add(
        &mut self,
        name: &'static str,
        dropped: Counter,
    ) -> mpsc::Receiver<Arc<GenerationEvent>> {
        let (tx, rx) = mpsc::channel(SINK_CHANNEL);
        self.sinks.push(Sink { name, tx, dropped });
        rx
    }

    /// Adds a sink that records each event as it is published.
    pub fn add_inline(&mut self, sink: Arc<dyn Inline>) {
        self.inline.push(sink);
    }

    /// Hands `event` to every sink without waiting.
    #[inline]
    pub fn publish(&self, event: GenerationEvent) {
        let event = Arc::new(event);
        for sink in &self.inline {
            sink.record(&event);
        }
        for sink in &self.sinks {
            if sink.tx.try_send(Arc::clone(&event)).is_err() {
                sink.dropped.inc();
                tracing::debug!(sink = sink.name, "event dropped: the sink is full");
            }
        }
    }
}
