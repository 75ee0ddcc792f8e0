//! The settings' integration tests, one binary (`it`) with a module per
//! part of the settings: loaded from a TOML text and an environment given
//! as a list (never the process's own, so the tests run in parallel), and
//! the errors that name the setting at fault without showing a secret.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

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

mod client_settings;
mod config_secrets;
mod key_pool_settings;
mod responses_api_setting;
mod telemetry_settings;
mod transport_settings;
