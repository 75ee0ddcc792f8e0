//! Providers: the built-ins and the environment variables that set them,
//! a provider's settings, and reading them all (the file's
//! `[providers.NAME]` tables, in `provider_table.rs`, laid over a built-in
//! or declaring a provider of its own, then the environment over them).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::protocol::Protocol;

use super::ca_file::CaFile;
use super::capabilities::{Capabilities, CapabilityOverrides, Price};
use super::keys::KeyPool;
use super::platform::{CloudEnv, Kind, Platform, RawCloud};
use super::provider_table::RawProvider;
use super::secret::{Secret, redact_url};
use super::source::{Blame, Env, SettingsError};
use super::timeouts::Timeouts;

/// One provider's settings. Its `Debug` shows the base URL without its
/// userinfo and the extra headers without their values (secrets as much
/// as the key is).
#[derive(Clone)]
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
    pub pool: KeyPool,
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
struct Builtin {
    name: &'static str,
    kind: Protocol,
    base_url: &'static str,
    model: &'static str,
    /// The variables its key is read from: the first one set wins, and the
    /// first one is shown while none is.
    key_vars: &'static [&'static str],
    base_url_var: &'static str,
    model_var: &'static str,
    /// Takes `max_completion_tokens` (see [`Capabilities`]).
    max_completion_tokens: bool,
}

