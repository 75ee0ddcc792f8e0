//! `[caller_routing]`: whether a request may choose its own routing —
//! OpenRouter's `models` and `provider` preferences, LiteLLM's and the
//! Messages API's `fallbacks`, the `x-understudy-targets` header. Off by
//! default; `enabled = true` allows it for every client, and a client
//! record's own `caller_routing` wins over this for its key. A record's
//! `models` still bound what any request may name.

use serde::Deserialize;

/// The `[caller_routing]` table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallerRoutingSettings {
    /// Requests may choose their routing (default false: the fields are
    /// ignored and never forwarded).
    pub enabled: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCallerRouting {
    enabled: Option<bool>,
}

/// `[caller_routing]` as read (nothing to validate but its shape, which
/// serde checks).
pub(super) fn read(raw: RawCallerRouting) -> CallerRoutingSettings {
    CallerRoutingSettings {
        enabled: raw.enabled.unwrap_or(false),
    }
}

// === impl CallerRoutingSettings ===

impl CallerRoutingSettings {
    /// Whether a request with `record` (its client's own setting, when it
    /// has a record that sets one) may choose its routing.
    pub fn allows(&self, record: Option<&super::ClientRecord>) -> bool {
        record
            .and_then(|r| r.caller_routing)
            .unwrap_or(self.enabled)
    }
}

#[cfg(test)]
mod tests {
    use crate::{RawClient, Settings};

    fn record(caller_routing: Option<bool>) -> crate::ClientRecord {
        RawClient {
            name: Some("c".into()),
            key: Some("sk-client-0123456789".into()),
            caller_routing,
            ..RawClient::default()
        }
        .read("", &|_| None)
        .unwrap()
    }

    #[test]
    fn off_by_default_on_for_all_or_per_record() {
        let off = Settings::from_toml_str("", |_| None)
            .unwrap()
            .caller_routing;
        let on = Settings::from_toml_str("[caller_routing]\nenabled = true\n", |_| None)
            .unwrap()
            .caller_routing;
        // (the global setting, the record's, allowed)
        let cases = [
            (off, None, false),
            (off, Some(None), false),
            (off, Some(Some(true)), true),
            (on, None, true),
            (on, Some(None), true),
            (on, Some(Some(false)), false),
        ];
        for (global, rec, want) in cases {
            let rec = rec.map(record);
            assert_eq!(global.allows(rec.as_ref()), want, "{global:?} {rec:?}");
        }
        let e = Settings::from_toml_str("[caller_routing]\nenable = true\n", |_| None).unwrap_err();
        assert!(e.to_string().contains("caller_routing"), "{e}");
    }
}
