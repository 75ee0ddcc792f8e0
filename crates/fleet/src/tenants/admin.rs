//! What the admin API does to client records: list, create (a made key
//! is shown once), update, revoke. With Redis the fleet's records are in
//! Redis: one script checks the name and the key against every record and
//! stores the change, then every instance reads it within a second.
//! Without Redis they are this instance's, kept in the state file
//! (`state.rs`) before they are applied. Either way one write at a time
//! per instance (check, store, apply), so an answer of 201 means the
//! record is kept, and two writes never both take one name or key.

use std::sync::Arc;

use serde::Serialize;
use understudy_settings::{ClientRecord, ClientView, RawClient, hex, new_client_key};

use super::Tenants;
use super::fleet::{Mode, Publish};
use crate::shared::SharedState;

/// Why an admin change of a record was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// The change clashes with what exists (409).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
    /// Redis is configured but unreachable (the change would reach this
    /// instance only), or the state file cannot take the change: it is not
    /// made (503).
    #[error("{0}")]
    Unavailable(String),
}

/// Where the admin API's changes are kept: `redis` (the fleet's) or
/// `state_file` (this instance's, over restarts).
pub type KeptIn = &'static str;

/// A record as `GET /v1/admin/clients` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct ClientListing {
    #[serde(flatten)]
    pub record: ClientView,
    /// `file` (`[[server.clients]]`, changed only there) or `admin`.
    pub source: &'static str,
    /// The counts last seen (the fleet's with Redis).
    pub usage: ClientUsage,
}

/// A record's counts as last seen.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ClientUsage {
    pub requests_this_minute: u64,
    pub tokens_this_minute: u64,
    pub spent_usd: f64,
}

/// A record made or changed, and its key when the gateway made it (shown
/// this once).
#[derive(Debug, Clone, Serialize)]
pub struct Saved {
    pub client: ClientView,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Where the record is kept ([`KeptIn`]).
    pub kept_in: KeptIn,
}

// === what the admin API does ===

impl Tenants {
    /// Every client record, the file's and the admin API's.
    pub fn list_clients(&self) -> Vec<ClientListing> {
        let tenants = self;
        tenants
            .list()
            .into_iter()
            .map(|r| ClientListing {
                source: if tenants.from_file(&r.name) {
                    "file"
                } else {
                    "admin"
                },
                usage: tenants.usage(&r),
                record: r.view(),
            })
            .collect()
    }

    /// Makes a record; without `key` or `key_sha256`, with a new key.
    pub async fn create_client(
        &self,
        shared: Option<&SharedState>,
        mut raw: RawClient,
    ) -> Result<Saved, AdminError> {
        let tenants = self;
        if !tenants.closed {
            return Err(AdminError::Conflict(
                "this gateway is open (no client keys): configure server.api_keys or \
                 [[server.clients]] before adding client records"
                    .into(),
            ));
        }
        let made = match (&raw.key, &raw.key_sha256) {
            (None, None) if raw.key_env.is_none() => {
                let key = new_client_key().ok_or_else(|| {
                    AdminError::Unavailable("the system's random source failed".into())
                })?;
                raw.key = Some(key.clone());
                Some(key)
            }
            _ => None,
        };
        let record = read(&raw)?;
        self.check_not_a_gateway_key(&record, &raw)?;
        let _one = self.writes.lock().await;
        if tenants.named(&record.name).is_some() {
            return Err(AdminError::Conflict(format!(
                "a client record named `{}` exists: PUT /v1/admin/clients/{} changes it",
                record.name, record.name
            )));
        }
        tenants.check_key_free(&record, None)?;
        self.save(
            shared,
            &record.name.clone(),
            Some(record.clone()),
            Mode::New,
        )
        .await?;
        Ok(Saved {
            client: record.view(),
            key: made,
            kept_in: self.kept_in(shared),
        })
    }

    /// Replaces the limits of the admin API's record `name`; its key stays
    /// unless the body gives `key` or `key_sha256`.
    pub async fn update_client(
        &self,
        shared: Option<&SharedState>,
        name: &str,
        mut raw: RawClient,
    ) -> Result<Saved, AdminError> {
        let tenants = self;
        let _one = self.writes.lock().await;
        let old = self.admin_record(name)?;
        if raw.name.as_deref().is_some_and(|n| n != name) {
            return Err(AdminError::Invalid {
                field: "name".into(),
                message: "a record's name is its path; make a new record to rename".into(),
            });
        }
        raw.name = Some(name.to_owned());
        if raw.key.is_none() && raw.key_sha256.is_none() && raw.key_env.is_none() {
            raw.key_sha256 = Some(hex(&old.key_sha256));
        }
        let record = read(&raw)?;
        self.check_not_a_gateway_key(&record, &raw)?;
        tenants.check_key_free(&record, Some(name))?;
        self.save(shared, name, Some(record.clone()), Mode::Change)
            .await?;
        Ok(Saved {
            client: record.view(),
            key: None,
            kept_in: self.kept_in(shared),
        })
    }

    /// Revokes the admin API's record `name`: its key is refused from the
    /// next request on (on every instance within a second).
    pub async fn delete_client(
        &self,
        shared: Option<&SharedState>,
        name: &str,
    ) -> Result<(), AdminError> {
        let _one = self.writes.lock().await;
        self.admin_record(name)?;
        self.save(shared, name, None, Mode::Delete).await
    }

    /// Where the admin API's changes are kept.
    pub fn kept_in(&self, shared: Option<&SharedState>) -> KeptIn {
        if shared.is_some() {
            "redis"
        } else {
            "state_file"
        }
    }

