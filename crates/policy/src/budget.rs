//! The fallback spend cap's windows (UTC hour, day or month, or a fixed
//! number of seconds): which window a moment falls in and how long one
//! lasts. Pure; the meter that counts spend (locally and in Redis) is
//! `understudy_core::spend`.

use std::time::Duration;

use understudy_settings::BudgetWindow;

/// How long a window lasts (a month counts as 31 days).
pub fn window_len(window: BudgetWindow) -> Duration {
    Duration::from_secs(match window {
        BudgetWindow::Hour => 3600,
        BudgetWindow::Day => 86_400,
        BudgetWindow::Month => 31 * 86_400,
        BudgetWindow::Seconds(n) => n.max(1),
    })
}

/// The id of the window `unix` falls in (hours, days or months since the
/// epoch, or multiples of a fixed length).
pub fn window_id(window: BudgetWindow, unix: u64) -> u64 {
    match window {
        BudgetWindow::Hour => unix / 3600,
        BudgetWindow::Day => unix / 86_400,
        BudgetWindow::Month => {
            let stamp = understudy_types::clock::rfc3339_of(unix, 0);
            let year: u64 = stamp[0..4].parse().unwrap_or(1970);
            let month: u64 = stamp[5..7].parse().unwrap_or(1);
            year * 12 + month
        }
        BudgetWindow::Seconds(n) => unix / n.max(1),
    }
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
    }
}
