//! One request's run through its plan, on the caller's task (a stream's on
//! a task of its own, which outlives the call): thin executors of the decision machine
//! ([`understudy_policy::decide`]). They make the calls it asks for, wait where
//! it says, ask the spend meter when it asks, and report each outcome back;
//! they hold no policy of their own.
//!
//! - `walk.rs`: the walk through the plan and each attempt's sequence,
//!   written once for both paths (each path supplies its call).
//! - `answer.rs`: a non-streamed request (and the response cache).
//! - `stream/`: a streamed request: the walk to the commit, then the pump
//!   (`continuation.rs`: a cut stream continued on another target).
//! - `hedge.rs`: a hedged route's attempt: the backup started beside a
//!   silent call, the first to show output serving, the other cancelled.
//! - `credit.rs`: Anthropic's fallback credit, from a refusal to the next
//!   attempt on the same account.
//! - `key_choice.rs`: which key of a pooled target a call goes to, and what
//!   its outcome tells the pool.
//! - `prepare.rs`: a run planned from the router's published view.
//! - `caller.rs`: the routing a request asked for, where it may, and its
//!   event's note of it.
//! - `fit.rs`: the targets whose context window cannot hold the request
//!   left out of its plan, and a "too long" answer's next target.
//! - `session.rs`: the run's session: its pin looked up before planning,
//!   the switch cost the decision machine weighs, the pin moved to
//!   whoever served and the event's note.
//! - `count.rs`: counting input tokens (`count_tokens`) past the same
//!   breakers.
//! - `validate.rs`: an answer checked against the request's schema off
//!   the serving threads, within a time budget.
//! - `call.rs`: a provider's lease (its adapter and counts), asked of the
//!   supervisor when the router's view has none yet.
//!
//! What both share is here: the request's context ([`Run`]), admission
//! through the breaker board (and the fleet's probe lock), recording an
//! outcome on the board (and telling the fleet), the timeouts of a target,
//! and turning the machine's verdict into the request's [`Error`].

mod answer;
mod call;
mod caller;
mod count;
mod credit;
mod fit;
pub(crate) mod hedge;
mod key_choice;
mod prepare;
mod session;
mod validate;
mod walk;

mod stream;

pub(crate) use hedge::hedging;
pub(crate) use prepare::{prepare, route_prices};
pub(crate) use session::{Looked, RunAffinity};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ractor::ActorRef;
use understudy_policy::breaker::Admission;
use understudy_policy::decide::{Call, Rules, Verdict};
use understudy_policy::plan::{Plan, Unavailable};
use understudy_policy::timeouts::timeouts_for;
use understudy_settings::{Settings, TimeoutOverrides, Timeouts};
use understudy_types::attempt::{Attempt, AttemptKind, Outcome};
use understudy_types::chat::{ChatRequest, Usage};
use understudy_types::error::Error;
use understudy_types::failure::Failure;
use understudy_types::failure::FailureCode;

use crate::actor::provider::Lease;
use crate::actor::supervisor::SupervisorMsg;
use crate::adapter::{CallOptions, TraceHeaders};
use crate::breakers::Change;
use crate::engine_wide::EngineWide;
use crate::event::EventContext;
use crate::shared::unix_ms;
use crate::trace::notes::{Skip, TraceNotes};

