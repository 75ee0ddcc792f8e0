//! Providers: a provider's settings and what it answers (the protocol and
//! capabilities of a model, prices, a pool key's own settings), and the
//! built-ins with the environment variables that set them. Reading them
//! (the file's `[providers.NAME]` tables, then the environment) is
//! `provider_table.rs`, which depends on this file and not the other way.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use understudy_types::protocol::Protocol;

use super::ca_file::CaFile;
use super::capabilities::{Capabilities, CapabilityOverrides, Price};
use super::key_pools::KeyPoolSettings;
use super::platform::Platform;
use super::secret::{Secret, redact_url};
use super::timeouts::Timeouts;

/// One provider's settings. Its `Debug` shows the base URL without its
/// userinfo and the extra headers without their values (secrets as much
/// as the key is).
#[derive(Clone, PartialEq)]
pub struct ProviderSettings {
    pub name: String,
    /// The wire protocol it speaks.
    pub kind: Protocol,
    /// Without a trailing slash.
    pub base_url: String,
    pub api_key: Option<Secret>,
    /// The variable the key is read from, shown by `understudy providers`.
    pub api_key_env: Option<String>,
    /// Whether the provider needs a key to be available. Built-ins do; an
    /// extra provider declared without `api_key`/`api_key_env` does not.
    pub requires_key: bool,
    /// The default model.
    pub model: String,
    /// Extra request headers (e.g. OpenRouter's `HTTP-Referer`).
    pub headers: Vec<(String, String)>,
    /// The temperature the provider uses when a request sets none; the
    /// softened retry cools down from it.
    pub default_temperature: f32,
    pub timeouts: Timeouts,
    /// Other connect timeouts that routes through this provider set; the
    /// adapter keeps a pooled client for each (reqwest sets the connect
    /// timeout per client, not per request).
    pub route_connect_timeouts: Vec<Duration>,
    /// What the provider's models can do (`capabilities = {…}`).
    pub capabilities: Capabilities,
    /// What particular models can do, where it differs
    /// (`model_capabilities = { "model" = {…} }`; unset fields follow the
    /// provider's).
    pub model_capabilities: BTreeMap<String, CapabilityOverrides>,
    /// The price of the default and any unlisted model.
    pub price: Option<Price>,
    /// Prices of particular models.
    pub prices: BTreeMap<String, Price>,
    /// HTTP/1.1 only (`http1_only = true`): HTTP/2 is not offered when TLS
    /// negotiates the protocol (ALPN). Plain `http://` is always HTTP/1.1.
    pub http1_only: bool,
    /// Certificate authorities this provider's client trusts beside the
    /// system's roots (`ca_file`: a corporate egress proxy's CA).
    pub ca_file: Option<CaFile>,
    /// The cloud it is on (`kind = "bedrock" | "vertex" | "azure"`), or
    /// none.
    pub platform: Platform,
    /// The provider's own id for a client's model name (`models = {
    /// "claude-sonnet-4-5" = "us.anthropic.claude-sonnet-4-5-…" }`): one
    /// name reaches each cloud's id for the same model.
    pub models: BTreeMap<String, String>,
    /// Several keys behind this one target (none: its one `api_key`).
    pub pool: KeyPoolSettings,
    /// These are one pool key's settings ([`ProviderSettings::for_key`]):
    /// its name. The adapter then reads the rate-limit budgets answers
    /// report, for the pool to steer by.
    pub key_name: Option<String>,
    /// Each attempt sends the request's W3C `traceparent` (naming the
    /// attempt's span) and `tracestate` (`forward_traceparent = true`): for
    /// a self-hosted server that traces too (vLLM, Ollama behind a proxy);
    /// off by default, since a public API does nothing with it.
    pub forward_traceparent: bool,
}

/// The built-in providers, in the order `understudy providers` lists them
/// (the names of `BUILTINS` below, which says what each one is).
pub const BUILTIN_PROVIDERS: [&str; 4] = ["groq", "gemini", "claude", "openai"];

