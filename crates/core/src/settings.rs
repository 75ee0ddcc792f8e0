//! Settings: built-in defaults, then the TOML file, then the environment
//! (DESIGN §4). The result is validated as a whole, and every error names the
//! setting at fault and where it came from.
//!
//! The environment is read through a lookup function rather than
//! `std::env` directly, so tests can load settings in parallel without
//! touching the process environment.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::policy::breaker::BreakerSettings;
use crate::policy::refusal::RefusalPolicy;
use crate::target::Target;

/// The validated settings of one engine.
#[derive(Debug, Clone)]
pub struct Settings {
    pub routing: Routing,
    /// Every provider, built-in or declared, by name.
    pub providers: BTreeMap<String, ProviderSettings>,
    /// Named routes besides `default`.
    pub routes: BTreeMap<String, Vec<Target>>,
    /// Per-route refusal policy and timeouts, for routes that set them.
    pub route_options: BTreeMap<String, RouteOptions>,
    pub timeouts: Timeouts,
    /// The longest `Retry-After` the engine waits out before its one
    /// rate-limit retry; longer waits fall back at once.
    pub rate_limit_max_wait: Duration,
    pub server: ServerSettings,
    /// Enables the Redis sinks and shared state when set.
    pub redis_url: Option<Secret>,
    pub events: EventSettings,
    pub cache: CacheSettings,
    pub breaker: BreakerSettings,
    /// The fallback spend cap, when set.
    pub budget: Option<BudgetSettings>,
}

/// What a named route sets for the requests that take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteOptions {
    pub refusal_policy: Option<RefusalPolicy>,
    /// The timeouts this route sets; each one it sets replaces the
    /// provider's for the targets of this route (see
    /// [`crate::policy::timeouts::timeouts_for`]).
    pub timeouts: TimeoutOverrides,
    /// When a stream commits (`stream_commit`); unset: at the first output.
    pub stream_commit: Option<StreamCommit>,
    /// A committed stream that is cut continues on a target that accepts
    /// an assistant prefill (`continue_after_cut`).
    pub continue_after_cut: Option<bool>,
}

/// When a stream commits to its target (`stream_commit`, per route, or per
/// request with `x-understudy-stream-commit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StreamCommit {
    /// At the first output the client would act on (the default).
    #[default]
    FirstOutput,
    /// When the target finishes: the answer is held until then, so any
    /// failure, a cut or a stall included, can still fall back.
    Complete,
}

// === impl StreamCommit ===

impl std::str::FromStr for StreamCommit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "first_output" => Ok(Self::FirstOutput),
            "complete" => Ok(Self::Complete),
            other => Err(format!(
                "`{other}` is not a stream commit (first_output or complete)"
            )),
        }
    }
}

impl StreamCommit {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FirstOutput => "first_output",
            Self::Complete => "complete",
        }
    }
}

/// The `[budget]` table: a cap on what fallback targets may spend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetSettings {
    pub fallback_budget_usd: f64,
    pub window: BudgetWindow,
}

/// The window a spend cap counts over (UTC calendar units, or a fixed
/// number of seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetWindow {
    Hour,
    Day,
    Month,
    Seconds(u64),
}

/// The `[events]` table: where the Redis writer puts events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSettings {
    /// The stream key (`understudy:events`).
    pub stream_key: String,
    /// `XADD … MAXLEN ~` this many entries.
    pub stream_maxlen: u64,
    /// Events held while Redis is unreachable; beyond it the oldest go.
    pub redis_buffer: usize,
    /// How long shutdown may spend writing what is buffered.
    pub flush_timeout: Duration,
}

/// The `[cache]` table: the response cache for non-streamed requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    pub enabled: bool,
    pub ttl: Duration,
    /// Entries kept in memory (when Redis is not configured).
    pub max_entries: usize,
    /// Whether an entry stored for one client key may answer another
    /// (`[cache] shared`, default false: each client key sees only its own
    /// entries).
    pub shared: bool,
}

/// The `[routing]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    /// The primary provider of the default route.
    pub default: String,
    /// The fallback order; the primary is skipped where it appears.
    pub order: Vec<String>,
    pub refusal_policy: RefusalPolicy,
}

/// The routing table as the admin API reads and writes it: the fields of
/// the TOML `[routing]` table plus the named routes (`"provider:model"`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct RoutingTable {
    pub default: String,
    pub order: Vec<String>,
    pub refusal_policy: RefusalPolicy,
    pub routes: BTreeMap<String, Vec<String>>,
}

/// A change to the routing table; absent fields stay as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingUpdate {
    pub default: Option<String>,
    pub order: Option<Vec<String>>,
    pub refusal_policy: Option<RefusalPolicy>,
    pub routes: Option<BTreeMap<String, Vec<String>>>,
}

/// The wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI Chat Completions and every compatible server (Groq, Ollama, vLLM, OpenRouter…).
    Openai,
    Gemini,
    Anthropic,
}

impl ProviderKind {
    /// Whether the protocol takes images by `https:` URL (Gemini takes them
    /// only inline, and the gateway never fetches a URL itself).
    pub fn takes_remote_images(self) -> bool {
        self != Self::Gemini
    }
}

/// One provider's settings. Its `Debug` shows the base URL without its
/// userinfo and the extra headers without their values (secrets as much
/// as the key is).
#[derive(Clone)]
pub struct ProviderSettings {
    pub name: String,
    pub kind: ProviderKind,
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
    /// An OpenAI-compatible provider that speaks OpenAI's Responses API
    /// (`responses_api = true`): called at `{base_url}/responses`, and a
    /// client's own Responses body is forwarded to it natively.
    pub responses_api: bool,
    /// HTTP/1.1 only (`http1_only = true`): HTTP/2 is not offered when TLS
    /// negotiates the protocol (ALPN). Plain `http://` is always HTTP/1.1.
    pub http1_only: bool,
    /// Certificate authorities this provider's client trusts beside the
    /// system's roots (`ca_file`: a corporate egress proxy's CA).
    pub ca_file: Option<CaFile>,
}

/// A PEM file of one or more CA certificates (`ca_file`), read when the
/// settings load: a missing or unreadable file is a settings error, not a
/// failure on the first request. Its `Debug` shows the path and size only.
#[derive(Clone, PartialEq, Eq)]
pub struct CaFile {
    pub path: PathBuf,
    /// The file's bytes (a certificate bundle; shared, not copied, when the
    /// settings are cloned).
    pub pem: std::sync::Arc<[u8]>,
}

/// The largest `ca_file` read (a full public root bundle is about 220 KB).
const CA_FILE_LIMIT: u64 = 4 * 1024 * 1024;

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
    /// What a natively forwarded request may switch on at this provider on
    /// the operator's key (`passthrough = ["web_search", …]`; none by
    /// default): see [`crate::passthrough`]. A provider setting, not a
    /// model's.
    pub passthrough: crate::passthrough::GatedSet,
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
}

