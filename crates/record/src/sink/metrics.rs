//! The Prometheus metrics, written as each event is published (the sink
//! in `metrics/recorder.rs`), and read at `GET /metrics`.
//!
//! Labels are low-cardinality: provider names come from the settings, flags
//! are `true`/`false`, kinds and outcomes are the stable codes. A failed
//! request is labelled with the route's primary, never an empty provider.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

mod recorder;
pub use recorder::{MetricsSink, Recorder};

/// Seconds: from a cache hit to a slow provider's whole answer.
const DURATION_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GenerationLabels {
    provider: String,
    success: bool,
    fell_back: bool,
    content_filtered: bool,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    provider: String,
    kind: &'static str,
    outcome: &'static str,
}

/// A pooled provider's attempts, by key name (never the key).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyAttemptLabels {
    provider: String,
    key: String,
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    provider: String,
    streamed: bool,
    /// The API the request came through (`neutral`, `openai`, `anthropic`).
    api: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    pub provider: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    provider: String,
    direction: &'static str,
}

/// A client record's, by its name (never its key).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientLabels {
    client: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientRequestLabels {
    client: String,
    success: bool,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientTokenLabels {
    client: String,
    direction: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientRefusedLabels {
    client: String,
    /// `rpm`, `tpm`, `budget`, `models`, `expired`.
    limit: &'static str,
}

/// A session's affinity outcome (`hit`, `moved`, `new`, `expired`,
/// `none`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AffinityLabels {
    outcome: &'static str,
}

/// A hedge's outcome (one of the recorder's `HEDGE_OUTCOMES`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HedgeLabels {
    outcome: &'static str,
}

/// The wait-or-switch rule's choice (`wait`, `switch`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChoiceLabels {
    choice: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    sink: &'static str,
}

/// A group choice: the route and the member chosen first.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BalanceLabels {
    route: String,
    provider: String,
}

/// A served answer's prompt-cache tokens: `read`, `write`, `uncached`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheTokenLabels {
    provider: String,
    kind: &'static str,
}

/// A readiness probe's outcome: the provider and the verdict's code.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    provider: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub provider: String,
    pub model: String,
}

/// Builds histograms with `DURATION_BUCKETS`.
#[derive(Debug, Clone, Copy)]
pub struct Buckets;

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
    key_attempts: Family<KeyAttemptLabels, Counter>,
    duration: Family<DurationLabels, Histogram, Buckets>,
    ttft: Family<ProviderLabels, Histogram, Buckets>,
    tokens: Family<TokenLabels, Counter>,
    cost: Family<ProviderLabels, Counter<f64, AtomicU64>>,
    balance_choices: Family<BalanceLabels, Counter>,
    prompt_cache_tokens: Family<CacheTokenLabels, Counter>,
    pub provider_up: Family<ProviderLabels, Gauge>,
    pub breaker_open: Family<StateLabels, Gauge>,
    events_dropped: Family<SinkLabels, Counter>,
    pub redis_degraded: Gauge,
    client_requests: Family<ClientRequestLabels, Counter>,
    client_tokens: Family<ClientTokenLabels, Counter>,
    client_cost: Family<ClientLabels, Counter<f64, AtomicU64>>,
    client_refused: Family<ClientRefusedLabels, Counter>,
    pub genai: crate::sink::genai::GenAiMetrics,
    affinity: Family<AffinityLabels, Counter>,
    wait_or_switch: Family<ChoiceLabels, Counter>,
    hedges: Family<HedgeLabels, Counter>,
    // The readiness prober's series.
    target_ready: Family<StateLabels, Gauge>,
    probes: Family<ProbeLabels, Counter>,
    /// Reloads of the settings file, by result (`ok`, `error`).
    config_reloads: Family<ReloadLabels, Counter>,
}

/// A reload's result: `ok`, or `error` (the file did not load; the
/// configuration in force stayed).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    result: &'static str,
}

impl Metrics {
    pub fn new() -> Self {
        Self::with_registered(|_| {})
    }

    /// The engine's metrics, then those `registered` adds (a sink's handed
    /// to the engine: see [`crate::sink::Sink::register`]).
    pub fn with_registered(registered: impl FnOnce(&mut Registry)) -> Self {
        let mut registry = Registry::default();
        let genai = crate::sink::genai::GenAiMetrics::register(&mut registry);
        let m = Self {
            genai,
            generations: Family::default(),
            attempts: Family::default(),
            key_attempts: Family::default(),
            duration: Family::new_with_constructor(Buckets),
            ttft: Family::new_with_constructor(Buckets),
            tokens: Family::default(),
            cost: Family::default(),
            balance_choices: Family::default(),
            prompt_cache_tokens: Family::default(),
            provider_up: Family::default(),
            breaker_open: Family::default(),
            events_dropped: Family::default(),
            redis_degraded: Gauge::default(),
            client_requests: Family::default(),
            client_tokens: Family::default(),
            client_cost: Family::default(),
            client_refused: Family::default(),
            affinity: Family::default(),
            wait_or_switch: Family::default(),
            hedges: Family::default(),
            target_ready: Family::default(),
            probes: Family::default(),
            config_reloads: Family::default(),
            registry: Registry::default(),
        };
        m.register_traffic(&mut registry);
        m.register_health(&mut registry);
        m.register_clients(&mut registry);
        m.register_affinity(&mut registry);
        m.register_probes(&mut registry);
        registered(&mut registry);
        Self { registry, ..m }
    }

