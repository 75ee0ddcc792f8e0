//! The TOML file: its top-level shape (each table's own shape lives with
//! the settings it becomes), parsing it, and what a parse error says: the
//! setting at fault and its line, never a value that can be a secret.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::affinity::RawAffinity;
use super::balance::RawBalance;
use super::caller_routing::RawCallerRouting;
use super::probe::RawProbe;
use super::provider_table::RawProvider;
use super::routes::RawRouteSpec;
use super::routing::RawRouting;
use super::server::RawServer;
use super::source::{Blame, FieldError, SettingsError};
use super::tables::{RawBreaker, RawBudget, RawCache, RawEvents, RawRateLimit};
use super::telemetry::RawTelemetry;
use super::timeouts::RawTimeouts;

/// The file as serde reads it. A table the file leaves out reads as an
/// empty one, but `[budget]`, whose presence turns the cap on.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawFile {
    pub(super) routing: RawRouting,
    pub(super) providers: BTreeMap<String, RawProvider>,
    pub(super) routes: BTreeMap<String, RawRouteSpec>,
    pub(super) timeouts: RawTimeouts,
    pub(super) rate_limit: RawRateLimit,
    pub(super) server: RawServer,
    pub(super) events: RawEvents,
    pub(super) cache: RawCache,
    pub(super) breaker: RawBreaker,
    pub(super) budget: Option<RawBudget>,
    pub(super) telemetry: RawTelemetry,
    pub(super) balance: RawBalance,
    pub(super) affinity: RawAffinity,
    pub(super) caller_routing: RawCallerRouting,
    pub(super) probe: RawProbe,
}

/// The file `(path, text)` parsed, or an empty one where there is none,
/// with the [`Blame`] for the errors of its settings.
pub(super) fn read(file: Option<(&Path, &str)>) -> Result<(RawFile, Blame), SettingsError> {
    let blame = Blame::new(file.map(|(path, _)| path));
    let raw = match file {
        Some((_, text)) => parse_toml(text).map_err(|e| blame.field(e))?,
        None => RawFile::default(),
    };
    Ok((raw, blame))
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
    const SECRET_KEYS: [&str; 7] = [
        "api_key",
        "api_keys",
        "admin_token",
        "headers",
        "base_url",
        "key",
        "key_sha256",
    ];
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
