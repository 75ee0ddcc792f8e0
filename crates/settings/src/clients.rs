//! Client records (`[[server.clients]]`, and the admin API's
//! `/v1/admin/clients`): a client key with a name, a spend budget over a
//! window, request and token rates per minute, the models it may ask for
//! and an expiry. The records are read here; `understudy_core::tenants` holds them
//! to account.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::source::{Env, FieldError};

/// The shortest client key a record accepts.
pub const MIN_CLIENT_KEY: usize = 16;

/// The longest client key a record accepts.
pub const MAX_CLIENT_KEY: usize = 256;

/// Nano-USD in one USD: budgets and spend are counted in whole nano-USD,
/// so that every instance adds the same integers (Redis `INCRBY`).
pub const NANOS_PER_USD: f64 = 1e9;

/// One client record.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientRecord {
    /// Its name in events, metrics and errors (never the key).
    pub name: Arc<str>,
    /// SHA-256 of the key: all the gateway keeps of it.
    pub key_sha256: [u8; 32],
    /// The spend allowed per `window`, in nano-USD (`budget_usd`).
    pub budget_nanos: Option<u64>,
    /// The budget's window (a month by default).
    pub window: ClientWindow,
    /// Requests admitted per minute.
    pub rpm: Option<u64>,
    /// Tokens (prompt and answer) per minute.
    pub tpm: Option<u64>,
    /// Route names, `provider` or `provider:model` patterns (`*` matches
    /// any run of characters) the client may ask for; empty: any.
    pub models: Vec<String>,
    /// After it the key is refused (401).
    pub expires: Option<SystemTime>,
    /// Whether its requests may choose their own routing (`models`,
    /// `provider`, `fallbacks`, `x-understudy-targets`); unset: as
    /// `[caller_routing] enabled` says.
    pub caller_routing: Option<bool>,
}

/// The window a budget is spent over: a calendar hour, day or month
/// (UTC), or a fixed length counted from the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientWindow {
    Hour,
    Day,
    #[default]
    Month,
    Every(Duration),
}

/// A record as the file (`[[server.clients]]`) or the admin API writes it.
/// Its `Debug` leaves the key out.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClient {
    pub name: Option<String>,
    /// The key itself ([`MIN_CLIENT_KEY`] to [`MAX_CLIENT_KEY`] printable
    /// ASCII characters, no space).
    pub key: Option<String>,
    /// The variable holding the key.
    pub key_env: Option<String>,
    /// SHA-256 of the key, 64 hex digits: the file need not hold the key.
    pub key_sha256: Option<String>,
    pub budget_usd: Option<f64>,
    /// `hour`, `day`, `month`, or a length (`90s`, `30m`, `12h`, `7d`).
    pub window: Option<String>,
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
    pub models: Option<Vec<String>>,
    /// RFC 3339 (`2027-01-01T00:00:00Z`).
    pub expires: Option<String>,
    pub caller_routing: Option<bool>,
}

/// A record as the admin API shows it (never the key; its hash's first
/// eight hex digits tell two records apart).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientView {
    pub name: String,
    pub key_sha256_prefix: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    pub window: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub models: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub caller_routing: Option<bool>,
}

