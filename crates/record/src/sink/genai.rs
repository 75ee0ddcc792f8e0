//! The OpenTelemetry GenAI client metrics on `/metrics`, named as
//! Prometheus names OTel's (dots to underscores, the unit a suffix):
//! `gen_ai_client_operation_duration_seconds` (each attempt: a call to a
//! provider) and `gen_ai_client_token_usage` (the serving attempt's input
//! and output tokens), with the conventions' buckets and attributes; and
//! the conventions' names the spans share ([`operation`],
//! [`provider_name`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use understudy_settings::{Platform, Settings};
use understudy_types::attempt::{Attempt, Outcome};
use understudy_types::chat::Usage;
use understudy_types::protocol::Protocol;

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
pub struct OperationLabels {
    gen_ai_operation_name: &'static str,
    gen_ai_provider_name: String,
    gen_ai_request_model: String,
    /// The failure code; empty for a success.
    error_type: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    gen_ai_operation_name: &'static str,
    gen_ai_provider_name: String,
    gen_ai_request_model: String,
    gen_ai_token_type: &'static str,
}

#[derive(Debug, Clone, Copy)]
pub struct Buckets(&'static [f64]);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// The two families.
#[derive(Debug)]
pub struct GenAiMetrics {
    duration: Family<OperationLabels, Histogram, Buckets>,
    tokens: Family<TokenLabels, Histogram, Buckets>,
}

impl GenAiMetrics {
    pub fn register(registry: &mut Registry) -> Self {
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

/// One provider's series, kept by the metrics recorder beside the
/// provider's own (a family lookup hashes and clones its labels).
#[derive(Debug, Default)]
pub struct GenAiHandles {
    /// By operation, model and error type.
    duration: Vec<(&'static str, String, &'static str, Histogram)>,
    /// By operation and model: input and output.
    tokens: Vec<(&'static str, String, [Histogram; 2])>,
}

/// The most models one provider's series name; further ones (a client can
/// pin any model name) are counted as `_OTHER`, as OpenTelemetry names a
/// value it does not keep.
const MAX_MODELS: usize = 64;

/// `gen_ai.operation.name` of a request that came through `api`.
pub fn operation(api: Option<Protocol>) -> &'static str {
    match api {
        Some(Protocol::GenerateContent) => "generate_content",
        _ => "chat",
    }
}

/// `gen_ai.provider.name`: the platform's, else the API's owner, else the
/// provider's own name where the conventions list it (`groq`, …).
pub fn provider_name(provider: &str, settings: &Settings) -> String {
    const LISTED: [&str; 8] = [
        "groq",
        "deepseek",
        "mistral_ai",
        "x_ai",
        "perplexity",
        "cohere",
        "moonshot_ai",
        "openai",
    ];
    let Some(p) = settings.providers.get(provider) else {
        return provider.to_owned();
    };
    let named = match (&p.platform, p.kind) {
        (Platform::Bedrock(_), _) => "aws.bedrock",
        (Platform::Vertex(_), _) => "gcp.vertex_ai",
        (Platform::Azure(_), _) => "azure.ai.openai",
        _ if LISTED.contains(&provider) => return provider.to_owned(),
        (_, Protocol::Messages) => "anthropic",
        (_, Protocol::GenerateContent) => "gcp.gemini",
        _ => "openai",
    };
    named.to_owned()
}

impl GenAiHandles {
    /// Records attempt `a` (of operation `op`; `usage`: the tokens, when it
    /// served); `name` is the provider's `gen_ai.provider.name`.
    pub fn record(
        &mut self,
        m: &GenAiMetrics,
        name: impl Fn() -> String,
        op: &'static str,
        a: &Attempt,
        usage: Option<Usage>,
    ) {
        let error = match a.outcome {
            Outcome::Ok => "",
            Outcome::Failed(code) => code.as_str(),
            Outcome::Cancelled => "cancelled",
        };
        let model = if self.duration.len() < MAX_MODELS * 4
            || self.duration.iter().any(|(_, m, _, _)| **m == *a.model)
        {
            &*a.model
        } else {
            "_OTHER"
        };
        let i = match self
            .duration
            .iter()
            .position(|(o, m, err, _)| *o == op && m == model && *err == error)
        {
            Some(i) => i,
            None => {
                let h = m
                    .duration
                    .get_or_create(&OperationLabels {
                        gen_ai_operation_name: op,
                        gen_ai_provider_name: name(),
                        gen_ai_request_model: model.to_owned(),
                        error_type: error,
                    })
                    .clone();
                self.duration.push((op, model.to_owned(), error, h));
                self.duration.len() - 1
            }
        };
        self.duration[i].3.observe(a.latency_ms / 1000.0);
        let Some(u) = usage else {
            return;
        };
        let i = match self
            .tokens
            .iter()
            .position(|(o, m, _)| *o == op && m == model)
        {
            Some(i) => i,
            None => {
                let hs = ["input", "output"].map(|kind| {
                    m.tokens
                        .get_or_create(&TokenLabels {
                            gen_ai_operation_name: op,
                            gen_ai_provider_name: name(),
                            gen_ai_request_model: model.to_owned(),
                            gen_ai_token_type: kind,
                        })
                        .clone()
                });
                self.tokens.push((op, model.to_owned(), hs));
                self.tokens.len() - 1
            }
        };
        let [input, output] = &self.tokens[i].2;
        input.observe(u.input_tokens as f64);
        output.observe(u.output_tokens as f64);
    }
}
