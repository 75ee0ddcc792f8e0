//! Whether the gateway is ready to serve: every route (the default one
//! and each named one) has at least one target that can serve now — its
//! provider available (a key, a compiled-in adapter, usable credentials,
//! an actor that is not stopped), its circuit breaker not open, some key
//! of its pool not out, and not proven unable to serve by the readiness
//! prober (`crate::probe`). A plain function of what `/v1/providers`
//! shows, so that `/readyz` can grow other checks beside it.

use serde::Serialize;
use understudy_policy::breaker::BreakerState;
use understudy_types::target::Target;

use crate::info::ProviderInfo;

/// A route that no target can serve now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnreadyRoute {
    pub route: String,
    /// Each of its targets, and why it cannot serve.
    pub targets: Vec<TargetState>,
}

/// One target that cannot serve, and why: a short reason that names no
/// file, key or setting's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetState {
    pub target: String,
    pub reason: String,
}

/// The routes of `routes` (name, targets) that no target can serve, given
/// the `providers` as `/v1/providers` shows them and the targets a probe
/// proved `not_ready`.
pub fn unready(
    routes: &[(String, Vec<Target>)],
    providers: &[ProviderInfo],
    not_ready: impl Fn(&Target) -> bool,
) -> Vec<UnreadyRoute> {
    let mut out = Vec::new();
    for (route, targets) in routes {
        let mut why_not = Vec::with_capacity(targets.len());
        for t in targets {
            let probed = not_ready(t).then(|| {
                "not ready (a probe found its key refused or its model missing)".to_owned()
            });
            match probed.or_else(|| cannot_serve(t, providers)) {
                None => {
                    why_not.clear();
                    break;
                }
                Some(reason) => why_not.push(TargetState {
                    target: t.to_string(),
                    reason,
                }),
            }
        }
        if !why_not.is_empty() || targets.is_empty() {
            out.push(UnreadyRoute {
                route: route.clone(),
                targets: why_not,
            });
        }
    }
    out
}

/// Why target `t` cannot serve now, if it cannot.
fn cannot_serve(t: &Target, providers: &[ProviderInfo]) -> Option<String> {
    let Some(p) = providers.iter().find(|p| *p.name == *t.provider) else {
        return Some("unknown provider".to_owned());
    };
    if !p.available {
        // The reason's head: a credential's error (after the colon) may
        // name an account, which an open endpoint does not show.
        let why = p.unavailable_reason.as_deref().unwrap_or("unavailable");
        return Some(why.split(':').next().unwrap_or(why).trim().to_owned());
    }
    if p.breakers
        .iter()
        .any(|b| *b.model == *t.model && b.state == BreakerState::Open)
    {
        return Some("circuit breaker open".to_owned());
    }
    if !p.keys.is_empty() && p.keys.iter().all(|k| !k.available) {
        return Some("every key of its pool is out".to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use understudy_types::protocol::Protocol;

    use super::*;
    use crate::info::{KeyStatus, TargetBreaker};

    fn provider(name: &str, unavailable: Option<&str>, open: &[&str]) -> ProviderInfo {
        ProviderInfo {
            name: name.to_owned(),
            kind: Protocol::ChatCompletions,
            platform: "direct",
            model: "m".to_owned(),
            base_url: String::new(),
            key: KeyStatus::NotNeeded,
            available: unavailable.is_none(),
            unavailable_reason: unavailable.map(str::to_owned),
            started: true,
            stats: None,
            breakers: open
                .iter()
                .map(|m| TargetBreaker {
                    model: (*m).to_owned(),
                    state: BreakerState::Open,
                    consecutive_failures: 5,
                    reopens_in_ms: Some(1000),
                })
                .collect(),
            keys: Vec::new(),
        }
    }

    #[test]
    fn a_route_is_ready_while_one_target_can_serve() {
        let providers = [
            provider(
                "vertex",
                Some("credentials unusable: the token endpoint of a@b refused"),
                &[],
            ),
            provider("groq", None, &["big"]),
            provider("openai", None, &[]),
        ];
        let routes = |targets: &[&str]| -> Vec<Target> {
            targets
                .iter()
                .map(|t| {
                    let (p, m) = t.split_once(':').unwrap();
                    Target::new(p, m)
                })
                .collect()
        };
        // (route's targets, what is not ready: target and reason)
        type Case = (
            &'static [&'static str],
            &'static [(&'static str, &'static str)],
        );
        let cases: [Case; 7] = [
            (&["vertex:g", "openai:m"], &[]),
            // A target a probe proved bad serves nothing.
            (
                &["openai:retired"],
                &[(
                    "openai:retired",
                    "not ready (a probe found its key refused or its model missing)",
                )],
            ),
            (&["openai:retired", "openai:m"], &[]),
            (&["groq:small"], &[]),
            (&["vertex:g"], &[("vertex:g", "credentials unusable")]),
            (
                &["vertex:g", "groq:big"],
                &[
                    ("vertex:g", "credentials unusable"),
                    ("groq:big", "circuit breaker open"),
                ],
            ),
            (&["nope:x"], &[("nope:x", "unknown provider")]),
        ];
        for (targets, want) in cases {
            let got = unready(&[("r".to_owned(), routes(targets))], &providers, |t| {
                &*t.model == "retired"
            });
            let got: Vec<(String, String)> = got
                .iter()
                .flat_map(|r| r.targets.iter())
                .map(|t| (t.target.clone(), t.reason.clone()))
                .collect();
            let want: Vec<(String, String)> = want
                .iter()
                .map(|(t, r)| ((*t).to_owned(), (*r).to_owned()))
                .collect();
            assert_eq!(got, want, "{targets:?}");
        }
        // No route at all is not ready either.
        assert_eq!(
            unready(&[("empty".to_owned(), Vec::new())], &providers, |_| false).len(),
            1
        );
    }
}
