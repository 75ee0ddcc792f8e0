//! A route's hedging (`hedge = { after = "p95", fallback = "800ms",
//! max_share = 0.05 }` in its table): when the serving attempt has shown
//! no output after `after` — the serving target's own observed p95 time
//! to first output, or a fixed duration — the route's next target starts
//! too, and the first to show output serves. Off unless a route sets it.
//! A group step of a route takes the same table for its own members
//! (`{ group = [..], hedge = { .. } }`), written back in the same shape.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a route's `hedge` sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HedgeSettings {
    /// When the backup starts.
    pub after: HedgeAfter,
    /// The largest share of the route's requests that may hedge, in
    /// millionths (`max_share = 0.05` is 50 000).
    pub max_share_ppm: u32,
}

/// When a hedge's backup starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HedgeAfter {
    /// After the serving target's observed p95 time to first output;
    /// `until_known` while it has too few observations (none: no hedge
    /// until it has them).
    P95 { until_known: Option<Duration> },
    /// After this long.
    Fixed(Duration),
}

/// The share of requests a route hedges at most when `max_share` is left
/// out.
pub const DEFAULT_MAX_SHARE: f64 = 0.05;

/// A route's or a group's `hedge` table as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HedgeSpec {
    pub after: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_share: Option<f64>,
}

// === impl HedgeSpec ===

// Written forms compare by their text and the share's bits, so that a
// step list (which holds them) is `Eq`.
impl PartialEq for HedgeSpec {
    fn eq(&self, other: &Self) -> bool {
        self.after == other.after
            && self.fallback == other.fallback
            && self.max_share.map(f64::to_bits) == other.max_share.map(f64::to_bits)
    }
}

impl Eq for HedgeSpec {}

impl HedgeSpec {
    /// The settings, or the TOML path at fault (`at` is the table's) and
    /// why.
    pub(super) fn read(&self, at: &str) -> Result<HedgeSettings, (String, String)> {
        let fallback = self
            .fallback
            .as_deref()
            .map(|f| duration(f).map_err(|m| (format!("{at}.fallback"), m)))
            .transpose()?;
        let after = match self.after.trim() {
            "p95" => HedgeAfter::P95 {
                until_known: fallback,
            },
            fixed => {
                if fallback.is_some() {
                    return Err((
                        format!("{at}.fallback"),
                        "a fallback is for `after = \"p95\"` only".into(),
                    ));
                }
                HedgeAfter::Fixed(duration(fixed).map_err(|m| (format!("{at}.after"), m))?)
            }
        };
        let share = self.max_share.unwrap_or(DEFAULT_MAX_SHARE);
        if !(share > 0.0 && share <= 1.0) {
            return Err((
                format!("{at}.max_share"),
                format!("{share} is not a share: give a number above 0 and at most 1"),
            ));
        }
        Ok(HedgeSettings {
            after,
            max_share_ppm: (share * 1_000_000.0).round() as u32,
        })
    }
}

// === impl HedgeSettings ===

impl HedgeSettings {
    /// The table that reads back as these settings (`max_share` left out
    /// when it is the default).
    pub fn written(&self) -> HedgeSpec {
        let ms = |d: Duration| format!("{}ms", d.as_secs_f64() * 1000.0);
        let (after, fallback) = match self.after {
            HedgeAfter::P95 { until_known } => ("p95".to_owned(), until_known.map(ms)),
            HedgeAfter::Fixed(d) => (ms(d), None),
        };
        let share = f64::from(self.max_share_ppm) / 1_000_000.0;
        let default = (DEFAULT_MAX_SHARE * 1_000_000.0).round() as u32;
        HedgeSpec {
            after,
            fallback,
            max_share: (self.max_share_ppm != default).then_some(share),
        }
    }
}

/// `800ms`, `1.5s` or `2s` as a positive duration.
fn duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let parsed = if let Some(ms) = t.strip_suffix("ms") {
        ms.trim().parse::<f64>().ok().map(|v| v / 1000.0)
    } else if let Some(s) = t.strip_suffix('s') {
        s.trim().parse::<f64>().ok()
    } else {
        None
    };
    match parsed {
        Some(secs) if secs > 0.0 && secs < 3600.0 => Ok(Duration::from_secs_f64(secs)),
        _ => Err(format!(
            "`{text}` is neither \"p95\" nor a duration such as \"800ms\" or \"1.5s\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(
        after: &str,
        fallback: Option<&str>,
        share: Option<f64>,
    ) -> Result<HedgeSettings, String> {
        HedgeSpec {
            after: after.into(),
            fallback: fallback.map(Into::into),
            max_share: share,
        }
        .read("routes.r.hedge")
        .map_err(|(at, m)| format!("{at}: {m}"))
    }

    #[test]
    fn shapes() {
        let p95 = read("p95", Some("800ms"), None).unwrap();
        assert_eq!(
            p95.after,
            HedgeAfter::P95 {
                until_known: Some(Duration::from_millis(800))
            }
        );
        assert_eq!(p95.max_share_ppm, 50_000);
        let fixed = read("1.5s", None, Some(0.1)).unwrap();
        assert_eq!(fixed.after, HedgeAfter::Fixed(Duration::from_millis(1500)));
        assert_eq!(fixed.max_share_ppm, 100_000);
        for (after, fallback, share, at) in [
            ("soon", None, None, "routes.r.hedge.after"),
            ("1s", Some("2s"), None, "routes.r.hedge.fallback"),
            ("p95", Some("x"), None, "routes.r.hedge.fallback"),
            ("p95", None, Some(0.0), "routes.r.hedge.max_share"),
            ("p95", None, Some(1.5), "routes.r.hedge.max_share"),
        ] {
            let e = read(after, fallback, share).unwrap_err();
            assert!(e.starts_with(at), "{e}");
        }
    }

    #[test]
    fn settings_write_back_as_they_were_read() {
        for (after, fallback, share) in [
            ("p95", Some("800ms"), None),
            ("p95", None, Some(0.1)),
            ("1.5s", None, None),
            ("250ms", None, Some(0.02)),
        ] {
            let read = read(after, fallback, share).unwrap();
            let again = read.written().read("x").unwrap();
            assert_eq!(again, read, "{after} {fallback:?} {share:?}");
        }
        let written = read("1.5s", None, None).unwrap().written();
        assert_eq!(written.after, "1500ms");
        assert_eq!(written.max_share, None);
    }
}
