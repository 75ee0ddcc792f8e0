//! The metrics sink, which records every event into [`Metrics`] as it is
//! published, and the [`Recorder`] that keeps the handle of each series
//! it has written (a provider's, a client record's, the sessions' and the
//! hedges'), so that an event hashes no labels.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use super::{
    AffinityLabels, AttemptLabels, BalanceLabels, CacheTokenLabels, ChoiceLabels, ClientLabels,
    ClientRequestLabels, ClientTokenLabels, DurationLabels, GenerationLabels, HedgeLabels,
    KeyAttemptLabels, Metrics, ProviderLabels, TokenLabels,
};
use crate::event::GenerationEvent;

/// The metrics sink: every event recorded into [`Metrics`] as it is
/// published, by one [`Recorder`] behind a short lock.
#[derive(Debug)]
pub struct MetricsSink(Mutex<Recorder>);

impl MetricsSink {
    /// A sink writing `metrics`, naming each provider for the GenAI
    /// metrics by `genai_names` (provider name → `gen_ai.provider.name`).
    pub fn new(metrics: Arc<Metrics>, genai_names: HashMap<String, String>) -> Self {
        let mut recorder = Recorder::new(metrics);
        recorder.genai_names = genai_names;
        Self(Mutex::new(recorder))
    }
}

impl crate::sink::fanout::Inline for MetricsSink {
    fn record(&self, event: &Arc<GenerationEvent>) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .record(event);
    }
}

/// Records events into [`Metrics`], keeping the handle of every series it
/// has written: a family lookup hashes and clones its labels, so each
/// series is looked up once, and an event then costs a lookup by provider
/// name for its labelled provider and for each attempt. The map is bounded by the providers in the settings
/// (events name no other).
#[derive(Debug)]
pub struct Recorder {
    metrics: Arc<Metrics>,
    providers: crate::fixed_keys::FixedMap<String, Handles>,
    /// By client record's name.
    clients: HashMap<String, ClientHandles>,
    /// Provider name → `gen_ai.provider.name`.
    genai_names: HashMap<String, String>,
    /// Group choices, by route and member chosen (a short list).
    balance_choices: Vec<((String, String), Counter)>,
    /// Affinity outcomes, by [`AFFINITY_OUTCOMES`]' index, then wait and
    /// switch: each series resolved once (when first written), so an event
    /// hashes no labels.
    affinity: [Option<Counter>; AFFINITY_OUTCOMES.len()],
    wait_or_switch: [Option<Counter>; 2],
    /// Hedge outcomes, by [`HEDGE_OUTCOMES`]' index.
    hedges: [Option<Counter>; HEDGE_OUTCOMES.len()],
}

/// The hedge outcomes a series is kept for: `started` (counted beside
/// each started hedge's end), its ends, the skips, then `other`.
const HEDGE_OUTCOMES: [&str; 9] = [
    "started",
    "won_primary",
    "won_backup",
    "failed",
    "skipped_share",
    "skipped_breaker",
    "skipped_rate_limit",
    "skipped_spend",
    "other",
];

/// The affinity outcomes a series is kept for; any other counts as the
/// last, `other` (an event read back from Redis could say anything).
const AFFINITY_OUTCOMES: [&str; 6] = ["hit", "moved", "new", "expired", "none", "other"];

/// One client record's series.
#[derive(Debug)]
struct ClientHandles {
    /// By `success`.
    requests: [Counter; 2],
    /// Input, output.
    tokens: [Counter; 2],
    cost: Counter<f64, AtomicU64>,
}

impl ClientHandles {
    fn record(&self, e: &GenerationEvent) {
        self.requests[usize::from(e.success)].inc();
        if let Some(u) = e.usage.filter(|_| !e.cached) {
            self.tokens[0].inc_by(u.input_tokens);
            self.tokens[1].inc_by(u.output_tokens);
        }
        // A hedge's losing call is the client's spend too.
        let loser = e.hedge.as_deref().and_then(|h| h.loser_cost_usd);
        let cost = e.cost_usd.unwrap_or(0.0) + loser.unwrap_or(0.0);
        if cost > 0.0 {
            self.cost.inc_by(cost);
        }
    }
}

