//! A run's keys: which key of a pooled target a call goes to
//! (`policy::keys::choose`, through the engine's [`KeyPool`]s), and what
//! its outcome tells the pool and the decision machine. A target without a
//! pool takes none of this: no lookup beyond the pools' map, no
//! allocation.

use std::sync::Arc;
use std::time::Instant;

use understudy_policy::decide::{Call, Input};
use understudy_policy::key_choice::{Ask, Scope, scope};
use understudy_settings::Sticky;
use understudy_types::attempt::AttemptKind;
use understudy_types::failure::{Failure, FailureKind};
use understudy_types::ratelimit::RateLimits;

use crate::key_pools::{KeyInUse, KeyPool};
use crate::run::Run;
use crate::shared::unix_ms;

/// Where a call goes.
pub(crate) enum KeyChoice {
    /// The target has one key.
    Single,
    /// This key of its pool.
    Pooled(KeyInUse),
    /// Every key of its pool is out: the target is skipped, as behind an
    /// open breaker.
    None,
    /// Every key of its pool is out for a rate limit: the target is rate
    /// limited as a whole, without a call (this failure).
    RateLimited(Failure),
}

impl Run {
    /// The key `call` goes to.
    pub(crate) fn pick_key(&mut self, call: Call) -> KeyChoice {
        let Some(pool) = &self.leases[call.target].pool else {
            return KeyChoice::Single;
        };
        let pool = Arc::clone(pool);
        if self.keys_tried.len() < self.plan.targets.len() {
            self.keys_tried = vec![0; self.plan.targets.len()].into_boxed_slice();
        }
        let ask = Ask {
            tried: self.keys_tried[call.target],
            tokens: understudy_types::chat::estimate_tokens(&self.chat),
            sticky: (pool.sticky == Sticky::Conversation)
                .then(|| crate::affinity::session::hash_start(&self.chat, false)),
            last_resort: call.force || call.kind == AttemptKind::RateLimitRetry,
            draw: fastrand::f64(),
        };
        let now = crate::runtime_clock::now();
        match pool.pick(&ask, now) {
            Some(ticket) => {
                self.keys_tried[call.target] |= 1u64 << ticket.key().min(63);
                KeyChoice::Pooled(ticket)
            }
            None => match pool.rate_limited_until(now) {
                Some(until) => {
                    let wait = until.saturating_duration_since(now);
                    KeyChoice::RateLimited(Failure::new(
                        FailureKind::RateLimited {
                            retry_after: Some(wait),
                        },
                        format!(
                            "not called: every key of the pool is rate limited for {:.1} s",
                            wait.as_secs_f64()
                        ),
                    ))
                }
                None => KeyChoice::None,
            },
        }
    }

    /// Tells the pool how the call on `ticket` went (and the fleet when
    /// that took the key out), and says what the decision machine hears:
    /// a key's own failure with another key ready is `KeyFailed`.
    pub(crate) fn key_outcome(
        &self,
        idx: usize,
        ticket: Option<KeyInUse>,
        limits: Option<&RateLimits>,
        failure: Option<&Failure>,
    ) -> Option<Input> {
        let ticket = ticket?;
        let pool = Arc::clone(ticket.pool());
        let now = crate::runtime_clock::now();
        let kind = failure.map(|f| &f.kind);
        if let Some((key, until)) = ticket.end(limits, kind, now) {
            self.announce_out(&pool, key, until, kind);
        }
        let kind = kind?;
        let tried = self.keys_tried.get(idx).copied().unwrap_or(0);
        (scope(kind) == Scope::Key
            && pool.another(
                tried,
                understudy_types::chat::estimate_tokens(&self.chat),
                now,
            ))
        .then(|| Input::KeyFailed(kind.clone()))
    }

    /// Tells the fleet that a key is out (a rare path: boxed, spawned).
    fn announce_out(
        &self,
        pool: &Arc<KeyPool>,
        key: usize,
        until: Instant,
        kind: Option<&FailureKind>,
    ) {
        let (Some(shared), Some(id)) = (&self.wide.shared, pool.id(key)) else {
            return;
        };
        let shared = Arc::clone(shared);
        let provider = Arc::clone(&pool.provider);
        let id = Arc::clone(id);
        let code = kind.map_or("rate_limited", |k| k.code().as_str());
        let until_ms = unix_ms()
            + until
                .saturating_duration_since(crate::runtime_clock::now())
                .as_millis() as u64;
        tokio::spawn(async move { shared.publish_key_out(&provider, &id, until_ms, code).await });
    }
}
