//! The event fan-out: `publish` does one `try_send` per sink and never
//! waits. Full-policy: drop the newest event and count it per sink
//! (`understudy_events_dropped_total{sink}`). Each sink's channel is bounded
//! ([`SINK_CHANNEL`]); its writer task drains it into whatever buffering the
//! sink needs.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

use crate::event::GenerationEvent;

/// Events queued between the bus and one sink's writer.
pub const SINK_CHANNEL: usize = 4096;

/// The fan-out to every sink.
#[derive(Debug, Default)]
pub struct EventBus {
    sinks: Vec<Sink>,
}

#[derive(Debug)]
struct Sink {
    name: &'static str,
    tx: mpsc::Sender<Arc<GenerationEvent>>,
    dropped: Counter,
}

impl EventBus {
    /// Adds a sink; returns the receiving end for its writer.
    pub fn add(
        &mut self,
        name: &'static str,
        dropped: Counter,
    ) -> mpsc::Receiver<Arc<GenerationEvent>> {
        let (tx, rx) = mpsc::channel(SINK_CHANNEL);
        self.sinks.push(Sink { name, tx, dropped });
        rx
    }

    /// Hands `event` to every sink without waiting.
    #[inline]
    pub fn publish(&self, event: GenerationEvent) {
        let event = Arc::new(event);
        for sink in &self.sinks {
            if sink.tx.try_send(Arc::clone(&event)).is_err() {
                sink.dropped.inc();
                tracing::debug!(sink = sink.name, "event dropped: the sink is full");
            }
        }
    }
}
