//! The span exporter: a sink that holds sampled requests' events, makes
//! their spans ([`crate::spans`]) when it sends them — every
//! `telemetry.export_every`, or sooner once `max_batch` spans are held —
//! and posts them as OTLP/protobuf through a [`SpanSender`]. Bounded
//! everywhere: the bus channel (full: the event is dropped and counted as
//! the sink's), the spans held (`max_queue`: beyond it new ones are
//! dropped), and each export (`export_timeout`); a collector that is down
//! or slow costs counted drops
//! (`understudy_otlp_spans_total{outcome="dropped"}`), never a request's
//! time. Shutdown sends what is held.

use std::collections::VecDeque;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};
use understudy_core::adapter::BoxFuture;
use understudy_core::event::GenerationEvent;
use understudy_core::sink::Sink;
use understudy_settings::Settings;
use understudy_types::Error;

use crate::proto::{Value, export_request};
use crate::sender::SpanSender;

/// The span exporter, as the engine is handed it ([`Sink`]): the sender
/// for the configured collector, and its counts of spans.
#[derive(Debug)]
pub struct SpanExporter {
    sender: Arc<dyn SpanSender>,
    counts: SpanCounts,
}

/// `understudy_otlp_spans_total{outcome}`: spans exported, or dropped
/// (queue full, collector down or slow).
#[derive(Debug, Clone, Default)]
struct SpanCounts {
    by_outcome: Family<OutcomeLabels, Counter>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

// === impl SpanExporter ===

impl SpanExporter {
    /// The exporter `settings` ask for: `None` when no traces endpoint is
    /// set; an error when its sender cannot be built (a header that is not
    /// one).
    pub fn for_settings(settings: &Settings) -> Result<Option<Self>, Error> {
        if settings.telemetry.traces_endpoint.is_none() {
            return Ok(None);
        }
        let sender = crate::sender::sender(&settings.telemetry)
            .map_err(|e| Error::Engine(format!("telemetry: {e}")))?;
        Ok(Some(Self::with_sender(sender)))
    }

    /// An exporter posting through `sender`.
    pub fn with_sender(sender: Arc<dyn SpanSender>) -> Self {
        Self {
            sender,
            counts: SpanCounts::default(),
        }
    }
}

impl Sink for SpanExporter {
    fn name(&self) -> &'static str {
        "otlp"
    }

    fn exports_spans(&self) -> bool {
        true
    }

    fn register(&self, registry: &mut Registry) {
        self.counts.register(registry);
    }

    fn run(
        self: Box<Self>,
        settings: Arc<Settings>,
        events: mpsc::Receiver<Arc<GenerationEvent>>,
        stop: watch::Receiver<bool>,
    ) -> BoxFuture<'static, ()> {
        Box::pin(run(settings, self.sender, self.counts, events, stop))
    }
}

// === impl SpanCounts ===

impl SpanCounts {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "understudy_otlp_spans",
            "Spans by outcome: exported to the collector, or dropped (queue full, collector down or slow)",
            self.by_outcome.clone(),
        );
    }

    /// Counts `n` spans exported or dropped.
    fn add(&self, outcome: &'static str, n: u64) {
        self.by_outcome
            .get_or_create(&OutcomeLabels { outcome })
            .inc_by(n);
    }
}

