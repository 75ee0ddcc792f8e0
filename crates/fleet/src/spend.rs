//! [`SpendMeter`]: what fallback targets have spent in the current window,
//! against `fallback_budget_usd`. Local to the process, or the fleet's
//! counter in Redis when shared state is configured (the windows are
//! `policy::budget`'s).

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use understudy_policy::budget::{window_id, window_len};
use understudy_settings::BudgetSettings;

use crate::shared::SharedState;

/// The spend of the current window: the fleet's (in Redis) when shared
/// state is configured and reachable, else this process's.
#[derive(Debug)]
pub struct SpendMeter {
    settings: BudgetSettings,
    /// `(window id, USD spent in it)`.
    spent: Mutex<(u64, f64)>,
    shared: Option<Arc<SharedState>>,
}

impl SpendMeter {
    pub fn new(settings: BudgetSettings, shared: Option<Arc<SharedState>>) -> Self {
        Self {
            settings,
            spent: Mutex::new((0, 0.0)),
            shared,
        }
    }

    /// Whether fallbacks may still be tried now.
    pub async fn allows_fallback(&self) -> bool {
        if let Some(shared) = &self.shared {
            let window = window_id(self.settings.window, unix_now());
            if let Some(spent) = shared.spent(window).await {
                return spent < self.settings.fallback_budget_usd;
            }
        }
        self.spent_now() < self.settings.fallback_budget_usd
    }

    /// What fallbacks spent in the current window.
    pub fn spent_now(&self) -> f64 {
        let window = window_id(self.settings.window, unix_now());
        let guard = self
            .spent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.0 == window { guard.1 } else { 0.0 }
    }

    /// Adds what a fallback target just spent (to the fleet's count too,
    /// without waiting for it).
    pub fn add(self: &Arc<Self>, usd: f64) {
        if !(usd.is_finite() && usd > 0.0) {
            return;
        }
        let window = window_id(self.settings.window, unix_now());
        if let Some(shared) = &self.shared {
            let shared = Arc::clone(shared);
            let len = window_len(self.settings.window);
            tokio::spawn(async move { shared.add_spend(window, usd, len).await });
        }
        let mut guard = self
            .spent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.0 != window {
            *guard = (window, 0.0);
        }
        guard.1 += usd;
    }

    pub fn cap(&self) -> f64 {
        self.settings.fallback_budget_usd
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use understudy_settings::BudgetWindow;

    use super::*;

    #[tokio::test]
    async fn spend_accumulates_in_a_window() {
        let settings = BudgetSettings {
            fallback_budget_usd: 1.0,
            window: BudgetWindow::Day,
        };
        let m = Arc::new(SpendMeter::new(settings, None));
        assert!(m.allows_fallback().await);
        m.add(0.6);
        assert!(m.allows_fallback().await);
        m.add(0.5);
        assert!(!m.allows_fallback().await);
        assert!((m.spent_now() - 1.1).abs() < 1e-9);
    }
}