/// The `[[server.clients]]` tables: the records, every key of the shape
/// [`check_key`] asks, no name or key twice, no key that is also one of
/// `server.api_keys` (`plain`) or the admin token.
pub(super) fn read_all(
    raw: &[RawClient],
    plain: &[super::Secret],
    admin: Option<&super::Secret>,
    env: &Env<'_>,
) -> Result<Vec<ClientRecord>, FieldError> {
    let mut out: Vec<ClientRecord> = Vec::with_capacity(raw.len());
    for (i, r) in raw.iter().enumerate() {
        let at = format!("server.clients[{i}]");
        let record = r.read(&at, &|var| env.get(var))?;
        if out.iter().any(|o| o.name == record.name) {
            return Err((
                format!("{at}.name"),
                format!("two client records are named `{}`", record.name),
            ));
        }
        if let Some(other) = out.iter().find(|o| o.key_sha256 == record.key_sha256) {
            return Err((
                format!("{at}.{}", r.key_field()),
                format!("the same key as the record `{}`", other.name),
            ));
        }
        if plain
            .iter()
            .any(|k| sha256(k.expose().as_bytes()) == record.key_sha256)
        {
            return Err((
                format!("{at}.{}", r.key_field()),
                "the same key as one of `server.api_keys`".into(),
            ));
        }
        if admin.is_some_and(|t| sha256(t.expose().as_bytes()) == record.key_sha256) {
            return Err((
                format!("{at}.{}", r.key_field()),
                "the same key as the admin token: a client key must never open the admin API"
                    .into(),
            ));
        }
        out.push(record);
    }
    Ok(out)
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// A new client key: `us-` and 40 hex digits from the system's random
/// source (160 bits).
pub fn new_client_key() -> Option<String> {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 20];
    ring::rand::SystemRandom::new().fill(&mut bytes).ok()?;
    Some(format!("us-{}", hex(&bytes)))
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    use fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

// === impl RawClient ===

impl fmt::Debug for RawClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawClient")
            .field("name", &self.name)
            .field("key", &self.key.as_ref().map(|_| "***"))
            .field("key_env", &self.key_env)
            .field("budget_usd", &self.budget_usd)
            .field("window", &self.window)
            .field("rpm", &self.rpm)
            .field("tpm", &self.tpm)
            .field("models", &self.models)
            .field("expires", &self.expires)
            .field("caller_routing", &self.caller_routing)
            .finish_non_exhaustive()
    }
}

impl RawClient {
    /// The setting that holds the key.
    fn key_field(&self) -> &'static str {
        if self.key_sha256.is_some() {
            "key_sha256"
        } else if self.key_env.is_some() {
            "key_env"
        } else {
            "key"
        }
    }

    /// The record, its settings named under `at` in errors (`at` empty:
    /// the admin API's body, whose fields stand alone). `var` reads the
    /// environment for `key_env`.
    pub fn read(
        &self,
        at: &str,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ClientRecord, FieldError> {
        let field = |f: &str| {
            if at.is_empty() {
                f.to_owned()
            } else {
                format!("{at}.{f}")
            }
        };
        let name = self.name.as_deref().map(str::trim).unwrap_or_default();
        check_name(name).map_err(|m| (field("name"), m))?;
        let key_sha256 = self.key_hash(var).map_err(|(f, m)| (field(f), m))?;
        let budget_nanos = match self.budget_usd {
            None => None,
            Some(usd) if usd.is_finite() && (0.0..=1e9).contains(&usd) => {
                Some((usd * NANOS_PER_USD).round() as u64)
            }
            Some(_) => {
                return Err((
                    field("budget_usd"),
                    "must be a number of USD from 0 to 1e9".into(),
                ));
            }
        };
        let window = match self.window.as_deref() {
            None => ClientWindow::Month,
            Some(_) if self.budget_usd.is_none() => {
                return Err((field("window"), "the window of a `budget_usd`".into()));
            }
            Some(text) => ClientWindow::parse(text).map_err(|m| (field("window"), m))?,
        };
        for (f, v) in [("rpm", self.rpm), ("tpm", self.tpm)] {
            if v == Some(0) {
                return Err((
                    field(f),
                    "must be at least 1 (leave it out for no limit)".into(),
                ));
            }
        }
        let models = self.models.clone().unwrap_or_default();
        for (i, m) in models.iter().enumerate() {
            if m.trim().is_empty() || m.len() > 256 || m.chars().any(char::is_control) {
                return Err((
                    field(&format!("models[{i}]")),
                    "a route name or a `provider:model` pattern".into(),
                ));
            }
        }
        let expires = match self.expires.as_deref() {
            None => None,
            Some(text) => Some(
                understudy_types::clock::rfc3339(text.trim()).ok_or_else(|| {
                    (
                        field("expires"),
                        "an RFC 3339 time, like 2027-01-01T00:00:00Z".to_owned(),
                    )
                })?,
            ),
        };
        Ok(ClientRecord {
            name: name.into(),
            key_sha256,
            budget_nanos,
            window,
            rpm: self.rpm,
            tpm: self.tpm,
            models,
            expires,
            caller_routing: self.caller_routing,
        })
    }

    /// SHA-256 of the record's key: exactly one of `key`, `key_env` and
    /// `key_sha256`. No message holds the key.
    fn key_hash(
        &self,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<[u8; 32], (&'static str, String)> {
        let given = [
            self.key.is_some(),
            self.key_env.is_some(),
            self.key_sha256.is_some(),
        ];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err((
                self.key_field(),
                "exactly one of `key`, `key_env` and `key_sha256` names the client's key".into(),
            ));
        }
        if let Some(hash) = &self.key_sha256 {
            return parse_hash(hash.trim()).ok_or((
                "key_sha256",
                "must be SHA-256 as 64 hex digits (sha256sum of the key)".into(),
            ));
        }
        let (key, f) = match (&self.key, &self.key_env) {
            (Some(k), _) => (k.trim().to_owned(), "key"),
            (None, Some(v)) => match var(v.trim()) {
                Some(k) => (k.trim().to_owned(), "key_env"),
                None => return Err(("key_env", format!("the variable `{v}` is not set"))),
            },
            (None, None) => unreachable!("one of the three is set"),
        };
        check_key(&key).map_err(|m| (f, m))?;
        Ok(sha256(key.as_bytes()))
    }
}

