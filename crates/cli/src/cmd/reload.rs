//! `understudy serve`'s configuration reload: the settings file is read
//! again on SIGHUP, and when it changes. A change is seen by polling the
//! file every [`POLL_EVERY`]: its resolved path (a Kubernetes ConfigMap
//! update swaps the `..data` symlink, so the path stays and its target
//! changes), modification time and size; when any of them moved (and
//! every [`HASH_EVERY`] polls whatever they say), the bytes are read and
//! hashed, and only new bytes are loaded. A poll of metadata costs one
//! `stat` chain: no watcher crate, no inotify limits, and it works the
//! same on a bind mount, a ConfigMap and an editor's rename-over save.
//!
//! A file that does not load leaves the configuration in force, is logged
//! at ERROR (the settings error names the TOML setting and line, never a
//! value that can be a secret) and counted; the same bytes are not tried
//! again until they change or a SIGHUP asks.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use understudy_core::{ConfigStamp, Engine};
use understudy_settings::{Settings, SettingsError};

/// How often the file's metadata is looked at: a change is in force
/// within this and a load.
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(250);

/// Every this many polls the bytes are hashed even when the metadata did
/// not move (5 s): a write in place that keeps the size, on a filesystem
/// whose modification times are coarse, is still seen.
const HASH_EVERY: u32 = 20;

/// The reload's task, stopped when this is dropped (when `serve` ends).
pub(crate) struct Watcher(tokio::task::JoinHandle<()>);

impl Drop for Watcher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The settings file `serve` started from, as it was read: what the
/// watcher compares the file with from then on.
pub(crate) struct Loaded {
    path: PathBuf,
    seen: Seen,
    /// The hash of the bytes the engine was built from (`None`: they
    /// could not be read here, and the first poll loads the file).
    tried: Option<[u8; 32]>,
}

/// The settings `serve` starts from (`config`, else `UNDERSTUDY_CONFIG`,
/// with the environment over it), and the file as read for them: a
/// change after this read is one the watcher puts in force.
pub(crate) fn load(config: Option<&Path>) -> Result<(Settings, Option<Loaded>), SettingsError> {
    let path = config
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("UNDERSTUDY_CONFIG").map(PathBuf::from));
    let Some(path) = path else {
        return Ok((Settings::from_env(config)?, None));
    };
    // Looked at before the read: a change in between moves the metadata,
    // and the first poll reads the file again.
    let seen = look_now(&path).ok();
    let text = std::fs::read(&path)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok());
    let Some(text) = text else {
        // Loaded the usual way, for its error (or the file that came).
        let settings = Settings::from_env(config)?;
        let (seen, tried) = (None, None);
        return Ok((settings, Some(Loaded { path, seen, tried })));
    };
    let tried = Some(understudy_settings::sha256(text.as_bytes()));
    let settings = Settings::from_file_text(&path, &text, |name| std::env::var(name).ok())?;
    Ok((settings, Some(Loaded { path, seen, tried })))
}

/// Starts reloading `engine`'s settings file (`loaded`, as [`load`] read
/// it) on SIGHUP and on change, and records the file in force now for
/// `/v1/status`.
pub(crate) fn watch(loaded: Option<Loaded>, engine: &Engine) -> Watcher {
    let file = loaded.map(|Loaded { path, seen, tried }| {
        if let Some(hash) = &tried {
            engine.set_config_stamp(stamp(hash));
        }
        File {
            path,
            seen,
            tried,
            unreadable: false,
        }
    });
    // Installed before `serve` listens: from here a SIGHUP no longer
    // ends the process (its default).
    let hangup = hangups();
    Watcher(tokio::spawn(run(file, hangup, engine.clone())))
}

/// What the last poll saw of the file: its resolved path, modification
/// time and size (`None`: it could not be looked at).
type Seen = Option<(PathBuf, Option<SystemTime>, u64)>;

/// The watcher's state: the file, what was last seen of it, and the hash
/// of the bytes last tried (loaded or not).
struct File {
    path: PathBuf,
    seen: Seen,
    tried: Option<[u8; 32]>,
    /// The file could not be looked at or read last time (said once, and
    /// once when it is back).
    unreadable: bool,
}

async fn run(file: Option<File>, mut hangup: Hangups, engine: Engine) {
    let Some(mut file) = file else {
        loop {
            hangup.recv().await;
            tracing::warn!(
                "SIGHUP: there is no configuration file to read again (--config or UNDERSTUDY_CONFIG)"
            );
        }
    };
    let mut polls = 0u32;
    loop {
        let forced = tokio::select! {
            () = hangup.recv() => true,
            () = tokio::time::sleep(POLL_EVERY) => false,
        };
        if forced {
            tracing::info!(path = %file.path.display(), "SIGHUP: reading the configuration file again");
        } else {
            polls = (polls + 1) % HASH_EVERY;
            let seen = match look(&file.path).await {
                Ok(seen) => Some(seen),
                Err(e) => {
                    // Looked at afresh when it is back.
                    file.seen = None;
                    file.unreadable(&engine, &format!("cannot look at it: {e}"));
                    continue;
                }
            };
            if seen == file.seen && polls != 0 {
                continue;
            }
            file.seen = seen;
        }
        file.load(&engine, forced).await;
    }
}

// === impl File ===

