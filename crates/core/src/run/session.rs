//! A run's side of affinity: the session looked up before planning
//! ([`Looked`], handed to `run::prepare` for its pin), what leaving the pinned
//! target's cache would cost (weighed by the decision machine), and, when
//! the run publishes its event, the pin moved to the target that served
//! (a failover moves the session once; it stays there) with what the
//! event, the span and the status page say of it.

use understudy_policy::affinity::{
    CacheHints, CacheKind, Choice, Weigh, cache_ttl, rates, switch_cost_usd,
};
use understudy_policy::decide::{Decider, Mode};
use understudy_settings::AffinitySettings;
use understudy_types::RouteSelector;
use understudy_types::target::Target;

use crate::actor::router::View;
use crate::affinity::session::{SessionKey, SessionSource, session_of};
use crate::affinity::{Affinity, Found, Pin, PinWrite};
use crate::engine_wide::EngineWide;
use crate::event::{AffinityNote, GenerationEvent, TargetName};
use crate::generation::GenerateRequest;
use crate::run::Run;

/// A request's session and the pin found for it, before planning.
pub(crate) struct Looked {
    key: SessionKey,
    source: SessionSource,
    found: Found,
}

/// A run's session: what was found, what the decision machine weighed and
/// chose, and the fleet's write of the new pin (awaited by the engine
/// after an answer).
pub(crate) struct RunAffinity {
    key: SessionKey,
    source: SessionSource,
    pinned: Option<Pin>,
    expired: bool,
    /// The switch cost was weighed (on the pinned target's failure).
    weighed: bool,
    choice: Option<(Choice, f64)>,
    write: Option<PinWrite>,
    /// What the request's body says of its cache's lifetime.
    hints: CacheHints,
}

// === impl Looked ===

impl Looked {
    /// Whether `request`'s sessions are pinned: its route (the default or
    /// a named one, a pattern included) has a group of equivalent targets,
    /// or is one the settings opt in, has more than one target, and is not
    /// excepted. A pinned `provider:model` (the client's own choice, its
    /// fallbacks not equivalent) never is; a route with neither stops at a
    /// map lookup (the plain path).
    #[inline(never)] // named apart in callgrind (`cargo xtask bench routing-cost`)
    pub(crate) fn applies(
        view: &View,
        request: &GenerateRequest,
        settings: &AffinitySettings,
    ) -> bool {
        let (name, targets) = match &request.route {
            RouteSelector::Default => ("default", &view.default_route),
            RouteSelector::Named(n) | RouteSelector::Model(n) if n == "default" => {
                ("default", &view.default_route)
            }
            RouteSelector::Pin { .. } => return false,
            RouteSelector::Named(n) | RouteSelector::Model(n) => {
                // A route by its name: one lookup; else a client's model
                // name a pattern route matches.
                let found = match view.routes.get_key_value(n.as_str()) {
                    Some((name, targets)) => Some((name.as_str(), targets)),
                    None => understudy_policy::plan::route_name(&request.route, &view.routes)
                        .and_then(|name| Some((name, view.routes.get(name)?))),
                };
                let Some(found) = found else {
                    return false;
                };
                found
            }
        };
        targets.len() > 1
            && (view.groups.contains_key(name) || settings.routes.iter().any(|r| r == name))
            && !settings.except.iter().any(|e| e == name)
    }

    /// Looks `request`'s session up in `affinity`.
    pub(crate) async fn of(affinity: &Affinity, request: &GenerateRequest) -> Self {
        let (source, key) = session_of(request, affinity.settings.session_from_user);
        let found = affinity.find(&key, crate::runtime_clock::now()).await;
        Self { key, source, found }
    }

    /// Looks `request`'s session up in `affinity`'s pins in this process
    /// (when it has no Redis: [`Affinity::is_local`]), without a future.
    #[inline(never)] // named apart in callgrind (`cargo xtask bench routing-cost`)
    pub(crate) fn here(affinity: &Affinity, request: &GenerateRequest) -> Self {
        let (source, key) = session_of(request, affinity.settings.session_from_user);
        let found = affinity.find_here(&key, crate::runtime_clock::now());
        Self { key, source, found }
    }

