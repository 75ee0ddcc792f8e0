//! Built-in context windows of well-known models, and a target's limits
//! resolved from them: the window a prompt must fit and the most output a
//! request may reserve. A provider or model may set its own
//! (`capabilities = { context_window = … }`, `model_capabilities = {
//! "model" = { context_window = …, max_output_tokens = … } }`), which wins;
//! a model neither knows has no window, and every prompt is assumed to fit.
//!
//! A model id is matched after its cloud's decorations are taken off: a
//! `vendor/` part (OpenRouter, Groq's `openai/gpt-oss-120b`, a Vertex
//! resource path), a Vertex `@date` suffix, and Bedrock's region and
//! vendor prefixes (`us.`, `eu.`, `global.`, `anthropic.`, …); then the
//! longest entry that matches wins. A Claude entry names one model and
//! matches only that model, dated (`-20251101`) or versioned (`-v1:0`):
//! a newer Claude whose name merely starts the same (`claude-opus-4-9`)
//! stays unknown rather than inheriting an older, smaller window. Other
//! entries are families (`gpt-4o` covers `gpt-4o-mini`, `gemini-2.5`
//! every 2.5 model): a whole family shares at least that window.

use std::collections::BTreeMap;

use understudy_types::protocol::Protocol;

use crate::ProviderSettings;
use crate::capabilities::CapabilityOverrides;
use crate::source::FieldError;

/// What a target's model holds: the window a request must fit, and how
/// its provider counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelLimits {
    /// Tokens of context: input, plus the reserved output where
    /// `counts_output`.
    pub context_window: u32,
    /// The most output tokens a request may ask for (a larger `max_tokens`
    /// is clamped to it before it is sent), when known.
    pub max_output: Option<u32>,
    /// The provider refuses input plus the request's `max_tokens` over the
    /// window (Anthropic's and OpenAI's APIs, Bedrock's); Gemini's limits
    /// the input alone.
    pub counts_output: bool,
    /// The output a request that sets no `max_tokens` reserves all the
    /// same: the Messages API requires one and is sent the model's output
    /// limit (else [`MESSAGES_DEFAULT_OUTPUT`]); Converse's default is the
    /// model's maximum; OpenAI's and Gemini's APIs reserve none.
    pub unasked_output: u32,
}

/// The `max_tokens` a Messages request gets when neither the request nor
/// the model's known limit says (the wire's `messages::DEFAULT_MAX_TOKENS`).
pub const MESSAGES_DEFAULT_OUTPUT: u32 = 8192;

/// How an entry's name matches a model id.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Match {
    /// The model itself, or a dated or versioned id of it.
    Model,
    /// Every model whose id starts with the name.
    Family,
}

/// `(name, match, context window, max output)`, from the providers'
/// model pages.
const TABLE: &[(&str, Match, u32, u32)] = &[
    // Anthropic (also on Bedrock and Vertex).
    ("claude-opus-5", Match::Family, 1_000_000, 128_000),
    ("claude-sonnet-5", Match::Family, 1_000_000, 128_000),
    ("claude-haiku-5", Match::Family, 1_000_000, 128_000),
    ("claude-fable-5", Match::Family, 1_000_000, 128_000),
    ("claude-opus-4-8", Match::Model, 1_000_000, 128_000),
    ("claude-opus-4-7", Match::Model, 1_000_000, 128_000),
    ("claude-opus-4-6", Match::Model, 1_000_000, 128_000),
    ("claude-sonnet-4-6", Match::Model, 1_000_000, 128_000),
    ("claude-opus-4-5", Match::Model, 200_000, 64_000),
    ("claude-sonnet-4-5", Match::Model, 200_000, 64_000),
    ("claude-haiku-4-5", Match::Model, 200_000, 64_000),
    ("claude-opus-4-1", Match::Model, 200_000, 32_000),
    ("claude-opus-4", Match::Model, 200_000, 32_000),
    ("claude-sonnet-4", Match::Model, 200_000, 64_000),
    ("claude-3-7-sonnet", Match::Model, 200_000, 64_000),
    ("claude-3-5-sonnet", Match::Model, 200_000, 8_192),
    ("claude-3-5-haiku", Match::Model, 200_000, 8_192),
    // OpenAI (also on Azure, under the deployment's model name).
    ("gpt-4o", Match::Family, 128_000, 16_384),
    ("gpt-4.1", Match::Family, 1_047_576, 32_768),
    ("o3", Match::Family, 200_000, 100_000),
    ("o4-mini", Match::Family, 200_000, 100_000),
    ("gpt-5", Match::Family, 400_000, 128_000),
    ("gpt-5.4", Match::Family, 1_050_000, 128_000),
    ("gpt-5.5", Match::Family, 1_050_000, 128_000),
    ("gpt-5.6-sol", Match::Family, 1_050_000, 128_000),
    ("gpt-5.6-terra", Match::Family, 1_000_000, 128_000),
    ("gpt-5.6-luna", Match::Family, 400_000, 128_000),
    // Google (also on Vertex).
    ("gemini-2.5", Match::Family, 1_048_576, 65_536),
    ("gemini-2.0", Match::Family, 1_048_576, 8_192),
    // Groq.
    ("llama-3.3-70b-versatile", Match::Family, 131_072, 32_768),
    ("llama-3.1-8b-instant", Match::Family, 131_072, 131_072),
    ("gpt-oss-120b", Match::Family, 131_072, 65_536),
    ("gpt-oss-20b", Match::Family, 131_072, 65_536),
];