    /// Registers the generations' series: counts, attempts, latency, time
    /// to first token, tokens and cost.
    fn register_traffic(&self, registry: &mut Registry) {
        registry.register(
            "understudy_generations",
            "Generations by who served (the primary when nobody did), success, fallback and refusal",
            self.generations.clone(),
        );
        registry.register(
            "understudy_attempts",
            "Attempts by provider, kind and outcome",
            self.attempts.clone(),
        );
        registry.register(
            "understudy_key_attempts",
            "A key pool's attempts by provider, key name, kind and outcome",
            self.key_attempts.clone(),
        );
        registry.register(
            "understudy_request_duration_seconds",
            "Whole-request latency by serving provider and streaming",
            self.duration.clone(),
        );
        registry.register(
            "understudy_time_to_first_token_seconds",
            "Time to the first streamed text, by serving provider",
            self.ttft.clone(),
        );
        registry.register(
            "understudy_tokens",
            "Tokens by provider and direction (input, output)",
            self.tokens.clone(),
        );
        registry.register(
            "understudy_cost_usd",
            "Spend in USD by serving provider",
            self.cost.clone(),
        );
        registry.register(
            "understudy_balance_choices",
            "Requests whose primary was chosen among a group of equivalent targets, by route and member chosen",
            self.balance_choices.clone(),
        );
        registry.register(
            "understudy_prompt_cache_tokens",
            "Input tokens of served answers by provider and prompt-cache kind (read, write, uncached)",
            self.prompt_cache_tokens.clone(),
        );
    }

    /// Registers the gateway's health series: providers up, breakers,
    /// events dropped, Redis degraded.
    fn register_health(&self, registry: &mut Registry) {
        registry.register(
            "understudy_provider_up",
            "1 when the provider can serve, else 0",
            self.provider_up.clone(),
        );
        registry.register(
            "understudy_breaker_open",
            "Circuit breaker state per target: 0 closed, 1 open, 2 half-open",
            self.breaker_open.clone(),
        );
        registry.register(
            "understudy_events_dropped",
            "Events dropped per sink",
            self.events_dropped.clone(),
        );
        registry.register(
            "understudy_redis_degraded",
            "1 while Redis is unreachable and local state is used",
            self.redis_degraded.clone(),
        );
        registry.register(
            "understudy_config_reloads",
            "Reloads of the settings file, by result (ok; error: the configuration in force stayed)",
            self.config_reloads.clone(),
        );
    }

    /// Counts a reload of the settings file: `ok`, or not.
    pub fn config_reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.config_reloads
            .get_or_create(&ReloadLabels { result })
            .inc();
    }

    /// Registers the sessions' series: affinity outcomes and the
    /// wait-or-switch choices.
    fn register_affinity(&self, registry: &mut Registry) {
        registry.register(
            "understudy_affinity",
            "Requests of a session on a route with a choice, by what became of its pin",
            self.affinity.clone(),
        );
        registry.register(
            "understudy_affinity_wait_or_switch",
            "A pinned target asked a session to wait: whether it waited or switched",
            self.wait_or_switch.clone(),
        );
        registry.register(
            "understudy_hedges",
            "Hedges of routes that hedge: started, who won, or why the backup was skipped",
            self.hedges.clone(),
        );
    }

    /// Registers the readiness prober's series.
    fn register_probes(&self, registry: &mut Registry) {
        registry.register(
            "understudy_target_ready",
            "1 when the last probe proved the target ready, 0 when it proved it not ready (a refused key, a missing model)",
            self.target_ready.clone(),
        );
        registry.register(
            "understudy_probes",
            "Readiness probes this instance made, by provider and outcome",
            self.probes.clone(),
        );
    }

    /// Sets a probed target's readiness gauge from its board state (1
    /// ready, 2 and 3 not ready); an unchecked target has no series.
    pub fn target_ready(&self, labels: &StateLabels, state: u8) {
        let value = match state {
            1 => 1,
            2 | 3 => 0,
            _ => {
                self.target_ready.remove(labels);
                return;
            }
        };
        self.target_ready.get_or_create(labels).set(value);
    }

    /// Counts a probe this instance made.
    pub fn probed(&self, provider: &str, outcome: &'static str) {
        self.probes
            .get_or_create(&ProbeLabels {
                provider: provider.to_owned(),
                outcome,
            })
            .inc();
    }

    /// Registers the client records' series.
    fn register_clients(&self, registry: &mut Registry) {
        registry.register(
            "understudy_client_requests",
            "A client record's generations by success (admitted requests)",
            self.client_requests.clone(),
        );
        registry.register(
            "understudy_client_tokens",
            "A client record's tokens by direction (input, output)",
            self.client_tokens.clone(),
        );
        registry.register(
            "understudy_client_cost_usd",
            "A client record's spend in USD",
            self.client_cost.clone(),
        );
        registry.register(
            "understudy_client_refused",
            "A client record's requests refused at admission, by the limit that tripped",
            self.client_refused.clone(),
        );
    }

    /// Counts a client's request refused by its record's `limit`.
    pub fn client_refused(&self, client: &str, limit: &'static str) {
        self.client_refused
            .get_or_create(&ClientRefusedLabels {
                client: client.to_owned(),
                limit,
            })
            .inc();
    }

    /// The drop counter for `sink`.
    pub fn dropped(&self, sink: &'static str) -> Counter {
        self.events_dropped
            .get_or_create(&SinkLabels { sink })
            .clone()
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

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