    /// The target this session is pinned to, for the plan to put first.
    pub(crate) fn pinned(&self) -> Option<&Target> {
        self.found.pin.as_ref().map(|p| &p.target)
    }

    /// The run's session, made in `run::prepare` as the run is. What
    /// leaving the pinned target's cache would cost is weighed only when
    /// that target fails ([`Run::weigh_on_failure`]): a pinned target that
    /// serves, as most do, never looks its providers' rates up.
    #[inline(never)] // named apart in callgrind (`cargo xtask bench routing-cost`)
    pub(crate) fn into_run(self, chat: &understudy_types::ChatRequest) -> Box<RunAffinity> {
        Box::new(RunAffinity {
            key: self.key,
            source: self.source,
            pinned: self.found.pin,
            expired: self.found.expired,
            weighed: false,
            choice: None,
            write: None,
            hints: cache_hints(chat),
        })
    }
}

// === impl RunAffinity ===

impl RunAffinity {
    /// When `plan` put the pinned target first with another behind it, the
    /// cost of leaving its cache for the next target, for the decision
    /// machine.
    fn weigh(
        &self,
        plan: &understudy_policy::plan::Plan,
        settings: &understudy_settings::Settings,
        wide: &EngineWide,
    ) -> Option<Weigh> {
        let pin = self.pinned.as_ref()?;
        let first = plan.targets.first().filter(|t| **t == pin.target)?;
        let next = plan.targets.get(1)?;
        let affinity = wide.affinity.as_ref()?;
        let rates_of = |t: &Target| {
            let provider = settings.providers.get(&*t.provider)?;
            Some(rates(
                provider,
                &t.model,
                self.hints,
                affinity.settings.providers.get(&*t.provider),
            ))
        };
        Some(Weigh {
            switch_cost_usd: switch_cost_usd(pin.cached, rates_of(first)?, rates_of(next)?),
            wait_cost_per_second: affinity.settings.wait_cost_per_second,
        })
    }
}

/// What a request's body says of its cache's lifetime.
fn cache_hints(chat: &understudy_types::ChatRequest) -> CacheHints {
    chat.native
        .as_ref()
        .map_or_else(CacheHints::default, |n| CacheHints::of_native(n))
}

// === impl Run ===

impl Run {
    /// The run's decision machine.
    pub(crate) fn decider(&self) -> Decider {
        Decider::new(&self.plan, self.rules, self.deadline)
    }

    /// Before the machine hears that the walk's first target failed: when
    /// that target is the session's pin, the machine is told what leaving
    /// its cache costs (once), so that a wait it asks for is weighed. The
    /// machine weighs a wait only there, so telling it now is telling it
    /// from the start.
    pub(crate) fn weigh_on_failure(&mut self, decider: &mut Decider) {
        if decider.at() == 0 && self.affinity.is_some() {
            self.weigh_pinned(decider);
        }
    }

    /// [`Self::weigh_on_failure`] for a run with a session.
    #[inline(never)] // named apart in callgrind (`cargo xtask bench routing-cost`)
    fn weigh_pinned(&mut self, decider: &mut Decider) {
        let Some(a) = self.affinity.as_deref_mut() else {
            return;
        };
        if std::mem::replace(&mut a.weighed, true) {
            return;
        }
        if let Some(weigh) = a.weigh(&self.plan, &self.settings, &self.wide) {
            decider.weigh_switch(weigh);
        }
    }

    /// Keeps what the wait-or-switch rule chose, for the event.
    pub(crate) fn note_choice(&mut self, decider: &Decider) {
        if let Some(a) = self.affinity.as_deref_mut() {
            a.choice = decider.wait_or_switch();
        }
    }

