//! The admin API's changes kept on disk when there is no Redis: the client
//! records it made (each key as its SHA-256, as the fleet keeps them) and
//! the routing table it last set, in one JSON file (`server.state_file`),
//! read at start so that a restart loses none of them.
//!
//! A change is kept before it is applied: the whole file is written to a
//! temporary file in the same directory, flushed to disk, then renamed
//! over the old one (and the directory flushed), so the file is always
//! either the old state or the new one. A change the file cannot take is
//! refused and not applied. A file that cannot be read at start stops the
//! start: records that exist only there would otherwise be lost silently.
//!
//! The file (format 1):
//! `{"understudy_state": 1, "clients": [record…], "routing": table | null}`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use understudy_settings::{ClientRecord, RoutingTable};

/// The format this version writes and reads.
const FORMAT: u32 = 1;

/// The state file and what it holds now.
pub struct StateFile {
    path: PathBuf,
    /// What the file holds; changed only after the file took the change.
    /// Held across the write, so that two changes never interleave.
    kept: tokio::sync::Mutex<Kept>,
}

/// What the state file holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Kept {
    /// The admin API's records.
    pub clients: Vec<ClientRecord>,
    /// The routing table the admin API last set (`None`: never set; the
    /// settings file's is in force).
    pub routing: Option<RoutingTable>,
}

/// Why the state file could not be read or written. Its message names the
/// file and the cause, never a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the state file {path}: {cause}")]
pub struct StateError {
    pub path: String,
    pub cause: String,
}

/// The file as JSON.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OnDisk {
    understudy_state: u32,
    clients: Vec<serde_json::Value>,
    routing: Option<RoutingTable>,
}

// === impl StateFile ===

impl StateFile {
    /// Reads the state file at `path` (none there: nothing kept yet).
    pub fn open(path: PathBuf) -> Result<(Self, Kept), StateError> {
        let kept = read(&path)?;
        let file = Self {
            path,
            kept: tokio::sync::Mutex::new(kept.clone()),
        };
        Ok((file, kept))
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The routing table the admin API last set, as the file holds it.
    pub async fn routing(&self) -> Option<RoutingTable> {
        self.kept.lock().await.routing.clone()
    }

    /// Keeps the admin API's records `clients` (the routing stays).
    pub async fn keep_clients(&self, clients: Vec<ClientRecord>) -> Result<(), StateError> {
        let mut kept = self.kept.lock().await;
        let next = Kept {
            clients,
            routing: kept.routing.clone(),
        };
        self.write(&next).await?;
        *kept = next;
        Ok(())
    }

    /// Keeps the routing table the admin API set (the records stay).
    pub async fn keep_routing(&self, routing: RoutingTable) -> Result<(), StateError> {
        let mut kept = self.kept.lock().await;
        let next = Kept {
            clients: kept.clients.clone(),
            routing: Some(routing),
        };
        self.write(&next).await?;
        *kept = next;
        Ok(())
    }

    /// Writes `kept` over the file, off the serving threads.
    async fn write(&self, kept: &Kept) -> Result<(), StateError> {
        let text = render(kept);
        let path = self.path.clone();
        let done = tokio::task::spawn_blocking(move || write_atomically(&path, text.as_bytes()))
            .await
            .unwrap_or_else(|e| Err(format!("the write stopped: {e}")));
        done.map_err(|cause| self.error(cause))
    }

    fn error(&self, cause: String) -> StateError {
        StateError {
            path: self.path.display().to_string(),
            cause,
        }
    }
}

impl std::fmt::Debug for StateFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The file's text for `kept`.
fn render(kept: &Kept) -> String {
    let disk = OnDisk {
        understudy_state: FORMAT,
        clients: kept
            .clients
            .iter()
            .map(super::fleet::stored_value)
            .collect(),
        routing: kept.routing.clone(),
    };
    let mut text = serde_json::to_string_pretty(&disk).unwrap_or_default();
    text.push('\n');
    text
}

/// What the file at `path` holds; nothing when there is no file.
fn read(path: &Path) -> Result<Kept, StateError> {
    let error = |cause: String| StateError {
        path: path.display().to_string(),
        cause,
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Kept::default()),
        Err(e) => return Err(error(format!("cannot be read: {e}"))),
    };
    parse(&text).map_err(error)
}

