//! The Prometheus metrics (DESIGN §5), written by a task that consumes the
//! event channel, and read at `GET /metrics`.
//!
//! Labels are low-cardinality: provider names come from the settings, flags
//! are `true`/`false`, kinds and outcomes are the stable codes. A failed
//! request is labelled with the route's primary, never an empty provider.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;

use crate::event::GenerationEvent;

/// Seconds: from a cache hit to a slow provider's whole answer.
const DURATION_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct GenerationLabels {
    provider: String,
    success: bool,
    fell_back: bool,
    content_filtered: bool,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct AttemptLabels {
    provider: String,
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DurationLabels {
    provider: String,
    streamed: bool,
    /// The API the request came through (`neutral`, `openai`, `anthropic`).
    api: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ProviderLabels {
    pub(crate) provider: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TokenLabels {
    provider: String,
    direction: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SinkLabels {
    sink: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StateLabels {
    pub(crate) provider: String,
    pub(crate) model: String,
}

/// Builds histograms with [`DURATION_BUCKETS`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Buckets;

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(DURATION_BUCKETS)
    }
}

/// Every metric, and the registry that encodes them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    generations: Family<GenerationLabels, Counter>,
    attempts: Family<AttemptLabels, Counter>,
    duration: Family<DurationLabels, Histogram, Buckets>,
    ttft: Family<ProviderLabels, Histogram, Buckets>,
    tokens: Family<TokenLabels, Counter>,
    cost: Family<ProviderLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    pub(crate) provider_up: Family<ProviderLabels, Gauge>,
    pub(crate) breaker_open: Family<StateLabels, Gauge>,
    events_dropped: Family<SinkLabels, Counter>,
    pub(crate) redis_degraded: Gauge,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Self {
            generations: Family::default(),
            attempts: Family::default(),
            duration: Family::new_with_constructor(Buckets),
            ttft: Family::new_with_constructor(Buckets),
            tokens: Family::default(),
            cost: Family::default(),
            provider_up: Family::default(),
            breaker_open: Family::default(),
            events_dropped: Family::default(),
            redis_degraded: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "understudy_generations",
            "Generations by who served (the primary when nobody did), success, fallback and refusal",
            m.generations.clone(),
        );
        registry.register(
            "understudy_attempts",
            "Attempts by provider, kind and outcome",
            m.attempts.clone(),
        );
        registry.register(
            "understudy_request_duration_seconds",
            "Whole-request latency by serving provider and streaming",
            m.duration.clone(),
        );
        registry.register(
            "understudy_time_to_first_token_seconds",
            "Time to the first streamed text, by serving provider",
            m.ttft.clone(),
        );
        registry.register(
            "understudy_tokens",
            "Tokens by provider and direction (input, output)",
            m.tokens.clone(),
        );
        registry.register(
            "understudy_cost_usd",
            "Spend in USD by serving provider",
            m.cost.clone(),
        );
        registry.register(
            "understudy_provider_up",
            "1 when the provider can serve, else 0",
            m.provider_up.clone(),
        );
        registry.register(
            "understudy_breaker_open",
            "Circuit breaker state per target: 0 closed, 1 open, 2 half-open",
            m.breaker_open.clone(),
        );
        registry.register(
            "understudy_events_dropped",
            "Events dropped per sink",
            m.events_dropped.clone(),
        );
        registry.register(
            "understudy_redis_degraded",
            "1 while Redis is unreachable and local state is used",
            m.redis_degraded.clone(),
        );
        Self { registry, ..m }
    }

    /// The drop counter for `sink`.
    pub(crate) fn dropped(&self, sink: &'static str) -> Counter {
        self.events_dropped
            .get_or_create(&SinkLabels { sink })
            .clone()
    }

    /// Records one event.
    pub fn record(&self, e: &GenerationEvent) {
        let provider = e.label_provider().to_owned();
        self.generations
            .get_or_create(&GenerationLabels {
                provider: provider.clone(),
                success: e.success,
                fell_back: e.fell_back,
                content_filtered: e.content_filtered,
            })
            .inc();
        for a in &e.attempts {
            self.attempts
                .get_or_create(&AttemptLabels {
                    provider: a.provider.clone(),
                    kind: a.kind.as_str(),
                    outcome: a.outcome.as_str(),
                })
                .inc();
        }
        self.duration
            .get_or_create(&DurationLabels {
                provider: provider.clone(),
                streamed: e.streamed,
                api: e.api.as_str(),
            })
            .observe(e.latency_ms / 1000.0);
        if let Some(ttft) = e.ttft_ms {
            self.ttft
                .get_or_create(&ProviderLabels {
                    provider: provider.clone(),
                })
                .observe(ttft / 1000.0);
        }
        if let (Some(u), Some(served)) = (e.usage, &e.provider) {
            self.tokens
                .get_or_create(&TokenLabels {
                    provider: served.clone(),
                    direction: "input",
                })
                .inc_by(u.input_tokens);
            self.tokens
                .get_or_create(&TokenLabels {
                    provider: served.clone(),
                    direction: "output",
                })
                .inc_by(u.output_tokens);
        }
        if let (Some(cost), Some(served)) = (e.cost_usd, &e.provider) {
            self.cost
                .get_or_create(&ProviderLabels {
                    provider: served.clone(),
                })
                .inc_by(cost);
        }
    }

    /// The OpenMetrics text exposition.
    pub fn openmetrics(&self) -> String {
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// The Prometheus text format (0.0.4): the OpenMetrics text without
    /// `# EOF` and `# UNIT`, with counters' `# TYPE`/`# HELP` named as their
    /// `_total` samples.
    pub fn prometheus_text(&self) -> String {
        let om = self.openmetrics();
        let mut counters = Vec::new();
        for line in om.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                if let Some(name) = rest.strip_suffix(" counter") {
                    counters.push(name.to_owned());
                }
            }
        }
        let mut out = String::with_capacity(om.len());
        for line in om.lines() {
            if line == "# EOF" || line.starts_with("# UNIT ") {
                continue;
            }
            let renamed = ["# TYPE ", "# HELP "].iter().find_map(|prefix| {
                let rest = line.strip_prefix(prefix)?;
                let (name, tail) = rest.split_once(' ')?;
                counters
                    .iter()
                    .any(|c| c == name)
                    .then(|| format!("{prefix}{name}_total {tail}"))
            });
            out.push_str(renamed.as_deref().unwrap_or(line));
            out.push('\n');
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The metrics writer: records every event it receives until the bus is
/// dropped or `stop` turns true (then it records what is queued and ends).
pub(crate) async fn run(
    metrics: Arc<Metrics>,
    mut rx: mpsc::Receiver<Arc<GenerationEvent>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            event = rx.recv() => match event {
                Some(e) => metrics.record(&e),
                None => return,
            },
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    while let Ok(e) = rx.try_recv() {
        metrics.record(&e);
    }
}
