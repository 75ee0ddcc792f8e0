//! How a Bedrock request is authorized: a Bedrock API key (a bearer), or
//! a SigV4 signature with AWS keys — given in the settings or the
//! environment (they never change), or read from a profile of the shared
//! credentials file, which the provider's actor reads again when the file
//! changes (a `credential_process` or SSO login rewriting it), and at once
//! when Bedrock says the session token expired. A request never reads the
//! file itself (a file on a hung network mount would stall it): with no
//! keys held it waits for the actor's read at most the gate's bound.
//!
//! A profile that cannot be read does not fail the provider's start: its
//! status says why and names the profile, never the file (the status is
//! served to clients; the actor's log line names it), requests
//! pass the provider over, and the actor reads the file again on its
//! schedule, so that fixing it recovers the provider without a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use understudy_core::{BoxFuture, CredentialGate, CredentialStatus, Credentials};
use understudy_settings::{AwsCredentials, shown_key_id};
use understudy_types::{Failure, FailureKind};

use crate::sigv4;

/// How often the actor looks at the credentials file's modification time.
const FILE_CHECK: Duration = Duration::from_secs(30);

/// AWS keys a provider signs with, and where they come from.
pub(crate) struct AwsKeys {
    source: Source,
    held: RwLock<Option<Held>>,
    /// Why the file could not be read last, naming no file.
    error: Mutex<Option<String>>,
    /// How long a request waits for the actor's first read.
    gate: CredentialGate,
}

enum Source {
    /// Given once; `from` is `settings` or `environment`.
    Fixed {
        from: &'static str,
    },
    Profile {
        file: PathBuf,
        profile: String,
    },
}

struct Held {
    keys: Arc<sigv4::Credentials>,
    /// The file's modification time when they were read.
    modified: Option<SystemTime>,
}

impl std::fmt::Debug for AwsKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsKeys")
            .field("source", &self.status().source)
            .finish_non_exhaustive()
    }
}

impl AwsKeys {
    /// The keys the settings found; `None` when there are none (the
    /// provider then has a Bedrock API key).
    pub(crate) fn of(credentials: &AwsCredentials) -> Self {
        match credentials {
            AwsCredentials::Keys {
                access_key_id,
                secret_access_key,
                session_token,
                source,
            } => Self {
                source: Source::Fixed { from: source },
                held: RwLock::new(Some(Held {
                    keys: Arc::new(sigv4::Credentials {
                        access_key_id: access_key_id.clone(),
                        secret_access_key: secret_access_key.expose().to_owned(),
                        session_token: session_token.as_ref().map(|t| t.expose().to_owned()),
                    }),
                    modified: None,
                })),
                error: Mutex::new(None),
                gate: CredentialGate::default(),
            },
            AwsCredentials::Profile { file, profile } => Self {
                source: Source::Profile {
                    file: file.clone(),
                    profile: profile.clone(),
                },
                held: RwLock::new(None),
                error: Mutex::new(None),
                gate: CredentialGate::default(),
            },
        }
    }

    /// The keys to sign with now: the held ones, else (before the actor's
    /// first read, or after expired keys were dropped) the ones the actor
    /// reads, waited for at most the gate's bound. A request never reads
    /// the file itself: a file on a hung network mount would stall it.
    pub(crate) async fn current(&self) -> Result<Arc<sigv4::Credentials>, Failure> {
        if let Some(keys) = self.held() {
            return Ok(keys);
        }
        self.gate.ready(|| self.usable()).await;
        // Why not (a file, a profile) is the status's and the log's, not
        // the request's.
        self.held()
            .ok_or_else(|| Failure::new(FailureKind::Auth, "the AWS credentials could not be read"))
    }