/// Everything one run needs; planned from the router's published view.
pub(crate) struct Run {
    pub request_id: Arc<str>,
    pub plan: Plan,
    pub chat: Arc<ChatRequest>,
    /// The decision machine's settings, the mode (answer or stream) among
    /// them.
    pub rules: Rules,
    pub settings: Arc<Settings>,
    /// Per plan target: its provider's lease the router's view had (a
    /// missing one is asked of the supervisor), and its stats when it is a
    /// member of a group of the route.
    pub leases: Vec<Slot>,
    pub supervisor: ActorRef<SupervisorMsg>,
    pub started: Instant,
    /// `default`, a route name, or the pin, for events.
    pub route_label: String,
    /// The API the request came through, for events.
    pub api: Option<understudy_types::protocol::Protocol>,
    /// Hosted tools the front end left out, for events.
    pub omitted_tools: Vec<String>,
    /// The engine-wide objects: the event bus, the response cache, the
    /// breaker board, the key pools, the spend meter, the fleet's state.
    pub wide: Arc<EngineWide>,
    /// Whether the response cache may answer this request.
    pub use_cache: bool,
    /// The client key the request came with: its cache entries are its own.
    pub client: Option<crate::generation::ClientTag>,
    /// When the whole request must be over.
    pub deadline: Instant,
    /// The timeouts the request's route sets.
    pub route_timeouts: TimeoutOverrides,
    /// How a streamed request commits and whether a cut stream continues.
    pub streams: StreamRules,
    /// The target whose half-open probe this run holds until the call's
    /// outcome is recorded ([`NO_PROBE`] when none), so that a run that
    /// stops mid-call gives back only a probe it took.
    pub probe_held: AtomicUsize,
    /// Per plan target, the pool keys this request tried (bit `i`: key
    /// `i`); empty until a pooled target is called. A boxed slice, sized
    /// once: the run stays as small as it was before it had hedging.
    pub keys_tried: Box<[u64]>,
    /// The client record's admission, settled by the run's event.
    pub reservation: Option<crate::tenants::Reservation>,
    /// The request's trace, when traces are on.
    pub trace: Option<Arc<crate::trace::TraceContext>>,
    /// What its spans need beyond the event (a recorded trace only).
    pub notes: Option<Box<TraceNotes>>,
    /// The targets passed over when their turn came, in order (their
    /// place in the plan, and why): for the request's error when every
    /// target was, and for its event.
    pub passed_over: Vec<(usize, Unavailable)>,
    /// The request's session, on a route with a choice and affinity on.
    pub affinity: Option<Box<RunAffinity>>,
    /// A refusal's fallback credit, held for the next attempt on the same
    /// account (see `credit.rs`).
    pub credit: Option<Box<credit::Held>>,
    /// The route's hedging, when it or one of its groups sets `hedge`
    /// (see `hedge.rs`).
    pub hedge: Option<Box<hedge::Hedging>>,
}

/// One plan target's lease and, for a group's member, its stats (see
/// [`crate::actor::target_stats`]).
pub(crate) struct Slot {
    pub lease: Option<Lease>,
    pub stats: Option<Arc<crate::actor::target_stats::TargetStat>>,
    /// The target's key pool in the view the run was planned from (`None`:
    /// its provider has one key).
    pub pool: Option<Arc<crate::key_pools::KeyPool>>,
    /// This run counts in the target's requests in flight (given back when
    /// the call ends, or when the run is dropped).
    pub entered: bool,
    /// What the run reads of the target's provider, found once at the plan.
    pub provider: Provided,
}

/// What a run reads of one plan target's provider settings on each
/// attempt's path, found by name once when the run is planned: a lookup
/// by name compares the name with the map's names, and the attempt's path
/// would otherwise look the same provider up several times.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Provided {
    /// The provider's timeouts (the settings' where it is not configured).
    pub timeouts: Timeouts,
    /// The provider receives `traceparent`.
    pub forward_traceparent: bool,
    /// An Anthropic API provider (the Messages protocol, not on a cloud),
    /// whose refusals carry the fallback credit.
    pub takes_credit: bool,
    /// The temperature a softened retry falls back to.
    pub default_temperature: f32,
    /// The target's model's price: input and output per million tokens.
    pub price: Option<(f64, f64)>,
    /// The target accepts an assistant prefill (its protocol is Messages,
    /// or its model's capabilities say so).
    pub prefill: bool,
    /// The protocol a request for the target's model speaks.
    pub protocol: Option<understudy_types::protocol::Protocol>,
}

