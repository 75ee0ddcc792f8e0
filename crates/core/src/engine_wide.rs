//! [`EngineWide`]: the objects made once at the engine's start and fixed
//! for its life — the event bus, the response cache, the breaker board,
//! the key pools in force (a reload swaps them), the spend meter and the
//! fleet's shared state — held
//! apart from the router's view (which holds only what the router
//! changes), and handed to every run by the engine.

use std::sync::Arc;

use crate::breakers::BreakerBoard;
use crate::cache::ResponseCache;
use crate::key_pools::LivePools;
use crate::shared::SharedState;
use crate::sink::fanout::EventBus;
use crate::spend::SpendMeter;

/// The engine-wide objects every run shares (one `Arc` per run).
pub(crate) struct EngineWide {
    /// Where every run publishes its event.
    pub(crate) bus: Arc<EventBus>,
    pub(crate) cache: Arc<ResponseCache>,
    /// Every target's breaker: read inline to plan, shared with the runs
    /// and the fleet poller.
    pub(crate) board: Arc<BreakerBoard>,
    /// Every pooled provider's keys, as the last reload left them (a run
    /// takes its view's).
    pub(crate) pools: Arc<LivePools>,
    /// The fallback spend cap, when configured.
    pub(crate) spend: Option<Arc<SpendMeter>>,
    /// The fleet's shared state, when Redis is configured.
    pub(crate) shared: Option<Arc<SharedState>>,
    /// Each probed target's readiness: read inline to plan, written by
    /// the prober.
    pub(crate) ready: Arc<crate::probe::ReadyBoard>,
    /// The sessions' pins, unless `[affinity]` is off.
    pub(crate) affinity: Option<Arc<crate::affinity::Affinity>>,
}
