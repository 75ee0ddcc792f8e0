//! The subcommands.

pub(crate) mod ask;
pub(crate) mod demo;
pub(crate) mod events;
pub(crate) mod providers;
pub(crate) mod serve;

use std::io::Write as _;
use std::path::Path;

use understudy_core::{Engine, Settings};
use understudy_providers::Providers;

use crate::{EXIT_FAILED, EXIT_USAGE};

/// Writes a line to standard error (the lint that forbids `eprintln!`
/// keeps stray debugging out of libraries; the CLI talks on purpose).
pub(crate) fn report(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "understudy: {message}");
}

/// Writes to standard output; a closed pipe is not an error worth a panic.
pub(crate) fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// Loads settings and starts the engine, or says why not and gives the
/// exit status.
pub(crate) async fn engine(config: Option<&Path>) -> Result<Engine, u8> {
    let settings = Settings::from_env(config).map_err(|e| {
        report(&format!("configuration error: {e}"));
        EXIT_USAGE
    })?;
    Engine::start(settings, Providers::factory())
        .await
        .map_err(|e| {
            report(&format!("cannot start the engine: {e}"));
            EXIT_FAILED
        })
}

/// Starts logging to standard error. `RUST_LOG` overrides `default`; with
/// `json`, one JSON object per line (span fields such as `request_id`
/// included).
pub(crate) fn init_logging(default: &str, json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().with_current_span(true).try_init()
    } else {
        builder.try_init()
    };
}
