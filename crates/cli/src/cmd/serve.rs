//! `understudy serve`: the HTTP API.

use std::net::SocketAddr;
use std::path::Path;

use tokio::net::TcpListener;

use super::{report, serving_engine};
use crate::{EXIT_FAILED, EXIT_USAGE};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The address to listen on (default: the settings' server.listen, 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Serve without client keys on a non-loopback address (anyone who can
    /// reach it can spend your provider credits).
    #[arg(long)]
    insecure_no_auth: bool,
    /// Log as JSON lines.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

pub(crate) async fn run(config: Option<&Path>, args: Args) -> u8 {
    super::init_logging("info", matches!(args.log_format, LogFormat::Json));
    let engine = match serving_engine(config).await {
        Ok(e) => e,
        Err(code) => return code,
    };
    let _reload = super::reload::watch(config, &engine);
    let addr = args.listen.unwrap_or(engine.settings().server.listen);
    let no_keys = !engine.tenants().closed;
    if no_keys && !addr.ip().is_loopback() && !args.insecure_no_auth {
        report(&format!(
            "refusing to listen on {addr} without client keys: set UNDERSTUDY_API_KEYS (or server.api_keys, or [[server.clients]]), \
             listen on a loopback address, or pass --insecure-no-auth"
        ));
        return EXIT_USAGE;
    }
    if no_keys {
        tracing::warn!("no client keys configured: the API is open to anyone who can reach it");
    }
    if engine.settings().server.admin_token.is_none() {
        tracing::info!("no admin token: the admin API is off");
    } else if engine.settings().redis_url.is_none() {
        tracing::info!(
            path = %engine.settings().server.state_file.display(),
            "without Redis, the admin API's changes are kept in the state file"
        );
    }
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            report(&format!(
                "cannot listen on {addr}: {e}{}",
                if e.kind() == std::io::ErrorKind::AddrInUse {
                    " (another process holds the port: stop it or pass --listen with another address)"
                } else {
                    ""
                }
            ));
            return EXIT_USAGE;
        }
    };
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| addr.to_string());
    tracing::info!(address = %local, "listening");
    report(&format!("listening on http://{local}"));
    match understudy_server::serve(listener, engine, shutdown_signal()).await {
        Ok(()) => 0,
        Err(e) => {
            report(&format!("server error: {e}"));
            EXIT_FAILED
        }
    }
}

/// Completes on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
    tracing::info!("shutting down");
}