/// Runs the exporter until the bus is dropped or `stop` turns true, then
/// sends what it holds (each export still bounded by its timeout). One
/// export is in flight at a time, and the bus is read meanwhile: a slow
/// collector fills the queue (and costs counted drops past it), never the
/// bus.
async fn run(
    settings: Arc<Settings>,
    sender: Arc<dyn SpanSender>,
    counts: SpanCounts,
    mut rx: mpsc::Receiver<Arc<GenerationEvent>>,
    mut stop: watch::Receiver<bool>,
) {
    let t = &settings.telemetry;
    let mut exporter = Exporter {
        resource: resource(&settings),
        held: VecDeque::new(),
        held_spans: 0,
        counts,
        settings: Arc::clone(&settings),
        failing: false,
        unanswered: false,
    };
    let mut tick = tokio::time::interval(t.export_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The export under way, and how many spans it carries.
    let mut in_flight: Option<(u64, Export)> = None;
    // A tick's round is under way: what it found held goes, a batch at a
    // time, until none is left (or an export fails).
    let mut round = false;
    loop {
        tokio::select! {
            event = rx.recv() => match event {
                Some(e) => exporter.hold(e),
                None => break,
            },
            _ = tick.tick() => {
                exporter.unanswered = false;
                round = true;
            }
            result = async {
                match in_flight.as_mut() {
                    Some((_, export)) => export.await,
                    None => std::future::pending().await,
                }
            }, if in_flight.is_some() => {
                if let Some((n, _)) = in_flight.take() {
                    exporter.sent(n, result);
                }
                // While the collector fails, only the next tick tries again.
                round &= !exporter.failing;
            }
            stopped = stop.wait_for(|s| *s) => {
                drop(stopped);
                break;
            }
        }
        if in_flight.is_some() {
            continue;
        }
        let due = if round {
            Due::Tick
        } else if exporter.full() {
            Due::Full
        } else {
            continue;
        };
        in_flight = exporter
            .batch(due)
            .map(|(n, body)| (n, send(Arc::clone(&sender), t.export_timeout, body)));
        match due {
            // Nothing left that the round may send.
            Due::Tick => round = in_flight.is_some(),
            // Nothing held was answered yet: the tick sends it (no scan of
            // the queue per event meanwhile).
            _ => exporter.unanswered = in_flight.is_none(),
        }
    }
    shut_down(&mut exporter, &sender, in_flight, &mut rx).await;
}

/// Sends what is held at shutdown, all within one `export_timeout` (the
/// export under way included): what is not sent by then is dropped and
/// counted, and a collector that fails gets no second try.
async fn shut_down(
    exporter: &mut Exporter,
    sender: &Arc<dyn SpanSender>,
    in_flight: Option<(u64, Export)>,
    rx: &mut mpsc::Receiver<Arc<GenerationEvent>>,
) {
    let timeout = exporter.settings.telemetry.export_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    while let Ok(e) = rx.try_recv() {
        exporter.hold(e);
    }
    let mut next = in_flight;
    loop {
        if let Some((n, export)) = next.take() {
            match tokio::time::timeout_at(deadline, export).await {
                Ok(result) => exporter.sent(n, result),
                Err(_) => exporter.sent(n, Err("shutting down".into())),
            }
        }
        if exporter.failing || tokio::time::Instant::now() >= deadline {
            exporter.drop_held();
            return;
        }
        match exporter.batch(Due::All) {
            Some((n, body)) => next = Some((n, send(Arc::clone(sender), timeout, body))),
            None => return,
        }
    }
}

/// Roughly the bytes of one span without content (its attributes, ids
/// and times).
const SPAN_BYTES: usize = 600;

/// The most bytes one export carries, roughly: well under a collector's
/// limit (the OpenTelemetry Collector's gRPC receiver takes 4 MiB).
const BATCH_BYTES: usize = 2 * 1024 * 1024;

/// Why an export starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// The tick: everything held goes, a batch at a time, but a request
    /// whose answer's status is not yet recorded and that came since the
    /// last tick (it is being answered: its span should have the status).
    Tick,
    /// A batch's worth is held: requests already answered go.
    Full,
    /// Shutdown: everything.
    All,
}

/// One export under way: how it went.
type Export = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>;

/// Posts `body` within `timeout`.
fn send(sender: Arc<dyn SpanSender>, timeout: std::time::Duration, body: Vec<u8>) -> Export {
    Box::pin(async move {
        match tokio::time::timeout(timeout, sender.send(body)).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {timeout:?}")),
        }
    })
}

struct Exporter {
    resource: Vec<(String, Value)>,
    /// Recorded requests' events waiting to be sent, with when they came
    /// (their spans are made when sent, so the front end has recorded the
    /// answer's status by then).
    held: VecDeque<(tokio::time::Instant, Arc<GenerationEvent>)>,
    held_spans: usize,
    counts: SpanCounts,
    settings: Arc<Settings>,
    /// The last export failed (logged once per outage).
    failing: bool,
    /// A full batch found nothing answered to send; until the tick, a
    /// full queue does not look again.
    unanswered: bool,
}

impl Exporter {
    /// Whether a batch's worth is held and may go before the tick (while
    /// the collector fails, only the tick tries again).
    fn full(&self) -> bool {
        self.held_spans >= self.settings.telemetry.max_batch && !self.failing && !self.unanswered
    }

    fn hold(&mut self, e: Arc<GenerationEvent>) {
        if !e.trace.as_ref().is_some_and(|t| t.recording) {
            return;
        }
        let n = e.attempts.len() + 1;
        if self.held_spans + n > self.settings.telemetry.max_queue {
            self.counts.add("dropped", n as u64);
            return;
        }
        self.held_spans += n;
        self.held.push_back((tokio::time::Instant::now(), e));
    }

