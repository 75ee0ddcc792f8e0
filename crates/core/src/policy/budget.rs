//! The fallback spend cap: what fallback targets have spent in the current
//! window (UTC hour, day or month, or a fixed number of seconds), against
//! `fallback_budget_usd`. Local to the process; the shared (Redis) counter
//! of a fleet builds on the same windows.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::settings::{BudgetSettings, BudgetWindow};
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

/// How long a window lasts (a month counts as 31 days).
pub fn window_len(window: BudgetWindow) -> Duration {
    Duration::from_secs(match window {
        BudgetWindow::Hour => 3600,
        BudgetWindow::Day => 86_400,
        BudgetWindow::Month => 31 * 86_400,
        BudgetWindow::Seconds(n) => n.max(1),
    })
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The id of the window `unix` falls in (hours, days or months since the
/// epoch, or multiples of a fixed length).
pub fn window_id(window: BudgetWindow, unix: u64) -> u64 {
    match window {
        BudgetWindow::Hour => unix / 3600,
        BudgetWindow::Day => unix / 86_400,
        BudgetWindow::Month => {
            let stamp = crate::event::rfc3339(unix, 0);
            let year: u64 = stamp[0..4].parse().unwrap_or(1970);
            let month: u64 = stamp[5..7].parse().unwrap_or(1);
            year * 12 + month
        }
        BudgetWindow::Seconds(n) => unix / n.max(1),
    }
}

/// `90s`, `10m`, `2h`, `1d` (or plain seconds) as seconds.
pub fn parse_seconds(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().ok()?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    n.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows() {
        assert_eq!(window_id(BudgetWindow::Hour, 7200), 2);
        assert_eq!(window_id(BudgetWindow::Day, 86_400 * 3 + 5), 3);
        assert_ne!(
            window_id(BudgetWindow::Month, 1_796_000_000),
            window_id(BudgetWindow::Month, 1_796_000_000 + 40 * 86_400)
        );
        assert_eq!(window_id(BudgetWindow::Month, 951_782_400), 2000 * 12 + 2);
        assert_eq!(window_id(BudgetWindow::Seconds(10), 95), 9);
        assert_eq!(parse_seconds("90s"), Some(90));
        assert_eq!(parse_seconds("10m"), Some(600));
        assert_eq!(parse_seconds("3"), Some(3));
        assert_eq!(parse_seconds("x"), None);
    }

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