impl Default for Capabilities {
    fn default() -> Self {
        Self {
            tools: true,
            vision: true,
            json_schema: true,
            assistant_prefill: false,
            max_output_tokens: None,
            passthrough: crate::passthrough::GatedSet::NONE,
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
            passthrough: self.passthrough,
        }
    }
}

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

/// Timeouts (DESIGN §2 defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub first_token: Duration,
    pub stream_idle: Duration,
    /// One attempt in total; the only read timeout of a non-streamed call.
    pub attempt: Duration,
    /// The whole request, every attempt and wait included.
    pub request: Duration,
}

/// The timeouts a route sets, each one optional: a route that sets only
/// `first_token` keeps every provider's other timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimeoutOverrides {
    pub connect: Option<Duration>,
    pub first_token: Option<Duration>,
    pub stream_idle: Option<Duration>,
    pub attempt: Option<Duration>,
    pub request: Option<Duration>,
}

/// The `[server]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    pub listen: SocketAddr,
    /// Keys clients must send as `Authorization: Bearer`; none means no
    /// client auth (and then only loopback, unless explicitly insecure).
    pub api_keys: Vec<Secret>,
    /// Guards the admin routes; without it they are off.
    pub admin_token: Option<Secret>,
    /// How long a connection may go without a complete request head: a
    /// client that sends one too slowly, or a keep-alive connection idle
    /// between requests, is closed after it (`[server] idle_timeout`,
    /// seconds, default 60).
    pub idle_timeout: Duration,
    /// How long a request's body may take to arrive in full; past it the
    /// request gets a 408 and the connection closes (`[server]
    /// body_timeout`, seconds, default 30).
    pub body_timeout: Duration,
    /// Connections served at once; more wait in the accept queue (`[server]
    /// max_connections`, default 1024).
    pub max_connections: usize,
    /// Host names (with or without port) accepted besides the listen
    /// address and `localhost`/`127.0.0.1`/`[::1]` when the gateway is open
    /// on loopback (`[server] allowed_hosts`).
    pub allowed_hosts: Vec<String>,
    /// Origins allowed to call the API from a browser (CORS); none by
    /// default (`[server] cors_origins`).
    pub cors_origins: Vec<String>,
    /// Client-pinned targets (`provider:model` not in the configuration)
    /// whose breaker and metric labels are kept; the least recently used
    /// is forgotten beyond it (`[server] max_pinned_targets`, default 1024).
    pub max_pinned_targets: usize,
    /// The largest request body accepted, in bytes; a larger one is a 413
    /// in the API's own error shape (`[server] max_body_bytes`, default
    /// 32 MiB, Anthropic's own limit for the Messages API: a long agent
    /// session with screenshots reaches several MB).
    pub max_body_bytes: usize,
}

/// The default of `[server] max_body_bytes`.
pub const DEFAULT_MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// A secret string (an API key, a URL with a password). Its `Debug` and
/// `Display` never show the value; only [`Secret::expose`] does.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

/// A setting that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}`{setting}`: {message}")]
pub struct SettingsError {
    /// The setting's name: an environment variable or a TOML path.
    pub setting: String,
    pub message: String,
    origin: Origin,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    Env,
    File(PathBuf),
    None,
}

/// The built-in providers, in the order `understudy providers` lists them.
pub const BUILTIN_PROVIDERS: [&str; 4] = ["groq", "gemini", "claude", "openai"];

// === impl Settings ===

impl Settings {
    /// Loads settings from `config` (or `UNDERSTUDY_CONFIG`) and the process
    /// environment.
    pub fn from_env(config: Option<&Path>) -> Result<Self, SettingsError> {
        Self::load(config, |name| std::env::var(name).ok())
    }

