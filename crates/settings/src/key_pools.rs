//! A provider's key pool: several credentials behind one target
//! (`api_keys = […]`, `api_key_envs = […]` or `[[providers.NAME.keys]]`
//! tables), each with a name that is shown where the secret never is.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::secret::{Secret, redact_url};
use super::source::{Env, FieldError};
use super::timeouts::seconds_or;

/// How long a key stays out after the provider refused it (401, 403, an
/// exhausted quota), unless `key_cooldown` says otherwise.
pub const DEFAULT_KEY_COOLDOWN: Duration = Duration::from_secs(60);

/// The most keys one provider may pool.
const MAX_KEYS: usize = 64;

/// One key of a pool.
#[derive(Clone, PartialEq)]
pub struct PoolKey {
    /// Its name in metrics, events, `/v1/status` and `understudy
    /// providers` (the variable's name for `api_key_envs`, `key-1`, … for
    /// `api_keys`).
    pub name: String,
    /// The secret; `None` while the variable it is read from is not set
    /// (the key is left out of the pool).
    pub secret: Option<Secret>,
    /// The variable it is read from.
    pub env: Option<String>,
    /// Its share of new requests among the keys that may take one.
    pub weight: u32,
    /// Its own base URL (another Azure resource, another account's
    /// endpoint), else the provider's.
    pub base_url: Option<String>,
    /// Its own region (Bedrock, Vertex), else the provider's.
    pub region: Option<String>,
}

/// Which key a request goes to when several may take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sticky {
    /// Weighted, least in flight.
    #[default]
    None,
    /// The same conversation keeps its key while it may take requests, so
    /// the provider's prompt cache (scoped to the key's account) keeps
    /// working.
    Conversation,
}

/// A provider's pool. No keys: the provider has its one `api_key`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyPoolSettings {
    pub keys: Vec<PoolKey>,
    pub sticky: Sticky,
    /// How long a refused key (401, 403, quota) stays out.
    pub cooldown: Duration,
}

/// A `[[providers.NAME.keys]]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKey {
    name: Option<String>,
    api_key: Option<String>,
    api_key_env: Option<String>,
    weight: Option<u32>,
    base_url: Option<String>,
    region: Option<String>,
}

/// What a `[providers.NAME]` table says of its pool.
#[derive(Debug, Default)]
pub(super) struct RawPool {
    pub api_keys: Option<Vec<String>>,
    pub api_key_envs: Option<Vec<String>>,
    pub keys: Option<Vec<RawKey>>,
    pub sticky: Option<String>,
    pub key_cooldown: Option<f64>,
}

// === impl RawPool ===

impl RawPool {
    /// Whether the table declares a pool at all.
    pub(super) fn declared(&self) -> bool {
        self.api_keys.is_some() || self.api_key_envs.is_some() || self.keys.is_some()
    }

    /// The pool, its keys' variables not yet read; `single` says the table
    /// also set `api_key` or `api_key_env`.
    pub(super) fn read(
        &self,
        at: &str,
        single: bool,
        check_url: impl Fn(&str) -> Result<String, String>,
    ) -> Result<KeyPoolSettings, FieldError> {
        let forms = [
            ("api_keys", self.api_keys.is_some()),
            ("api_key_envs", self.api_key_envs.is_some()),
            ("keys", self.keys.is_some()),
        ];
        let set: Vec<&str> = forms.iter().filter(|f| f.1).map(|f| f.0).collect();
        if set.len() > 1 {
            return Err((
                format!("{at}.{}", set[1]),
                format!("`{}` and `{}` both list the keys; keep one", set[0], set[1]),
            ));
        }
        if single && !set.is_empty() {
            return Err((
                format!("{at}.{}", set[0]),
                "a pool and `api_key`/`api_key_env` both name the provider's key; keep the pool"
                    .into(),
            ));
        }
        let keys = self.keys_of(at, &check_url)?;
        if !set.is_empty() && keys.is_empty() {
            return Err((format!("{at}.{}", set[0]), "the pool has no key".into()));
        }
        if keys.len() > MAX_KEYS {
            return Err((
                format!("{at}.{}", set[0]),
                format!("a pool holds at most {MAX_KEYS} keys"),
            ));
        }
        for (i, k) in keys.iter().enumerate() {
            if keys[..i].iter().any(|o| o.name == k.name) {
                return Err((
                    format!("{at}.keys[{i}].name"),
                    format!("two keys are named `{}`", k.name),
                ));
            }
        }
        let sticky = match self.sticky.as_deref() {
            None | Some("none") => Sticky::None,
            Some("conversation") => Sticky::Conversation,
            Some(other) => {
                return Err((
                    format!("{at}.sticky"),
                    format!("`{other}` is not `none` or `conversation`"),
                ));
            }
        };
        let cooldown = seconds_or(self.key_cooldown, DEFAULT_KEY_COOLDOWN)
            .map_err(|m| (format!("{at}.key_cooldown"), m))?;
        if !self.declared() && (self.sticky.is_some() || self.key_cooldown.is_some()) {
            let key = if self.sticky.is_some() {
                "sticky"
            } else {
                "key_cooldown"
            };
            return Err((
                format!("{at}.{key}"),
                "a setting of a key pool (`api_keys`, `api_key_envs` or `keys`)".into(),
            ));
        }
        Ok(KeyPoolSettings {
            keys,
            sticky,
            cooldown,
        })
    }