/// The built-ins, in the order their variables are read (so of two wrong
/// ones, the first here is the one reported).
const BUILTINS: [Builtin; 4] = [
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

/// Every provider: the built-ins, the file's tables over them, then the
/// environment over the file.
pub(super) fn read(
    raw: BTreeMap<String, RawProvider>,
    timeouts: Timeouts,
    env: &Env<'_>,
    blame: &Blame,
) -> Result<BTreeMap<String, ProviderSettings>, SettingsError> {
    let (mut providers, clouds) = from_file(raw, timeouts, blame)?;
    apply_env(&mut providers, env, blame)?;
    for p in providers.values_mut() {
        resolve_pool(p, env)
            .map_err(|(key, m)| blame.file(format!("providers.{}.{key}", p.name), m))?;
    }
    for (name, (kind, cloud)) in clouds {
        if let Some(p) = providers.get_mut(&name) {
            resolve_platform(p, kind, &cloud, &CloudEnv { env })
                .map_err(|(key, m)| blame.file(format!("providers.{name}.{key}"), m))?;
        }
    }
    for p in providers.values() {
        if let Some(i) = p.pool.keys.iter().position(|k| k.region.is_some()) {
            if matches!(p.platform, Platform::Direct | Platform::Azure(_)) {
                return Err(blame.file(
                    format!("providers.{}.keys[{i}].region", p.name),
                    "`region` is a setting of kind bedrock or vertex".into(),
                ));
            }
        }
    }
    Ok(providers)
}

/// A pool's keys read from the environment; the provider's `api_key` is
/// its first key that is set (so that whatever asks whether the provider
/// has a key asks the pool).
fn resolve_pool(p: &mut ProviderSettings, env: &Env<'_>) -> Result<(), (String, String)> {
    if p.pool.keys.is_empty() {
        return Ok(());
    }
    p.pool.read_env(env);
    if let Some(i) = p.pool.duplicate() {
        return Err((
            format!("keys[{i}]"),
            format!(
                "key `{}` is the same key as another of the pool",
                p.pool.keys[i].name
            ),
        ));
    }
    p.api_key = p.pool.first_secret().cloned();
    p.api_key_env = None;
    p.requires_key = true;
    Ok(())
}

/// A provider's cloud settings, completed from the environment once its
/// key is known (a Bedrock API key or a Vertex access token needs no
/// other credentials).
fn resolve_platform(
    p: &mut ProviderSettings,
    kind: Kind,
    cloud: &RawCloud,
    env: &CloudEnv<'_, '_>,
) -> Result<(), (String, String)> {
    let key = p.api_key.is_some();
    p.platform = match kind {
        Kind::Protocol(_) => return Ok(()),
        Kind::Bedrock => Platform::Bedrock(env.bedrock(cloud, key)?),
        Kind::Vertex => Platform::Vertex(env.vertex(cloud, key)?),
        Kind::Azure => Platform::Azure(CloudEnv::azure(cloud)?),
    };
    if p.base_url.is_empty() {
        p.base_url = p.platform.default_base_url().ok_or_else(|| {
            (
                "base_url".to_owned(),
                "an azure provider needs its resource's base_url (`https://NAME.openai.azure.com`)"
                    .to_owned(),
            )
        })?;
    }
    if let Some(protocol) = p.platform.protocol_for(&p.model) {
        p.kind = protocol;
    }
    Ok(())
}

/// A cloud provider's kind and cloud settings, completed from the
/// environment after the rest.
type Clouds = BTreeMap<String, (Kind, RawCloud)>;

/// The built-ins with the file's tables on top: a table named after a
/// built-in changes it, any other declares a provider. Beside them, the
/// cloud settings of the tables that set a cloud kind.
fn from_file(
    raw: BTreeMap<String, RawProvider>,
    timeouts: Timeouts,
    blame: &Blame,
) -> Result<(BTreeMap<String, ProviderSettings>, Clouds), SettingsError> {
    let mut clouds = Clouds::new();
    let mut providers: BTreeMap<String, ProviderSettings> = BUILTINS
        .iter()
        .map(|b| (b.name.to_owned(), b.settings(timeouts)))
        .collect();
    for (name, rp) in raw {
        let at = format!("providers.{name}");
        if !valid_name(&name) {
            return Err(blame.file(at, "a provider name uses only a-z, 0-9, `-` and `_`".into()));
        }
        let cloud = rp.cloud(&at).map_err(|e| blame.field(e))?;
        let p = match providers.remove(&name) {
            Some(existing) => rp.overlay(existing, &at),
            None => rp.create(&name, timeouts, &at),
        }
        .map_err(|e| blame.field(e))?;
        if let Some(cloud) = cloud {
            clouds.insert(name.clone(), cloud);
        }
        providers.insert(name, p);
    }
    Ok((providers, clouds))
}

/// The environment over the file: the built-ins' own variables, then the
/// keys that `api_key_env` names.
fn apply_env(
    providers: &mut BTreeMap<String, ProviderSettings>,
    env: &Env<'_>,
    blame: &Blame,
) -> Result<(), SettingsError> {
    for b in &BUILTINS {
        let Some(p) = providers.get_mut(b.name) else {
            continue;
        };
        if let Some((var, key)) = b.key_vars.iter().find_map(|v| env.get(v).map(|k| (*v, k))) {
            p.api_key = Some(Secret::new(key.trim()));
            p.api_key_env = Some(var.to_owned());
        }
        if let Some(url) = env.get(b.base_url_var) {
            p.base_url = check_url(&url).map_err(|m| blame.env(b.base_url_var, m))?;
        }
        if let Some(model) = env.get(b.model_var) {
            p.model = model.trim().to_owned();
        }
    }
    for p in providers.values_mut() {
        if p.api_key.is_none() {
            if let Some(var) = &p.api_key_env {
                p.api_key = env.get(var).map(|k| Secret::new(k.trim()));
            }
        }
    }
    Ok(())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// `url` without surrounding white space or a trailing slash, if it is an
/// `http://` or `https://` URL with a host.
pub(super) fn check_url(url: &str) -> Result<String, String> {
    let url = url.trim();
    // Errors show the URL without its userinfo (a password, a token).
    let shown = redact_url(url);
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("`{shown}` is not an http:// or https:// URL"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("`{shown}` has no host"));
    }
    if rest.contains(char::is_whitespace) {
        return Err(format!("`{shown}` contains white space"));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// The features that `passthrough = [...]` names.
pub(super) fn passthrough(names: &[String]) -> Result<crate::passthrough::GatedSet, String> {
    let mut allowed = crate::passthrough::GatedSet::NONE;
    for name in names {
        let Some(g) = crate::passthrough::Gated::parse(name) else {
            let known: Vec<&str> = crate::passthrough::Gated::ALL
                .iter()
                .map(|g| g.name())
                .collect();
            return Err(format!(
                "unknown feature `{name}` (known: {})",
                known.join(", ")
            ));
        };
        allowed.insert(g);
    }
    Ok(allowed)
}

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
            pool: KeyPool::default(),
            key_name: None,
            forward_traceparent: false,
        }
    }

    /// The settings of the pool's key `i`: its secret, and its own base
    /// URL or region where it has them (`None`: no such key).
    pub fn for_key(&self, i: usize) -> Option<ProviderSettings> {
        let k = self.pool.keys.get(i)?;
        let mut p = self.clone();
        p.pool = KeyPool::default();
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
    fn settings(&self, timeouts: Timeouts) -> ProviderSettings {
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