    /// Loads settings with `env` as the environment. A `config` path wins
    /// over `UNDERSTUDY_CONFIG`.
    pub fn load(
        config: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let path = match config {
            Some(p) => Some(p.to_path_buf()),
            None => env("UNDERSTUDY_CONFIG").map(PathBuf::from),
        };
        let file = match &path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| SettingsError {
                    setting: "UNDERSTUDY_CONFIG".into(),
                    message: format!("cannot read {}: {e}", p.display()),
                    origin: Origin::None,
                })?;
                Some((p.clone(), text))
            }
            None => None,
        };
        match file {
            Some((p, text)) => Self::from_parts(Some((&p, &text)), &env),
            None => Self::from_parts(None, &env),
        }
    }

    /// Parses TOML text (as if read from `path`) with `env` overriding it.
    pub fn from_toml_str(
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        Self::from_parts(Some((Path::new("<config>"), text)), &env)
    }

    fn from_parts(
        file: Option<(&Path, &str)>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let (raw, path) = match file {
            Some((path, text)) => {
                let raw: RawFile =
                    parse_toml(text).map_err(|(setting, message)| SettingsError {
                        setting,
                        message,
                        origin: Origin::File(path.to_path_buf()),
                    })?;
                (raw, Some(path.to_path_buf()))
            }
            None => (RawFile::default(), None),
        };
        let file_err = |setting: String, message: String| SettingsError {
            setting,
            message,
            origin: path.clone().map_or(Origin::None, Origin::File),
        };
        let env_err = |setting: &str, message: String| SettingsError {
            setting: setting.to_owned(),
            message,
            origin: Origin::Env,
        };

        // Timeouts: defaults, then the file's global table.
        let timeouts = raw
            .timeouts
            .as_ref()
            .map_or(Ok(Timeouts::default()), |t| {
                t.apply(Timeouts::default(), "timeouts")
            })
            .map_err(|(s, m)| file_err(s, m))?;

        // Providers: built-ins, then the file's tables on top.
        let mut providers = BTreeMap::new();
        for name in BUILTIN_PROVIDERS {
            providers.insert(name.to_owned(), builtin(name, timeouts));
        }
        for (name, rp) in raw.providers {
            let at = format!("providers.{name}");
            if !valid_name(&name) {
                return Err(file_err(
                    at,
                    "a provider name uses only a-z, 0-9, `-` and `_`".into(),
                ));
            }
            let p = match providers.remove(&name) {
                Some(existing) => rp.overlay(existing, &at),
                None => rp.create(&name, timeouts, &at),
            }
            .map_err(|(s, m)| file_err(s, m))?;
            providers.insert(name, p);
        }

        // Environment over the file, for the built-ins.
        for (name, key_vars, base_var, model_var) in [
            ("groq", &["GROQ_API_KEY"][..], "GROQ_BASE_URL", "GROQ_MODEL"),
            (
                "openai",
                &["OPENAI_API_KEY"][..],
                "OPENAI_BASE_URL",
                "OPENAI_MODEL",
            ),
            (
                "gemini",
                &["GEMINI_API_KEY", "GOOGLE_API_KEY"][..],
                "GEMINI_BASE_URL",
                "GEMINI_MODEL",
            ),
            (
                "claude",
                &["ANTHROPIC_API_KEY"][..],
                "ANTHROPIC_BASE_URL",
                "ANTHROPIC_MODEL",
            ),
        ] {
            let Some(p) = providers.get_mut(name) else {
                continue;
            };
            if let Some((var, key)) = key_vars.iter().find_map(|v| env(v).map(|k| (*v, k))) {
                p.api_key = Some(Secret(key.trim().to_owned()));
                p.api_key_env = Some(var.to_owned());
            }
            if let Some(url) = env(base_var) {
                p.base_url = check_url(&url).map_err(|m| env_err(base_var, m))?;
            }
            if let Some(model) = env(model_var) {
                p.model = model.trim().to_owned();
            }
        }
        // Keys named by `api_key_env` in the file.
        for p in providers.values_mut() {
            if p.api_key.is_none() {
                if let Some(var) = &p.api_key_env {
                    p.api_key = env(var).map(|k| Secret(k.trim().to_owned()));
                }
            }
        }

        // Routing: defaults, file, environment.
        let raw_routing = raw.routing.unwrap_or_default();
        let (default, default_setting) = match env("AI_DEFAULT_PROVIDER") {
            Some(v) => (v.trim().to_owned(), Err("AI_DEFAULT_PROVIDER")),
            None => (
                raw_routing.default.unwrap_or_else(|| "groq".into()),
                Ok("routing.default"),
            ),
        };
        let (order, order_setting) = match env("AI_PROVIDER_FALLBACK_ORDER") {
            Some(v) => (
                v.split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect(),
                Err("AI_PROVIDER_FALLBACK_ORDER"),
            ),
            None => (
                raw_routing
                    .order
                    .unwrap_or_else(|| vec!["groq".into(), "gemini".into(), "claude".into()]),
                Ok("routing.order"),
            ),
        };
        let setting_err = |setting: Result<&str, &str>, message: String| match setting {
            Ok(s) => file_err(s.to_owned(), message),
            Err(s) => env_err(s, message),
        };
        if !providers.contains_key(&default) {
            return Err(setting_err(
                default_setting,
                unknown_provider(&default, &providers),
            ));
        }
        let mut seen = Vec::<&str>::new();
        for name in &order {
            if !providers.contains_key(name) {
                return Err(setting_err(
                    order_setting,
                    unknown_provider(name, &providers),
                ));
            }
            if seen.contains(&name.as_str()) {
                return Err(setting_err(
                    order_setting,
                    format!("`{name}` is listed twice"),
                ));
            }
            seen.push(name);
        }
        let refusal_policy = match env("UNDERSTUDY_REFUSAL_POLICY") {
            Some(v) => v
                .trim()
                .parse()
                .map_err(|m| env_err("UNDERSTUDY_REFUSAL_POLICY", m))?,
            None => match raw_routing.refusal_policy {
                Some(v) => v
                    .parse()
                    .map_err(|m| file_err("routing.refusal_policy".into(), m))?,
                None => RefusalPolicy::default(),
            },
        };

        // Named routes.
        let mut routes = BTreeMap::new();
        let mut route_options = BTreeMap::new();
        for (name, spec) in raw.routes {
            let at = format!("routes.{name}");
            if name == "default" {
                return Err(file_err(
                    at,
                    "`default` is the configured order; name the route differently".into(),
                ));
            }
            let (specs, options) = match spec {
                RawRouteSpec::Targets(t) => (t, None),
                RawRouteSpec::Table(r) => (
                    r.targets,
                    Some((
                        r.refusal_policy,
                        r.timeouts,
                        r.stream_commit,
                        r.continue_after_cut,
                    )),
                ),
            };
            if specs.is_empty() {
                return Err(file_err(at, "a route needs at least one target".into()));
            }
            let targets = specs
                .iter()
                .map(|spec| parse_target(spec, &providers))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|m| file_err(at.clone(), m))?;
            if let Some((policy, route_timeouts, stream_commit, continue_after_cut)) = options {
                let stream_commit = match stream_commit {
                    Some(c) => Some(
                        c.parse()
                            .map_err(|m| file_err(format!("{at}.stream_commit"), m))?,
                    ),
                    None => None,
                };
                let refusal_policy = match policy {
                    Some(p) => Some(
                        p.parse()
                            .map_err(|m| file_err(format!("{at}.refusal_policy"), m))?,
                    ),
                    None => None,
                };
                let route_timeouts = match route_timeouts {
                    Some(t) => t
                        .overrides(&format!("{at}.timeouts"))
                        .map_err(|(s, m)| file_err(s, m))?,
                    None => TimeoutOverrides::default(),
                };
                route_options.insert(
                    name.clone(),
                    RouteOptions {
                        refusal_policy,
                        timeouts: route_timeouts,
                        stream_commit,
                        continue_after_cut,
                    },
                );
            }
            routes.insert(name, targets);
        }
        // Each provider keeps a client for every connect timeout a route
        // through it sets.
        for (name, targets) in &routes {
            let Some(connect) = route_options
                .get(name)
                .and_then(|o: &RouteOptions| o.timeouts.connect)
            else {
                continue;
            };
            for t in targets {
                if let Some(p) = providers.get_mut(&*t.provider) {
                    let p: &mut ProviderSettings = p;
                    if !p.route_connect_timeouts.contains(&connect) {
                        p.route_connect_timeouts.push(connect);
                    }
                }
            }
        }

        let rate_limit_max_wait = match raw.rate_limit.and_then(|r| r.max_wait) {
            Some(s) => seconds(s).map_err(|m| file_err("rate_limit.max_wait".into(), m))?,
            None => Duration::from_secs(5),
        };
        let raw_server = raw.server.unwrap_or_default();
        let api_keys: Vec<Secret> = match env("UNDERSTUDY_API_KEYS") {
            Some(v) => v
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(Secret::new)
                .collect(),
            None => raw_server
                .api_keys
                .iter()
                .map(|k| Secret::new(k.trim()))
                .collect(),
        };
        if api_keys.iter().any(|k| k.expose().len() < 8) {
            let message = "a client key must be at least 8 characters".to_owned();
            return Err(match env("UNDERSTUDY_API_KEYS") {
                Some(_) => env_err("UNDERSTUDY_API_KEYS", message),
                None => file_err("server.api_keys".into(), message),
            });
        }
        let admin_token = env("UNDERSTUDY_ADMIN_TOKEN")
            .or(raw_server.admin_token)
            .map(|t| Secret::new(t.trim()));
        if admin_token.as_ref().is_some_and(|t| t.expose().len() < 8) {
            return Err(env_err(
                "UNDERSTUDY_ADMIN_TOKEN",
                "the admin token must be at least 8 characters".into(),
            ));
        }
        let listen = match env("UNDERSTUDY_LISTEN") {
            Some(v) => v
                .trim()
                .parse()
                .map_err(|e| env_err("UNDERSTUDY_LISTEN", format!("not a socket address: {e}")))?,
            None => match raw_server.listen {
                Some(v) => v.parse().map_err(|e| {
                    file_err("server.listen".into(), format!("not a socket address: {e}"))
                })?,
                None => SocketAddr::from(([127, 0, 0, 1], 8080)),
            },
        };

        let idle_timeout = match raw_server.idle_timeout {
            Some(s) => seconds(s).map_err(|m| file_err("server.idle_timeout".into(), m))?,
            None => Duration::from_secs(60),
        };
        let body_timeout = match raw_server.body_timeout {
            Some(s) => seconds(s).map_err(|m| file_err("server.body_timeout".into(), m))?,
            None => Duration::from_secs(30),
        };
        let max_connections = match raw_server.max_connections {
            Some(0) => {
                return Err(file_err(
                    "server.max_connections".into(),
                    "must be at least 1".into(),
                ));
            }
            Some(n) => n,
            None => 1024,
        };
        let max_pinned_targets = raw_server.max_pinned_targets.unwrap_or(1024);
        let max_body_bytes = match raw_server.max_body_bytes {
            Some(0) => {
                return Err(file_err(
                    "server.max_body_bytes".into(),
                    "must be at least 1".into(),
                ));
            }
            Some(n) => n,
            None => DEFAULT_MAX_BODY_BYTES,
        };
        let allowed_hosts = raw_server.allowed_hosts.clone();
        let cors_origins = raw_server.cors_origins.clone();

        let raw_events = raw.events.unwrap_or_default();
        let events = EventSettings {
            stream_key: raw_events
                .stream_key
                .unwrap_or_else(|| "understudy:events".into()),
            stream_maxlen: raw_events.stream_maxlen.unwrap_or(100_000),
            redis_buffer: raw_events.redis_buffer.unwrap_or(10_000).max(1),
            flush_timeout: match raw_events.flush_timeout {
                Some(s) => seconds(s).map_err(|m| file_err("events.flush_timeout".into(), m))?,
                None => Duration::from_secs(5),
            },
        };
        if events.stream_key.is_empty() {
            return Err(file_err(
                "events.stream_key".into(),
                "the stream key is empty".into(),
            ));
        }
        let raw_cache = raw.cache.unwrap_or_default();
        let cache = CacheSettings {
            enabled: match env("UNDERSTUDY_CACHE") {
                Some(v) => match v.trim() {
                    "1" | "true" | "on" => true,
                    "0" | "false" | "off" => false,
                    other => {
                        return Err(env_err(
                            "UNDERSTUDY_CACHE",
                            format!("`{other}` is not on or off"),
                        ));
                    }
                },
                None => raw_cache.enabled.unwrap_or(true),
            },
            ttl: match raw_cache.ttl {
                Some(s) => seconds(s).map_err(|m| file_err("cache.ttl".into(), m))?,
                None => Duration::from_secs(300),
            },
            max_entries: raw_cache.max_entries.unwrap_or(10_000),
            shared: raw_cache.shared.unwrap_or(false),
        };

        let raw_breaker = raw.breaker.unwrap_or_default();
        let defaults = BreakerSettings::default();
        let breaker = BreakerSettings {
            failure_threshold: raw_breaker
                .failure_threshold
                .unwrap_or(defaults.failure_threshold),
            cooldown: match raw_breaker.cooldown {
                Some(s) => seconds(s).map_err(|m| file_err("breaker.cooldown".into(), m))?,
                None => defaults.cooldown,
            },
            cooldown_multiplier: match raw_breaker.cooldown_multiplier {
                Some(m) if m.is_finite() && (1.0..=10.0).contains(&m) => m,
                Some(_) => {
                    return Err(file_err(
                        "breaker.cooldown_multiplier".into(),
                        "must be between 1 and 10".into(),
                    ));
                }
                None => defaults.cooldown_multiplier,
            },
            max_cooldown: match raw_breaker.max_cooldown {
                Some(s) => seconds(s).map_err(|m| file_err("breaker.max_cooldown".into(), m))?,
                None => defaults.max_cooldown,
            },
        };
        let budget = match raw.budget {
            None => None,
            Some(b) => {
                let cap = b.fallback_budget_usd.ok_or_else(|| {
                    file_err(
                        "budget.fallback_budget_usd".into(),
                        "the [budget] table needs a fallback_budget_usd".into(),
                    )
                })?;
                if !cap.is_finite() || cap < 0.0 {
                    return Err(file_err(
                        "budget.fallback_budget_usd".into(),
                        "must be zero or more".into(),
                    ));
                }
                let window = match b.window.as_deref().unwrap_or("day") {
                    "hour" => BudgetWindow::Hour,
                    "day" => BudgetWindow::Day,
                    "month" => BudgetWindow::Month,
                    other => match parse_seconds(other) {
                        Some(secs) if secs > 0 => BudgetWindow::Seconds(secs),
                        _ => {
                            return Err(file_err(
                                "budget.window".into(),
                                format!(
                                    "`{other}` is not hour, day, month or a duration such as 90s or 10m"
                                ),
                            ));
                        }
                    },
                };
                Some(BudgetSettings {
                    fallback_budget_usd: cap,
                    window,
                })
            }
        };

        Ok(Self {
            route_options,
            breaker,
            budget,
            events,
            cache,
            routing: Routing {
                default,
                order,
                refusal_policy,
            },
            providers,
            routes,
            timeouts,
            rate_limit_max_wait,
            server: ServerSettings {
                listen,
                api_keys,
                admin_token,
                idle_timeout,
                body_timeout,
                max_connections,
                allowed_hosts,
                cors_origins,
                max_pinned_targets,
                max_body_bytes,
            },
            redis_url: env("REDIS_URL").map(Secret),
        })
    }

    /// The targets of the default route: the primary, then the fallback
    /// order without the primary, each with its provider's default model.
    pub fn default_route(&self) -> Vec<Target> {
        self.route_for(&self.routing)
    }

    /// Applies `update` to the current routing and routes, validated by the
    /// same rules as the file. Returns the new routing and routes.
    pub fn apply_routing_update(
        &self,
        routing: &Routing,
        routes: &BTreeMap<String, Vec<Target>>,
        update: RoutingUpdate,
    ) -> Result<(Routing, BTreeMap<String, Vec<Target>>), crate::Error> {
        let invalid = crate::Error::invalid;
        let mut next = routing.clone();
        if let Some(default) = update.default {
            next.default = default;
        }
        if let Some(order) = update.order {
            next.order = order;
        }
        if let Some(policy) = update.refusal_policy {
            next.refusal_policy = policy;
        }
        if !self.providers.contains_key(&next.default) {
            return Err(invalid(
                "default",
                unknown_provider(&next.default, &self.providers),
            ));
        }
        for (i, name) in next.order.iter().enumerate() {
            if !self.providers.contains_key(name) {
                return Err(invalid("order", unknown_provider(name, &self.providers)));
            }
            if next.order[..i].contains(name) {
                return Err(invalid("order", format!("`{name}` is listed twice")));
            }
        }
        let routes = match update.routes {
            None => routes.clone(),
            Some(specs) => {
                let mut out = BTreeMap::new();
                for (name, targets) in specs {
                    if name == "default" || name.is_empty() || name.contains(':') {
                        return Err(invalid("routes", format!("`{name}` cannot name a route")));
                    }
                    if targets.is_empty() {
                        return Err(invalid(
                            "routes",
                            format!("route `{name}` needs at least one target"),
                        ));
                    }
                    let parsed = targets
                        .iter()
                        .map(|spec| parse_target(spec, &self.providers))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|m| invalid("routes", format!("route `{name}`: {m}")))?;
                    out.insert(name, parsed);
                }
                out
            }
        };
        Ok((next, routes))
    }

    /// The default route of `routing`: the primary, then the order without
    /// the primary, each with its provider's default model.
    pub fn route_for(&self, routing: &Routing) -> Vec<Target> {
        let mut names = vec![routing.default.as_str()];
        names.extend(
            routing
                .order
                .iter()
                .map(String::as_str)
                .filter(|n| *n != routing.default),
        );
        names
            .into_iter()
            .filter_map(|n| self.providers.get(n).map(|p| Target::new(n, &p.model)))
            .collect()
    }
}