    fn keys_of(
        &self,
        at: &str,
        check_url: &impl Fn(&str) -> Result<String, String>,
    ) -> Result<Vec<PoolKey>, FieldError> {
        let plain = |name: String, secret: Option<Secret>, env: Option<String>| PoolKey {
            name,
            secret,
            env,
            weight: 1,
            base_url: None,
            region: None,
        };
        if let Some(keys) = &self.api_keys {
            return keys
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    if k.trim().is_empty() {
                        return Err((format!("{at}.api_keys[{i}]"), "the key is empty".into()));
                    }
                    Ok(plain(
                        format!("key-{}", i + 1),
                        Some(Secret::new(k.trim())),
                        None,
                    ))
                })
                .collect();
        }
        if let Some(vars) = &self.api_key_envs {
            return vars
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    check_var(v).map_err(|m| (format!("{at}.api_key_envs[{i}]"), m))?;
                    Ok(plain(v.clone(), None, Some(v.clone())))
                })
                .collect();
        }
        let Some(tables) = &self.keys else {
            return Ok(Vec::new());
        };
        tables
            .iter()
            .enumerate()
            .map(|(i, t)| t.read(&format!("{at}.keys[{i}]"), check_url))
            .collect()
    }
}

// === impl RawKey ===

impl RawKey {
    fn read(
        &self,
        at: &str,
        check_url: &impl Fn(&str) -> Result<String, String>,
    ) -> Result<PoolKey, FieldError> {
        let name = self.name.clone().ok_or_else(|| {
            (
                format!("{at}.name"),
                "every key of a pool has a name".into(),
            )
        })?;
        check_name(&name).map_err(|m| (format!("{at}.name"), m))?;
        let (secret, env) = match (&self.api_key, &self.api_key_env) {
            (Some(_), Some(_)) => {
                return Err((
                    format!("{at}.api_key_env"),
                    "`api_key` and `api_key_env` both give the key; keep one".into(),
                ));
            }
            (Some(k), None) if k.trim().is_empty() => {
                return Err((format!("{at}.api_key"), "the key is empty".into()));
            }
            (Some(k), None) => (Some(Secret::new(k.trim())), None),
            (None, Some(v)) => {
                check_var(v).map_err(|m| (format!("{at}.api_key_env"), m))?;
                (None, Some(v.clone()))
            }
            (None, None) => {
                return Err((
                    format!("{at}.api_key"),
                    "a key needs `api_key` or `api_key_env`".into(),
                ));
            }
        };
        let weight = self.weight.unwrap_or(1);
        if !(1..=1000).contains(&weight) {
            return Err((
                format!("{at}.weight"),
                "a weight is a whole number from 1 to 1000".into(),
            ));
        }
        let base_url = match &self.base_url {
            Some(url) => Some(check_url(url).map_err(|m| (format!("{at}.base_url"), m))?),
            None => None,
        };
        if let Some(region) = &self.region {
            super::platform::check_region(region).map_err(|m| (format!("{at}.region"), m))?;
        }
        Ok(PoolKey {
            name,
            secret,
            env,
            weight,
            base_url,
            region: self.region.clone(),
        })
    }
}

/// A key's name goes into metric labels and Redis keys.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a key name (1 to 64 of A-Z, a-z, 0-9, `-`, `_`, `.`)"
        ))
    }
}

fn check_var(var: &str) -> Result<(), String> {
    check_name(var).map_err(|_| format!("`{var}` is not an environment variable's name"))
}

// === impl KeyPoolSettings ===

impl KeyPoolSettings {
    /// Reads the keys' variables; a key whose variable is not set stays
    /// out of the pool (`secret: None`).
    pub(super) fn read_env(&mut self, env: &Env<'_>) {
        for k in &mut self.keys {
            if let Some(var) = &k.env {
                k.secret = env.get(var).map(|v| Secret::new(v.trim()));
            }
        }
    }

    /// Two keys with the same secret: the second one's setting.
    pub(super) fn duplicate(&self) -> Option<usize> {
        self.keys.iter().enumerate().find_map(|(i, k)| {
            let s = k.secret.as_ref()?;
            self.keys[..i]
                .iter()
                .any(|o| o.secret.as_ref() == Some(s))
                .then_some(i)
        })
    }

    /// The first key that has its secret.
    pub(super) fn first_secret(&self) -> Option<&Secret> {
        self.keys.iter().find_map(|k| k.secret.as_ref())
    }
}

impl fmt::Debug for PoolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            name,
            secret,
            env,
            weight,
            base_url,
            region,
        } = self;
        f.debug_struct("PoolKey")
            .field("name", name)
            .field("secret", secret)
            .field("env", env)
            .field("weight", weight)
            .field("base_url", &base_url.as_deref().map(redact_url))
            .field("region", region)
            .finish()
    }
}
