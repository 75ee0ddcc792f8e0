//! `understudy serve`: the HTTP API, and the shutdown signals that drain it.

use std::future::Future;
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
    let (engine, loaded) = match serving_engine(config).await {
        Ok(e) => e,
        Err(code) => return code,
    };
    let _reload = super::reload::watch(loaded, &engine);
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
    // Before "listening": a signal from then on drains.
    let (shutdown, stop_now) = shutdown_signals();
    tracing::info!(address = %local, "listening");
    report(&format!("listening on http://{local}"));
    match understudy_server::serve_until(listener, engine, shutdown, stop_now).await {
        Ok(()) => 0,
        Err(e) => {
            report(&format!("server error: {e}"));
            EXIT_FAILED
        }
    }
}

/// The shutdown signals (SIGTERM, SIGINT / Ctrl-C), counted from now on:
/// the first future completes on the first signal (the drain begins), the
/// second on the second (the drain is cut short).
fn shutdown_signals() -> (
    impl Future<Output = ()> + Send + 'static,
    impl Future<Output = ()> + Send + 'static,
) {
    let (count, counted) = tokio::sync::watch::channel(0u32);
    let mut signals = Signals::new();
    tokio::spawn(async move {
        loop {
            signals.next().await;
            count.send_modify(|n| *n += 1);
            if *count.borrow() >= 2 {
                return;
            }
        }
    });
    let (mut first, mut second) = (counted.clone(), counted);
    (
        async move {
            let _ = first.wait_for(|n| *n >= 1).await;
        },
        async move {
            let _ = second.wait_for(|n| *n >= 2).await;
        },
    )
}

/// SIGTERM and SIGINT, registered when made (a signal that comes after
/// it is never the default action, which would kill the process).
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let register = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::error!(error = %e, signal = name, "cannot listen for a shutdown signal");
                    None
                }
            };
            Self {
                term: register(SignalKind::terminate(), "SIGTERM"),
                int: register(SignalKind::interrupt(), "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// The next signal.
    async fn next(&mut self) {
        #[cfg(unix)]
        {
            let term = async {
                match &mut self.term {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            let int = async {
                match &mut self.int {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            let name = tokio::select! {
                _ = term => "SIGTERM",
                _ = int => "SIGINT",
            };
            tracing::info!(signal = name, "shutdown signal");
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!(signal = "Ctrl-C", "shutdown signal");
        }
    }
}
