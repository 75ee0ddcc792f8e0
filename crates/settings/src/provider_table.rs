//! Reading every provider's settings: the built-ins, the file's
//! `[providers.NAME]` tables over them — each making a provider (an extra
//! one) or laid over one (a built-in's defaults): its endpoint, key or
//! pool, models and prices, transport, and a cloud's settings checked
//! against its kind — then the environment over the file, and the pools
//! and platforms resolved.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use understudy_types::protocol::Protocol;

use super::ca_file::read_ca_file;
use super::capabilities::{CapabilityOverrides, Price};
use super::key_pools::{RawKey, RawPool};
use super::platform::{CloudEnv, Kind, Platform, RawCloud};
use super::provider::{BUILTIN_PROVIDERS, BUILTINS, ProviderSettings};
use super::secret::{Secret, redact_url};
use super::source::{Blame, Env, FieldError, SettingsError};
use super::timeouts::{RawTimeouts, Timeouts};

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
fn check_url(url: &str) -> Result<String, String> {
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
fn passthrough(names: &[String]) -> Result<understudy_types::passthrough::GatedSet, String> {
    let mut allowed = understudy_types::passthrough::GatedSet::NONE;
    for name in names {
        let Some(g) = understudy_types::passthrough::Gated::parse(name) else {
            let known: Vec<&str> = understudy_types::passthrough::Gated::ALL
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

/// A `[providers.NAME]` table of the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    kind: Option<Kind>,
    base_url: Option<String>,
    api_key: Option<String>,
    api_key_env: Option<String>,
    /// A key pool: its keys (one of three forms), its choice and cooldown.
    api_keys: Option<Vec<String>>,
    api_key_envs: Option<Vec<String>>,
    keys: Option<Vec<RawKey>>,
    sticky: Option<String>,
    key_cooldown: Option<f64>,
    model: Option<String>,
    /// Sorted by name, the order they are checked and sent in.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    temperature: Option<f32>,
    #[serde(default)]
    timeouts: RawTimeouts,
    price: Option<Price>,
    #[serde(default)]
    prices: BTreeMap<String, Price>,
    capabilities: Option<CapabilityOverrides>,
    #[serde(default)]
    model_capabilities: BTreeMap<String, CapabilityOverrides>,
    /// What the native pass-through may switch on here (names of
    /// [`understudy_types::passthrough::Gated`]).
    passthrough: Option<Vec<String>>,
    /// The provider speaks OpenAI's Responses API (OpenAI-compatible only).
    responses_api: Option<bool>,
    /// HTTP/1.1 only (no HTTP/2 by ALPN).
    http1_only: Option<bool>,
    /// Send the attempt's `traceparent` and `tracestate`.
    forward_traceparent: Option<bool>,
    /// A PEM file of extra CA certificates to trust.
    ca_file: Option<PathBuf>,
    /// Client model names to the provider's ids for them.
    #[serde(default)]
    models: BTreeMap<String, String>,
    // A cloud platform's settings (see `platform.rs`).
    region: Option<String>,
    aws_profile: Option<String>,
    aws_access_key_id: Option<String>,
    aws_secret_access_key: Option<String>,
    aws_session_token: Option<String>,
    project: Option<String>,
    credentials_file: Option<PathBuf>,
    api_version: Option<String>,
    auth: Option<String>,
}

// === impl RawProvider ===

impl RawProvider {
    /// This table's kind and cloud settings, when its kind is a cloud's;
    /// a cloud setting on a table of another kind is an error.
    pub(super) fn cloud(&self, at: &str) -> Result<Option<(Kind, RawCloud)>, FieldError> {
        let cloud = RawCloud {
            region: self.region.clone(),
            aws_profile: self.aws_profile.clone(),
            aws_access_key_id: self.aws_access_key_id.clone(),
            aws_secret_access_key: self.aws_secret_access_key.clone(),
            aws_session_token: self.aws_session_token.clone(),
            project: self.project.clone(),
            credentials_file: self.credentials_file.clone(),
            api_version: self.api_version.clone(),
            auth: self.auth.clone(),
        };
        let name = match self.kind {
            Some(Kind::Bedrock) => "bedrock",
            Some(Kind::Vertex) => "vertex",
            Some(Kind::Azure) => "azure",
            Some(Kind::Protocol(_)) | None => "",
        };
        if let Some((key, kinds)) = cloud.misplaced(name) {
            return Err((
                format!("{at}.{key}"),
                format!("`{key}` is a setting of kind {}", kinds.join(" or ")),
            ));
        }
        Ok(self.kind.filter(|_| !name.is_empty()).map(|k| (k, cloud)))
    }

    /// The provider this table declares (one that is not a built-in).
    pub(super) fn create(
        self,
        name: &str,
        timeouts: Timeouts,
        at: &str,
    ) -> Result<ProviderSettings, FieldError> {
        let kind = self
            .kind
            .unwrap_or(Kind::Protocol(Protocol::ChatCompletions));
        // A cloud's base URL follows from its region, filled in with the
        // rest of its settings (`resolve_platform`).
        let base_url = match (&self.base_url, kind) {
            (Some(url), _) => url.as_str(),
            (None, Kind::Bedrock | Kind::Vertex | Kind::Azure) => "",
            (None, Kind::Protocol(_)) => {
                return Err((
                    format!("{at}.base_url"),
                    "an extra provider needs a base_url".into(),
                ));
            }
        };
        let Some(model) = &self.model else {
            return Err((
                format!("{at}.model"),
                "an extra provider needs a default model".into(),
            ));
        };
        let (protocol, key_env) = match kind {
            Kind::Protocol(p) => (p, None),
            Kind::Bedrock => (Protocol::Messages, Some("AWS_BEARER_TOKEN_BEDROCK")),
            Kind::Vertex => (Protocol::Messages, None),
            Kind::Azure => (Protocol::ChatCompletions, Some("AZURE_OPENAI_API_KEY")),
        };
        let mut base = ProviderSettings::plain(name, protocol, base_url, model, timeouts);
        base.requires_key = self.api_key.is_some() || self.api_key_env.is_some();
        if let Some(var) = key_env {
            base.api_key_env = Some(var.to_owned());
            base.requires_key = true;
        }
        if kind == Kind::Azure {
            // Azure's Chat Completions takes `max_completion_tokens` as
            // OpenAI's does (its reasoning models refuse `max_tokens`).
            base.capabilities.max_completion_tokens = true;
        }
        self.overlay(base, at)
    }

    /// `p` with what this table sets in place of its own, each setting
    /// checked (in the order of the table's fields, which decides which
    /// of several errors is reported).
    pub(super) fn overlay(
        self,
        mut p: ProviderSettings,
        at: &str,
    ) -> Result<ProviderSettings, FieldError> {
        self.overlay_endpoint(&mut p, at)?;
        self.overlay_models(&mut p, at)?;
        self.overlay_transport(&mut p, at)?;
        Ok(p)
    }

    /// Where and how the provider is called: its protocol, base URL, key,
    /// default model and extra headers.
    fn overlay_endpoint(&self, p: &mut ProviderSettings, at: &str) -> Result<(), FieldError> {
        let builtin = BUILTIN_PROVIDERS.contains(&p.name.as_str());
        match self.kind {
            Some(Kind::Protocol(kind)) => {
                // OpenAI's servers speak both of its APIs; nothing else
                // changes.
                let openai_both = kind.is_openai() && p.kind.is_openai();
                if kind != p.kind && !openai_both && builtin {
                    return Err((
                        format!("{at}.kind"),
                        "a built-in provider's protocol cannot change".into(),
                    ));
                }
                p.kind = kind;
            }
            Some(_) if builtin => {
                return Err((
                    format!("{at}.kind"),
                    "a built-in provider is not on a cloud platform; declare one of your own"
                        .into(),
                ));
            }
            Some(_) | None => {}
        }
        if let Some(url) = &self.base_url {
            p.base_url = check_url(url).map_err(|m| (format!("{at}.base_url"), m))?;
        }
        if let Some(key) = &self.api_key {
            p.api_key = Some(Secret::new(key.as_str()));
            p.requires_key = true;
        }
        if let Some(var) = &self.api_key_env {
            p.api_key_env = Some(var.clone());
            p.requires_key = true;
        }
        let pool = RawPool {
            api_keys: self.api_keys.clone(),
            api_key_envs: self.api_key_envs.clone(),
            keys: self.keys.clone(),
            sticky: self.sticky.clone(),
            key_cooldown: self.key_cooldown,
        };
        if pool.declared() || self.sticky.is_some() || self.key_cooldown.is_some() {
            let single = self.api_key.is_some() || self.api_key_env.is_some();
            p.pool = pool.read(at, single, check_url)?;
            p.requires_key = true;
        }
        if let Some(model) = &self.model {
            if model.trim().is_empty() {
                return Err((format!("{at}.model"), "the model name is empty".into()));
            }
            p.model = model.clone();
        }
        for (name, value) in &self.headers {
            let ok_name = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !ok_name || value.contains(['\r', '\n']) {
                return Err((
                    format!("{at}.headers"),
                    format!("`{name}` is not a valid header"),
                ));
            }
        }
        p.headers.extend(self.headers.clone());
        Ok(())
    }

    /// What the provider's models are asked and can do: the default
    /// temperature, timeouts, prices, capabilities and pass-through.
    fn overlay_models(&self, p: &mut ProviderSettings, at: &str) -> Result<(), FieldError> {
        if let Some(t) = self.temperature {
            if !t.is_finite() || !(0.0..=2.0).contains(&t) {
                return Err((
                    format!("{at}.temperature"),
                    "must be between 0 and 2".into(),
                ));
            }
            p.default_temperature = t;
        }
        p.timeouts = self.timeouts.apply(p.timeouts, &format!("{at}.timeouts"))?;
        if let Some(price) = self.price {
            if !price.is_valid() {
                return Err((format!("{at}.price"), "prices must be zero or more".into()));
            }
            p.price = Some(price);
        }
        for (model, price) in &self.prices {
            if !price.is_valid() {
                return Err((
                    format!("{at}.prices"),
                    format!("the price of `{model}` must be zero or more"),
                ));
            }
            p.prices.insert(model.clone(), *price);
        }
        crate::windows::check_overrides(self.capabilities.as_ref(), &self.model_capabilities, at)?;
        if let Some(c) = &self.capabilities {
            p.capabilities = p.capabilities.with(c);
        }
        p.model_capabilities.extend(self.model_capabilities.clone());
        for (name, id) in &self.models {
            if name.trim().is_empty() || id.trim().is_empty() {
                return Err((
                    format!("{at}.models"),
                    "a model name and the id it maps to are not empty".into(),
                ));
            }
            p.models.insert(name.clone(), id.clone());
        }
        if let Some(names) = &self.passthrough {
            p.capabilities.passthrough =
                passthrough(names).map_err(|m| (format!("{at}.passthrough"), m))?;
        }
        Ok(())
    }

    /// How the provider is reached: the Responses API, HTTP/1.1 only, and
    /// extra CA certificates.
    fn overlay_transport(&self, p: &mut ProviderSettings, at: &str) -> Result<(), FieldError> {
        // The older spelling of `kind = "responses"`.
        match self.responses_api {
            Some(true) if !p.kind.is_openai() => {
                return Err((
                    format!("{at}.responses_api"),
                    "only an OpenAI-compatible provider speaks the Responses API".into(),
                ));
            }
            Some(true) => p.kind = Protocol::Responses,
            Some(false) if p.kind == Protocol::Responses => {
                return Err((
                    format!("{at}.responses_api"),
                    "`kind = \"responses\"` says the opposite; drop one of them".into(),
                ));
            }
            Some(false) | None => {}
        }
        if let Some(on) = self.http1_only {
            p.http1_only = on;
        }
        if let Some(on) = self.forward_traceparent {
            p.forward_traceparent = on;
        }
        if let Some(path) = &self.ca_file {
            p.ca_file = Some(read_ca_file(path.clone()).map_err(|m| (format!("{at}.ca_file"), m))?);
        }
        Ok(())
    }
}