/// The table form of a routing and its routes.
pub fn routing_table(routing: &Routing, routes: &BTreeMap<String, Vec<Target>>) -> RoutingTable {
    RoutingTable {
        default: routing.default.clone(),
        order: routing.order.clone(),
        refusal_policy: routing.refusal_policy,
        routes: routes
            .iter()
            .map(|(name, targets)| {
                (
                    name.clone(),
                    targets.iter().map(ToString::to_string).collect(),
                )
            })
            .collect(),
    }
}

fn unknown_provider(name: &str, providers: &BTreeMap<String, ProviderSettings>) -> String {
    let known: Vec<&str> = providers.keys().map(String::as_str).collect();
    format!("unknown provider `{name}` (known: {})", known.join(", "))
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

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

/// Parses `provider` or `provider:model` against the known providers.
pub fn parse_target(
    spec: &str,
    providers: &BTreeMap<String, ProviderSettings>,
) -> Result<Target, String> {
    let (name, model) = match spec.split_once(':') {
        Some((name, model)) => (name.trim(), Some(model.trim())),
        None => (spec.trim(), None),
    };
    let Some(p) = providers.get(name) else {
        let known: Vec<&str> = providers.keys().map(String::as_str).collect();
        return Err(format!(
            "unknown provider `{name}` in `{spec}` (known: {})",
            known.join(", ")
        ));
    };
    match model {
        Some("") => Err(format!("`{spec}` names no model after the colon")),
        Some(m) => Ok(Target::new(name, m)),
        None => Ok(Target::new(name, &p.model)),
    }
}

/// `90s`, `10m`, `2h`, `1d` (or plain seconds) as seconds.
pub fn parse_seconds(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().ok()?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    n.checked_mul(scale)
}

fn seconds(s: f64) -> Result<Duration, String> {
    if !s.is_finite() || s <= 0.0 || s > 86_400.0 {
        return Err(format!(
            "`{s}` is not a number of seconds between 0 and 86400"
        ));
    }
    Ok(Duration::from_secs_f64(s))
}

fn builtin(name: &str, timeouts: Timeouts) -> ProviderSettings {
    let (kind, base_url, model, key_env) = match name {
        "groq" => (
            ProviderKind::Openai,
            "https://api.groq.com/openai/v1",
            "llama-3.1-8b-instant",
            "GROQ_API_KEY",
        ),
        "openai" => (
            ProviderKind::Openai,
            "https://api.openai.com/v1",
            "gpt-4o-mini",
            "OPENAI_API_KEY",
        ),
        "gemini" => (
            ProviderKind::Gemini,
            "https://generativelanguage.googleapis.com/v1beta",
            "gemini-2.5-flash",
            "GEMINI_API_KEY",
        ),
        _ => (
            ProviderKind::Anthropic,
            "https://api.anthropic.com",
            "claude-haiku-4-5",
            "ANTHROPIC_API_KEY",
        ),
    };
    ProviderSettings {
        name: name.to_owned(),
        kind,
        base_url: base_url.to_owned(),
        api_key: None,
        api_key_env: Some(key_env.to_owned()),
        requires_key: true,
        model: model.to_owned(),
        headers: Vec::new(),
        // All four APIs default to 1.0 when no temperature is sent.
        default_temperature: 1.0,
        timeouts,
        route_connect_timeouts: Vec::new(),
        capabilities: Capabilities::default(),
        model_capabilities: BTreeMap::new(),
        price: None,
        prices: BTreeMap::new(),
        responses_api: false,
        http1_only: false,
        ca_file: None,
    }
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
        !self.requires_key || self.api_key.is_some()
    }
}

