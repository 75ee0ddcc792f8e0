//! Built-in output-token limits of well-known models, so that a client's
//! `max_tokens` meant for one model (Claude Code asks for 32 000 to
//! 128 000) is clamped to what a fallback accepts instead of failing with a
//! 400 exactly when the fallback is needed. A provider or model may set its
//! own (`capabilities = { max_output_tokens = … }`), which wins.
//!
//! The values are the providers' documented maximum output tokens per model
//! family; a model is matched by the longest prefix of its name (after any
//! `vendor/` part, as OpenRouter-style names have), so dated snapshots
//! (`claude-sonnet-4-5-20250929`) find their family.

use understudy_types::protocol::Protocol;

use crate::ProviderSettings;

/// `(model name prefix, max output tokens)` per protocol.
const OPENAI: &[(&str, u32)] = &[
    ("gpt-3.5-turbo", 4_096),
    ("gpt-4-turbo", 4_096),
    ("gpt-4o", 16_384),
    ("gpt-4o-mini", 16_384),
    ("gpt-4.1", 32_768),
    ("gpt-5", 128_000),
    ("o1", 100_000),
    ("o1-mini", 65_536),
    ("o3", 100_000),
    ("o4-mini", 100_000),
    // Groq's models, served over the same protocol.
    ("llama-3.1-8b-instant", 131_072),
    ("llama-3.3-70b-versatile", 32_768),
];

const ANTHROPIC: &[(&str, u32)] = &[
    ("claude-3-haiku", 4_096),
    ("claude-3-opus", 4_096),
    ("claude-3-5-haiku", 8_192),
    ("claude-3-5-sonnet", 8_192),
    ("claude-3-7-sonnet", 64_000),
    ("claude-sonnet-4", 64_000),
    ("claude-opus-4", 32_000),
    ("claude-opus-4-5", 64_000),
    ("claude-haiku-4", 64_000),
];

const GEMINI: &[(&str, u32)] = &[
    ("gemini-1.5", 8_192),
    ("gemini-2.0", 8_192),
    ("gemini-2.5", 65_536),
    ("gemini-3", 65_536),
];

/// The output-token limit of `model` on provider `p`: configured (the
/// model's, then the provider's capabilities), else built in for
/// well-known models, else unknown.
pub fn output_limit(p: &ProviderSettings, model: &str) -> Option<u32> {
    p.capabilities_of(model)
        .max_output_tokens
        .or_else(|| builtin_output_limit(p.protocol_for(model), model))
}

/// The documented output limit of `model` on a provider speaking `kind`,
/// when the model is a well-known one.
pub fn builtin_output_limit(kind: Protocol, model: &str) -> Option<u32> {
    let table = match kind {
        Protocol::ChatCompletions | Protocol::Responses => OPENAI,
        Protocol::Messages => ANTHROPIC,
        Protocol::GenerateContent => GEMINI,
        // Bedrock's other models (Converse), and a protocol no provider
        // speaks: no built-in output limits. Every kind has a table (a
        // test walks `Protocol::KINDS`).
        _ => &[],
    };
    let name = model.rsplit('/').next().unwrap_or(model);
    table
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|&(_, limit)| limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new provider kind gets its table here, or this fails (the match
    /// above no longer makes the compiler ask).
    #[test]
    fn every_provider_kind_has_built_in_limits() {
        let known = [
            (Protocol::ChatCompletions, "gpt-4o"),
            (Protocol::Responses, "gpt-4o"),
            (Protocol::Messages, "claude-sonnet-4-5"),
            (Protocol::GenerateContent, "gemini-2.5-pro"),
        ];
        for kind in Protocol::KINDS {
            let model = known.iter().find(|(k, _)| *k == kind).map(|(_, m)| *m);
            let model = model.unwrap_or_else(|| panic!("no well-known model for {kind}"));
            assert!(
                builtin_output_limit(kind, model).is_some(),
                "{kind}: {model}"
            );
        }
    }

    #[test]
    fn the_longest_prefix_wins() {
        let cases = [
            (Protocol::ChatCompletions, "gpt-4o-mini", Some(16_384)),
            (Protocol::ChatCompletions, "gpt-4o-2024-08-06", Some(16_384)),
            (
                Protocol::ChatCompletions,
                "openai/gpt-4.1-mini",
                Some(32_768),
            ),
            (
                Protocol::ChatCompletions,
                "o1-mini-2024-09-12",
                Some(65_536),
            ),
            (Protocol::ChatCompletions, "my-local-model", None),
            (Protocol::Responses, "gpt-5-codex", Some(128_000)),
            (Protocol::Messages, "claude-opus-4-1-20250805", Some(32_000)),
            (Protocol::Messages, "claude-opus-4-5-20251101", Some(64_000)),
            (Protocol::Messages, "claude-haiku-4-5", Some(64_000)),
            (Protocol::Messages, "claude-unknown", None),
            (Protocol::GenerateContent, "gemini-2.5-flash", Some(65_536)),
            // A table is per protocol.
            (Protocol::GenerateContent, "gpt-4o", None),
        ];
        for (kind, model, want) in cases {
            assert_eq!(builtin_output_limit(kind, model), want, "{kind:?} {model}");
        }
    }
}