    /// Drops (and counts) everything held.
    fn drop_held(&mut self) {
        self.counts.add("dropped", self.held_spans as u64);
        self.held.clear();
        self.held_spans = 0;
    }

    /// The next batch to send (`None`: nothing is due): at most
    /// `max_batch` spans, made now, encoded.
    fn batch(&mut self, due: Due) -> Option<(u64, Vec<u8>)> {
        let t = &self.settings.telemetry;
        // A request that came before this moment and is still unanswered
        // is not being answered (its client left): the tick sends it.
        let patience = tokio::time::Instant::now()
            .checked_sub(t.export_every)
            .unwrap_or_else(tokio::time::Instant::now);
        let mut spans = Vec::new();
        let mut bytes = 0;
        let mut waiting = VecDeque::new();
        while let Some((at, e)) = self.held.pop_front() {
            let n = e.attempts.len() + 1;
            // Captured content makes spans large: a batch stays under
            // BATCH_BYTES (roughly) too.
            let size = n * SPAN_BYTES
                + e.notes
                    .as_ref()
                    .and_then(|n| n.content.as_ref())
                    .map_or(0, |c| c.size());
            if !spans.is_empty() && (spans.len() + n > t.max_batch || bytes + size > BATCH_BYTES) {
                self.held.push_front((at, e));
                break;
            }
            let answered = e.trace.as_ref().is_none_or(|ctx| ctx.status().is_some());
            let goes = match due {
                Due::All => true,
                Due::Tick => answered || at <= patience,
                Due::Full => answered,
            };
            if !goes {
                waiting.push_back((at, e));
                continue;
            }
            self.held_spans -= n;
            bytes += size;
            if let Some(ctx) = &e.trace {
                spans.extend(crate::spans::of_event(&e, ctx, &self.settings));
            }
        }
        // Those still waiting for their status go first next time.
        while let Some(e) = waiting.pop_back() {
            self.held.push_front(e);
        }
        if spans.is_empty() {
            return None;
        }
        let body = export_request(
            &self.resource,
            ("understudy", env!("CARGO_PKG_VERSION")),
            &spans,
        );
        Some((spans.len() as u64, body))
    }

    /// Counts how an export of `n` spans went, and logs the start and end
    /// of an outage once each.
    fn sent(&mut self, n: u64, result: Result<(), String>) {
        match result {
            Ok(()) => {
                self.counts.add("exported", n);
                if std::mem::take(&mut self.failing) {
                    tracing::info!("spans reach the collector again");
                }
            }
            Err(why) => {
                self.counts.add("dropped", n);
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(error = %why, "cannot export spans; dropping them until the collector answers");
                }
            }
        }
    }
}

