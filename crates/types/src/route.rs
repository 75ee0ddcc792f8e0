//! Which targets a request asks to walk: the default route, a named route,
//! a model name resolved against the routing table, or a pinned provider.

use std::fmt;

use crate::error::Error;

/// Which targets a request should walk.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RouteSelector {
    /// The default route (the configured primary, then the fallback order).
    #[default]
    Default,
    /// A named route from the settings.
    Named(String),
    /// A name a client sent as its model: `default`, a route if one has
    /// this name when the request is planned, else `provider` or
    /// `provider:model` as a pin; anything else is an unknown model.
    /// Resolved by the router, so it sees the routing table in force.
    Model(String),
    /// `provider` or `provider:model` as the primary; the rest of the default
    /// order follows as fallbacks.
    Pin {
        provider: String,
        model: Option<String>,
    },
}

// === impl RouteSelector ===

impl fmt::Display for RouteSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::Named(name) | Self::Model(name) => f.write_str(name),
            Self::Pin {
                provider,
                model: Some(m),
            } => write!(f, "{provider}:{m}"),
            Self::Pin {
                provider,
                model: None,
            } => f.write_str(provider),
        }
    }
}

/// The longest model, route or pin name accepted, in bytes.
pub const MAX_MODEL_NAME: usize = 256;

impl RouteSelector {
    /// As [`fmt::Display`] writes it, copied without the formatting
    /// machinery where it is one name (every request's event names it).
    pub fn label(&self) -> String {
        match self {
            Self::Default => "default".to_owned(),
            Self::Named(name)
            | Self::Model(name)
            | Self::Pin {
                provider: name,
                model: None,
            } => name.clone(),
            Self::Pin { .. } => self.to_string(),
        }
    }

    /// Rejects a name no provider could have: longer than
    /// [`MAX_MODEL_NAME`] bytes, or with control characters (before any
    /// work, so client-chosen names cannot grow the gateway's state).
    pub fn validate(&self) -> Result<(), Error> {
        let names: [Option<&str>; 2] = match self {
            Self::Default => [None, None],
            Self::Named(n) | Self::Model(n) => [Some(n), None],
            Self::Pin { provider, model } => [Some(provider), model.as_deref()],
        };
        for name in names.into_iter().flatten() {
            if name.len() > MAX_MODEL_NAME {
                return Err(Error::invalid(
                    "model",
                    format!("the model name is longer than {MAX_MODEL_NAME} bytes"),
                ));
            }
            if name.chars().any(char::is_control) {
                return Err(Error::invalid(
                    "model",
                    "the model name contains control characters",
                ));
            }
        }
        Ok(())
    }

    /// Parses `provider` or `provider:model` as a pin.
    pub fn pin(spec: &str) -> Self {
        match spec.split_once(':') {
            Some((provider, model)) if !model.is_empty() => Self::Pin {
                provider: provider.to_owned(),
                model: Some(model.to_owned()),
            },
            Some((provider, _)) => Self::Pin {
                provider: provider.to_owned(),
                model: None,
            },
            None => Self::Pin {
                provider: spec.to_owned(),
                model: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RouteSelector;

    /// The label is what `Display` writes, for every kind of selector.
    #[test]
    fn the_label_is_the_selector_as_written() {
        for selector in [
            RouteSelector::Default,
            RouteSelector::Named("fast".into()),
            RouteSelector::Model("gpt-4o".into()),
            RouteSelector::pin("openai"),
            RouteSelector::pin("openai:gpt-4o"),
        ] {
            assert_eq!(selector.label(), selector.to_string(), "{selector:?}");
        }
    }
}