impl Provided {
    /// What the run reads of `provider` for `model` (`None`: a provider
    /// the settings do not have, read with the settings' defaults).
    pub(crate) fn of(
        provider: Option<&understudy_settings::ProviderSettings>,
        model: &str,
        settings: &Settings,
    ) -> Self {
        match provider {
            Some(p) => {
                let protocol = p.protocol_for(model);
                Self {
                    timeouts: p.timeouts,
                    forward_traceparent: p.forward_traceparent,
                    takes_credit: p.kind == understudy_types::protocol::Protocol::Messages
                        && p.platform == understudy_settings::Platform::Direct,
                    default_temperature: p.default_temperature,
                    price: p
                        .price_of(model)
                        .map(|p| (p.input_per_mtok, p.output_per_mtok)),
                    prefill: protocol == understudy_types::protocol::Protocol::Messages
                        || p.capabilities_of(model).assistant_prefill,
                    protocol: Some(protocol),
                }
            }
            None => Self {
                timeouts: settings.timeouts,
                forward_traceparent: false,
                takes_credit: false,
                default_temperature: 1.0,
                price: None,
                prefill: false,
                protocol: None,
            },
        }
    }
}

/// A streamed request's own rules (route settings, or the request's
/// headers).
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamRules {
    pub commit: understudy_settings::StreamCommit,
    pub continue_after_cut: bool,
}

impl Drop for Run {
    /// A run that stops before recording the outcome of a half-open probe
    /// it took (its caller left mid-call) gives the probe back, so the
    /// breaker is not left waiting for an outcome that never comes.
    fn drop(&mut self) {
        self.release_held_probe();
        for slot in &mut self.leases {
            slot.leave();
        }
    }
}

/// [`Run::probe_held`] when the run holds no probe.
pub(crate) const NO_PROBE: usize = usize::MAX;

// === impl Run ===

impl Run {
    pub(crate) fn event_context(&self) -> EventContext {
        EventContext {
            request_id: self.request_id.clone(),
            route: self.route_label.clone(),
            api: self.api,
            omitted_tools: self.omitted_tools.clone(),
            primary: Arc::clone(&self.plan.primary.provider),
        }
    }

    /// The provider `name` as the plan holds it (one of its targets'), or
    /// a new one where it holds none (a cached answer of another route).
    pub(crate) fn shared_name(&self, name: &str) -> Arc<str> {
        self.plan
            .targets
            .iter()
            .find(|t| *t.provider == *name)
            .map_or_else(|| Arc::from(name), |t| Arc::clone(&t.provider))
    }

    /// The event context of an answer's one event: the request's id, route
    /// label and omitted tools move out of the run (an answer's run reads
    /// them no more once its walk is over).
    pub(crate) fn take_event_context(&mut self) -> EventContext {
        EventContext {
            request_id: std::mem::take(&mut self.request_id),
            route: std::mem::take(&mut self.route_label),
            api: self.api,
            omitted_tools: std::mem::take(&mut self.omitted_tools),
            primary: Arc::clone(&self.plan.primary.provider),
        }
    }

    /// The timeouts for target `idx` of this request (its provider's as
    /// found at the plan, under the route's).
    fn timeouts(&self, idx: usize) -> Timeouts {
        timeouts_for(
            self.leases[idx].provider.timeouts,
            &self.route_timeouts,
            None,
        )
    }

    /// Whether `call` may go out: its breaker admits it (a forced call
    /// always goes), and a half-open probe also needs the fleet's one probe
    /// lock (always taken without shared state, or while Redis is down).
    async fn admit(&self, call: Call) -> bool {
        let target = &self.plan.targets[call.target];
        match self
            .wide
            .board
            .admit(target, crate::runtime_clock::now(), call.force)
        {
            Admission::Yes => true,
            Admission::No => false,
            Admission::Probe => {
                let taken = match &self.wide.shared {
                    // Boxed, like every Redis call on a run's way: a rare
                    // path must not enlarge the future of every request
                    // (it is moved, and held for every open stream).
                    Some(shared) if !call.force => {
                        Box::pin(shared.try_probe(target, self.settings.breaker.cooldown)).await
                    }
                    _ => true,
                };
                if taken {
                    self.probe_held.store(call.target, Ordering::Relaxed);
                } else {
                    self.wide
                        .board
                        .release_probe(target, crate::runtime_clock::now());
                }
                taken
            }
        }
    }