// === impl Timeouts ===

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            first_token: Duration::from_secs(10),
            stream_idle: Duration::from_secs(15),
            attempt: Duration::from_secs(60),
            request: Duration::from_secs(120),
        }
    }
}

// === impl Secret ===

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

// === impl ProviderSettings (Debug) ===

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
            responses_api,
            http1_only,
            ca_file,
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
            .field("responses_api", responses_api)
            .field("http1_only", http1_only)
            .field("ca_file", ca_file)
            .finish()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

// === impl Origin ===

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env => f.write_str("environment variable "),
            Self::File(p) => write!(f, "{}: setting ", p.display()),
            Self::None => f.write_str("setting "),
        }
    }
}

// === the file's shape ===

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    routing: Option<RawRouting>,
    #[serde(default)]
    providers: BTreeMap<String, RawProvider>,
    #[serde(default)]
    routes: BTreeMap<String, RawRouteSpec>,
    timeouts: Option<RawTimeouts>,
    rate_limit: Option<RawRateLimit>,
    server: Option<RawServer>,
    events: Option<RawEvents>,
    cache: Option<RawCache>,
    breaker: Option<RawBreaker>,
    budget: Option<RawBudget>,
}

/// A route: a list of targets, or a table with options.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawRouteSpec {
    Targets(Vec<String>),
    Table(RawRoute),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    targets: Vec<String>,
    refusal_policy: Option<String>,
    timeouts: Option<RawTimeouts>,
    stream_commit: Option<String>,
    continue_after_cut: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBreaker {
    failure_threshold: Option<u32>,
    cooldown: Option<f64>,
    cooldown_multiplier: Option<f64>,
    max_cooldown: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    fallback_budget_usd: Option<f64>,
    window: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvents {
    stream_key: Option<String>,
    stream_maxlen: Option<u64>,
    redis_buffer: Option<usize>,
    flush_timeout: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    enabled: Option<bool>,
    ttl: Option<f64>,
    max_entries: Option<usize>,
    shared: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouting {
    default: Option<String>,
    order: Option<Vec<String>>,
    refusal_policy: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    kind: Option<ProviderKind>,
    base_url: Option<String>,
    api_key: Option<String>,
    api_key_env: Option<String>,
    model: Option<String>,
    #[serde(default)]
    headers: HashMap<String, String>,
    temperature: Option<f32>,
    timeouts: Option<RawTimeouts>,
    price: Option<Price>,
    #[serde(default)]
    prices: BTreeMap<String, Price>,
    capabilities: Option<CapabilityOverrides>,
    #[serde(default)]
    model_capabilities: BTreeMap<String, CapabilityOverrides>,
    /// What the native pass-through may switch on here (names of
    /// [`crate::passthrough::Gated`]).
    passthrough: Option<Vec<String>>,
    /// The provider speaks OpenAI's Responses API (OpenAI-compatible only).
    responses_api: Option<bool>,
    /// HTTP/1.1 only (no HTTP/2 by ALPN).
    http1_only: Option<bool>,
    /// A PEM file of extra CA certificates to trust.
    ca_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimeouts {
    connect: Option<f64>,
    first_token: Option<f64>,
    stream_idle: Option<f64>,
    attempt: Option<f64>,
    request: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    max_wait: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<String>,
    #[serde(default)]
    api_keys: Vec<String>,
    admin_token: Option<String>,
    idle_timeout: Option<f64>,
    body_timeout: Option<f64>,
    max_connections: Option<usize>,
    max_pinned_targets: Option<usize>,
    max_body_bytes: Option<usize>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    #[serde(default)]
    cors_origins: Vec<String>,
}

type FieldError = (String, String);

impl RawTimeouts {
    /// The timeouts this table sets, validated, and nothing else.
    fn overrides(&self, at: &str) -> Result<TimeoutOverrides, FieldError> {
        let one = |value: Option<f64>, name: &str| {
            value
                .map(seconds)
                .transpose()
                .map_err(|m| (format!("{at}.{name}"), m))
        };
        Ok(TimeoutOverrides {
            connect: one(self.connect, "connect")?,
            first_token: one(self.first_token, "first_token")?,
            stream_idle: one(self.stream_idle, "stream_idle")?,
            attempt: one(self.attempt, "attempt")?,
            request: one(self.request, "request")?,
        })
    }

    fn apply(&self, mut t: Timeouts, at: &str) -> Result<Timeouts, FieldError> {
        for (value, slot, name) in [
            (self.connect, &mut t.connect, "connect"),
            (self.first_token, &mut t.first_token, "first_token"),
            (self.stream_idle, &mut t.stream_idle, "stream_idle"),
            (self.attempt, &mut t.attempt, "attempt"),
            (self.request, &mut t.request, "request"),
        ] {
            if let Some(v) = value {
                *slot = seconds(v).map_err(|m| (format!("{at}.{name}"), m))?;
            }
        }
        Ok(t)
    }
}

impl RawProvider {
    fn create(
        self,
        name: &str,
        timeouts: Timeouts,
        at: &str,
    ) -> Result<ProviderSettings, FieldError> {
        let Some(base_url) = &self.base_url else {
            return Err((
                format!("{at}.base_url"),
                "an extra provider needs a base_url".into(),
            ));
        };
        let Some(model) = &self.model else {
            return Err((
                format!("{at}.model"),
                "an extra provider needs a default model".into(),
            ));
        };
        let requires_key = self.api_key.is_some() || self.api_key_env.is_some();
        let base = ProviderSettings {
            name: name.to_owned(),
            kind: self.kind.unwrap_or(ProviderKind::Openai),
            base_url: base_url.clone(),
            api_key: None,
            api_key_env: None,
            requires_key,
            model: model.clone(),
            headers: Vec::new(),
            default_temperature: 1.0,
            timeouts,
            route_connect_timeouts: Vec::new(),
            capabilities: Capabilities::default(),
            model_capabilities: BTreeMap::new(),
            price: None,
            prices: BTreeMap::new(),
            responses_api: false,
            http1_only: false,
            ca_file: None,
        };
        self.overlay(base, at)
    }

    fn overlay(self, mut p: ProviderSettings, at: &str) -> Result<ProviderSettings, FieldError> {
        if let Some(kind) = self.kind {
            if kind != p.kind && BUILTIN_PROVIDERS.contains(&p.name.as_str()) {
                return Err((
                    format!("{at}.kind"),
                    "a built-in provider's protocol cannot change".into(),
                ));
            }
            p.kind = kind;
        }
        if let Some(url) = self.base_url {
            p.base_url = check_url(&url).map_err(|m| (format!("{at}.base_url"), m))?;
        }
        if let Some(key) = self.api_key {
            p.api_key = Some(Secret(key));
            p.requires_key = true;
        }
        if let Some(var) = self.api_key_env {
            p.api_key_env = Some(var);
            p.requires_key = true;
        }
        if let Some(model) = self.model {
            if model.trim().is_empty() {
                return Err((format!("{at}.model"), "the model name is empty".into()));
            }
            p.model = model;
        }
        let mut headers: Vec<_> = self.headers.into_iter().collect();
        headers.sort();
        for (name, value) in &headers {
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
        p.headers.extend(headers);
        if let Some(t) = self.temperature {
            if !t.is_finite() || !(0.0..=2.0).contains(&t) {
                return Err((
                    format!("{at}.temperature"),
                    "must be between 0 and 2".into(),
                ));
            }
            p.default_temperature = t;
        }
        if let Some(t) = self.timeouts {
            p.timeouts = t.apply(p.timeouts, &format!("{at}.timeouts"))?;
        }
        if let Some(price) = self.price {
            if !(price.input_per_mtok >= 0.0 && price.output_per_mtok >= 0.0) {
                return Err((format!("{at}.price"), "prices must be zero or more".into()));
            }
            p.price = Some(price);
        }
        for (model, price) in self.prices {
            if !(price.input_per_mtok >= 0.0 && price.output_per_mtok >= 0.0) {
                return Err((
                    format!("{at}.prices"),
                    format!("the price of `{model}` must be zero or more"),
                ));
            }
            p.prices.insert(model, price);
        }
        if let Some(c) = self.capabilities {
            p.capabilities = p.capabilities.with(&c);
        }
        p.model_capabilities.extend(self.model_capabilities);
        if let Some(names) = self.passthrough {
            let mut allowed = crate::passthrough::GatedSet::NONE;
            for name in &names {
                let Some(g) = crate::passthrough::Gated::parse(name) else {
                    let known: Vec<&str> = crate::passthrough::Gated::ALL
                        .iter()
                        .map(|g| g.name())
                        .collect();
                    return Err((
                        format!("{at}.passthrough"),
                        format!("unknown feature `{name}` (known: {})", known.join(", ")),
                    ));
                };
                allowed.insert(g);
            }
            p.capabilities.passthrough = allowed;
        }
        if let Some(on) = self.responses_api {
            if on && p.kind != ProviderKind::Openai {
                return Err((
                    format!("{at}.responses_api"),
                    "only an OpenAI-compatible provider speaks the Responses API".into(),
                ));
            }
            p.responses_api = on;
        }
        if let Some(on) = self.http1_only {
            p.http1_only = on;
        }
        if let Some(path) = self.ca_file {
            p.ca_file = Some(read_ca_file(path).map_err(|m| (format!("{at}.ca_file"), m))?);
        }
        Ok(p)
    }
}

/// Reads a `ca_file` (relative paths from the working directory): it must
/// hold at least one PEM certificate. The certificates themselves are
/// parsed when the provider's client is built.
fn read_ca_file(path: PathBuf) -> Result<CaFile, String> {
    use std::io::Read as _;
    let shown = path.display().to_string();
    let mut pem = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(CA_FILE_LIMIT + 1).read_to_end(&mut pem))
        .map_err(|e| format!("cannot read `{shown}`: {e}"))?;
    if pem.len() as u64 > CA_FILE_LIMIT {
        return Err(format!(
            "`{shown}` is larger than {} MiB: not a CA bundle",
            CA_FILE_LIMIT / (1024 * 1024)
        ));
    }
    let text = String::from_utf8_lossy(&pem);
    let mut count = 0;
    let mut rest = text.as_ref();
    while let Some(start) = rest.find(CERT_BEGIN) {
        count += 1;
        let body = &rest[start + CERT_BEGIN.len()..];
        let Some(end) = body.find(CERT_END) else {
            return Err(format!(
                "`{shown}`: certificate {count} has no `{CERT_END}`"
            ));
        };
        if !base64(&body[..end]).is_some_and(|der| is_der_sequence(&der)) {
            return Err(format!(
                "`{shown}`: certificate {count} is not a base64 DER certificate"
            ));
        }
        rest = &body[end + CERT_END.len()..];
    }
    if count == 0 {
        return Err(format!(
            "`{shown}` holds no PEM certificate (`{CERT_BEGIN}`)"
        ));
    }
    Ok(CaFile {
        path,
        pem: pem.into(),
    })
}

const CERT_BEGIN: &str = "-----BEGIN CERTIFICATE-----";
const CERT_END: &str = "-----END CERTIFICATE-----";

/// Standard base64 (whitespace ignored, `=` padding), or `None`.
fn base64(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits, mut padding) = (0u32, 0u32, 0usize);
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace()) {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => {
                padding += 1;
                continue;
            }
            _ => return None,
        };
        if padding > 0 {
            return None;
        }
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    (padding <= 2).then_some(out)
}

/// Whether `der` is exactly one DER SEQUENCE (what a certificate is): the
/// structure only; the certificate itself is parsed when the provider's
/// client is built.
fn is_der_sequence(der: &[u8]) -> bool {
    let [0x30, first, rest @ ..] = der else {
        return false;
    };
    let (len, body) = if *first < 0x80 {
        (usize::from(*first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return false;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |len, b| (len << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    len > 0 && body.len() == len
}

impl fmt::Debug for CaFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaFile")
            .field("path", &self.path)
            .field("bytes", &self.pem.len())
            .finish()
    }
}

/// Parses the file's TOML, or says which setting is wrong and why (with
/// its line). The setting is the dotted key path serde was at; an error
/// about a setting that can hold a secret never quotes the value.
fn parse_toml(text: &str) -> Result<RawFile, FieldError> {
    let de = toml::Deserializer::parse(text)
        .map_err(|e| ("config".to_owned(), toml_message(&e, text)))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let e = e.into_inner();
        let setting = toml_error_setting(&e, &path);
        let message = match secret_setting(&setting) {
            Some(key) => {
                let line = toml_line(&e, text);
                format!(
                    "{} {line}(the value is not shown: `{key}` can hold a secret)",
                    expected(e.message())
                )
            }
            None => toml_message(&e, text),
        };
        (setting, message)
    })
}

/// A TOML error's message with its line, if known.
fn toml_message(e: &toml::de::Error, text: &str) -> String {
    format!("{} {}", e.message(), toml_line(e, text))
        .trim_end()
        .to_owned()
}

/// `(line N) ` for where a TOML error points, or nothing.
fn toml_line(e: &toml::de::Error, text: &str) -> String {
    match e.span() {
        Some(span) => {
            let line = text
                .get(..span.start.min(text.len()))
                .map_or(0, |t| t.matches('\n').count())
                + 1;
            format!("(line {line}) ")
        }
        None => String::new(),
    }
}

/// What serde's message says was expected, without what was found:
/// `invalid type: string "sk-…", expected a sequence` → `expected a
/// sequence`.
fn expected(message: &str) -> String {
    match message.rsplit_once(", expected ") {
        Some((_, what)) if !what.contains(['"', '`']) => {
            // serde's words for TOML's: a list, a table.
            let what = match what {
                "a sequence" => "a list",
                "a map" => "a table",
                other => other,
            };
            format!("expected {what}")
        }
        _ => "invalid value".to_owned(),
    }
}

/// The key of `setting` that can hold a secret (`api_key`, `api_keys`,
/// `admin_token`, `headers`, `base_url`, or anything under them), if any.
fn secret_setting(setting: &str) -> Option<&'static str> {
    const SECRET_KEYS: [&str; 5] = ["api_key", "api_keys", "admin_token", "headers", "base_url"];
    setting
        .split(['.', '['])
        .find_map(|part| SECRET_KEYS.into_iter().find(|k| *k == part))
}

