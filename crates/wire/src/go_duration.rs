//! Durations as Go writes them (`6m0s`, `1.57s`, `399ms`), both ways: read
//! from the rate-limit headers and messages of OpenAI, Groq and Google,
//! and written in the `x-ratelimit-reset-*` headers the gateway gives its
//! own clients, as OpenAI's clients read them.

use std::time::Duration;

/// A Go-style duration as OpenAI and Groq write them: `6m0s`, `1.57s`,
/// `399ms`, `9m38.016s`, `2h1m`.
pub fn parse(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0_f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    (total.is_finite() && total < 1e9).then(|| Duration::from_secs_f64(total))
}

/// A duration as Go writes one (`1m0s`, `12.5s`, `250ms`), to the
/// millisecond.
pub fn write(d: Duration) -> String {
    use std::fmt::Write as _;
    let ms = d.as_millis();
    let mut out = String::with_capacity(12);
    if ms < 1000 {
        let _ = write!(out, "{ms}ms");
        return out;
    }
    let (minutes, rest) = (ms / 60_000, ms % 60_000);
    if minutes > 0 {
        let _ = write!(out, "{minutes}m");
    }
    let _ = write!(out, "{}", rest / 1000);
    // Integers only: formatting a float costs more than the rest.
    let mut frac = rest % 1000;
    if frac > 0 {
        let mut digits = 3;
        while frac % 10 == 0 {
            frac /= 10;
            digits -= 1;
        }
        let _ = write!(out, ".{frac:0digits$}");
    }
    out.push('s');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_read() {
        for (s, ms) in [
            ("6m0s", Some(360_000)),
            ("1.57s", Some(1570)),
            ("399ms", Some(399)),
            ("9m38.016s", Some(578_016)),
            ("2h", Some(7_200_000)),
            ("", None),
            ("5x", None),
            ("s", None),
        ] {
            assert_eq!(parse(s).map(|d| d.as_millis()), ms, "{s}");
        }
    }

    #[test]
    fn go_durations_written() {
        assert_eq!(write(Duration::from_millis(250)), "250ms");
        assert_eq!(write(Duration::from_millis(12_500)), "12.5s");
        assert_eq!(write(Duration::from_secs(60)), "1m0s");
        assert_eq!(write(Duration::from_secs(59)), "59s");
        assert_eq!(write(Duration::from_millis(61_050)), "1m1.05s");
        assert_eq!(write(Duration::from_millis(1_007)), "1.007s");
    }

    #[test]
    fn written_durations_read_back() {
        for ms in [
            0, 1, 250, 999, 1000, 1_007, 59_999, 60_000, 61_050, 3_600_000,
        ] {
            let d = Duration::from_millis(ms);
            assert_eq!(
                parse(&write(d)).map(|d| d.as_millis()),
                Some(u128::from(ms))
            );
        }
    }
}