    /// Records how a call to target `idx` ended on the board and tells the
    /// fleet when the breaker changed. (The provider actor counts the
    /// attempts it ran itself; see [`Run::stream_ended`].)
    fn outcome(&self, idx: usize, outcome: Result<(), FailureCode>) {
        // The probe's outcome is recorded: it is no longer held.
        let _ =
            self.probe_held
                .compare_exchange(idx, NO_PROBE, Ordering::Relaxed, Ordering::Relaxed);
        let target = &self.plan.targets[idx];
        let change = self
            .wide
            .board
            .record(target, outcome, crate::runtime_clock::now());
        if let (Some(change), Some(shared)) = (change, &self.wide.shared) {
            let shared = Arc::clone(shared);
            let target = target.clone();
            match change {
                Change::Opened(until) => {
                    let until_ms = unix_ms()
                        + until
                            .saturating_duration_since(crate::runtime_clock::now())
                            .as_millis() as u64;
                    tokio::spawn(async move { shared.publish_open(&target, until_ms).await });
                }
                Change::Closed => {
                    tokio::spawn(async move { shared.publish_closed(&target).await });
                }
            }
        }
    }

    /// A stream that was opened has ended: record it on the board and in
    /// the provider's counts.
    fn stream_ended(&self, idx: usize, outcome: Result<(), FailureCode>, latency: Duration) {
        self.outcome(idx, outcome);
        if let Some(lease) = &self.leases[idx].lease {
            lease.end(outcome, latency);
        }
    }

    /// The record of one attempt on target `idx`.
    fn attempt_record(
        &self,
        idx: usize,
        kind: AttemptKind,
        outcome: Outcome,
        latency: Duration,
        failure: Option<&Failure>,
    ) -> Attempt {
        let target = &self.plan.targets[idx];
        Attempt {
            provider: Arc::clone(&target.provider),
            model: Arc::clone(&target.model),
            kind,
            outcome,
            latency_ms: millis(latency),
            detail: failure.map(Failure::describe),
            status: failure.and_then(|f| f.status),
            key: None,
            started_ms: millis(crate::runtime_clock::since(self.started).saturating_sub(latency)),
            span_id: None,
            fallback_credit: None,
        }
    }

    /// A span id for an attempt about to be made on target `idx`, when its
    /// span is recorded or its provider is told it (`traceparent`).
    fn attempt_span(&self, idx: usize) -> Option<[u8; 8]> {
        let trace = self.trace.as_ref()?;
        (trace.recording || self.forwards_trace(idx)).then(crate::trace::new_span_id)
    }

    /// Whether target `idx`'s provider receives `traceparent`.
    fn forwards_trace(&self, idx: usize) -> bool {
        self.leases[idx].provider.forward_traceparent
    }

    /// The options of a call to target `idx` made in span `span`: the
    /// target's connect timeout, and the trace context where its provider
    /// receives it.
    fn call_options(&self, idx: usize, connect: Duration, span: Option<[u8; 8]>) -> CallOptions {
        let trace = match (&self.trace, span) {
            (Some(ctx), Some(span)) if self.forwards_trace(idx) => Some(TraceHeaders {
                // An attempt's span that is not exported would be a parent
                // nobody sees: unrecorded, the caller's own span is passed
                // on, as an OpenTelemetry API without an SDK does.
                traceparent: ctx.traceparent_for(match ctx.parent {
                    Some(ref parent) if !ctx.recording => parent,
                    _ => &span,
                }),
                tracestate: ctx.state.clone(),
            }),
            _ => None,
        };
        CallOptions {
            connect,
            trace,
            credit: None,
        }
    }