/// The dotted path of the key a TOML error points at, or `config` when the
/// parser did not say.
fn toml_error_setting(e: &toml::de::Error, path: &str) -> String {
    let msg = e.message();
    let path = (!path.is_empty() && path != "." && !path.starts_with('?')).then_some(path);
    // serde's messages name the field: "unknown field `x`, expected ...".
    match (msg.split('`').nth(1), path) {
        (Some(field), _) if msg.starts_with("missing field") => match path {
            Some(path) => format!("{path}.{field}"),
            None => field.to_owned(),
        },
        (Some(field), None) if msg.starts_with("unknown field") => field.to_owned(),
        (_, Some(path)) => path.to_owned(),
        _ => "config".to_owned(),
    }
}

/// `url` without its userinfo (`https://user:pw@host/` → `https://***@host/`),
/// for showing a URL in errors, listings and logs.
pub fn redact_url(url: &str) -> String {
    // Without a scheme (`user:pw@host`) the authority starts the text.
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}***@{host}{tail}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults() {
        let s = Settings::load(None, env(&[])).unwrap();
        assert_eq!(s.routing.default, "groq");
        assert_eq!(s.routing.order, ["groq", "gemini", "claude"]);
        assert_eq!(s.routing.refusal_policy, RefusalPolicy::SoftenThenFallback);
        assert_eq!(s.timeouts, Timeouts::default());
        assert_eq!(
            s.providers["groq"].base_url,
            "https://api.groq.com/openai/v1"
        );
        assert!(!s.providers["groq"].has_key());
        let route: Vec<_> = s
            .default_route()
            .iter()
            .map(|t| t.provider.to_string())
            .collect();
        assert_eq!(route, ["groq", "gemini", "claude"]);
    }

    #[test]
    fn environment() {
        let s = Settings::load(
            None,
            env(&[
                ("AI_DEFAULT_PROVIDER", "openai"),
                ("AI_PROVIDER_FALLBACK_ORDER", "groq, openai ,claude"),
                ("GROQ_API_KEY", "gsk_secret"),
                ("GOOGLE_API_KEY", "g-secret"),
                ("GROQ_BASE_URL", "http://127.0.0.1:9/v1/"),
                ("OPENAI_MODEL", "gpt-x"),
            ]),
        )
        .unwrap();
        assert_eq!(s.routing.default, "openai");
        assert_eq!(s.routing.order, ["groq", "openai", "claude"]);
        assert_eq!(
            s.providers["groq"].api_key.as_ref().map(Secret::expose),
            Some("gsk_secret")
        );
        assert_eq!(
            s.providers["gemini"].api_key_env.as_deref(),
            Some("GOOGLE_API_KEY")
        );
        assert_eq!(s.providers["groq"].base_url, "http://127.0.0.1:9/v1");
        let route: Vec<_> = s.default_route().iter().map(|t| t.to_string()).collect();
        assert_eq!(
            route,
            [
                "openai:gpt-x",
                "groq:llama-3.1-8b-instant",
                "claude:claude-haiku-4-5"
            ]
        );
        assert!(!format!("{s:?}").contains("gsk_secret"));
    }

    #[test]
    fn file_with_extra_provider_and_routes() {
        let text = r#"
            [routing]
            default = "local"
            order = ["local", "groq"]
            refusal_policy = "fallback_only"

            [providers.groq]
            model = "llama-3.3-70b-versatile"

            [providers.local]
            kind = "openai"
            base_url = "http://127.0.0.1:11434/v1"
            model = "llama3.2"
            headers = { "X-Title" = "understudy" }
            price = { input_per_mtok = 0.0, output_per_mtok = 0.0 }

            [routes]
            fast = ["groq:llama-3.1-8b-instant", "local"]

            [timeouts]
            connect = 2
            attempt = 30.5

            [server]
            listen = "0.0.0.0:9000"
        "#;
        let s = Settings::from_toml_str(text, env(&[("AI_DEFAULT_PROVIDER", "groq")])).unwrap();
        assert_eq!(
            s.routing.default, "groq",
            "the environment wins over the file"
        );
        assert_eq!(s.routing.refusal_policy, RefusalPolicy::FallbackOnly);
        assert!(
            s.providers["local"].has_key(),
            "no key configured means none needed"
        );
        assert_eq!(s.providers["groq"].model, "llama-3.3-70b-versatile");
        assert_eq!(
            s.providers["local"].timeouts.connect,
            Duration::from_secs(2)
        );
        assert_eq!(s.timeouts.attempt, Duration::from_secs_f64(30.5));
        let fast: Vec<_> = s.routes["fast"].iter().map(|t| t.to_string()).collect();
        assert_eq!(fast, ["groq:llama-3.1-8b-instant", "local:llama3.2"]);
        assert_eq!(s.server.listen.port(), 9000);
    }

    fn check_err(text: &str, env_pairs: &[(&str, &str)], setting: &str, needle: &str) {
        let err = Settings::from_toml_str(text, env(env_pairs)).unwrap_err();
        assert_eq!(err.setting, setting, "{err}");
        assert!(err.to_string().contains(needle), "{err}");
    }

    #[test]
    fn errors_name_the_setting() {
        check_err(
            "[routing]\norder = [\"groq\", \"nope\"]",
            &[],
            "routing.order",
            "unknown provider `nope`",
        );
        check_err(
            "",
            &[("AI_PROVIDER_FALLBACK_ORDER", "groq,nope")],
            "AI_PROVIDER_FALLBACK_ORDER",
            "environment variable",
        );
        check_err(
            "",
            &[("AI_DEFAULT_PROVIDER", "nope")],
            "AI_DEFAULT_PROVIDER",
            "nope",
        );
        check_err(
            "[routing]\nrefusal_policy = \"maybe\"",
            &[],
            "routing.refusal_policy",
            "maybe",
        );
        check_err(
            "[timeouts]\nconnect = -1",
            &[],
            "timeouts.connect",
            "seconds",
        );
        check_err(
            "[providers.x]\nmodel = \"m\"",
            &[],
            "providers.x.base_url",
            "base_url",
        );
        check_err(
            "[providers.groq]\nbase_url = \"ftp://x\"",
            &[],
            "providers.groq.base_url",
            "http",
        );
        check_err(
            "[routes]\nfast = [\"nope:m\"]",
            &[],
            "routes.fast",
            "unknown provider",
        );
        check_err("[breakr]\nx = 1", &[], "breakr", "unknown field");
        check_err("[routing\n", &[], "config", "<config>");
        check_err(
            "",
            &[("GROQ_BASE_URL", "localhost:80")],
            "GROQ_BASE_URL",
            "not an http",
        );
        check_err(
            "[server]\nlisten = \"nowhere\"",
            &[],
            "server.listen",
            "socket address",
        );
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let err =
            Settings::load(Some(Path::new("/nonexistent/understudy.toml")), env(&[])).unwrap_err();
        assert!(
            err.to_string()
                .contains("cannot read /nonexistent/understudy.toml"),
            "{err}"
        );
    }
}