/// A built-in provider: where it is, and the environment variables that
/// set it over the file.
pub(super) struct Builtin {
    pub(super) name: &'static str,
    pub(super) kind: Protocol,
    pub(super) base_url: &'static str,
    pub(super) model: &'static str,
    /// The variables its key is read from: the first one set wins, and the
    /// first one is shown while none is.
    pub(super) key_vars: &'static [&'static str],
    pub(super) base_url_var: &'static str,
    pub(super) model_var: &'static str,
    /// Takes `max_completion_tokens` (see [`Capabilities`]).
    pub(super) max_completion_tokens: bool,
}

/// The built-ins, in the order their variables are read (so of two wrong
/// ones, the first here is the one reported).
pub(super) const BUILTINS: [Builtin; 4] = [
    Builtin {
        name: "groq",
        kind: Protocol::ChatCompletions,
        base_url: "https://api.groq.com/openai/v1",
        model: "llama-3.1-8b-instant",
        key_vars: &["GROQ_API_KEY"],
        base_url_var: "GROQ_BASE_URL",
        model_var: "GROQ_MODEL",
        max_completion_tokens: false,
    },
    Builtin {
        name: "openai",
        kind: Protocol::ChatCompletions,
        base_url: "https://api.openai.com/v1",
        model: "gpt-4o-mini",
        key_vars: &["OPENAI_API_KEY"],
        base_url_var: "OPENAI_BASE_URL",
        model_var: "OPENAI_MODEL",
        max_completion_tokens: true,
    },
    Builtin {
        name: "gemini",
        kind: Protocol::GenerateContent,
        base_url: "https://generativelanguage.googleapis.com/v1beta",
        model: "gemini-2.5-flash",
        key_vars: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        base_url_var: "GEMINI_BASE_URL",
        model_var: "GEMINI_MODEL",
        max_completion_tokens: false,
    },
    Builtin {
        name: "claude",
        kind: Protocol::Messages,
        base_url: "https://api.anthropic.com",
        model: "claude-haiku-4-5",
        key_vars: &["ANTHROPIC_API_KEY"],
        base_url_var: "ANTHROPIC_BASE_URL",
        model_var: "ANTHROPIC_MODEL",
        max_completion_tokens: false,
    },
];

// === impl ProviderSettings ===

impl ProviderSettings {
    /// The price of `model`: its own, else the provider's.
    pub fn price_of(&self, model: &str) -> Option<Price> {
        self.prices.get(model).copied().or(self.price)
    }

    /// What `model` can do: the provider's capabilities with the model's
    /// overrides.
    pub fn capabilities_of(&self, model: &str) -> Capabilities {
        match self.model_capabilities.get(model) {
            Some(o) => self.capabilities.with(o),
            None => self.capabilities,
        }
    }

    /// Whether the provider has what it needs to be called.
    pub fn has_key(&self) -> bool {
        match self.platform {
            Platform::Direct => !self.requires_key || self.api_key.is_some(),
            _ => self.platform.has_credentials(self.api_key.is_some()),
        }
    }

    /// The protocol a request for `model` speaks here: the provider's,
    /// unless its platform decides by the model (Vertex serves Gemini and
    /// Claude each in its own).
    pub fn protocol_for(&self, model: &str) -> Protocol {
        self.platform.protocol_for(model).unwrap_or(self.kind)
    }

    /// The provider's id for a client's model name (the name itself unless
    /// `models` maps it).
    pub fn model_id<'m>(&'m self, model: &'m str) -> &'m str {
        self.models.get(model).map_or(model, String::as_str)
    }