/// The state a file's `text` holds.
fn parse(text: &str) -> Result<Kept, String> {
    let disk: OnDisk = serde_json::from_str(text)
        .map_err(|e| format!("is not a state file Understudy wrote: {e}"))?;
    if disk.understudy_state != FORMAT {
        return Err(format!(
            "is of format {}; this version reads format {FORMAT}",
            disk.understudy_state
        ));
    }
    let mut clients = Vec::with_capacity(disk.clients.len());
    for (i, value) in disk.clients.into_iter().enumerate() {
        let record = super::fleet::read_stored_value(value)
            .ok_or_else(|| format!("its client record {i} cannot be read"))?;
        clients.push(record);
    }
    Ok(Kept {
        clients,
        routing: disk.routing,
    })
}

/// Replaces the file at `path` by `bytes`: a temporary file beside it,
/// flushed, renamed over it, and the directory flushed, so that a crash
/// leaves the old file or the new one, never a part.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("its directory cannot be made: {e}"))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "state".into());
    // Unique per write: two engines of one process (tests) never share one.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = dir.join(format!(".{name}.{}-{n}.tmp", std::process::id()));
    let written = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            // Key hashes are the operator's: not for other users to read.
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let mut file = options.open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)?;
        #[cfg(unix)]
        std::fs::File::open(&dir)?.sync_all()?;
        Ok::<(), std::io::Error>(())
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("cannot be written: {e}")
    })
}

#[cfg(test)]
mod tests {
    use understudy_settings::RawClient;

    use super::*;

    fn record(name: &str) -> ClientRecord {
        RawClient {
            name: Some(name.into()),
            key: Some(format!("sk-{name}-0123456789abcdef")),
            rpm: Some(5),
            budget_usd: Some(2.5),
            window: Some("day".into()),
            ..RawClient::default()
        }
        .read("", &|_| None)
        .unwrap()
    }

    fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("understudy-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[tokio::test]
    async fn what_is_kept_reads_back_and_holds_no_key() {
        let path = dir("kept").join("state.json");
        let (file, kept) = StateFile::open(path.clone()).unwrap();
        assert_eq!(kept, Kept::default(), "no file yet: nothing kept");
        file.keep_clients(vec![record("a"), record("b")])
            .await
            .unwrap();
        let table = RoutingTable {
            default: "groq".into(),
            order: vec!["groq".into(), "openai".into()],
            refusal_policy: understudy_types::RefusalPolicy::default(),
            routes: Default::default(),
        };
        file.keep_routing(table.clone()).await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("sk-a-"), "{text}");
        let (_, again) = StateFile::open(path.clone()).unwrap();
        assert_eq!(again.clients, vec![record("a"), record("b")]);
        assert_eq!(again.routing, Some(table));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, ["state.json"], "no temporary file left");
    }

    #[test]
    fn a_file_that_cannot_be_read_is_an_error_naming_it() {
        let cases = [
            ("{", "is not a state file"),
            ("[]", "is not a state file"),
            (
                r#"{"understudy_state": 2, "clients": [], "routing": null}"#,
                "format 2",
            ),
            (
                r#"{"understudy_state": 1, "clients": [{"name": "x"}], "routing": null}"#,
                "client record 0",
            ),
        ];
        let path = dir("bad").join("state.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        for (text, says) in cases {
            std::fs::write(&path, text).unwrap();
            let e = StateFile::open(path.clone()).unwrap_err();
            assert!(e.to_string().contains(says), "{text}: {e}");
            assert!(e.to_string().contains("state.json"), "{e}");
        }
    }

    #[tokio::test]
    async fn a_write_the_disk_refuses_changes_nothing() {
        let dir = dir("refused");
        let (file, _) = StateFile::open(dir.join("blocker").join("state.json")).unwrap();
        // The file's directory is a file now: nothing can be written there.
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("blocker"), "").unwrap();
        let e = file.keep_clients(vec![record("a")]).await.unwrap_err();
        assert!(e.cause.contains("cannot"), "{e}");
        assert_eq!(file.kept.lock().await.clients, Vec::new());
    }
}