    /// Notes (for a recorded trace) the serving answer.
    fn note_answer(&mut self, c: &understudy_types::chat::Completion) {
        self.note_served(
            c.response_id.as_deref(),
            &c.finish_reason,
            &c.text,
            &c.tool_calls,
        );
    }

    /// Notes (for a recorded trace) the serving answer's id, how it ended,
    /// and its content where content is captured.
    fn note_served(
        &mut self,
        response_id: Option<&str>,
        finish: &understudy_types::chat::FinishReason,
        text: &str,
        tool_calls: &[understudy_types::chat::ToolCall],
    ) {
        let Some(notes) = self.notes.as_mut() else {
            return;
        };
        notes.response_id = response_id.map(str::to_owned);
        notes.finish_reason = Some(finish.clone());
        if let Some(content) = notes.content.as_mut() {
            content.output = Some(crate::trace::notes::output(text, tool_calls, finish));
        }
    }

    /// Notes (for a recorded trace that captures content) the softened
    /// retry's system instructions.
    fn note_softened(&mut self, softened: &ChatRequest) {
        if let Some(content) = self.notes.as_mut().and_then(|n| n.content.as_mut()) {
            content.softened_system = softened
                .system
                .as_deref()
                .map(crate::trace::notes::instructions);
        }
    }

    /// Whether target `idx`'s credentials for key `key` are held, or come
    /// within the bound a request waits for them (a target whose lease
    /// cannot be had goes on to its call, which reports why).
    async fn credentials_ready(&mut self, idx: usize, key: usize) -> bool {
        let provider = Arc::clone(&self.plan.targets[idx].provider);
        match call::lease(&mut self.leases[idx], &self.supervisor, &provider).await {
            Ok(lease) => lease.credentials_ready(key).await,
            Err(_) => true,
        }
    }

    /// Notes that target `idx` was passed over: for the request's error
    /// (when every target was), and for a recorded trace.
    fn note_skip(&mut self, idx: usize, reason: Unavailable) {
        self.passed_over.push((idx, reason));
        let at_ms = millis(crate::runtime_clock::since(self.started));
        let target = &self.plan.targets[idx];
        if let Some(notes) = self.notes.as_mut() {
            notes.skips.push(Skip {
                provider: target.provider.to_string(),
                model: target.model.to_string(),
                reason,
                at_ms,
            });
        }
    }

    /// Every target this run passed over, in order: those the plan left
    /// out (an open breaker, a stopped provider; a missing key or adapter
    /// is configuration, not an event of this request), then those passed
    /// over when their turn came. Nothing is allocated when there are none.
    fn skipped_targets(&self) -> Vec<crate::event::SkippedTarget> {
        let skipped =
            |t: &understudy_types::target::Target, why: Unavailable| crate::event::SkippedTarget {
                provider: t.provider.to_string(),
                model: t.model.to_string(),
                reason: why.code().to_owned(),
            };
        self.plan
            .skipped
            .iter()
            .filter(|(_, why)| why.is_news())
            .map(|(t, why)| skipped(t, *why))
            .chain(
                self.passed_over
                    .iter()
                    .map(|&(idx, why)| skipped(&self.plan.targets[idx], why)),
            )
            .collect()
    }

    /// Gives back the half-open probe this run took, if its outcome was
    /// never recorded (the run stopped mid-call).
    fn release_held_probe(&self) {
        let idx = self.probe_held.swap(NO_PROBE, Ordering::Relaxed);
        if let Some(target) = self.plan.targets.get(idx) {
            self.wide
                .board
                .release_probe(target, crate::runtime_clock::now());
        }
    }