    /// A provider that needs no key, with every optional setting at its
    /// default.
    pub(super) fn plain(
        name: &str,
        kind: Protocol,
        base_url: &str,
        model: &str,
        timeouts: Timeouts,
    ) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            base_url: base_url.to_owned(),
            api_key: None,
            api_key_env: None,
            requires_key: false,
            model: model.to_owned(),
            headers: Vec::new(),
            // All four built-in APIs default to 1.0 when no temperature is
            // sent.
            default_temperature: 1.0,
            timeouts,
            route_connect_timeouts: Vec::new(),
            capabilities: Capabilities::default(),
            model_capabilities: BTreeMap::new(),
            price: None,
            prices: BTreeMap::new(),
            http1_only: false,
            ca_file: None,
            platform: Platform::Direct,
            models: BTreeMap::new(),
            pool: KeyPoolSettings::default(),
            key_name: None,
            forward_traceparent: false,
        }
    }

    /// The settings of the pool's key `i`: its secret, and its own base
    /// URL or region where it has them (`None`: no such key).
    pub fn for_key(&self, i: usize) -> Option<ProviderSettings> {
        let k = self.pool.keys.get(i)?;
        let mut p = self.clone();
        p.pool = KeyPoolSettings::default();
        p.api_key = k.secret.clone();
        p.key_name = Some(k.name.clone());
        if let Some(region) = &k.region {
            let default = p.platform.default_base_url();
            if p.platform.set_region(region) && default.as_deref() == Some(p.base_url.as_str()) {
                if let Some(url) = p.platform.default_base_url() {
                    p.base_url = url;
                }
            }
        }
        if let Some(url) = &k.base_url {
            p.base_url = url.clone();
        }
        Some(p)
    }

    /// The names of the pool's keys (none: the provider has one key).
    pub fn key_names(&self) -> impl Iterator<Item = &str> {
        self.pool.keys.iter().map(|k| k.name.as_str())
    }
}

impl fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Destructured, so that a new field cannot be added without being
        // considered here.
        let Self {
            name,
            kind,
            base_url,
            api_key,
            api_key_env,
            requires_key,
            model,
            headers,
            default_temperature,
            timeouts,
            route_connect_timeouts,
            capabilities,
            model_capabilities,
            price,
            prices,
            http1_only,
            ca_file,
            platform,
            models,
            pool,
            key_name,
            forward_traceparent,
        } = self;
        let header_names: Vec<(&str, &str)> =
            headers.iter().map(|(n, _)| (n.as_str(), "***")).collect();
        f.debug_struct("ProviderSettings")
            .field("name", name)
            .field("kind", kind)
            .field("base_url", &redact_url(base_url))
            .field("api_key", api_key)
            .field("api_key_env", api_key_env)
            .field("requires_key", requires_key)
            .field("model", model)
            .field("headers", &header_names)
            .field("default_temperature", default_temperature)
            .field("timeouts", timeouts)
            .field("route_connect_timeouts", route_connect_timeouts)
            .field("capabilities", capabilities)
            .field("model_capabilities", model_capabilities)
            .field("price", price)
            .field("prices", prices)
            .field("http1_only", http1_only)
            .field("ca_file", ca_file)
            .field("platform", platform)
            .field("models", models)
            .field("pool", pool)
            .field("key_name", key_name)
            .field("forward_traceparent", forward_traceparent)
            .finish()
    }
}

// === impl Builtin ===

impl Builtin {
    /// The built-in as it is before the file and the environment.
    pub(super) fn settings(&self, timeouts: Timeouts) -> ProviderSettings {
        let mut p = ProviderSettings {
            api_key_env: Some(self.key_vars[0].to_owned()),
            requires_key: true,
            ..ProviderSettings::plain(self.name, self.kind, self.base_url, self.model, timeouts)
        };
        p.capabilities.max_completion_tokens = self.max_completion_tokens;
        p
    }
}

#[cfg(test)]
mod tests {
    /// The listing order and the table of what each built-in is name the
    /// same providers.
    #[test]
    fn builtin_names_agree() {
        let mut listed = super::BUILTIN_PROVIDERS.to_vec();
        let mut table: Vec<&str> = super::BUILTINS.iter().map(|b| b.name).collect();
        listed.sort_unstable();
        table.sort_unstable();
        assert_eq!(listed, table);
    }
}
