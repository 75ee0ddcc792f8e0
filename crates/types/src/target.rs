//! [`Target`]: one provider and one of its models, the unit that routes,
//! plans, breakers and attempts speak of.
//!
//! A leaf module: it imports nothing from the crate (parsing a
//! `provider:model` spec against the configured providers lives in
//! `settings`).

use std::fmt;
use std::sync::Arc;

/// One provider and one of its models.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    pub provider: Arc<str>,
    pub model: Arc<str>,
}

// === impl Target ===

impl Target {
    pub fn new(provider: &str, model: &str) -> Self {
        Self {
            provider: Arc::from(provider),
            model: Arc::from(model),
        }
    }

    /// This target for a client's model name `asked`: a target written
    /// `provider:*` (in a route whose name is a pattern) serves the model
    /// the client asked for; any other target stays as it is.
    pub fn for_model(&self, asked: &str) -> Self {
        match &*self.model {
            "*" => Self {
                provider: self.provider.clone(),
                model: Arc::from(asked),
            },
            _ => self.clone(),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider, self.model)
    }
}