/// The resource every span belongs to: `service.name` and the configured
/// attributes.
fn resource(settings: &Settings) -> Vec<(String, Value)> {
    let t = &settings.telemetry;
    let mut out = vec![
        (
            "service.name".to_owned(),
            Value::Str(t.service_name.clone()),
        ),
        (
            "service.version".to_owned(),
            Value::Str(env!("CARGO_PKG_VERSION").into()),
        ),
        (
            "telemetry.sdk.name".to_owned(),
            Value::Str("understudy".into()),
        ),
        (
            "telemetry.sdk.language".to_owned(),
            Value::Str("rust".into()),
        ),
    ];
    for (k, v) in &t.resource {
        // The operator's value wins over the built-in one.
        out.retain(|(name, _)| name != k);
        out.push((k.clone(), Value::Str(v.clone())));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use understudy_core::sink::metrics::Metrics;
    use understudy_core::trace::TraceContext;
    use understudy_core::trace::notes::{Content, TraceNotes};
    use understudy_settings::Sampler;

    fn exporter(max_batch: usize) -> Exporter {
        let mut settings = Settings::load(None, |_| None).expect("default settings");
        settings.telemetry.max_batch = max_batch;
        Exporter {
            resource: Vec::new(),
            held: VecDeque::new(),
            held_spans: 0,
            counts: SpanCounts::default(),
            settings: Arc::new(settings),
            failing: false,
            unanswered: false,
        }
    }

    /// A recorded request's event (one span: no attempts), answered with
    /// `status` when given.
    fn event(id: &str, status: Option<u16>) -> Arc<GenerationEvent> {
        let mut e: GenerationEvent = serde_json::from_value(serde_json::json!({
            "request_id": id, "timestamp": "2026-12-01T00:00:00.000Z", "route": "default",
            "api": "openai", "provider": null, "model": null, "primary": "a",
            "success": true, "fell_back": false, "content_filtered": false,
            "streamed": false, "cached": false, "error_code": null, "error_detail": null,
            "attempts": [], "latency_ms": 1.0, "ttft_ms": null, "usage": null, "cost_usd": null,
        }))
        .expect("a valid event");
        let ctx = TraceContext::new(None, None, Sampler::AlwaysOn);
        if let Some(status) = status {
            ctx.answered(status);
        }
        e.trace = Some(Arc::new(ctx));
        Arc::new(e)
    }

    fn ids(e: &Exporter) -> Vec<&str> {
        e.held.iter().map(|(_, e)| &*e.request_id).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_not_yet_answered_waits_for_a_tick_after_it() {
        let mut x = exporter(2);
        x.hold(event("a", Some(200)));
        x.hold(event("b", None));
        x.hold(event("c", Some(200)));
        // The batch filled: the answered ones go, `b` waits (first in line).
        let (n, _) = x.batch(Due::Full).expect("a batch");
        assert_eq!(n, 2);
        assert_eq!(ids(&x), ["b"]);
        assert!(x.batch(Due::Full).is_none(), "nothing answered is left");
        // A tick right after it leaves it too: it is being answered.
        assert!(x.batch(Due::Tick).is_none());
        // A tick a whole period later sends it, status or not (its client
        // left).
        tokio::time::advance(x.settings.telemetry.export_every).await;
        let (n, _) = x.batch(Due::Tick).expect("the tick's batch");
        assert_eq!((n, x.held_spans), (1, 0));
        // Shutdown sends everything.
        x.hold(event("d", None));
        assert_eq!(x.batch(Due::All).map(|(n, _)| n), Some(1));
    }

    #[test]
    fn large_content_splits_batches_by_bytes() {
        let mut x = exporter(512);
        for id in ["a", "b", "c"] {
            let mut e = (*event(id, Some(200))).clone();
            e.notes = Some(Box::new(TraceNotes {
                content: Some(Content {
                    input: "x".repeat(BATCH_BYTES * 2 / 3),
                    ..Default::default()
                }),
                ..Default::default()
            }));
            x.hold(Arc::new(e));
        }
        let sizes: Vec<u64> = std::iter::from_fn(|| x.batch(Due::All).map(|(n, _)| n)).collect();
        assert_eq!(sizes, [1, 1, 1], "one large request a batch");
    }

    #[test]
    fn what_is_not_recorded_is_not_held_and_the_queue_is_bounded() {
        let mut x = exporter(512);
        let unsampled = {
            let mut e = (*event("u", Some(200))).clone();
            e.trace = Some(Arc::new(TraceContext::new(None, None, Sampler::AlwaysOff)));
            Arc::new(e)
        };
        x.hold(unsampled);
        assert!(x.held.is_empty());
        let limit = x.settings.telemetry.max_queue;
        for i in 0..limit + 3 {
            x.hold(event(&i.to_string(), Some(200)));
        }
        assert_eq!(x.held_spans, limit);
        let text = Metrics::with_registered(|r| x.counts.register(r)).prometheus_text();
        assert!(
            text.contains("understudy_otlp_spans_total{outcome=\"dropped\"} 3"),
            "{text}"
        );
    }

    /// A collector that never answers.
    #[derive(Debug, Default)]
    struct Hanging(std::sync::atomic::AtomicUsize);

    impl SpanSender for Hanging {
        fn send(
            &self,
            _body: Vec<u8>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + '_>>
        {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_bus_is_read_while_an_export_hangs() {
        let x = exporter(512);
        let settings = Arc::clone(&x.settings);
        let hanging = Arc::new(Hanging::default());
        let (tx, rx) = mpsc::channel(2);
        let (_stop_tx, stop) = watch::channel(false);
        let sender: Arc<dyn SpanSender> = hanging.clone();
        tokio::spawn(run(settings.clone(), sender, x.counts.clone(), rx, stop));
        tx.send(event("first", Some(200)))
            .await
            .expect("the bus is open");
        // The tick sends it, and the collector hangs on it.
        tokio::time::sleep(settings.telemetry.export_every * 2).await;
        assert_eq!(hanging.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Far more than the bus holds goes in well before the export's
        // timeout: the exporter keeps reading.
        let by = settings.telemetry.export_timeout / 4;
        for i in 0..20 {
            tokio::time::timeout(by, tx.send(event(&i.to_string(), Some(200))))
                .await
                .expect("the bus is read while the export hangs")
                .expect("the bus is open");
        }
    }
}
