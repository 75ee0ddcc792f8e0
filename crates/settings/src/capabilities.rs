//! What a provider's models can do (`capabilities`, `model_capabilities`)
//! and what they cost (`price`, `prices`).

use serde::Deserialize;

/// What a target can serve beyond plain text. Built-in protocols default
/// to everything; a provider or model that cannot is skipped (an attempt
/// with outcome `unsupported`, never called) by requests that need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub tools: bool,
    pub vision: bool,
    /// JSON answers (`json_object`, `json_schema`).
    pub json_schema: bool,
    /// Takes a final assistant turn as a prefill to continue from (what
    /// `continue_after_cut` needs). Anthropic targets always do; an
    /// OpenAI-compatible server must declare it.
    pub assistant_prefill: bool,
    /// The most output tokens a request may ask for; a client's larger
    /// `max_tokens` is clamped to it, and a request with none gets it.
    /// Unset: the built-in value for well-known models
    /// (`limits::output_limit`), else no clamp.
    pub max_output_tokens: Option<u32>,
    /// The model's context window in tokens (input and output together,
    /// as its provider counts them): a request that cannot fit skips the
    /// target without a call. Unset: the built-in value for well-known
    /// models (`windows::context_window`), else unknown (assumed to fit).
    pub context_window: Option<u32>,
    /// An OpenAI-compatible server that takes the output limit as
    /// `max_completion_tokens` (OpenAI itself and Azure OpenAI; what
    /// reasoning models require) rather than `max_tokens` (what other
    /// compatible servers understand). The built-in `openai` has it.
    pub max_completion_tokens: bool,
    /// What a natively forwarded request may switch on at this provider on
    /// the operator's key (`passthrough = ["web_search", …]`; none by
    /// default): see [`understudy_types::passthrough`]. A provider setting, not a
    /// model's.
    pub passthrough: understudy_types::passthrough::GatedSet,
}

/// A model's differences from its provider's capabilities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapabilityOverrides {
    pub tools: Option<bool>,
    pub vision: Option<bool>,
    pub json_schema: Option<bool>,
    pub assistant_prefill: Option<bool>,
    pub max_output_tokens: Option<u32>,
    pub context_window: Option<u32>,
    pub max_completion_tokens: Option<bool>,
}

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

// === impl Capabilities ===

impl Default for Capabilities {
    fn default() -> Self {
        Self {
            tools: true,
            vision: true,
            json_schema: true,
            assistant_prefill: false,
            max_output_tokens: None,
            context_window: None,
            max_completion_tokens: false,
            passthrough: understudy_types::passthrough::GatedSet::NONE,
        }
    }
}

impl Capabilities {
    /// These capabilities with a model's overrides applied.
    pub fn with(self, o: &CapabilityOverrides) -> Self {
        Self {
            tools: o.tools.unwrap_or(self.tools),
            vision: o.vision.unwrap_or(self.vision),
            json_schema: o.json_schema.unwrap_or(self.json_schema),
            assistant_prefill: o.assistant_prefill.unwrap_or(self.assistant_prefill),
            max_output_tokens: o.max_output_tokens.or(self.max_output_tokens),
            context_window: o.context_window.or(self.context_window),
            max_completion_tokens: o
                .max_completion_tokens
                .unwrap_or(self.max_completion_tokens),
            passthrough: self.passthrough,
        }
    }
}

// === impl Price ===

impl Price {
    /// Whether both prices are zero or more (and neither is NaN).
    pub(super) fn is_valid(&self) -> bool {
        self.input_per_mtok >= 0.0 && self.output_per_mtok >= 0.0
    }
}