/// A client key any HTTP client can send in a header: [`MIN_CLIENT_KEY`]
/// to [`MAX_CLIENT_KEY`] printable ASCII characters, no space (a NUL, a
/// control character or a non-ASCII letter could never arrive). The
/// message names the rule, never the key.
pub fn check_key(key: &str) -> Result<(), String> {
    if !(MIN_CLIENT_KEY..=MAX_CLIENT_KEY).contains(&key.len()) {
        return Err(format!(
            "a client key must be {MIN_CLIENT_KEY} to {MAX_CLIENT_KEY} characters"
        ));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(
            "a client key must be printable ASCII without spaces (what an HTTP header carries)"
                .into(),
        );
    }
    Ok(())
}

/// A record's name: 1 to 64 of `A-Z a-z 0-9 . _ -` (it labels metrics and
/// names Redis keys).
fn check_name(name: &str) -> Result<(), String> {
    let fits = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if fits {
        Ok(())
    } else {
        Err("a name of 1 to 64 letters, digits, `.`, `_` or `-`".into())
    }
}

fn parse_hash(text: &str) -> Option<[u8; 32]> {
    unhex(text)
}

/// `N` bytes from exactly `2 N` hex digits (either case).
pub fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != N * 2 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

// === impl ClientRecord ===

impl ClientRecord {
    /// The budget in USD.
    pub fn budget_usd(&self) -> Option<f64> {
        self.budget_nanos.map(|n| n as f64 / NANOS_PER_USD)
    }

    /// Whether the record has expired at `now`.
    pub fn expired(&self, now: SystemTime) -> bool {
        self.expires.is_some_and(|at| now >= at)
    }

    /// Whether the client may ask for `asked` (a route name, `default`,
    /// `provider` or `provider:model`).
    pub fn allows(&self, asked: &str) -> bool {
        self.models.is_empty()
            || self.models.iter().any(|p| {
                glob(p, asked)
                    // A bare provider pin is its default model.
                    || (!asked.contains(':') && glob(p, &format!("{asked}:")))
            })
    }

    /// The record as the admin API shows it.
    pub fn view(&self) -> ClientView {
        ClientView {
            name: self.name.to_string(),
            key_sha256_prefix: hex(&self.key_sha256[..4]),
            budget_usd: self.budget_usd(),
            window: self.window.to_string(),
            rpm: self.rpm,
            tpm: self.tpm,
            models: self.models.clone(),
            expires: self.expires.map(|at| {
                let secs = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
                understudy_types::clock::rfc3339_of(secs, 0)
            }),
            caller_routing: self.caller_routing,
        }
    }

    /// Whether it limits anything the gateway counts.
    pub fn counted(&self) -> bool {
        self.rpm.is_some() || self.tpm.is_some() || self.budget_nanos.is_some()
    }
}