    /// The record of a target passed over for lacking a capability.
    fn unsupported(&self, call: Call) -> Attempt {
        let lacks = self
            .plan
            .unsupported
            .get(call.target)
            .copied()
            .flatten()
            .unwrap_or("a capability");
        let mut record = self.attempt_record(
            call.target,
            call.kind,
            Outcome::Failed(FailureCode::Unsupported),
            Duration::ZERO,
            None,
        );
        record.detail = Some(format!("not called: the target lacks {lacks}"));
        record
    }

    /// The request's error for the machine's verdict.
    fn error(&self, verdict: Verdict, attempts: Vec<Attempt>) -> Error {
        match verdict {
            Verdict::NoTargets => {
                let why: Vec<String> = self
                    .plan
                    .skipped
                    .iter()
                    .map(|(t, why)| format!("{} ({})", t.provider, why.as_str()))
                    .collect();
                Error::NoProviderAvailable(why.join(", "))
            }
            Verdict::AllSkipped => Error::NoProviderAvailable(self.all_skipped()),
            Verdict::Failed(code) => Error::ProvidersFailed { code, attempts },
            Verdict::Refused => Error::Refused { attempts },
            Verdict::BudgetSpent => {
                if let Some(spend) = &self.wide.spend {
                    tracing::warn!(
                        spent = spend.spent_now(),
                        cap = spend.cap(),
                        "fallback budget spent: no fallback"
                    );
                }
                Error::FallbackBudgetExceeded { attempts }
            }
            Verdict::Deadline => Error::DeadlineExceeded { attempts },
        }
    }

    /// Publishes the run's one event, named after the client's record, and
    /// settles the record's admission with what it used: the answer's usage;
    /// nothing when no provider answered or the cache did; the estimate
    /// when a provider was at work but the usage is not known (a stream cut
    /// after it committed, an answer without usage).
    fn publish(&mut self, mut event: crate::event::GenerationEvent) {
        if let Some(trace) = self.trace.as_ref().filter(|t| t.recording) {
            trace.end_now();
        }
        event.trace.clone_from(&self.trace);
        event.notes = self.notes.take();
        event.skipped = self.skipped_targets();
        event.balanced = self.plan.balanced;
        event.caller_routing = caller::note(
            &self.chat,
            &self.settings,
            self.reservation.as_ref().map(|r| &*r.record),
        );
        event.hedge = self.hedge.as_deref().and_then(|h| h.note(self));
        self.count_cache_tokens(&event);
        self.pin_served(&mut event);
        if let Some(reservation) = &self.reservation {
            use crate::tenants::Used;
            event.client = Some(reservation.client().to_string());
            // A hedge's losing call is the client's spend too.
            let (loser_tokens, loser_usd) = event.hedge.as_deref().map_or((0, 0.0), |h| {
                (h.loser_tokens, h.loser_cost_usd.unwrap_or(0.0))
            });
            let used = match event.usage {
                _ if event.cached => Used::Nothing,
                Some(u) => Used::Known {
                    tokens: u.input_tokens + u.output_tokens + loser_tokens,
                    cost_usd: event.cost_usd.unwrap_or(0.0) + loser_usd,
                },
                // Served, or committed and then cut: tokens went (the
                // reservation's estimate stands for them).
                None if event.provider.is_some() => Used::Unknown,
                // Nothing served, but a hedge's loser ran a while.
                None if loser_tokens > 0 => Used::Known {
                    tokens: loser_tokens,
                    cost_usd: loser_usd,
                },
                None => Used::Nothing,
            };
            reservation.settle(used);
        }
        self.wide.bus.publish(event);
    }

    /// Counts a served answer's prompt-cache tokens in its target's stats,
    /// when it is a group's member.
    fn count_cache_tokens(&self, event: &crate::event::GenerationEvent) {
        let (Some(usage), Some(provider), Some(model)) =
            (&event.usage, &event.provider, &event.model)
        else {
            return;
        };
        let served = self
            .plan
            .targets
            .iter()
            .zip(&self.leases)
            .find(|(t, slot)| {
                slot.stats.is_some() && *t.provider == **provider && *t.model == **model
            });
        if let Some((
            _,
            Slot {
                stats: Some(stats), ..
            },
        )) = served
        {
            stats.cache_tokens(usage);
        }
    }

