//! The engine's integration tests, one binary (`it`) with a module per
//! behaviour: through `TestGateway` (the real engine, the real adapters,
//! simulated providers over real HTTP), or an in-process adapter where the
//! precise instrument is the adapter itself. One binary links the crate
//! once instead of once per file, and runs every test in one process, so
//! nothing here counts process-wide things (the RSS test is the `rss`
//! binary) or sets the environment.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]
#![allow(
    clippy::disallowed_methods,
    reason = "tests bound real time with the OS clock; the engine reads tokio's"
)]

/// Settings from `toml` with `env` as the whole environment (the settings
/// tests' one loader).
fn settings_with(
    toml: &str,
    env: &[(&str, &str)],
) -> Result<understudy_settings::Settings, understudy_settings::SettingsError> {
    understudy_settings::Settings::from_toml_str(toml, |k| {
        env.iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| (*v).to_owned())
    })
}

mod actor_state;
mod bounded_state;
mod caller_settings;
mod capabilities;
mod cloud_settings;
mod context_windows;
mod count_tokens;
mod default_route;
mod failover;
mod fallback_credit;
mod fleet;
mod hedging;
mod key_pools;
mod mode_parity;
mod native;
mod readiness_probe;
mod refusal;
mod resilience;
mod stream_commit;
mod stream_policy;
mod streaming;
mod supervision;