impl Metrics {
    /// A client record's counters, made once per record and kept by the
    /// recorder.
    fn client_handles(&self, client: &str) -> ClientHandles {
        let requests = [false, true].map(|success| {
            self.client_requests
                .get_or_create(&ClientRequestLabels {
                    client: client.to_owned(),
                    success,
                })
                .clone()
        });
        let tokens = ["input", "output"].map(|direction| {
            self.client_tokens
                .get_or_create(&ClientTokenLabels {
                    client: client.to_owned(),
                    direction,
                })
                .clone()
        });
        let cost = self
            .client_cost
            .get_or_create(&ClientLabels {
                client: client.to_owned(),
            })
            .clone();
        ClientHandles {
            requests,
            tokens,
            cost,
        }
    }
}

/// One provider's series, filled as events need them.
#[derive(Debug, Default)]
struct Handles {
    /// By `success`, `fell_back` and `content_filtered` (bits 0, 1, 2).
    generations: [Option<Counter>; 8],
    /// By `streamed` and API.
    duration: Vec<((bool, &'static str), Histogram)>,
    ttft: Option<Histogram>,
    /// Input, output.
    tokens: Option<[Counter; 2]>,
    cost: Option<Counter<f64, AtomicU64>>,
    /// Prompt-cache tokens: read, write, uncached.
    cache_tokens: Option<[Counter; 3]>,
    /// By kind and outcome.
    attempts: Vec<((&'static str, &'static str), Counter)>,
    /// A pool's, by kind, outcome and key name.
    key_attempts: Vec<((&'static str, &'static str, String), Counter)>,
    /// The GenAI client metrics' series.
    genai: crate::sink::genai::GenAiHandles,
}

impl Recorder {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            providers: Default::default(),
            clients: HashMap::new(),
            genai_names: HashMap::new(),
            balance_choices: Vec::new(),
            affinity: Default::default(),
            wait_or_switch: Default::default(),
            hedges: Default::default(),
        }
    }

    /// Records one event.
    pub fn record(&mut self, e: &GenerationEvent) {
        self.record_client(e);
        if let Some(a) = &e.affinity {
            self.record_affinity(a);
        }
        if let Some(h) = &e.hedge {
            self.record_hedge(h);
            self.record_loser_cost(e, h);
        }
        let m = &*self.metrics;
        let provider = e.label_provider();
        let Some(h) = handles(&mut self.providers, provider) else {
            return;
        };
        h.record_generation(m, provider, e);
        if e.balanced {
            let found = self
                .balance_choices
                .iter()
                .find(|((route, provider), _)| *route == e.route && **provider == *e.primary);
            match found {
                Some((_, c)) => {
                    c.inc();
                }
                None => {
                    let labels = BalanceLabels {
                        route: e.route.clone(),
                        provider: e.primary.to_string(),
                    };
                    let c = m.balance_choices.get_or_create(&labels).clone();
                    c.inc();
                    let key = (labels.route, labels.provider);
                    self.balance_choices.push((key, c));
                }
            }
        }
        self.record_attempts(e);
    }

    /// Records a session's affinity outcome and wait-or-switch choice.
    fn record_affinity(&mut self, a: &crate::event::AffinityNote) {
        let m = &*self.metrics;
        // Label values from a fixed set: no string is made per event.
        let at = AFFINITY_OUTCOMES
            .iter()
            .position(|o| a.outcome == *o)
            .unwrap_or(AFFINITY_OUTCOMES.len() - 1);
        self.affinity[at]
            .get_or_insert_with(|| {
                let outcome = AFFINITY_OUTCOMES[at];
                m.affinity
                    .get_or_create(&AffinityLabels { outcome })
                    .clone()
            })
            .inc();
        if let Some(choice) = a.wait_or_switch.as_deref() {
            let at = usize::from(choice != "wait");
            self.wait_or_switch[at]
                .get_or_insert_with(|| {
                    let choice = ["wait", "switch"][at];
                    m.wait_or_switch
                        .get_or_create(&ChoiceLabels { choice })
                        .clone()
                })
                .inc();
        }
    }

