//! The OpenTelemetry GenAI client metrics on `/metrics`, named as
//! Prometheus names OTel's (dots to underscores, the unit a suffix):
//! `gen_ai_client_operation_duration_seconds` (each attempt: a call to a
//! provider) and `gen_ai_client_token_usage` (the serving attempt's input
//! and output tokens), with the conventions' buckets and attributes.

use std::collections::HashMap;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::attempt::Outcome;
use crate::event::GenerationEvent;
use crate::protocol::Protocol;

/// Seconds: 0.01 doubling to 81.92 (the conventions' advice).
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// Tokens: 1, then ×4 to 67 108 864.
const TOKEN_BUCKETS: [f64; 14] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OperationLabels {
    gen_ai_operation_name: &'static str,
    gen_ai_provider_name: String,
    gen_ai_request_model: String,
    /// The failure code; empty for a success.
    error_type: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TokenLabels {
    gen_ai_operation_name: &'static str,
    gen_ai_provider_name: String,
    gen_ai_request_model: String,
    gen_ai_token_type: &'static str,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Buckets(&'static [f64]);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// The two families.
#[derive(Debug)]
pub(crate) struct GenAiMetrics {
    duration: Family<OperationLabels, Histogram, Buckets>,
    tokens: Family<TokenLabels, Histogram, Buckets>,
}

impl GenAiMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self {
            duration: Family::new_with_constructor(Buckets(&DURATION_BUCKETS)),
            tokens: Family::new_with_constructor(Buckets(&TOKEN_BUCKETS)),
        };
        registry.register_with_unit(
            "gen_ai_client_operation_duration",
            "GenAI operation duration: each call to a provider (OpenTelemetry GenAI conventions)",
            Unit::Seconds,
            m.duration.clone(),
        );
        registry.register(
            "gen_ai_client_token_usage",
            "Tokens used by the serving call, by gen_ai_token_type (OpenTelemetry GenAI conventions)",
            m.tokens.clone(),
        );
        m
    }
}

/// Records events, keeping each series' handle (a family lookup hashes and
/// clones its labels).
#[derive(Debug, Default)]
pub(crate) struct GenAiRecorder {
    /// Provider name → `gen_ai.provider.name`.
    names: HashMap<String, String>,
    /// By provider: (model, error type) and its series.
    duration: HashMap<String, Vec<(String, &'static str, Histogram)>>,
    /// By provider: model and its input and output series.
    tokens: HashMap<String, Vec<(String, [Histogram; 2])>>,
}

impl GenAiRecorder {
    pub(crate) fn new(names: HashMap<String, String>) -> Self {
        Self {
            names,
            ..Self::default()
        }
    }

    pub(crate) fn record(&mut self, m: &GenAiMetrics, e: &GenerationEvent) {
        if e.cached {
            return;
        }
        let op = match e.api {
            Some(Protocol::GenerateContent) => "generate_content",
            _ => "chat",
        };
        let served = e.attempts.iter().rposition(|a| a.outcome == Outcome::Ok);
        for (i, a) in e.attempts.iter().enumerate() {
            let error = match a.outcome {
                Outcome::Ok => "",
                Outcome::Failed(code) => code.as_str(),
            };
            let name = || {
                self.names
                    .get(&a.provider)
                    .cloned()
                    .unwrap_or_else(|| a.provider.clone())
            };
            let known = self
                .duration
                .get(&a.provider)
                .and_then(|list| {
                    list.iter()
                        .find(|(m, err, _)| *m == a.model && *err == error)
                })
                .map(|(_, _, h)| h.clone());
            let duration = match known {
                Some(h) => h,
                None => {
                    let h = m
                        .duration
                        .get_or_create(&OperationLabels {
                            gen_ai_operation_name: op,
                            gen_ai_provider_name: name(),
                            gen_ai_request_model: a.model.clone(),
                            error_type: error,
                        })
                        .clone();
                    self.duration.entry(a.provider.clone()).or_default().push((
                        a.model.clone(),
                        error,
                        h.clone(),
                    ));
                    h
                }
            };
            duration.observe(a.latency_ms / 1000.0);
            let Some(u) = e.usage.filter(|_| Some(i) == served) else {
                continue;
            };
            let known = self
                .tokens
                .get(&a.provider)
                .and_then(|list| list.iter().find(|(m, _)| *m == a.model))
                .map(|(_, hs)| hs.clone());
            let [input, output] = match known {
                Some(hs) => hs,
                None => {
                    let hs = ["input", "output"].map(|kind| {
                        m.tokens
                            .get_or_create(&TokenLabels {
                                gen_ai_operation_name: op,
                                gen_ai_provider_name: name(),
                                gen_ai_request_model: a.model.clone(),
                                gen_ai_token_type: kind,
                            })
                            .clone()
                    });
                    self.tokens
                        .entry(a.provider.clone())
                        .or_default()
                        .push((a.model.clone(), hs.clone()));
                    hs
                }
            };
            input.observe(u.input_tokens as f64);
            output.observe(u.output_tokens as f64);
        }
    }
}
