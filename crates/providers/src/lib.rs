//! Understudy's wire adapters: one per protocol, each translating the
//! neutral [`ChatRequest`](understudy_core::ChatRequest) to a provider's
//! HTTP API and classifying every outcome into a
//! [`Failure`](understudy_core::Failure) the decision table understands.
//!
//! # Layout
//! - [`openai_compat`]: OpenAI Chat Completions and compatible servers (Groq, Ollama, vLLM, OpenRouter…).
//! - [`classify`]: what HTTP statuses, transport errors and rate-limit hints mean.
//! - `http`: the pooled client and bounded body reading shared by adapters.

pub mod classify;
mod http;
pub mod openai_compat;

use std::sync::Arc;

use understudy_core::{Adapter, AdapterFactory, Failure, ProviderKind, ProviderSettings, Secret};

/// The factory the engine uses to build adapters for every compiled-in protocol.
#[derive(Debug, Default, Clone, Copy)]
pub struct Providers;

impl Providers {
    /// The factory as the engine takes it.
    pub fn factory() -> Arc<dyn AdapterFactory> {
        Arc::new(Self)
    }
}

impl AdapterFactory for Providers {
    fn supports(&self, kind: ProviderKind) -> bool {
        matches!(kind, ProviderKind::Openai)
    }

    fn build(&self, settings: &ProviderSettings) -> Result<Arc<dyn Adapter>, String> {
        match settings.kind {
            ProviderKind::Openai => Ok(Arc::new(openai_compat::OpenAiCompat::new(settings)?)),
            other => Err(format!(
                "no adapter for the {other:?} protocol is compiled in"
            )),
        }
    }
}

/// Installs ring as the process-wide rustls crypto provider. reqwest is
/// built without one (see the workspace manifest); a second call, or a
/// provider the host installed first, leaves things as they are.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Scrubs the provider's key from a failure's detail: an upstream that
/// echoes the key in its error message must not leak it into our errors,
/// events or logs.
pub(crate) fn redact(mut failure: Failure, key: Option<&Secret>) -> Failure {
    if let Some(key) = key.map(Secret::expose).filter(|k| k.len() >= 4) {
        if failure.detail.contains(key) {
            failure.detail = failure.detail.replace(key, "***");
        }
        // The detail is bounded, so a key can also stand cut short at its end.
        let body = failure.detail.trim_end_matches('…');
        if let Some(start) = (0..body.len().saturating_sub(3))
            .filter(|i| body.is_char_boundary(*i))
            .find(|i| key.starts_with(&body[*i..]))
        {
            failure.detail = format!("{}***…", &body[..start]);
        }
    }
    failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use understudy_core::FailureKind;

    #[test]
    fn redaction() {
        let key = Secret::new("sk-live-0123456789");
        let f = redact(
            Failure::new(FailureKind::Auth, "bad key sk-live-0123456789 given"),
            Some(&key),
        );
        assert_eq!(f.detail, "bad key *** given");
        let cut = redact(
            Failure::new(FailureKind::Auth, "bad key sk-live-01…"),
            Some(&key),
        );
        assert_eq!(cut.detail, "bad key ***…");
        let clean = redact(Failure::new(FailureKind::Auth, "bad key"), Some(&key));
        assert_eq!(clean.detail, "bad key");
    }
}
