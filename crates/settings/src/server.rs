//! The `[server]` table: where the gateway listens, the keys its clients
//! and its admin send, the limits on connections and requests, where the
//! admin API's changes are kept without Redis, and how it turns ready and
//! drains on shutdown.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::clients::{ClientRecord, RawClient};
use super::secret::Secret;
use super::source::{Blame, Env, SettingsError};
use super::timeouts::seconds_or;

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
    /// The most JSON parts one request body may hold: its objects and
    /// arrays and the members they hold (each `{`, `[` and `,` outside a
    /// string counts one), counted before the body is parsed. A body past
    /// it is a 400 in the API's own error shape (`[server] max_parts`,
    /// default [`DEFAULT_MAX_PARTS`]): what a parse holds grows with the
    /// parts, not the bytes, so the limit bounds a request's memory where
    /// `max_body_bytes` alone does not.
    pub max_parts: usize,
    /// Client records (`[[server.clients]]`): keys with a name, a budget,
    /// rates and a model scope.
    pub clients: Vec<ClientRecord>,
    /// Where the admin API's client records and routing are kept when
    /// there is no Redis (`UNDERSTUDY_STATE_FILE` over `[server]
    /// state_file`; default `understudy-state.json` beside the settings
    /// file, or in the working directory without one).
    pub state_file: PathBuf,
    /// How long the gateway goes on accepting new requests after SIGTERM
    /// or SIGINT while `/readyz` already answers 503 `draining`: time for
    /// a load balancer to see it unready and send traffic elsewhere
    /// (`UNDERSTUDY_DRAIN_GRACE` over `[server] drain_grace`, seconds,
    /// default 5; 0 stops accepting at once).
    pub drain_grace: Duration,
    /// How long requests in flight (open streams included) may run on once
    /// the gateway stops accepting; past it the process stops anyway
    /// (`UNDERSTUDY_DRAIN_TIMEOUT` over `[server] drain_timeout`, seconds,
    /// default 30).
    pub drain_timeout: Duration,
    /// Whether `/readyz` says ready while a configured Redis is
    /// unreachable: the gateway serves on local state then (breakers,
    /// rates and the cache per instance), and an operator may prefer that
    /// to no traffic (`UNDERSTUDY_READY_WITHOUT_REDIS` over `[server]
    /// ready_without_redis`, default false).
    pub ready_without_redis: bool,
}

/// The default of `[server] drain_grace`.
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(5);

/// The default of `[server] drain_timeout`.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The state file's name when `server.state_file` does not set one.
pub const DEFAULT_STATE_FILE: &str = "understudy-state.json";

/// The default of `[server] max_body_bytes`.
pub const DEFAULT_MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// The default of `[server] max_parts`. A Claude Code turn with its twelve
/// tools holds about 500 parts (the schemas most of them), a message about
/// ten: a session of 2 000 messages with a hundred tools stays under
/// 30 000, so real agents keep more than three times their largest
/// sessions' room, while the worst a parse can make of one part (a
/// free-form JSON value: about 400 bytes in the bench's probe) keeps a
/// request within tens of MB.
pub const DEFAULT_MAX_PARTS: usize = 100_000;

/// The `[server]` table of the file. What it leaves out is the default:
/// in its `Default` below, or (a duration) where it is read.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawServer {
    listen: Option<String>,
    api_keys: Vec<String>,
    admin_token: Option<String>,
    idle_timeout: Option<f64>,
    body_timeout: Option<f64>,
    max_connections: usize,
    max_pinned_targets: usize,
    max_body_bytes: usize,
    max_parts: usize,
    allowed_hosts: Vec<String>,
    cors_origins: Vec<String>,
    clients: Vec<RawClient>,
    state_file: Option<String>,
    drain_grace: Option<f64>,
    drain_timeout: Option<f64>,
    ready_without_redis: bool,
}

/// The server's settings: the file's `[server]` with the environment over
/// the keys, the listen address and the state file. `config_dir`: the
/// settings file's directory, when it was read from one.
pub(super) fn read(
    raw: RawServer,
    env: &Env<'_>,
    blame: &Blame,
    config_dir: Option<&Path>,
) -> Result<ServerSettings, SettingsError> {
    let (api_keys, admin_token) = keys(&raw, env, blame)?;
    let listen = listen(raw.listen.as_deref(), env, blame)?;
    let idle_timeout = seconds_or(raw.idle_timeout, Duration::from_secs(60))
        .map_err(|m| blame.file("server.idle_timeout", m))?;
    let body_timeout = seconds_or(raw.body_timeout, Duration::from_secs(30))
        .map_err(|m| blame.file("server.body_timeout", m))?;
    if raw.max_connections == 0 {
        return Err(blame.file("server.max_connections", "must be at least 1".into()));
    }
    if raw.max_body_bytes == 0 {
        return Err(blame.file("server.max_body_bytes", "must be at least 1".into()));
    }
    if raw.max_parts == 0 {
        return Err(blame.file("server.max_parts", "must be at least 1".into()));
    }
    let clients = super::clients::read_all(&raw.clients, &api_keys, admin_token.as_ref(), env)
        .map_err(|e| blame.field(e))?;
    let state_file = state_file(raw.state_file.as_deref(), env, blame, config_dir)?;
    let drain = drain(&raw, env, blame)?;
    Ok(ServerSettings {
        drain_grace: drain.0,
        drain_timeout: drain.1,
        ready_without_redis: drain.2,
        clients,
        state_file,
        listen,
        api_keys,
        admin_token,
        idle_timeout,
        body_timeout,
        max_connections: raw.max_connections,
        allowed_hosts: raw.allowed_hosts,
        cors_origins: raw.cors_origins,
        max_pinned_targets: raw.max_pinned_targets,
        max_body_bytes: raw.max_body_bytes,
        max_parts: raw.max_parts,
    })
}

