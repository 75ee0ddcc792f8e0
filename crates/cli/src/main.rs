//! The `understudy` binary: argument parsing only; each subcommand lives in
//! `cmd/` and talks to the engine through its handle.
//!
//! Exit status: 0 success, 1 when no provider answered, 2 for bad usage or
//! configuration.
//!
//! # Layout
//! - `cmd`: one module per subcommand (`ask`, `providers`, `serve`, `demo`:
//!   the gateway in front of the testkit's simulators, `events`; `reload`:
//!   `serve`'s settings file read again on SIGHUP and on change).
//! - `malloc`: glibc's malloc told to give large blocks back to the system and
//!   to keep more freed small blocks per thread.

mod cmd;
mod malloc;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Understudy: an LLM gateway that keeps answering when a provider fails,
/// and knows a refusal from an outage.
#[derive(Debug, Parser)]
#[command(
    name = "understudy",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("UNDERSTUDY_COMMIT"), ")")
)]
struct Cli {
    /// A TOML settings file (overrides UNDERSTUDY_CONFIG; the environment
    /// overrides the file).
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Ask one question through the failover chain and print the answer.
    Ask(cmd::ask::Args),
    /// Watch failover work with no API keys: simulated providers with faults, the real gateway, sample traffic.
    Demo(cmd::demo::Args),
    /// Follow the generation events written to Redis (`events tail`).
    Events(cmd::events::Args),
    /// List every provider: available or why not, model, base URL, key set or unset.
    Providers(cmd::providers::Args),
    /// Serve the HTTP API: /v1/chat/completions (OpenAI-compatible), /v1/generate, /v1/wit,
    /// /v1/models, /v1/providers, /v1/admin/routing, /healthz.
    Serve(cmd::serve::Args),
}

/// Exit status for bad usage or configuration.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status when no provider answered.
pub(crate) const EXIT_FAILED: u8 = 1;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Serve(_) | Command::Demo(_)) {
        // Long-running: memory must go back after a burst.
        malloc::restart_tuned();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            cmd::report(&format!("cannot start the async runtime: {e}"));
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let config = cli.config.as_deref();
    let code = runtime.block_on(async {
        match cli.command {
            Command::Ask(args) => cmd::ask::run(config, args).await,
            Command::Providers(args) => cmd::providers::run(config, args).await,
            Command::Events(args) => cmd::events::run(config, args).await,
            Command::Demo(args) => cmd::demo::run(config, args).await,
            Command::Serve(args) => cmd::serve::run(config, args).await,
        }
    });
    ExitCode::from(code)
}
