//! Routing a caller asked for in its request: OpenRouter's `models` and
//! `provider` preferences, LiteLLM's and the Messages API's `fallbacks`,
//! Understudy's `x-understudy-targets` header. Plain data: the front end
//! reads it, the engine decides whether the operator allows it and, if so,
//! plans with it.

use crate::error::Error;
use crate::route::MAX_MODEL_NAME;

/// The most targets one request may list (its `model` included), and the
/// most provider names each of `order`, `only` and `ignore` may hold: a
/// client's list cannot grow a plan without bound.
pub const MAX_CALLER_TARGETS: usize = 16;

/// What a request asked of the gateway's routing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallerRouting {
    /// Models to try after the request's `model`, in order (`models`, then
    /// `fallbacks`), each named the way `model` is: a route, a route's
    /// pattern, `provider` or `provider:model`.
    pub models: Vec<String>,
    /// The whole ordered list instead of `model` and `models`
    /// (`x-understudy-targets`), when the request carried one.
    pub targets: Option<Vec<String>>,
    /// Providers to try first, in this order, within each model's targets.
    pub order: Vec<String>,
    /// Only these providers (empty: any).
    pub only: Vec<String>,
    /// Never these providers.
    pub ignore: Vec<String>,
    /// `false`: only the first target of the resulting plan is tried.
    pub allow_fallbacks: bool,
}

// === impl CallerRouting ===

impl CallerRouting {
    /// An empty wish (nothing listed, fallbacks allowed).
    pub fn new() -> Self {
        Self {
            allow_fallbacks: true,
            ..Self::default()
        }
    }

    /// Whether it asks for nothing (every list empty, fallbacks allowed).
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
            && self.targets.is_none()
            && self.order.is_empty()
            && self.only.is_empty()
            && self.ignore.is_empty()
            && self.allow_fallbacks
    }

    /// Refuses lists longer than [`MAX_CALLER_TARGETS`] and names no
    /// provider or model could have (empty, too long, control characters),
    /// naming the field (`field`: where the list came from).
    pub fn validate(&self, field: &'static str) -> Result<(), Error> {
        let lists: [(&'static str, &[String]); 4] = [
            ("models", &self.models),
            ("provider.order", &self.order),
            ("provider.only", &self.only),
            ("provider.ignore", &self.ignore),
        ];
        let targets = self.targets.as_deref().map(|t| ("x-understudy-targets", t));
        for (name, list) in lists.into_iter().chain(targets) {
            let name = if name == "models" { field } else { name };
            if list.len() > MAX_CALLER_TARGETS {
                return Err(Error::invalid(
                    name,
                    format!("at most {MAX_CALLER_TARGETS} names"),
                ));
            }
            for item in list {
                let bad = item.trim().is_empty()
                    || item.len() > MAX_MODEL_NAME
                    || item.chars().any(char::is_control);
                if bad {
                    return Err(Error::invalid(
                        name,
                        format!(
                            "each name must be 1 to {MAX_MODEL_NAME} bytes without control characters"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_bounded_and_names_checked() {
        let ok = CallerRouting {
            models: vec!["a".into(), "openai:gpt".into()],
            ..CallerRouting::new()
        };
        assert!(ok.validate("models").is_ok());
        assert!(!ok.is_empty());
        assert!(CallerRouting::new().is_empty());
        let long = CallerRouting {
            order: vec!["p".into(); MAX_CALLER_TARGETS + 1],
            ..CallerRouting::new()
        };
        assert!(long.validate("models").is_err());
        let blank = CallerRouting {
            targets: Some(vec![" ".into()]),
            ..CallerRouting::new()
        };
        let e = blank.validate("models").unwrap_err();
        assert!(e.to_string().contains("x-understudy-targets"), "{e}");
    }
}