impl fmt::Debug for ClientRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientRecord")
            .field("name", &self.name)
            .field("budget_nanos", &self.budget_nanos)
            .field("window", &self.window)
            .field("rpm", &self.rpm)
            .field("tpm", &self.tpm)
            .field("models", &self.models)
            .finish_non_exhaustive()
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of
/// characters (none included) and everything else itself. Greedy with
/// one backtrack point (the last `*`), so a pattern of many stars costs
/// the product of the lengths at worst, never an exponential.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

// === impl ClientWindow ===

impl ClientWindow {
    fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bad = || format!("`{text}` is not `hour`, `day`, `month` or a length like `12h`");
        Ok(match text {
            "hour" => Self::Hour,
            "day" => Self::Day,
            "month" => Self::Month,
            _ => {
                let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
                let (n, unit) = text.split_at(split);
                let n: u64 = n.parse().map_err(|_| bad())?;
                let unit = match unit {
                    "s" => 1,
                    "m" => 60,
                    "h" => 3600,
                    "d" => 86_400,
                    _ => return Err(bad()),
                };
                let secs = n
                    .checked_mul(unit)
                    .filter(|s| (60..=366 * 86_400).contains(s))
                    .ok_or_else(|| format!("`{text}`: a window is from a minute to 366 days"))?;
                Self::Every(Duration::from_secs(secs))
            }
        })
    }

    /// The window holding Unix second `unix`: its id and the Unix second it
    /// ends at.
    pub fn at(self, unix: u64) -> (u64, u64) {
        let every = |len: u64| (unix / len, (unix / len + 1) * len);
        match self {
            Self::Hour => every(3600),
            Self::Day => every(86_400),
            Self::Every(d) => every(d.as_secs().max(1)),
            Self::Month => {
                let (year, month, _) =
                    understudy_types::clock::civil_from_days((unix / 86_400) as i64);
                let id = (year * 12 + i64::from(month) - 1) as u64;
                let (next_year, next_month) = if month == 12 {
                    (year + 1, 1)
                } else {
                    (year, month + 1)
                };
                let end_days =
                    understudy_types::clock::days_from_civil(next_year, i64::from(next_month), 1);
                (id, (end_days.max(0) as u64) * 86_400)
            }
        }
    }
}