    fn admin_record(&self, name: &str) -> Result<Arc<ClientRecord>, AdminError> {
        let tenants = self;
        if tenants.from_file(name) {
            return Err(AdminError::Conflict(format!(
                "the client record `{name}` is defined in the settings file; change it there"
            )));
        }
        tenants
            .named(name)
            .ok_or_else(|| AdminError::NotFound(format!("no client record named `{name}`")))
    }

    /// Stores `record` under `name` (or removes it) for the fleet, or in
    /// the state file without Redis, then applies it here. The caller
    /// holds `writes`.
    async fn save(
        &self,
        shared: Option<&SharedState>,
        name: &str,
        record: Option<ClientRecord>,
        mode: Mode,
    ) -> Result<(), AdminError> {
        let tenants = self;
        let mut admin: Vec<ClientRecord> = tenants
            .admin_records()
            .into_iter()
            .filter(|r| &*r.name != name)
            .collect();
        admin.extend(record.clone());
        if let Some(shared) = shared {
            let published = super::fleet::publish_record(shared, name, record.as_ref(), mode).await;
            refused_by_fleet(published, name)?;
        } else if let Some(state) = &self.state {
            state.keep_clients(admin.clone()).await.map_err(|e| {
                tracing::error!(error = %e, "an admin change of client records was not kept");
                AdminError::Unavailable(format!("{e}; the change was not made"))
            })?;
        }
        tenants.set_admin_records(admin);
        Ok(())
    }
}

/// The admin error of what the fleet said of a write, if it refused it.
fn refused_by_fleet(published: Option<Publish>, name: &str) -> Result<(), AdminError> {
    match published {
        Some(Publish::Saved) => Ok(()),
        Some(Publish::NameTaken) => Err(AdminError::Conflict(format!(
            "a client record named `{name}` exists in the fleet"
        ))),
        Some(Publish::KeyTaken) => Err(AdminError::Conflict("the key is already in use".into())),
        Some(Publish::Gone) => Err(AdminError::NotFound(format!(
            "no client record named `{name}` (another instance revoked it)"
        ))),
        None => Err(AdminError::Unavailable(
            "Redis is unreachable: the change would reach this instance only, so it was not \
             made; try again"
                .into(),
        )),
    }
}

/// The record a body describes; the admin API takes no `key_env` (a
/// variable of one instance is not the fleet's).
fn read(raw: &RawClient) -> Result<ClientRecord, AdminError> {
    if raw.key_env.is_some() {
        return Err(AdminError::Invalid {
            field: "key_env".into(),
            message: "the admin API takes `key` or `key_sha256` (or neither, for a new key)".into(),
        });
    }
    raw.read("", &|_| None)
        .map_err(|(field, message)| AdminError::Invalid { field, message })
}

impl Tenants {
    /// Refuses a key another record (but `except`) already has (409).
    fn check_key_free(
        &self,
        record: &ClientRecord,
        except: Option<&str>,
    ) -> Result<(), AdminError> {
        let taken = self
            .list()
            .iter()
            .any(|r| r.key_sha256 == record.key_sha256 && Some(&*r.name) != except);
        if taken {
            return Err(AdminError::Conflict("the key is already in use".into()));
        }
        Ok(())
    }

    /// Refuses a record's key that is the admin token or one of
    /// `server.api_keys` (400): a client key must open nothing else.
    fn check_not_a_gateway_key(
        &self,
        record: &ClientRecord,
        raw: &RawClient,
    ) -> Result<(), AdminError> {
        let field = if raw.key_sha256.is_some() {
            "key_sha256"
        } else {
            "key"
        };
        let message = if self.admin == Some(record.key_sha256) {
            "a client key must not be the admin token"
        } else if self.plain.contains(&record.key_sha256) {
            "a client key must not be one of `server.api_keys` (those need no record)"
        } else {
            return Ok(());
        };
        Err(AdminError::Invalid {
            field: field.into(),
            message: message.into(),
        })
    }

    /// `record`'s counts as last seen.
    pub fn usage(&self, record: &ClientRecord) -> ClientUsage {
        let now_ms = crate::shared::unix_ms();
        let c = self.lock().get(&record.name).copied().unwrap_or_default();
        let minute = c.minute == now_ms / 60_000;
        let window = c.window == record.window.at(now_ms / 1000).0;
        ClientUsage {
            requests_this_minute: if minute { c.requests } else { 0 },
            tokens_this_minute: if minute { c.tokens } else { 0 },
            spent_usd: if window {
                c.spent_nanos as f64 / understudy_settings::NANOS_PER_USD
            } else {
                0.0
            },
        }
    }
}

/// Runs an admin write (check, store, apply) on a task of its own and waits
/// for it: a caller dropped mid-write (its client gone) cannot cut it
/// between keeping the change and applying it, which would leave what is
/// kept and what is in force disagreeing.
pub async fn whole<T, E>(write: impl Future<Output = Result<T, E>> + Send + 'static) -> Result<T, E>
where
    T: Send + 'static,
    E: Send + 'static + From<WriteStopped>,
{
    tokio::spawn(write)
        .await
        .unwrap_or_else(|e| Err(WriteStopped(e.to_string()).into()))
}

/// An admin write's task that ended without an answer (it panicked).
#[derive(Debug)]
pub struct WriteStopped(String);

impl From<WriteStopped> for understudy_types::error::Error {
    fn from(e: WriteStopped) -> Self {
        understudy_types::error::Error::Engine(format!(
            "the change stopped before its end: {}",
            e.0
        ))
    }
}

impl From<WriteStopped> for AdminError {
    fn from(e: WriteStopped) -> Self {
        Self::Unavailable(format!("the change stopped before its end: {}", e.0))
    }
}