    /// Records a hedge's outcome (and, for one that started, `started`).
    fn record_hedge(&mut self, h: &crate::event::HedgeNote) {
        let at = HEDGE_OUTCOMES
            .iter()
            .position(|o| h.outcome == *o)
            .unwrap_or(HEDGE_OUTCOMES.len() - 1);
        let started = (1..=3).contains(&at);
        for at in [Some(at), started.then_some(0)].into_iter().flatten() {
            let m = &*self.metrics;
            self.hedges[at]
                .get_or_insert_with(|| {
                    let outcome = HEDGE_OUTCOMES[at];
                    m.hedges.get_or_create(&HedgeLabels { outcome }).clone()
                })
                .inc();
        }
    }

    /// Counts a hedge's losing call's estimated cost on its provider's
    /// cost series (the call is the event's cancelled attempt).
    fn record_loser_cost(&mut self, e: &GenerationEvent, h: &crate::event::HedgeNote) {
        let Some(cost) = h.loser_cost_usd.filter(|c| *c > 0.0) else {
            return;
        };
        let cancelled = understudy_types::attempt::Outcome::Cancelled;
        let Some(a) = e.attempts.iter().find(|a| a.outcome == cancelled) else {
            return;
        };
        let m = &*self.metrics;
        let provider = &*a.provider;
        if let Some(handles) = handles(&mut self.providers, provider) {
            handles
                .cost
                .get_or_insert_with(|| m.cost.get_or_create(&labels(provider)).clone())
                .inc_by(cost);
        }
    }

    /// Records the event on its client record's series, if it has one.
    fn record_client(&mut self, e: &GenerationEvent) {
        let Some(client) = &e.client else {
            return;
        };
        if !self.clients.contains_key(client.as_str()) {
            let h = self.metrics.client_handles(client);
            self.clients.insert(client.clone(), h);
        }
        if let Some(h) = self.clients.get(client.as_str()) {
            h.record(e);
        }
    }

    /// Records each attempt on its provider's series (and the GenAI
    /// client metrics', unless the cache answered).
    fn record_attempts(&mut self, e: &GenerationEvent) {
        let m = &*self.metrics;
        let op = crate::sink::genai::operation(e.api);
        let served = e
            .attempts
            .iter()
            .rposition(|a| a.outcome == understudy_types::attempt::Outcome::Ok);
        for (i, a) in e.attempts.iter().enumerate() {
            let (kind, outcome) = (a.kind.as_str(), a.outcome.as_str());
            let Some(h) = handles(&mut self.providers, &a.provider) else {
                continue;
            };
            if !e.cached {
                let names = &self.genai_names;
                let name = || {
                    names
                        .get(&*a.provider)
                        .cloned()
                        .unwrap_or_else(|| a.provider.to_string())
                };
                let usage = e.usage.filter(|_| Some(i) == served);
                h.genai.record(&m.genai, name, op, a, usage);
            }
            find_or(&mut h.attempts, (kind, outcome), || {
                m.attempts
                    .get_or_create(&AttemptLabels {
                        provider: a.provider.to_string(),
                        kind,
                        outcome,
                    })
                    .clone()
            })
            .inc();
            if let Some(key) = &a.key {
                h.record_key_attempt(m, &a.provider, key, (kind, outcome));
            }
        }
    }
}

// === impl Handles ===