    /// Bedrock said the session token expired: the held keys are dropped
    /// and the actor reads the file again (a request waiting for it at
    /// most the gate's bound). Whether other keys were found.
    pub(crate) async fn reload(&self) -> bool {
        if matches!(self.source, Source::Fixed { .. }) {
            return false;
        }
        let Some(before) = self.held() else {
            return false;
        };
        // The expired keys are not handed out again, unless another
        // request's reload already replaced them (one read for all).
        if let Ok(mut held) = self.held.write() {
            if held.as_ref().is_some_and(|h| Arc::ptr_eq(&h.keys, &before)) {
                *held = None;
            }
        }
        self.gate.ready(|| self.usable()).await;
        self.held().is_some_and(|after| {
            before.access_key_id != after.access_key_id
                || before.secret_access_key != after.secret_access_key
                || before.session_token != after.session_token
        })
    }

    /// The keys held now, if any.
    fn held(&self) -> Option<Arc<sigv4::Credentials>> {
        self.held
            .read()
            .ok()
            .and_then(|h| h.as_ref().map(|h| Arc::clone(&h.keys)))
    }

    /// Reads the profile from the file when the file changed since the
    /// held keys were read, or none are held. Only the actor's task calls
    /// it.
    fn read_file(&self) -> Result<(), String> {
        let Source::Profile { file, profile } = &self.source else {
            return Ok(());
        };
        let modified = std::fs::metadata(file).and_then(|m| m.modified()).ok();
        let unchanged = self
            .held
            .read()
            .ok()
            .and_then(|h| h.as_ref().map(|h| h.modified))
            .is_some_and(|m| m.is_some() && m == modified);
        if unchanged {
            return Ok(());
        }
        let result = read_profile(file, profile).map(|keys| {
            if let Ok(mut held) = self.held.write() {
                *held = Some(Held {
                    keys: Arc::new(keys),
                    modified,
                });
            }
        });
        if let Ok(mut error) = self.error.lock() {
            *error = result.as_ref().err().cloned();
        }
        result.map_err(|e| format!("{e} ({})", file.display()))
    }
}

impl Credentials for AwsKeys {
    fn refresh(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.read_file() })
    }

    fn refresh_in(&self) -> Option<Duration> {
        match self.source {
            Source::Fixed { .. } => None,
            Source::Profile { .. } => Some(FILE_CHECK),
        }
    }

    fn status(&self) -> CredentialStatus {
        let key = self
            .held
            .read()
            .ok()
            .and_then(|h| h.as_ref().map(|h| shown_key_id(&h.keys.access_key_id)));
        let place = match &self.source {
            Source::Fixed { from } => format!("AWS keys from the {from}"),
            Source::Profile { profile, .. } => format!("AWS profile `{profile}`"),
        };
        CredentialStatus {
            source: match key {
                Some(key) => format!("{place} ({key})"),
                None => place,
            },
            expires_at: None,
            error: self.error.lock().ok().and_then(|e| e.clone()),
        }
    }

    fn usable(&self) -> bool {
        self.held.read().is_ok_and(|h| h.is_some())
    }

    fn gate(&self) -> Option<&CredentialGate> {
        matches!(self.source, Source::Profile { .. }).then_some(&self.gate)
    }
}