/// The client keys (`UNDERSTUDY_API_KEYS`, comma-separated, over
/// `api_keys`) and the admin token (`UNDERSTUDY_ADMIN_TOKEN` over
/// `admin_token`), each at least 8 characters.
fn keys(
    raw: &RawServer,
    env: &Env<'_>,
    blame: &Blame,
) -> Result<(Vec<Secret>, Option<Secret>), SettingsError> {
    let api_keys: Vec<Secret> = match env.get("UNDERSTUDY_API_KEYS") {
        Some(v) => v
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(Secret::new)
            .collect(),
        None => raw.api_keys.iter().map(|k| Secret::new(k.trim())).collect(),
    };
    if api_keys.iter().any(|k| k.expose().len() < 8) {
        let message = "a client key must be at least 8 characters".to_owned();
        return Err(match env.get("UNDERSTUDY_API_KEYS") {
            Some(_) => blame.env("UNDERSTUDY_API_KEYS", message),
            None => blame.file("server.api_keys", message),
        });
    }
    let admin_token = env
        .get("UNDERSTUDY_ADMIN_TOKEN")
        .or_else(|| raw.admin_token.clone())
        .map(|t| Secret::new(t.trim()));
    if admin_token.as_ref().is_some_and(|t| t.expose().len() < 8) {
        let message = "the admin token must be at least 8 characters".to_owned();
        // Blame where the token came from: the variable wins over the file.
        return Err(match env.get("UNDERSTUDY_ADMIN_TOKEN") {
            Some(_) => blame.env("UNDERSTUDY_ADMIN_TOKEN", message),
            None => blame.file("server.admin_token", message),
        });
    }
    Ok((api_keys, admin_token))
}

/// The state file: `UNDERSTUDY_STATE_FILE` (from the working directory)
/// over `state_file` (from the settings file's directory), else
/// [`DEFAULT_STATE_FILE`] beside the settings file.
fn state_file(
    file: Option<&str>,
    env: &Env<'_>,
    blame: &Blame,
    config_dir: Option<&Path>,
) -> Result<PathBuf, SettingsError> {
    let beside = |p: &str| match config_dir {
        Some(dir) => dir.join(p),
        None => PathBuf::from(p),
    };
    match (env.get("UNDERSTUDY_STATE_FILE"), file) {
        (Some(v), _) if v.trim().is_empty() => Err(blame.env(
            "UNDERSTUDY_STATE_FILE",
            "a file's path (leave the variable unset for the default)".into(),
        )),
        (Some(v), _) => Ok(PathBuf::from(v.trim())),
        (None, Some(p)) if p.trim().is_empty() => Err(blame.file(
            "server.state_file",
            "a file's path (leave it out for the default)".into(),
        )),
        (None, Some(p)) => Ok(beside(p.trim())),
        (None, None) => Ok(beside(DEFAULT_STATE_FILE)),
    }
}

/// The drain's grace and deadline and whether the gateway is ready without
/// Redis: each variable over its setting.
fn drain(
    raw: &RawServer,
    env: &Env<'_>,
    blame: &Blame,
) -> Result<(Duration, Duration, bool), SettingsError> {
    let grace = env_or(env, "UNDERSTUDY_DRAIN_GRACE", raw.drain_grace, blame)?;
    let grace = drain_seconds(grace, DEFAULT_DRAIN_GRACE, true)
        .map_err(|m| blame_drain(env, blame, "UNDERSTUDY_DRAIN_GRACE", "drain_grace", m))?;
    let timeout = env_or(env, "UNDERSTUDY_DRAIN_TIMEOUT", raw.drain_timeout, blame)?;
    let timeout = drain_seconds(timeout, DEFAULT_DRAIN_TIMEOUT, false)
        .map_err(|m| blame_drain(env, blame, "UNDERSTUDY_DRAIN_TIMEOUT", "drain_timeout", m))?;
    let without_redis = match env.get("UNDERSTUDY_READY_WITHOUT_REDIS") {
        Some(v) => match v.trim() {
            "1" | "true" | "on" => true,
            "0" | "false" | "off" => false,
            other => {
                return Err(blame.env(
                    "UNDERSTUDY_READY_WITHOUT_REDIS",
                    format!("`{other}` is not true or false"),
                ));
            }
        },
        None => raw.ready_without_redis,
    };
    Ok((grace, timeout, without_redis))
}