/// Bedrock's cross-region inference prefixes, then its vendors'.
const BEDROCK_PREFIXES: &[&str] = &[
    "us.",
    "eu.",
    "apac.",
    "global.",
    "jp.",
    "au.",
    "ca.",
    "us-gov.",
    "anthropic.",
    "openai.",
    "meta.",
];

/// The smallest context window a configured value may have: smaller is a
/// typo (a window in thousands), not a model.
const MIN_WINDOW: u32 = 256;

/// `model`'s limits on provider `p`: its configured window (the model's,
/// then the provider's capabilities), else the built-in one; `None` when
/// neither knows it. The output limit is the one requests are clamped to,
/// else the table's.
pub fn limits_of(p: &ProviderSettings, model: &str) -> Option<ModelLimits> {
    let caps = p.capabilities_of(model);
    let builtin = builtin(model);
    let context_window = caps.context_window.or(builtin.map(|(window, _)| window))?;
    let clamp = crate::limits::output_limit(p, model);
    let max_output = clamp.or(builtin.map(|(_, out)| out));
    let protocol = p.protocol_for(model);
    Some(ModelLimits {
        context_window,
        max_output,
        counts_output: protocol != Protocol::GenerateContent,
        unasked_output: match protocol {
            Protocol::Messages => clamp.unwrap_or(MESSAGES_DEFAULT_OUTPUT),
            Protocol::Converse => max_output.unwrap_or(0),
            _ => 0,
        },
    })
}

/// The documented context window of `model`, when it is a well-known one.
pub fn context_window(model: &str) -> Option<u32> {
    builtin(model).map(|(window, _)| window)
}

/// The least room any well-known model leaves a request's input and
/// `max_tokens`: its window, less the output a Claude model reserves
/// unasked (its output limit, as it is sent one).
pub fn smallest_builtin_room() -> u32 {
    TABLE
        .iter()
        .map(|&(name, _, window, out)| {
            let reserved = if name.starts_with("claude-") { out } else { 0 };
            window - reserved
        })
        .min()
        .unwrap_or(u32::MAX)
}

// === impl ModelLimits ===

impl ModelLimits {
    /// What the window leaves a request's counted input and `max_tokens`,
    /// whatever it asks: its window less the output reserved unasked.
    pub fn room(&self) -> u32 {
        self.context_window.saturating_sub(self.unasked_output)
    }
}

/// The table's `(window, max output)` for `model`.
fn builtin(model: &str) -> Option<(u32, u32)> {
    let name = bare(model);
    TABLE
        .iter()
        .filter(|(entry, how, ..)| matches(name, entry, *how))
        .max_by_key(|(entry, ..)| entry.len())
        .map(|&(_, _, window, out)| (window, out))
}

/// `model` without its cloud's decorations.
fn bare(model: &str) -> &str {
    let mut name = model.rsplit('/').next().unwrap_or(model);
    if let Some((id, _date)) = name.split_once('@') {
        name = id;
    }
    while let Some(rest) = BEDROCK_PREFIXES
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
    {
        name = rest;
    }
    name
}

/// Whether `name` is `entry`'s: a family's member, or the model itself
/// (exactly, dated `-20…`, versioned `-v…`, or `-latest`).
fn matches(name: &str, entry: &str, how: Match) -> bool {
    let Some(rest) = name.strip_prefix(entry) else {
        return false;
    };
    match how {
        Match::Family => true,
        Match::Model => {
            rest.is_empty()
                || rest.starts_with("-20")
                || rest.starts_with("-v")
                || rest.starts_with("-latest")
        }
    }
}

