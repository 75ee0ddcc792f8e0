//! Counting a request's input tokens (`/v1/messages/count_tokens`) through
//! the same plan and breakers as a generation: the router plans it (targets
//! whose breaker is open are left out), each call is admitted by the
//! target's breaker and, for a half-open probe, the fleet's probe lock, and
//! its outcome is recorded. Only Anthropic targets can count; the first
//! that answers does. A count never forces a call past an open breaker:
//! with none admitted, the caller estimates.

use understudy_policy::decide::Call;
use understudy_types::attempt::AttemptKind;
use understudy_types::error::Error;

use crate::actor::provider::by_deadline;
use crate::run::Run;
use crate::run::call::lease;

/// The count and the provider that made it; `None` when no target could.
pub(crate) type CountResult = Result<Option<(u64, String)>, Error>;

impl Run {
    /// Counts on the caller's task; a caller that leaves drops the run,
    /// which stops the walk (and gives back a half-open probe the call in
    /// flight took).
    pub(crate) async fn count_tokens(mut self) -> CountResult {
        Ok(self.count().await)
    }

    /// Asks the plan's targets of the body's protocol in order, each past
    /// its breaker.
    async fn count(&mut self) -> Option<(u64, String)> {
        for idx in 0..self.plan.targets.len() {
            if self.plan.unsupported.get(idx).copied().flatten().is_some() {
                continue;
            }
            let target = self.plan.targets[idx].clone();
            let Some(p) = self.settings.providers.get(&*target.provider) else {
                continue;
            };
            // Only a target of the protocol the client wrote in can count
            // its body (Anthropic's count_tokens, Gemini's countTokens).
            if self.chat.native.as_ref().map(|n| n.kind) != Some(p.kind) {
                continue;
            }
            let name = p.name.clone();
            let call = Call {
                target: idx,
                kind: AttemptKind::Primary,
                force: false,
            };
            if !self.admit(call).await {
                continue;
            }
            let timeouts = self.timeouts(idx);
            let deadline = (crate::runtime_clock::now() + timeouts.attempt).min(self.deadline);
            let key = self.leases[idx]
                .pool
                .as_ref()
                .map_or(0, |pool| pool.any(crate::runtime_clock::now()));
            let counted =
                match lease(&mut self.leases[idx], &self.supervisor, &target.provider).await {
                    Ok(lease) => {
                        by_deadline(
                            &lease.actor,
                            deadline,
                            crate::runtime_clock::now(),
                            "no count",
                            lease.adapter_of(key).count_tokens(
                                &target.model,
                                &self.chat,
                                timeouts.connect,
                            ),
                        )
                        .await
                    }
                    Err(f) => Err(f),
                };
            match counted {
                Ok(Some(n)) => {
                    self.outcome(idx, Ok(()));
                    return Some((n, name));
                }
                // The adapter cannot count: no outcome to record.
                Ok(None) => self.release_held_probe(),
                Err(f) => {
                    self.outcome(idx, Err(f.code()));
                    tracing::info!(provider = %name, error = %f, "count_tokens failed; trying the next target");
                }
            }
        }
        None
    }
}
