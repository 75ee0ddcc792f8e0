//! The span exporter: a sink that holds sampled requests' events, makes
//! their spans (`crate::trace::spans`) when it sends them — every
//! `telemetry.export_every`, or sooner once `max_batch` spans are held —
//! and posts them as OTLP/protobuf through the front end's
//! [`SpanSender`]. Bounded everywhere: the bus channel (full: the event is
//! dropped and counted as the sink's), the spans held (`max_queue`: beyond
//! it new ones are dropped), and each export (`export_timeout`); a
//! collector that is down or slow costs counted drops
//! (`understudy_otlp_spans_total{outcome="dropped"}`), never a request's
//! time. Shutdown sends what is held.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use crate::event::GenerationEvent;
use crate::settings::Settings;
use crate::sink::metrics::Metrics;
use crate::trace::SpanSender;
use crate::trace::otlp::{Value, export_request};

/// Runs the exporter until the bus is dropped or `stop` turns true, then
/// sends what it holds (each export still bounded by its timeout).
pub(crate) async fn run(
    settings: Arc<Settings>,
    sender: Arc<dyn SpanSender>,
    metrics: Arc<Metrics>,
    mut rx: mpsc::Receiver<Arc<GenerationEvent>>,
    mut stop: watch::Receiver<bool>,
) {
    let t = &settings.telemetry;
    let mut exporter = Exporter {
        resource: resource(&settings),
        held: VecDeque::new(),
        held_spans: 0,
        sender,
        metrics,
        settings: Arc::clone(&settings),
        failing: false,
    };
    let mut tick = tokio::time::interval(t.export_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let due = tokio::select! {
            event = rx.recv() => match event {
                Some(e) => {
                    exporter.hold(e);
                    exporter.held_spans >= t.max_batch
                }
                None => break,
            },
            _ = tick.tick() => true,
            stopped = stop.wait_for(|s| *s) => {
                drop(stopped);
                break;
            }
        };
        if due {
            exporter.export_all().await;
        }
    }
    while let Ok(e) = rx.try_recv() {
        exporter.hold(e);
    }
    exporter.export_all().await;
}

struct Exporter {
    resource: Vec<(String, Value)>,
    /// Sampled events waiting to be sent (their spans are made when sent,
    /// so the front end has recorded the answer's status by then).
    held: VecDeque<Arc<GenerationEvent>>,
    held_spans: usize,
    sender: Arc<dyn SpanSender>,
    metrics: Arc<Metrics>,
    settings: Arc<Settings>,
    /// The last export failed (logged once per outage).
    failing: bool,
}

impl Exporter {
    fn hold(&mut self, e: Arc<GenerationEvent>) {
        if !e.trace.as_ref().is_some_and(|t| t.sampled) {
            return;
        }
        let n = e.attempts.len() + 1;
        if self.held_spans + n > self.settings.telemetry.max_queue {
            self.metrics.otlp_spans("dropped", n as u64);
            return;
        }
        self.held_spans += n;
        self.held.push_back(e);
    }

    /// Sends everything held, a batch at a time.
    /// Sends everything held, a batch at a time. After a failed batch the
    /// rest is dropped (and counted) rather than tried: a collector that
    /// hangs costs one `export_timeout` a round, not one a batch.
    async fn export_all(&mut self) {
        while !self.held.is_empty() {
            self.export_batch().await;
            if self.failing {
                self.metrics.otlp_spans("dropped", self.held_spans as u64);
                self.held.clear();
                self.held_spans = 0;
            }
        }
    }

    async fn export_batch(&mut self) {
        let t = &self.settings.telemetry;
        let mut spans = Vec::new();
        while let Some(e) = self.held.front() {
            if !spans.is_empty() && spans.len() + e.attempts.len() + 1 > t.max_batch {
                break;
            }
            let Some(e) = self.held.pop_front() else {
                break;
            };
            self.held_spans -= e.attempts.len() + 1;
            if let Some(ctx) = &e.trace {
                spans.extend(crate::trace::spans::of_event(&e, ctx, &self.settings));
            }
        }
        if spans.is_empty() {
            return;
        }
        let body = export_request(
            &self.resource,
            ("understudy", env!("CARGO_PKG_VERSION")),
            &spans,
        );
        let n = spans.len() as u64;
        let sent = tokio::time::timeout(t.export_timeout, self.sender.send(body)).await;
        match sent {
            Ok(Ok(())) => {
                self.metrics.otlp_spans("exported", n);
                if std::mem::take(&mut self.failing) {
                    tracing::info!("spans reach the collector again");
                }
            }
            failed => {
                self.metrics.otlp_spans("dropped", n);
                let why = match failed {
                    Ok(Err(e)) => e,
                    _ => format!("no answer within {:?}", t.export_timeout),
                };
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