/// A provider's configured windows checked, each error naming its TOML
/// path under `at` (the provider's table).
pub(crate) fn check_overrides(
    capabilities: Option<&CapabilityOverrides>,
    models: &BTreeMap<String, CapabilityOverrides>,
    at: &str,
) -> Result<(), FieldError> {
    let bad = |path: String, window: u32| {
        (window < MIN_WINDOW).then(|| {
            (
                path,
                format!(
                    "{window} is not a context window (tokens; at least {MIN_WINDOW}): \
                     a model's window is its whole number of tokens, e.g. 128000"
                ),
            )
        })
    };
    let provider = capabilities
        .and_then(|c| c.context_window)
        .and_then(|w| bad(format!("{at}.capabilities.context_window"), w));
    let model = models.iter().find_map(|(model, c)| {
        bad(
            format!("{at}.model_capabilities.\"{model}\".context_window"),
            c.context_window?,
        )
    });
    match provider.or(model) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloud_ids_find_their_model() {
        let cases = [
            ("gpt-4o", Some(128_000)),
            ("gpt-4o-mini-2024-07-18", Some(128_000)),
            ("gpt-4.1-nano", Some(1_047_576)),
            ("o4-mini", Some(200_000)),
            ("gpt-5.1-codex", Some(400_000)),
            ("gpt-5.5", Some(1_050_000)),
            ("gpt-5.6-luna", Some(400_000)),
            ("claude-opus-4-5-20251101", Some(200_000)),
            ("claude-opus-4-6", Some(1_000_000)),
            ("claude-sonnet-4-20250514", Some(200_000)),
            ("anthropic.claude-sonnet-4-5-20250929-v1:0", Some(200_000)),
            ("us.anthropic.claude-opus-4-6-v1:0", Some(1_000_000)),
            (
                "global.anthropic.claude-haiku-4-5-20251001-v1:0",
                Some(200_000),
            ),
            ("claude-sonnet-4-5@20250929", Some(200_000)),
            (
                "projects/p/locations/l/publishers/anthropic/models/claude-opus-4-1@20250805",
                Some(200_000),
            ),
            ("claude-opus-5", Some(1_000_000)),
            // A newer Claude that starts like an older one stays unknown.
            ("claude-opus-4-9", None),
            ("claude-sonnet-4-7", None),
            ("gemini-2.5-flash-lite", Some(1_048_576)),
            ("gemini-2.0-flash", Some(1_048_576)),
            ("openai/gpt-oss-120b", Some(131_072)),
            ("llama-3.3-70b-versatile", Some(131_072)),
            ("my-local-model", None),
            ("", None),
        ];
        for (model, want) in cases {
            assert_eq!(context_window(model), want, "{model}");
        }
    }

    #[test]
    fn the_table_leaves_no_less_room_than_gpt_4o() {
        assert_eq!(smallest_builtin_room(), 128_000);
    }
}

#[cfg(test)]
mod settings_tests {
    use crate::Settings;

    use super::*;

    #[test]
    fn a_configured_window_wins_and_a_bad_one_names_its_path() {
        let toml = r#"
[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:9"
model = "my-local-model"
capabilities = { context_window = 32768 }
model_capabilities = { "gpt-4o" = { context_window = 64000, max_output_tokens = 4096 } }
"#;
        let s = Settings::from_toml_str(toml, |_| None).unwrap();
        let p = &s.providers["local"];
        let of = |m: &str| limits_of(p, m);
        assert_eq!(of("my-local-model").map(|l| l.context_window), Some(32_768));
        assert_eq!(
            of("gpt-4o"),
            Some(ModelLimits {
                context_window: 64_000,
                max_output: Some(4096),
                counts_output: true,
                unasked_output: 0,
            })
        );
        // The built-in table where nothing is configured.
        let s = Settings::from_toml_str("", |_| None).unwrap();
        let gemini = limits_of(&s.providers["gemini"], "gemini-2.5-flash").unwrap();
        assert_eq!(gemini.context_window, 1_048_576);
        assert!(!gemini.counts_output);
        // A Claude model is sent its output limit when a request sets none.
        let claude = limits_of(&s.providers["claude"], "claude-sonnet-4-5").unwrap();
        assert_eq!(claude.unasked_output, 64_000);
        assert_eq!(claude.room(), 136_000);
        assert_eq!(limits_of(&s.providers["openai"], "my-fine-tune"), None);
        for (table, path) in [
            (
                "capabilities = { context_window = 128 }",
                "providers.local.capabilities.context_window",
            ),
            (
                "model_capabilities = { \"m\" = { context_window = 0 } }",
                "providers.local.model_capabilities.\"m\".context_window",
            ),
        ] {
            let toml = format!(
                "[providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\nmodel = \"m\"\n{table}\n"
            );
            let e = Settings::from_toml_str(&toml, |_| None).unwrap_err();
            assert!(e.to_string().contains(path), "{e}");
        }
        let e = Settings::from_toml_str(
            "[providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\nmodel = \"m\"\ncapabilities = { context_window = -5 }\n",
            |_| None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("providers.local"), "{e}");
    }
}