impl File {
    /// Reads the file and, when its bytes are new (or `forced`), puts them
    /// in force.
    async fn load(&mut self, engine: &Engine, forced: bool) {
        let bytes = match read(&self.path).await {
            Ok(bytes) => bytes,
            Err(e) => {
                let why = format!("cannot read it: {e}");
                if forced {
                    self.unreadable = true;
                    self.failed(engine, &why);
                } else {
                    self.unreadable(engine, &why);
                }
                return;
            }
        };
        if std::mem::take(&mut self.unreadable) {
            tracing::info!(path = %self.path.display(), "the configuration file can be read again");
        }
        let hash = understudy_settings::sha256(&bytes);
        if !forced && self.tried == Some(hash) {
            return;
        }
        self.tried = Some(hash);
        let Ok(text) = String::from_utf8(bytes) else {
            self.failed(engine, "it is not UTF-8 text");
            return;
        };
        let settings =
            match Settings::from_file_text(&self.path, &text, |name| std::env::var(name).ok()) {
                Ok(settings) => settings,
                Err(e) => {
                    self.failed(engine, &e.to_string());
                    return;
                }
            };
        match engine.reload(settings, stamp(&hash)).await {
            Ok(reloaded) => log_reloaded(&self.path, &reloaded, &hex(&hash)),
            Err(e) => {
                // Not these bytes' fault: they are tried again.
                self.tried = None;
                tracing::error!(
                    path = %self.path.display(),
                    error = %e,
                    "the configuration file was not put in force; the configuration in force stays"
                );
            }
        }
    }

    /// Logs and counts, once until it can be read again, a file that
    /// cannot be looked at or read (deleted, a directory in its place, a
    /// symlink loop).
    fn unreadable(&mut self, engine: &Engine, why: &str) {
        if !std::mem::replace(&mut self.unreadable, true) {
            self.failed(engine, why);
        }
    }

    /// Logs and counts a file that did not load. `why` is a settings
    /// error or an I/O one: neither quotes the file's values.
    fn failed(&self, engine: &Engine, why: &str) {
        engine.reload_failed();
        tracing::error!(
            path = %self.path.display(),
            error = %why,
            "the configuration file did not load; the configuration in force stays"
        );
    }
}

/// Logs what a reload did: INFO for the swap, WARN for each setting that
/// waits for a restart and for a stored routing that no longer fits.
fn log_reloaded(path: &Path, reloaded: &understudy_core::Reloaded, sha256: &str) {
    let p = &reloaded.providers;
    tracing::info!(
        path = %path.display(),
        sha256,
        added = ?p.added,
        removed = ?p.removed,
        rebuilt = ?p.rebuilt,
        "configuration reloaded"
    );
    for setting in &reloaded.restart_needed {
        tracing::warn!(
            setting = %setting,
            "this setting changed in the configuration file, but only a restart changes it; the rest was applied"
        );
    }
    match &reloaded.stored_routing {
        Some(Ok(())) => tracing::info!(
            "the admin API's stored routing is in force over the file's, as at start"
        ),
        Some(Err(why)) => tracing::warn!(
            error = %why,
            "the admin API's stored routing does not fit the reloaded providers; the file's routing is in force"
        ),
        None => {}
    }
}

/// The file's resolved path, modification time and size, following every
/// symlink (an error: it cannot be looked at now, or is not a file); off
/// the serving threads.
async fn look(path: &Path) -> std::io::Result<(PathBuf, Option<SystemTime>, u64)> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || look_now(&path))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

fn look_now(path: &Path) -> std::io::Result<(PathBuf, Option<SystemTime>, u64)> {
    let resolved = std::fs::canonicalize(path)?;
    let meta = std::fs::metadata(&resolved)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("it is not a file"));
    }
    Ok((resolved, meta.modified().ok(), meta.len()))
}

/// The file's bytes, read off the serving threads.
async fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || std::fs::read(path))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

/// The configuration stamp of bytes hashed `hash`, loaded now.
fn stamp(hash: &[u8; 32]) -> ConfigStamp {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    ConfigStamp {
        sha256: hex(hash),
        loaded_at: understudy_types::clock::rfc3339_of(now.as_secs(), now.subsec_millis()),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SIGHUPs as they come (on a platform without them, or when the handler
/// cannot be installed: none, and the file is still polled).
#[cfg(unix)]
struct Hangups(Option<tokio::signal::unix::Signal>);
#[cfg(not(unix))]
struct Hangups(Option<std::convert::Infallible>);

#[cfg(not(unix))]
fn hangups() -> Hangups {
    Hangups(None)
}

#[cfg(not(unix))]
impl Hangups {
    async fn recv(&mut self) {
        std::future::pending::<()>().await;
    }
}

#[cfg(unix)]
fn hangups() -> Hangups {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Hangups(Some(s)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; the configuration file is still watched");
            Hangups(None)
        }
    }
}

#[cfg(unix)]
impl Hangups {
    async fn recv(&mut self) {
        match &mut self.0 {
            Some(s) => {
                if s.recv().await.is_none() {
                    self.0 = None;
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watcher_starts_from_the_bytes_the_settings_came_from() {
        let dir =
            std::env::temp_dir().join(format!("understudy-reload-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("understudy.toml");
        let first = "[server]\nmax_parts = 7\n";
        std::fs::write(&path, first).unwrap();
        let (settings, loaded) = load(Some(&path)).unwrap();
        // A change after the read: the watcher's hash is still the one of
        // the bytes the settings came from, so the change is new to it.
        std::fs::write(&path, "[server]\nmax_parts = 8\n").unwrap();
        let loaded = loaded.unwrap();
        assert_eq!(settings.server.max_parts, 7);
        assert_eq!(
            loaded.tried,
            Some(understudy_settings::sha256(first.as_bytes()))
        );
        assert!(loaded.seen.is_some());
        // A file that cannot be read is left to the first poll.
        std::fs::remove_file(&path).unwrap();
        assert!(load(Some(&path)).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