    /// The fleet's write of the new pin, for the engine to await after an
    /// answer (a stream's is spawned).
    pub(crate) fn take_pin_write(&mut self) -> Option<PinWrite> {
        self.affinity.as_deref_mut()?.write.take()
    }

    /// The session's pin moved to whoever served `event` (refreshed when
    /// it was already there), and the event's affinity note.
    pub(crate) fn pin_served(&mut self, event: &mut GenerationEvent) {
        if let Some(a) = self.affinity.take() {
            self.pin_moved(a, event);
        }
    }

    /// [`Self::pin_served`] for a run with a session, `a`.
    #[inline(never)] // named apart in callgrind (`cargo xtask bench routing-cost`)
    fn pin_moved(&mut self, mut a: Box<RunAffinity>, event: &mut GenerationEvent) {
        let served = self.served_target(event);
        let outcome = match (&a.pinned, &served) {
            (_, None) => "none",
            (Some(p), Some(idx)) if p.target == self.plan.targets[*idx] => "hit",
            (Some(_), Some(_)) => "moved",
            (None, Some(_)) if a.expired => "expired",
            (None, Some(_)) => "new",
        };
        let mut note = AffinityNote {
            session: a.key.short(),
            source: a.source.as_str().into(),
            outcome: outcome.into(),
            pinned: a.pinned.as_ref().map(|p| TargetName(p.target.clone())),
            cached_tokens: a.pinned.as_ref().map_or(0, |p| p.cached),
            ttl_class: None,
            wait_or_switch: a.choice.map(|(c, _)| c.as_str().into()),
            switch_cost_usd: a.choice.map(|(_, usd)| usd),
        };
        if let (Some(idx), Some(affinity)) = (served, self.wide.affinity.as_ref()) {
            let (pin, ttl) = self.new_pin(affinity, idx, event, &a);
            note.cached_tokens = pin.cached;
            note.ttl_class = Some(pin.class.as_str().into());
            let write = affinity.keep(a.key, pin, ttl, crate::runtime_clock::now());
            match (write, self.rules.mode) {
                (Some(write), Mode::Stream) => {
                    tokio::spawn(write.write());
                }
                (Some(write), Mode::Answer) => a.write = Some(write),
                (None, _) => {}
            }
        }
        event.affinity = Some(Box::new(note));
        self.affinity = Some(a);
    }

    /// The place of the plan target that served `event` (none from the
    /// response cache, or when nobody did).
    fn served_target(&self, event: &GenerationEvent) -> Option<usize> {
        let provider = event.provider.as_deref().filter(|_| !event.cached)?;
        let model = event
            .attempts
            .iter()
            .rev()
            .find(|at| &*at.provider == provider)
            .map(|at| &*at.model);
        self.plan
            .targets
            .iter()
            .position(|t| *t.provider == *provider && model.is_none_or(|m| *t.model == *m))
    }

    /// The pin on plan target `idx` after `event`: the prefix its cache
    /// now holds (from the answer's usage; a refreshed pin without usage
    /// keeps what it held) and how long it holds it.
    fn new_pin(
        &self,
        affinity: &Affinity,
        idx: usize,
        event: &GenerationEvent,
        a: &RunAffinity,
    ) -> (Pin, std::time::Duration) {
        let before = a.pinned.as_ref();
        let target = self.plan.targets[idx].clone();
        let kind = self.leases[idx]
            .provider
            .protocol
            .map_or(CacheKind::OpenAi, CacheKind::of);
        let configured = affinity.settings.providers.get(&*target.provider);
        let (class, ttl) = cache_ttl(kind, a.hints, configured.and_then(|c| c.cache_ttl));
        let cached = match (event.usage, before) {
            (Some(usage), _) => kind.cached_prefix(&usage),
            (None, Some(p)) if p.target == target => p.cached,
            (None, _) => 0,
        };
        (
            Pin {
                target,
                cached,
                class,
            },
            ttl,
        )
    }
}