/// A number of seconds from variable `var`, else the file's `value`.
fn env_or(
    env: &Env<'_>,
    var: &str,
    value: Option<f64>,
    blame: &Blame,
) -> Result<Option<f64>, SettingsError> {
    match env.get(var) {
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| blame.env(var, format!("`{}` is not a number of seconds", v.trim()))),
        None => Ok(value),
    }
}

/// A drain duration: a number of seconds up to a day (0 only where
/// `zero` allows it), else `default`.
fn drain_seconds(value: Option<f64>, default: Duration, zero: bool) -> Result<Duration, String> {
    let Some(s) = value else {
        return Ok(default);
    };
    let least = if zero { "from 0" } else { "more than 0" };
    if !s.is_finite() || s < 0.0 || (s == 0.0 && !zero) || s > 86_400.0 {
        return Err(format!(
            "`{s}` is not a number of seconds {least} up to 86400"
        ));
    }
    Ok(Duration::from_secs_f64(s))
}

/// Blames the variable when it is set, else the file's setting.
fn blame_drain(
    env: &Env<'_>,
    blame: &Blame,
    var: &str,
    setting: &str,
    message: String,
) -> SettingsError {
    match env.get(var) {
        Some(_) => blame.env(var, message),
        None => blame.file(format!("server.{setting}"), message),
    }
}

/// The listen address: `UNDERSTUDY_LISTEN` over `listen`, else
/// `127.0.0.1:8080`.
fn listen(file: Option<&str>, env: &Env<'_>, blame: &Blame) -> Result<SocketAddr, SettingsError> {
    Ok(match env.get("UNDERSTUDY_LISTEN") {
        Some(v) => v
            .trim()
            .parse()
            .map_err(|e| blame.env("UNDERSTUDY_LISTEN", format!("not a socket address: {e}")))?,
        None => match file {
            Some(v) => v
                .parse()
                .map_err(|e| blame.file("server.listen", format!("not a socket address: {e}")))?,
            None => SocketAddr::from(([127, 0, 0, 1], 8080)),
        },
    })
}

// === impl RawServer ===

impl Default for RawServer {
    fn default() -> Self {
        Self {
            listen: None,
            api_keys: Vec::new(),
            admin_token: None,
            idle_timeout: None,
            body_timeout: None,
            max_connections: 1024,
            max_pinned_targets: 1024,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_parts: DEFAULT_MAX_PARTS,
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
            clients: Vec::new(),
            state_file: None,
            drain_grace: None,
            drain_timeout: None,
            ready_without_redis: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::Settings;

    /// (file, variables) -> the drain's grace, deadline and Redis rule, or
    /// the setting an error names.
    fn check(toml: &str, vars: &[(&str, &str)], want: Result<(f64, f64, bool), &str>) {
        let owned: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let got = Settings::from_toml_str(toml, move |k| {
            owned.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        });
        match (got, want) {
            (Ok(s), Ok((grace, timeout, without))) => {
                let s = &s.server;
                assert_eq!(s.drain_grace, Duration::from_secs_f64(grace), "{toml}");
                assert_eq!(s.drain_timeout, Duration::from_secs_f64(timeout), "{toml}");
                assert_eq!(s.ready_without_redis, without, "{toml}");
            }
            (Err(e), Err(setting)) => assert_eq!(e.setting, setting, "{toml}: {e}"),
            (got, want) => panic!("{toml} {vars:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn drain_and_redis_readiness_settings() {
        check("", &[], Ok((5.0, 30.0, false)));
        check(
            "[server]\ndrain_grace = 0\ndrain_timeout = 2.5\nready_without_redis = true",
            &[],
            Ok((0.0, 2.5, true)),
        );
        check(
            "[server]\ndrain_grace = 3",
            &[
                ("UNDERSTUDY_DRAIN_GRACE", "1"),
                ("UNDERSTUDY_DRAIN_TIMEOUT", "9"),
                ("UNDERSTUDY_READY_WITHOUT_REDIS", "on"),
            ],
            Ok((1.0, 9.0, true)),
        );
        check(
            "[server]\ndrain_timeout = 0",
            &[],
            Err("server.drain_timeout"),
        );
        check("[server]\ndrain_grace = -1", &[], Err("server.drain_grace"));
        check(
            "[server]\ndrain_grace = 1e9",
            &[],
            Err("server.drain_grace"),
        );
        check(
            "",
            &[("UNDERSTUDY_DRAIN_GRACE", "soon")],
            Err("UNDERSTUDY_DRAIN_GRACE"),
        );
        check(
            "",
            &[("UNDERSTUDY_DRAIN_TIMEOUT", "0")],
            Err("UNDERSTUDY_DRAIN_TIMEOUT"),
        );
        check(
            "",
            &[("UNDERSTUDY_READY_WITHOUT_REDIS", "maybe")],
            Err("UNDERSTUDY_READY_WITHOUT_REDIS"),
        );
    }
}