    /// Tells the client's reservation that plan target `idx` is being
    /// called, at its price.
    fn calling(&self, idx: usize) {
        let Some(reservation) = &self.reservation else {
            return;
        };
        reservation.calling(self.leases[idx].provider.price);
    }

    /// Why every target was passed over: each reason met, in the order
    /// met (a breaker, a pool's keys, credentials).
    fn all_skipped(&self) -> String {
        let mut reasons: Vec<Unavailable> = Vec::new();
        for &(_, why) in &self.passed_over {
            if !reasons.contains(&why) {
                reasons.push(why);
            }
        }
        if reasons
            .iter()
            .any(|r| *r != Unavailable::BreakerOpen && *r != Unavailable::KeysOut)
        {
            let reasons: Vec<&str> = reasons.iter().map(|r| r.as_str()).collect();
            return format!("every target was passed over ({})", reasons.join(", "));
        }
        if !self.keys_tried.is_empty() || self.plan_has_pool() {
            "every target's circuit breaker is open or every key of its pool is out".into()
        } else {
            "every target's circuit breaker is open".into()
        }
    }

    /// Whether a target of the plan has a key pool.
    fn plan_has_pool(&self) -> bool {
        self.leases.iter().any(|slot| slot.pool.is_some())
    }

    /// Whether the spend cap allows another fallback now.
    async fn budget_allows(&self) -> bool {
        match &self.wide.spend {
            Some(spend) => Box::pin(spend.allows_fallback()).await,
            None => true,
        }
    }

    /// Adds what a fallback spent to the cap's meter.
    fn spent(&self, fell_back: bool, cost: Option<f64>) {
        if let (true, Some(spend), Some(cost)) = (fell_back, &self.wide.spend, cost) {
            spend.add(cost);
        }
    }
}

// === impl Slot ===

impl Slot {
    /// A call on this target starts (counted when it is a group's member).
    fn enter(&mut self) {
        if let (Some(stats), false) = (&self.stats, self.entered) {
            stats.enter();
            self.entered = true;
        }
    }

    /// The call this run counted in flight is over.
    fn leave(&mut self) {
        if let (Some(stats), true) = (&self.stats, self.entered) {
            stats.leave();
            self.entered = false;
        }
    }
}

impl Run {
    /// What `usage` of an answer from `provider`'s `model` cost: at the
    /// price found at the plan when a plan target is that model, else at
    /// the one looked up by name ([`cost_usd`]).
    pub(crate) fn cost_of(&self, provider: &str, model: &str, usage: Option<Usage>) -> Option<f64> {
        let planned = self
            .plan
            .targets
            .iter()
            .zip(&self.leases)
            .find(|(t, _)| *t.provider == *provider && *t.model == *model);
        match planned {
            Some((_, slot)) => priced(slot.provider.price?, usage?),
            None => cost_usd(&self.settings, provider, model, usage),
        }
    }
}

/// What `usage` cost at `price` (input, output per million tokens).
fn priced((input, output): (f64, f64), u: Usage) -> Option<f64> {
    Some((u.input_tokens as f64 * input + u.output_tokens as f64 * output) / 1_000_000.0)
}

/// What `usage` cost at the provider's configured price, if it has one.
pub(crate) fn cost_usd(
    settings: &Settings,
    provider: &str,
    model: &str,
    usage: Option<Usage>,
) -> Option<f64> {
    let price = settings.providers.get(provider)?.price_of(model)?;
    priced((price.input_per_mtok, price.output_per_mtok), usage?)
}

/// Milliseconds with microsecond precision.
pub(crate) fn millis(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}
