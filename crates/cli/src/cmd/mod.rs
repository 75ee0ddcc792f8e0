//! The subcommands.

pub(crate) mod ask;
pub(crate) mod demo;
pub(crate) mod events;
pub(crate) mod providers;
pub(crate) mod reload;
pub(crate) mod serve;

use std::io::Write as _;
use std::path::Path;

use understudy_core::Engine;
use understudy_providers::Providers;
use understudy_settings::Settings;

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

/// Loads settings and starts the engine for one command, or says why not
/// and gives the exit status. Its prober does not run in the background
/// (`serve` is what keeps probing; `providers --check` probes once).
pub(crate) async fn engine(config: Option<&Path>) -> Result<Engine, u8> {
    engine_with(Settings::from_env(config), false).await
}

/// [`engine`] for `serve`: the prober runs as `[probe]` says; with the
/// settings file as read, for the reload's watcher.
pub(crate) async fn serving_engine(
    config: Option<&Path>,
) -> Result<(Engine, Option<reload::Loaded>), u8> {
    let (settings, loaded) = match reload::load(config) {
        Ok((settings, loaded)) => (Ok(settings), loaded),
        Err(e) => (Err(e), None),
    };
    Ok((engine_with(settings, true).await?, loaded))
}

async fn engine_with(
    settings: Result<Settings, understudy_settings::SettingsError>,
    serving: bool,
) -> Result<Engine, u8> {
    let mut settings = settings.map_err(|e| {
        report(&format!("configuration error: {e}"));
        EXIT_USAGE
    })?;
    settings.probe.enabled &= serving;
    let cannot_start = |e: understudy_types::Error| {
        report(&format!("cannot start the engine: {e}"));
        EXIT_FAILED
    };
    let sinks = understudy_otlp::sinks(&settings).map_err(cannot_start)?;
    Engine::start_with(settings, Providers::factory(), sinks)
        .await
        .map_err(cannot_start)
}

/// Starts logging to standard error. `RUST_LOG` overrides `default`; with
/// `json`, one JSON object per line. Every line a request prints names it
/// (`request_id`, from [`understudy_core::logctx`]).
pub(crate) fn init_logging(default: &str, json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder
            .json()
            .with_current_span(true)
            .event_format(WithRequestId {
                inner: tracing_subscriber::fmt::format()
                    .json()
                    .with_current_span(true),
                coloured: None,
                json: true,
            })
            .try_init()
    } else {
        builder.event_format(plain_with_request_id()).try_init()
    };
}

/// A log line with the request's id added: `request_id=…` before the line's
/// end, or a `"request_id"` member first in a JSON line.
struct WithRequestId<F> {
    inner: F,
    /// The same format in colour, for a writer that takes ANSI escapes (a
    /// terminal): the line is written to a buffer first, which would
    /// otherwise lose them.
    coloured: Option<F>,
    json: bool,
}

/// The plain (text) format with the request's id, coloured where the
/// writer takes it.
fn plain_with_request_id() -> WithRequestId<tracing_subscriber::fmt::format::Format> {
    WithRequestId {
        inner: tracing_subscriber::fmt::format().with_ansi(false),
        coloured: Some(tracing_subscriber::fmt::format().with_ansi(true)),
        json: false,
    }
}

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for WithRequestId<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let format = match &self.coloured {
            Some(coloured) if writer.has_ansi_escapes() => coloured,
            _ => &self.inner,
        };
        let Some(id) = understudy_core::logctx::request_id() else {
            return format.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        format.format_event(
            ctx,
            tracing_subscriber::fmt::format::Writer::new(&mut line),
            event,
        )?;
        let body = line.strip_suffix('\n').unwrap_or(&line);
        if self.json {
            let quoted = serde_json::to_string(&*id).map_err(|_| std::fmt::Error)?;
            match body.strip_prefix('{') {
                Some(rest) => writeln!(writer, "{{\"request_id\":{quoted},{rest}"),
                None => writeln!(writer, "{body}"),
            }
        } else {
            writeln!(writer, "{body} request_id={id}")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    /// What the subscriber wrote.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A line logged through the plain format with `ansi`, by a request
    /// (`req-7`) or not.
    async fn line(ansi: bool, in_request: bool) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(ansi)
            .with_writer(move || writer.clone())
            .event_format(super::plain_with_request_id())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        if in_request {
            understudy_core::logctx::scope(Arc::from("req-7"), async {
                tracing::warn!(provider = "groq", "request failed");
            })
            .await;
        } else {
            tracing::warn!("not a request's");
        }
        let bytes = captured
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[tokio::test]
    async fn a_request_s_lines_keep_their_colour_on_a_terminal() {
        let coloured = line(true, true).await;
        assert!(coloured.contains('\u{1b}'), "no ANSI escapes: {coloured:?}");
        assert!(
            coloured.trim_end().ends_with("request_id=req-7"),
            "{coloured:?}"
        );
        let outside = line(true, false).await;
        assert!(
            outside.contains('\u{1b}'),
            "a line outside a request: {outside:?}"
        );
        let plain = line(false, true).await;
        assert!(!plain.contains('\u{1b}'), "{plain:?}");
        assert!(plain.trim_end().ends_with("request_id=req-7"), "{plain:?}");
    }
}
