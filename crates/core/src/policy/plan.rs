//! Which targets a request walks, in which order.
//!
//! A route is an ordered list of targets (provider + model). The plan is the
//! route with unavailable targets removed: a provider with no key, no
//! compiled-in adapter, or an open breaker never receives the request.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::error::Error;
use crate::generation::RouteSelector;
use crate::settings::{ProviderSettings, Settings};

/// One provider and one of its models.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    pub provider: Arc<str>,
    pub model: Arc<str>,
}

/// Why a target is left out of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// The provider needs an API key and none is set.
    NoKey,
    /// No adapter for the provider's protocol is compiled in.
    NoAdapter,
    /// The target's circuit breaker is open.
    BreakerOpen,
    /// The provider's actor is gone and its restart budget is spent.
    Stopped,
}

/// A request's plan: the route's primary and the targets to try in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The route's first target, whether or not it is available: serving
    /// from anything else counts as falling back.
    pub primary: Target,
    /// The available targets, the primary first when it is available.
    pub targets: Vec<Target>,
    /// The targets left out, and why.
    pub skipped: Vec<(Target, Unavailable)>,
    /// Every target was benched by its breaker, so the primary is tried
    /// anyway, past its breaker.
    pub forced: bool,
    /// Per target: whether its call would be a half-open probe.
    pub probes: Vec<bool>,
}

// === impl Target ===

impl Target {
    pub fn new(provider: &str, model: &str) -> Self {
        Self {
            provider: Arc::from(provider),
            model: Arc::from(model),
        }
    }

    /// Parses `provider` or `provider:model` against the known providers.
    pub fn parse(
        spec: &str,
        providers: &BTreeMap<String, ProviderSettings>,
    ) -> Result<Self, String> {
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
            Some(m) => Ok(Self::new(name, m)),
            None => Ok(Self::new(name, &p.model)),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider, self.model)
    }
}

// === impl Unavailable ===

impl Unavailable {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoKey => "no API key",
            Self::NoAdapter => "adapter not compiled in",
            Self::BreakerOpen => "circuit breaker open",
            Self::Stopped => "stopped after repeated crashes",
        }
    }
}

// === route resolution ===

/// The targets a selector names, before availability is considered.
/// `default_route` is the current default route (routing can change at run
/// time, so it is passed in rather than read from `settings`).
pub fn resolve(
    selector: &RouteSelector,
    settings: &Settings,
    default_route: &[Target],
    routes: &BTreeMap<String, Vec<Target>>,
) -> Result<Vec<Target>, Error> {
    let mut targets = match selector {
        RouteSelector::Default => default_route.to_vec(),
        RouteSelector::Named(name) if name == "default" => default_route.to_vec(),
        RouteSelector::Named(name) => routes
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UnknownRoute(name.clone()))?,
        RouteSelector::Pin { provider, model } => {
            let p = settings
                .providers
                .get(provider)
                .ok_or_else(|| Error::UnknownProvider(provider.clone()))?;
            let model = model.as_deref().unwrap_or(&p.model);
            if model.trim().is_empty() {
                return Err(Error::invalid("model", "the model name is empty"));
            }
            let pinned = Target::new(provider, model);
            // The primary is never its own fallback: the rest of the default
            // order follows, without the pinned provider.
            std::iter::once(pinned)
                .chain(
                    default_route
                        .iter()
                        .filter(|t| *t.provider != **provider)
                        .cloned(),
                )
                .collect()
        }
    };
    let mut seen = Vec::with_capacity(targets.len());
    targets.retain(|t| {
        let fresh = !seen.contains(t);
        if fresh {
            seen.push(t.clone());
        }
        fresh
    });
    Ok(targets)
}

/// Removes unavailable targets. `availability` answers for one target.
pub fn plan(
    route: Vec<Target>,
    availability: impl Fn(&Target) -> Option<Unavailable>,
) -> Option<Plan> {
    let primary = route.first()?.clone();
    let mut targets = Vec::with_capacity(route.len());
    let mut skipped = Vec::new();
    for t in route {
        match availability(&t) {
            None => targets.push(t),
            Some(why) => skipped.push((t, why)),
        }
    }
    Some(Plan {
        primary,
        targets,
        skipped,
        forced: false,
        probes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings::from_toml_str(
            "[routes]\nfast = [\"groq:a\", \"groq:b\", \"groq:a\", \"openai\"]",
            |_| None,
        )
        .unwrap()
    }

    fn names(ts: &[Target]) -> Vec<String> {
        ts.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn pin_puts_the_pinned_provider_first_and_never_again() {
        let s = settings();
        let route = resolve(
            &RouteSelector::pin("gemini:g-pro"),
            &s,
            &s.default_route(),
            &s.routes,
        )
        .unwrap();
        assert_eq!(
            names(&route),
            [
                "gemini:g-pro",
                "groq:llama-3.1-8b-instant",
                "claude:claude-haiku-4-5"
            ]
        );
    }

    #[test]
    fn named_routes_keep_sibling_models_and_drop_duplicates() {
        let s = settings();
        let route = resolve(
            &RouteSelector::Named("fast".into()),
            &s,
            &s.default_route(),
            &s.routes,
        )
        .unwrap();
        assert_eq!(names(&route), ["groq:a", "groq:b", "openai:gpt-4o-mini"]);
        assert!(matches!(
            resolve(
                &RouteSelector::Named("nope".into()),
                &s,
                &s.default_route(),
                &s.routes
            ),
            Err(Error::UnknownRoute(_))
        ));
        assert!(matches!(
            resolve(
                &RouteSelector::pin("nope"),
                &s,
                &s.default_route(),
                &s.routes
            ),
            Err(Error::UnknownProvider(_))
        ));
    }

    #[test]
    fn unavailable_targets_are_skipped_but_the_primary_is_remembered() {
        let s = settings();
        let route = resolve(&RouteSelector::Default, &s, &s.default_route(), &s.routes).unwrap();
        let p = plan(route, |t| {
            (&*t.provider == "groq").then_some(Unavailable::NoKey)
        })
        .unwrap();
        assert_eq!(&*p.primary.provider, "groq");
        assert_eq!(
            names(&p.targets),
            ["gemini:gemini-2.5-flash", "claude:claude-haiku-4-5"]
        );
        assert_eq!(p.skipped.len(), 1);
    }
}