impl Handles {
    /// Records the generation on its provider's series (`provider`: the
    /// serving one, else the primary): its count, latency, time to first
    /// token, tokens and cost.
    fn record_generation(&mut self, m: &Metrics, provider: &str, e: &GenerationEvent) {
        let bits = usize::from(e.success)
            | usize::from(e.fell_back) << 1
            | usize::from(e.content_filtered) << 2;
        self.generations[bits]
            .get_or_insert_with(|| {
                m.generations
                    .get_or_create(&GenerationLabels {
                        provider: provider.to_owned(),
                        success: e.success,
                        fell_back: e.fell_back,
                        content_filtered: e.content_filtered,
                    })
                    .clone()
            })
            .inc();
        let api = understudy_types::protocol::api_label(e.api);
        find_or(&mut self.duration, (e.streamed, api), || {
            m.duration
                .get_or_create(&DurationLabels {
                    provider: provider.to_owned(),
                    streamed: e.streamed,
                    api,
                })
                .clone()
        })
        .observe(e.latency_ms / 1000.0);
        if let Some(ttft) = e.ttft_ms {
            self.ttft
                .get_or_insert_with(|| m.ttft.get_or_create(&labels(provider)).clone())
                .observe(ttft / 1000.0);
        }
        // Tokens and cost are the serving provider's, which is `provider`
        // whenever there is one.
        if let (Some(u), Some(_)) = (e.usage, &e.provider) {
            let [input, output] = self.tokens.get_or_insert_with(|| {
                ["input", "output"].map(|direction| {
                    m.tokens
                        .get_or_create(&TokenLabels {
                            provider: provider.to_owned(),
                            direction,
                        })
                        .clone()
                })
            });
            input.inc_by(u.input_tokens);
            output.inc_by(u.output_tokens);
        }
        if let (Some(u), Some(_), false) = (e.usage, &e.provider, e.cached) {
            let [read, write, uncached] = self.cache_tokens.get_or_insert_with(|| {
                ["read", "write", "uncached"].map(|kind| {
                    m.prompt_cache_tokens
                        .get_or_create(&CacheTokenLabels {
                            provider: provider.to_owned(),
                            kind,
                        })
                        .clone()
                })
            });
            read.inc_by(u.cache_read_input_tokens);
            write.inc_by(u.cache_write_input_tokens);
            uncached.inc_by(
                u.input_tokens.saturating_sub(
                    u.cache_read_input_tokens
                        .saturating_add(u.cache_write_input_tokens),
                ),
            );
        }
        if let (Some(cost), Some(_)) = (e.cost_usd, &e.provider) {
            self.cost
                .get_or_insert_with(|| m.cost.get_or_create(&labels(provider)).clone())
                .inc_by(cost);
        }
    }

    /// Counts an attempt on pool key `key` of `provider`, by kind and
    /// outcome.
    fn record_key_attempt(
        &mut self,
        m: &Metrics,
        provider: &str,
        key: &str,
        (kind, outcome): (&'static str, &'static str),
    ) {
        let found = self
            .key_attempts
            .iter()
            .find(|(k, _)| k.0 == kind && k.1 == outcome && k.2 == key);
        match found {
            Some((_, c)) => {
                c.inc();
            }
            None => {
                let c = m
                    .key_attempts
                    .get_or_create(&KeyAttemptLabels {
                        provider: provider.to_owned(),
                        key: key.to_owned(),
                        kind,
                        outcome,
                    })
                    .clone();
                c.inc();
                self.key_attempts.push(((kind, outcome, key.to_owned()), c));
            }
        };
    }
}

/// `provider`'s handles (created empty on its first event; `None` never
/// happens, as the entry is made first).
fn handles<'a>(
    providers: &'a mut crate::fixed_keys::FixedMap<String, Handles>,
    provider: &str,
) -> Option<&'a mut Handles> {
    if !providers.contains_key(provider) {
        providers.insert(provider.to_owned(), Handles::default());
    }
    providers.get_mut(provider)
}

/// The handle under `key` in a short list, made by `make` the first time.
fn find_or<K: PartialEq, M>(list: &mut Vec<(K, M)>, key: K, make: impl FnOnce() -> M) -> &M {
    let i = match list.iter().position(|(k, _)| *k == key) {
        Some(i) => i,
        None => {
            list.push((key, make()));
            list.len() - 1
        }
    };
    &list[i].1
}

fn labels(provider: &str) -> ProviderLabels {
    ProviderLabels {
        provider: provider.to_owned(),
    }
}