/// The keys of `profile` in an AWS shared credentials file (INI: `[name]`
/// sections of `key = value`; `[profile name]` as the config file writes
/// it is taken too). Errors name the profile, never the file or a value.
pub(crate) fn read_profile(file: &Path, profile: &str) -> Result<sigv4::Credentials, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read the AWS credentials file: {}", e.kind()))?;
    let mut in_profile = false;
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = section.trim();
            let name = name.strip_prefix("profile ").map_or(name, str::trim);
            in_profile = name == profile;
            continue;
        }
        if !in_profile {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim().to_owned();
        match key.trim().to_ascii_lowercase().as_str() {
            "aws_access_key_id" => id = Some(value),
            "aws_secret_access_key" => secret = Some(value),
            "aws_session_token" => token = Some(value),
            _ => {}
        }
    }
    match (id, secret) {
        (Some(access_key_id), Some(secret_access_key))
            if !access_key_id.is_empty() && !secret_access_key.is_empty() =>
        {
            Ok(sigv4::Credentials {
                access_key_id,
                secret_access_key,
                session_token: token.filter(|t| !t.is_empty()),
            })
        }
        _ => Err(format!(
            "the AWS credentials file has no `aws_access_key_id` and `aws_secret_access_key` for profile `{profile}`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("credentials");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `keys` with the actor's part played: a read asked of the gate runs
    /// on a task of its own.
    fn with_reader(keys: AwsKeys) -> Arc<AwsKeys> {
        let keys = Arc::new(keys);
        let weak = Arc::downgrade(&keys);
        keys.gate.attach(Box::new(move || {
            let Some(keys) = weak.upgrade() else {
                return false;
            };
            tokio::spawn(async move {
                let read = keys.refresh().await;
                keys.gate.finish(read.is_ok());
            });
            true
        }));
        keys
    }

    /// A file on a mount that hangs: the actor's read takes a minute, the
    /// request waits for it no longer than the gate's bound, and the read,
    /// once done, serves the requests after it.
    #[tokio::test(start_paused = true)]
    async fn a_request_never_reads_the_file_on_its_own_task() {
        use understudy_core::credentials::CREDENTIAL_WAIT;
        let dir = std::env::temp_dir().join(format!("understudy-aws-hung-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = write(
            &dir,
            "[sim]\naws_access_key_id = AKIDHUNG\naws_secret_access_key = s0\n",
        );
        let keys = Arc::new(AwsKeys::of(&AwsCredentials::Profile {
            file: path,
            profile: "sim".into(),
        }));
        let weak = Arc::downgrade(&keys);
        keys.gate.attach(Box::new(move || {
            let Some(keys) = weak.upgrade() else {
                return false;
            };
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(60)).await;
                let read = keys.refresh().await;
                keys.gate.finish(read.is_ok());
            });
            true
        }));
        let asked = tokio::time::Instant::now();
        assert!(keys.current().await.is_err(), "the file was read at once");
        assert_eq!(asked.elapsed(), CREDENTIAL_WAIT);
        keys.gate.settled().await;
        let asked = tokio::time::Instant::now();
        assert_eq!(keys.current().await.unwrap().access_key_id, "AKIDHUNG");
        assert_eq!(asked.elapsed(), Duration::ZERO);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_profile_is_read_from_its_section_only() {
        let dir = std::env::temp_dir().join(format!("understudy-aws-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = write(
            &dir,
            "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = s0\n\n[profile prod]\n# comment\naws_access_key_id=AKIDPROD\naws_secret_access_key = s1 \naws_session_token = t1\n",
        );
        let prod = read_profile(&path, "prod").unwrap();
        assert_eq!(prod.access_key_id, "AKIDPROD");
        assert_eq!(prod.secret_access_key, "s1");
        assert_eq!(prod.session_token.as_deref(), Some("t1"));
        let default = read_profile(&path, "default").unwrap();
        assert_eq!(default.access_key_id, "AKIDDEFAULT");
        assert!(default.session_token.is_none());
        let err = read_profile(&path, "missing").unwrap_err();
        assert!(
            err.contains("profile `missing`") && !err.contains("s1"),
            "{err}"
        );

        // Keys that change on disk are found by the actor's refresh and by
        // a reload after an expired token.
        let keys = with_reader(AwsKeys::of(&AwsCredentials::Profile {
            file: path.clone(),
            profile: "prod".into(),
        }));
        assert_eq!(keys.current().await.unwrap().access_key_id, "AKIDPROD");
        assert!(!keys.reload().await, "the same keys are not new ones");
        write(
            &dir,
            "[prod]\naws_access_key_id = AKIDNEW\naws_secret_access_key = s2\n",
        );
        assert!(keys.reload().await);
        assert_eq!(keys.current().await.unwrap().access_key_id, "AKIDNEW");
        let status = keys.status();
        assert!(status.source.contains("profile `prod`") && status.source.contains("AKID…"));
        // Where the file is, is the log's: the status is served to clients.
        assert!(
            !status.source.contains(&*dir.to_string_lossy()),
            "{status:?}"
        );
        assert!(!format!("{keys:?} {status:?}").contains("s2"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
