//! `understudy providers`: every provider and whether it can serve;
//! with `--check`, every target probed now for readiness.

use std::fmt::Write as _;
use std::path::Path;

use understudy_core::probe::TargetReadiness;
use understudy_core::{KeyStatus, ProviderInfo};
use understudy_policy::breaker::BreakerState;

use super::{engine, out, report};
use crate::EXIT_FAILED;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Probe every target the routes name now, with calls that generate
    /// nothing (model lookups, free token counts), and print each one's
    /// readiness; exits non-zero when some target is not ready.
    #[arg(long)]
    check: bool,
}

pub(crate) async fn run(config: Option<&Path>, args: Args) -> u8 {
    super::init_logging("warn", false);
    let engine = match engine(config).await {
        Ok(e) => e,
        Err(code) => return code,
    };
    // A cloud's credentials fetched first, to show when they expire (or
    // why they cannot be had).
    engine.warm_credentials(true).await;
    if args.check {
        let readiness = engine.probe_now().await;
        engine.shutdown().await;
        return check(&readiness, args.json);
    }
    let routing = engine.routing().await;
    let infos = engine.providers().await;
    engine.shutdown().await;
    let (infos, routing) = match (infos, routing) {
        (Ok(i), Ok(r)) => (i, r),
        (Err(e), _) | (_, Err(e)) => {
            report(&e.to_string());
            return EXIT_FAILED;
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&infos) {
            Ok(json) => out(&format!("{json}\n")),
            Err(e) => report(&format!("cannot encode: {e}")),
        }
        return 0;
    }
    let mut text = format!(
        "default route: {}{}\n\n",
        routing.default,
        routing
            .order
            .iter()
            .filter(|n| **n != routing.default)
            .fold(String::new(), |acc, n| acc + " → " + n)
    );
    text.push_str(&table(&infos));
    out(&text);
    0
}

/// `--check`: each probed target's readiness, as a table or JSON; exit 1
/// when some target is not ready.
fn check(readiness: &[TargetReadiness], json: bool) -> u8 {
    if json {
        match serde_json::to_string_pretty(readiness) {
            Ok(json) => out(&format!("{json}\n")),
            Err(e) => report(&format!("cannot encode: {e}")),
        }
    } else {
        let rows: Vec<[String; 3]> = readiness
            .iter()
            .map(|r| {
                let state = match r.reason {
                    Some(reason) => format!("{} ({reason})", r.state),
                    None => r.state.to_owned(),
                };
                [
                    format!("{}:{}", r.provider, r.model),
                    state,
                    r.detail.clone().unwrap_or_default(),
                ]
            })
            .collect();
        out(&aligned(
            ["TARGET", "READINESS", "DETAIL"].map(String::from),
            &rows,
        ));
    }
    if readiness.iter().any(TargetReadiness::not_ready) {
        EXIT_FAILED
    } else {
        0
    }
}

/// `rows` under `header`, in columns as wide as their widest cell.
fn aligned<const N: usize>(header: [String; N], rows: &[[String; N]]) -> String {
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

fn table(infos: &[ProviderInfo]) -> String {
    let rows: Vec<[String; 7]> = infos
        .iter()
        .map(|p| {
            let status = match &p.unavailable_reason {
                None => "available".to_owned(),
                Some(why) => format!("unavailable: {why}"),
            };
            let key = match &p.key {
                KeyStatus::Set { from } => format!(
                    "set{}",
                    from.as_ref().map(|v| format!(" ({v})")).unwrap_or_default()
                ),
                KeyStatus::Unset { from } => format!(
                    "unset{}",
                    from.as_ref().map(|v| format!(" ({v})")).unwrap_or_default()
                ),
                KeyStatus::NotNeeded => "not needed".to_owned(),
                KeyStatus::Credentials { source } => source.clone(),
            };
            // A running provider's actor knows its credentials' state:
            // when a token expires, or why the last refresh failed.
            let key = match p.stats.as_ref().and_then(|s| s.credentials.as_ref()) {
                Some(c) => credential_line(c),
                None => key,
            };
            // A pool: each key by name and state, never the secret.
            let key = if p.keys.is_empty() {
                key
            } else {
                pool_line(&p.keys)
            };
            let kind = match p.platform {
                "direct" => p.kind.as_str().to_owned(),
                platform => format!("{platform}/{}", p.kind.as_str()),
            };
            let open: Vec<String> = p
                .breakers
                .iter()
                .filter(|b| b.state != BreakerState::Closed)
                .map(|b| {
                    let state = if b.state == BreakerState::Open {
                        "open"
                    } else {
                        "half-open"
                    };
                    format!("{}={state}", b.model)
                })
                .collect();
            let breaker = if open.is_empty() {
                "closed".to_owned()
            } else {
                open.join(",")
            };
            [
                p.name.clone(),
                kind,
                status,
                breaker,
                p.model.clone(),
                p.base_url.clone(),
                key,
            ]
        })
        .collect();
    let header = [
        "PROVIDER", "PROTOCOL", "STATUS", "BREAKER", "MODEL", "BASE URL", "KEY",
    ]
    .map(String::from);
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

/// A pool's keys: `name=ok` (with what the provider last said is left),
/// or `name=why(back in)`.
fn pool_line(keys: &[understudy_core::key_pools::PoolKeyStatus]) -> String {
    let shown: Vec<String> = keys
        .iter()
        .map(|k| {
            let state = match (k.out, k.back_in_s) {
                (None, _) => match k.requests_remaining {
                    Some(n) => format!("ok({n} left)"),
                    None => "ok".to_owned(),
                },
                (Some(why), Some(s)) => format!("{why}({s:.0}s)"),
                (Some(why), None) => why.to_owned(),
            };
            format!("{}={state}", k.name)
        })
        .collect();
    format!("pool: {}", shown.join(" "))
}

/// A running provider's credentials: their source, when they expire, and
/// the last refresh's error. Never the secret.
fn credential_line(c: &understudy_core::CredentialStatus) -> String {
    let mut line = c.source.clone();
    if let Some(at) = c.expires_at {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let left = at.saturating_sub(now);
        line.push_str(&format!(", expires in {}m{:02}s", left / 60, left % 60));
    }
    if let Some(e) = &c.error {
        line.push_str(&format!(" (last refresh failed: {e})"));
    }
    line
}
