//! Reads the fleet's breakers and held-out pool keys from Redis into this
//! instance's breaker board and key pools (`understudy_fleet::shared`
//! keeps them there), every [`POLL_EVERY`].

use std::sync::Arc;
use std::time::Duration;

use understudy_fleet::shared::{POLL_EVERY, SharedState, unix_ms};
use understudy_types::target::Target;

use crate::breakers::BreakerBoard;
use crate::key_pools::{KeyPool, KeyPools, LivePools};

/// Reads the fleet's breakers every [`POLL_EVERY`] into the breaker board,
/// for every configured target whether or not its provider actor has
/// started, so that a target opened by any instance is skipped by every
/// instance within a poll, and a recovery seen by one is seen by all.
pub(crate) struct BreakerPoller {
    shared: Arc<SharedState>,
    board: Arc<BreakerBoard>,
    targets: Vec<Target>,
    was_open: Vec<bool>,
    /// The pools in force, and those the keys below are of.
    live: Arc<LivePools>,
    pools: KeyPools,
    /// Every pooled key: its pool, its place there, and (provider, id).
    keys: Vec<(Arc<KeyPool>, usize)>,
    key_ids: Vec<(Arc<str>, Arc<str>)>,
}

impl BreakerPoller {
    pub(crate) fn new(
        shared: Arc<SharedState>,
        board: Arc<BreakerBoard>,
        live: Arc<LivePools>,
    ) -> Self {
        let mut targets: Vec<Target> = board.configured().cloned().collect();
        targets.sort();
        let mut poller = Self {
            was_open: vec![false; targets.len()],
            shared,
            board,
            targets,
            pools: live.current(),
            live,
            keys: Vec::new(),
            key_ids: Vec::new(),
        };
        poller.list_keys();
        poller
    }

    /// Lists the keys of the pools in force (again after a reload).
    fn list_keys(&mut self) {
        self.keys = self
            .pools
            .iter()
            .flat_map(|p| (0..p.ids.len()).map(move |k| (Arc::clone(p), k)))
            .collect();
        self.key_ids = self
            .keys
            .iter()
            .map(|(p, k)| (Arc::clone(&p.provider), Arc::clone(&p.ids[*k])))
            .collect();
    }

    /// Reads the fleet's view once (bounded by [`understudy_fleet::shared::CALL_TIMEOUT`]; nothing
    /// changes while Redis is unreachable).
    pub(crate) async fn poll(&mut self) {
        let Some(open) = self.shared.open_targets(&self.targets).await else {
            return;
        };
        let now_ms = unix_ms();
        let now = crate::runtime_clock::now();
        for (i, (target, until)) in self.targets.iter().zip(open).enumerate() {
            match until {
                // Open: hold it open here too, until the same moment.
                Some(u) if u > now_ms => {
                    let until = now + Duration::from_millis(u - now_ms);
                    self.board.sync(target, Some(until), now);
                    self.was_open[i] = true;
                }
                // Lapsed: the fleet is probing it; nothing changes here.
                Some(_) => {}
                // Deleted by the instance that saw it recover.
                None => {
                    if self.was_open[i] {
                        self.board.sync(target, None, now);
                    }
                    self.was_open[i] = false;
                }
            }
        }
        self.poll_keys().await;
    }

    /// Holds out here every pooled key the fleet holds out.
    async fn poll_keys(&mut self) {
        let pools = self.live.current();
        if !pools.same(&self.pools) {
            self.pools = pools;
            self.list_keys();
        }
        if self.keys.is_empty() {
            return;
        }
        let Some(out) = self.shared.keys_out(&self.key_ids).await else {
            return;
        };
        let now_ms = unix_ms();
        let now = crate::runtime_clock::now();
        for ((pool, key), out) in self.keys.iter().zip(out) {
            if let Some((until_ms, code)) = out.filter(|(u, _)| *u > now_ms) {
                let code = understudy_types::failure::FailureCode::parse(&code)
                    .unwrap_or(understudy_types::failure::FailureCode::RateLimited);
                pool.sync(*key, now + Duration::from_millis(until_ms - now_ms), code);
            }
        }
    }

    /// Polls every [`POLL_EVERY`] until `stop` turns true.
    pub(crate) async fn run(mut self, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(POLL_EVERY) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            self.poll().await;
        }
    }
}

/// Every target this instance may call: each provider's default model and
/// every named route's targets.
pub(crate) fn configured_targets(settings: &understudy_settings::Settings) -> Vec<Target> {
    let mut out: Vec<Target> = settings
        .providers
        .values()
        .map(|p| Target::new(&p.name, &p.model))
        .collect();
    for targets in settings.routes.values() {
        out.extend(targets.iter().cloned());
    }
    out.sort();
    out.dedup();
    out
}