impl fmt::Display for ClientWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Hour => f.write_str("hour"),
            Self::Day => f.write_str("day"),
            Self::Month => f.write_str("month"),
            Self::Every(d) => write!(f, "{}s", d.as_secs()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> Option<String> {
        None
    }

    fn raw(key: &str) -> RawClient {
        RawClient {
            name: Some("team-a".into()),
            key: Some(key.into()),
            ..RawClient::default()
        }
    }

    #[test]
    fn a_record_reads_and_hides_its_key() {
        let mut r = raw("sk-team-a-0123456789");
        r.budget_usd = Some(0.01);
        r.window = Some("day".into());
        r.rpm = Some(60);
        r.models = Some(vec!["fast".into(), "openai:gpt-4o*".into()]);
        r.expires = Some("2027-01-01T00:00:00Z".into());
        let rec = r.read("server.clients[0]", &none).unwrap();
        assert_eq!(rec.budget_nanos, Some(10_000_000));
        assert_eq!(rec.window, ClientWindow::Day);
        assert_eq!(rec.key_sha256, sha256(b"sk-team-a-0123456789"));
        assert!(!format!("{rec:?}").contains("sk-team"));
        assert!(rec.allows("fast"));
        assert!(rec.allows("openai:gpt-4o-mini"));
        assert!(!rec.allows("anthropic:claude"));
        assert!(!rec.allows("default"));
        assert!(!rec.expired(UNIX_EPOCH + Duration::from_secs(1_790_000_000)));
        assert!(rec.expired(UNIX_EPOCH + Duration::from_secs(1_800_000_000)));
    }

    #[test]
    fn key_shapes_no_client_could_send_are_refused() {
        // (key, what the message says)
        let cases = [
            ("short-key", "16 to 256 characters"),
            (&*"k".repeat(257), "16 to 256 characters"),
            ("sk-with a-space-0123", "printable ASCII"),
            ("sk-with-nul\0-0123456", "printable ASCII"),
            ("sk-with-tab\t-0123456", "printable ASCII"),
            ("sk-non-ascii-é-0123456", "printable ASCII"),
            ("sk-non-ascii-\u{7f}-012345", "printable ASCII"),
        ];
        for (key, says) in cases {
            let (field, message) = raw(key).read("", &none).unwrap_err();
            assert_eq!(field, "key", "{key:?}");
            assert!(message.contains(says), "{key:?}: {message}");
            assert!(!message.contains(key), "{message}");
        }
        // The extremes fit.
        for key in [
            "k".repeat(16),
            "~".repeat(256),
            "sk-!#$%&'()*+,-./:;<=>?@[]^_`{|}".into(),
        ] {
            assert!(raw(&key).read("", &none).is_ok(), "{key}");
        }
    }

    #[test]
    fn bad_records_name_the_field_and_show_no_secret() {
        let cases: Vec<(RawClient, &str)> = vec![
            (raw("short-key"), "server.clients[0].key"),
            (
                RawClient {
                    budget_usd: Some(-1.0),
                    ..raw("sk-team-a-0123456789")
                },
                "server.clients[0].budget_usd",
            ),
            (
                RawClient {
                    name: Some("a b".into()),
                    ..raw("sk-team-a-0123456789")
                },
                "server.clients[0].name",
            ),
            (
                RawClient {
                    key_sha256: Some("00".into()),
                    ..raw("sk-team-a-0123456789")
                },
                "server.clients[0].key_sha256",
            ),
            (
                RawClient {
                    window: Some("week".into()),
                    budget_usd: Some(1.0),
                    ..raw("sk-team-a-0123456789")
                },
                "server.clients[0].window",
            ),
            (
                RawClient {
                    window: Some("day".into()),
                    ..raw("sk-team-a-0123456789")
                },
                "server.clients[0].window",
            ),
            (
                RawClient {
                    rpm: Some(0),
                    ..raw("sk-team-a-0123456789")
                },
                "server.clients[0].rpm",
            ),
            (
                RawClient {
                    expires: Some("tomorrow".into()),
                    ..raw("sk-team-a-0123456789")
                },
                "server.clients[0].expires",
            ),
        ];
        for (r, field) in cases {
            let (f, message) = r.read("server.clients[0]", &none).unwrap_err();
            assert_eq!(f, field, "{message}");
            assert!(!message.contains("sk-team") && !message.contains("short-key"));
        }
    }

    #[test]
    fn windows_end_where_the_calendar_says() {
        // 2026-12-04T19:00:00Z.
        let t = 1_796_410_800;
        assert_eq!(ClientWindow::Hour.at(t + 5).1, t + 3600);
        assert_eq!(ClientWindow::Day.at(t).1, 1_796_428_800);
        // December's end is 2027-01-01T00:00:00Z.
        assert_eq!(ClientWindow::Month.at(t).1, 1_798_761_600);
        assert_ne!(
            ClientWindow::Month.at(t).0,
            ClientWindow::Month.at(1_798_761_600).0
        );
        let every = ClientWindow::parse("30m").unwrap();
        assert_eq!(every, ClientWindow::Every(Duration::from_secs(1800)));
        assert!(ClientWindow::parse("10s").is_err());
        assert!(ClientWindow::parse("367d").is_err());
        assert!(ClientWindow::parse("99999999999999d").is_err());
    }

    #[test]
    fn patterns() {
        assert!(glob("*", "anything"));
        assert!(glob("openai:*", "openai:gpt-4o"));
        assert!(glob("a*c*e", "abcde"));
        assert!(!glob("a*c", "abd"));
        assert!(glob("*a*", "bab") && !glob("*x*", "bab"));
        assert!(glob("", "") && !glob("", "a") && glob("**", ""));
        // Many stars against a long name stay cheap.
        let long = "a".repeat(256);
        assert!(!glob(&"*a".repeat(60).replace("a", "a*b"), &long));
        let rec = RawClient {
            models: Some(vec!["groq:*".into()]),
            ..raw("sk-team-a-0123456789")
        }
        .read("", &none)
        .unwrap();
        assert!(
            rec.allows("groq"),
            "a bare pin is its provider's default model"
        );
        assert!(!rec.allows("openai"));
    }
}
