//! One request's run through its plan: the decision table of DESIGN §2 as
//! plain async code on a task of its own (spawned by the router, never run
//! inside a `handle`).

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use ractor::rpc::CallResult;
use tokio::time::Instant;

use crate::actor::provider::{AttemptError, ProviderMsg};
use crate::actor::supervisor::{EnsureError, SupervisorMsg};
use crate::cache::{CacheKey, ResponseCache};
use crate::chat::{ChatRequest, Completion, Usage};
use crate::error::{Error, Failure, FailureCode, FailureKind};
use crate::event::{EventContext, GenerationEvent};
use crate::generation::{Attempt, AttemptKind, GenerateResult, Generation, Outcome};
use crate::policy::backoff::rate_limit_wait;
use crate::policy::budget::SpendMeter;
use crate::policy::plan::{Plan, Target};
use crate::policy::refusal::RefusalPolicy;
use crate::policy::softening::soften;
use crate::settings::Settings;
use crate::shared::SharedState;
use crate::sink::fanout::EventBus;

/// How much longer than an attempt's own deadline the run waits for the
/// provider actor's reply before it counts the actor as gone.
const REPLY_GRACE: Duration = Duration::from_secs(1);

/// Everything one run needs; built by the router from its state.
pub(crate) struct Run {
    pub request_id: String,
    pub plan: Plan,
    pub chat: Arc<ChatRequest>,
    pub policy: RefusalPolicy,
    pub settings: Arc<Settings>,
    /// The provider actors the router knew of, aligned with `plan.targets`.
    pub actors: Vec<Option<ActorRef<ProviderMsg>>>,
    pub supervisor: ActorRef<SupervisorMsg>,
    pub started: Instant,
    /// `default`, a route name, or the pin, for events.
    pub route_label: String,
    pub bus: Arc<EventBus>,
    pub cache: Arc<ResponseCache>,
    /// Whether the response cache may answer this request.
    pub use_cache: bool,
    /// The fallback spend cap, when configured.
    pub spend: Option<Arc<SpendMeter>>,
    /// The fleet's shared state, when Redis is configured.
    pub shared: Option<Arc<SharedState>>,
    /// Only the primary may serve (and its own retries).
    pub no_fallback: bool,
    /// When the whole request must be over.
    pub deadline: Instant,
    /// The route's attempt timeout, which caps each provider's.
    pub attempt_cap: Option<Duration>,
}

/// What ended a step of the plan.
enum Step {
    Served(Completion),
    /// Move on to the next target.
    Next,
    /// Stop here with this error.
    Stop(Error),
}

struct Walk {
    run: Run,
    deadline: Instant,
    attempts: Vec<Attempt>,
    content_filtered: bool,
}

impl Run {
    /// Runs the plan (or answers from the cache), publishes the event, and
    /// returns the result.
    pub(crate) async fn execute(self) -> GenerateResult {
        let ctx = self.event_context();
        let bus = Arc::clone(&self.bus);
        let cache = Arc::clone(&self.cache);
        let started = self.started;
        let key = (self.use_cache && cache.enabled() && !self.plan.targets.is_empty())
            .then(|| CacheKey::new(&self.chat, &self.plan.targets, self.policy));
        if let Some(key) = key {
            if let Some(mut g) = cache.get(key).await {
                g.request_id = ctx.request_id.clone();
                g.cached = true;
                g.attempts.clear();
                g.latency_ms = millis(started.elapsed());
                bus.publish(GenerationEvent::served(&ctx, &g, true, Some(0.0)));
                return Ok(g);
            }
        }
        let settings = Arc::clone(&self.settings);
        let deadline = self.deadline;
        let mut walk = Walk {
            attempts: Vec::with_capacity(self.plan.targets.len() + 1),
            content_filtered: false,
            deadline,
            run: self,
        };
        let result = walk.go().await;
        match &result {
            Ok(g) => {
                if let Some(key) = key {
                    cache.put(key, g);
                }
                let cost = cost_usd(&settings, &g.provider, &g.model, g.usage);
                bus.publish(GenerationEvent::served(&ctx, g, false, cost));
            }
            Err(e) => bus.publish(GenerationEvent::failed(
                &ctx,
                e,
                false,
                millis(started.elapsed()),
            )),
        }
        result
    }

    /// For a half-open target in a fleet: whether this instance holds the
    /// one probe (always, without shared state or when Redis is down).
    pub(crate) async fn take_probe(&self, idx: usize) -> bool {
        match (&self.shared, self.plan.probes.get(idx)) {
            (Some(shared), Some(true)) => {
                shared
                    .try_probe(&self.plan.targets[idx], self.settings.breaker.cooldown)
                    .await
            }
            _ => true,
        }
    }

    pub(crate) fn event_context(&self) -> EventContext {
        EventContext {
            request_id: self.request_id.clone(),
            route: self.route_label.clone(),
            primary: self.plan.primary.provider.to_string(),
        }
    }
}

/// What `usage` cost at the provider's configured price, if it has one.
pub(crate) fn cost_usd(
    settings: &Settings,
    provider: &str,
    model: &str,
    usage: Option<Usage>,
) -> Option<f64> {
    let price = settings.providers.get(provider)?.price_of(model)?;
    let u = usage?;
    Some(
        (u.input_tokens as f64 * price.input_per_mtok
            + u.output_tokens as f64 * price.output_per_mtok)
            / 1_000_000.0,
    )
}

/// How one attempt went.
enum Tried {
    Served(Completion),
    Failed(Failure),
    /// The target's breaker did not admit the call; nothing was recorded.
    Skipped,
    /// The request deadline ran out.
    Deadline,
}

impl Walk {
    async fn go(&mut self) -> GenerateResult {
        if self.run.plan.targets.is_empty() {
            let why: Vec<String> = self
                .run
                .plan
                .skipped
                .iter()
                .map(|(t, why)| format!("{} ({})", t.provider, why.as_str()))
                .collect();
            return Err(Error::NoProviderAvailable(why.join(", ")));
        }
        for idx in 0..self.run.plan.targets.len() {
            let is_primary = self.run.plan.targets[idx] == self.run.plan.primary;
            let kind = if is_primary {
                AttemptKind::Primary
            } else {
                AttemptKind::Fallback
            };
            if kind == AttemptKind::Fallback {
                if self.run.no_fallback {
                    break;
                }
                if let Some(spend) = &self.run.spend {
                    if !spend.allows_fallback().await {
                        tracing::warn!(
                            spent = spend.spent_now(),
                            cap = spend.cap(),
                            "fallback budget spent: no fallback"
                        );
                        return Err(Error::FallbackBudgetExceeded {
                            attempts: std::mem::take(&mut self.attempts),
                        });
                    }
                }
            }
            let chat = Arc::clone(&self.run.chat);
            match self.step(idx, kind, chat).await {
                Step::Served(c) => return Ok(self.served(idx, c)),
                Step::Next => continue,
                Step::Stop(e) => return Err(e),
            }
        }
        if self.attempts.is_empty() {
            // Every target was skipped by its breaker mid-plan.
            return Err(Error::NoProviderAvailable(
                "every target's circuit breaker is open".into(),
            ));
        }
        Err(self.all_failed())
    }

    /// One target: the attempt, then the softened or rate-limit retry the
    /// decision table allows on the same target.
    async fn step(&mut self, idx: usize, kind: AttemptKind, chat: Arc<ChatRequest>) -> Step {
        let failure = match self.attempt(idx, kind, Arc::clone(&chat)).await {
            Tried::Served(c) => return Step::Served(c),
            Tried::Failed(f) => f,
            Tried::Skipped => return Step::Next,
            Tried::Deadline => return Step::Stop(self.deadline_exceeded()),
        };
        match failure.kind {
            FailureKind::ContentFilter => self.refused(idx, kind).await,
            FailureKind::RateLimited { retry_after } => {
                let Some(wait) =
                    rate_limit_wait(retry_after, self.run.settings.rate_limit_max_wait)
                else {
                    return Step::Next;
                };
                if Instant::now() + wait >= self.deadline {
                    return Step::Next;
                }
                tokio::time::sleep(wait).await;
                match self.attempt(idx, AttemptKind::RateLimitRetry, chat).await {
                    Tried::Served(c) => Step::Served(c),
                    Tried::Failed(f) if f.kind.is_refusal() => self.refused(idx, kind).await,
                    Tried::Failed(_) | Tried::Skipped => Step::Next,
                    Tried::Deadline => Step::Stop(self.deadline_exceeded()),
                }
            }
            // Outages, timeouts, auth, quota and bad requests: never the
            // same target again; the plan moves on.
            _ => Step::Next,
        }
    }

    /// A content filter refused on target `idx`, tried as `kind`.
    async fn refused(&mut self, idx: usize, kind: AttemptKind) -> Step {
        self.content_filtered = true;
        let policy = self.run.policy;
        if policy == RefusalPolicy::Surface {
            return Step::Stop(Error::Refused {
                attempts: std::mem::take(&mut self.attempts),
            });
        }
        // Only the primary earns the softened retry; a refusing fallback
        // simply hands over to the next one.
        if kind == AttemptKind::Primary && policy.softens() {
            let target = &self.run.plan.targets[idx];
            let default_t = self
                .run
                .settings
                .providers
                .get(&*target.provider)
                .map_or(1.0, |p| p.default_temperature);
            let softened = Arc::new(soften(&self.run.chat, default_t));
            match self.attempt(idx, AttemptKind::Softened, softened).await {
                Tried::Served(c) => return Step::Served(c),
                Tried::Deadline => return Step::Stop(self.deadline_exceeded()),
                Tried::Failed(_) | Tried::Skipped => {}
            }
        }
        if kind == AttemptKind::Primary && !policy.falls_back() {
            return Step::Stop(Error::Refused {
                attempts: std::mem::take(&mut self.attempts),
            });
        }
        Step::Next
    }

    /// Runs one attempt and records it (unless the breaker skipped it).
    async fn attempt(&mut self, idx: usize, kind: AttemptKind, chat: Arc<ChatRequest>) -> Tried {
        let target = self.run.plan.targets[idx].clone();
        let started = Instant::now();
        if started >= self.deadline {
            return Tried::Deadline;
        }
        let attempt_timeout = self
            .run
            .settings
            .providers
            .get(&*target.provider)
            .map_or(self.run.settings.timeouts.attempt, |p| p.timeouts.attempt)
            .min(self.run.attempt_cap.unwrap_or(Duration::MAX));
        let deadline = (started + attempt_timeout).min(self.deadline);
        let force = self.run.plan.forced && idx == 0;
        if !force && !self.run.take_probe(idx).await {
            return Tried::Skipped;
        }
        let result = match self.call(idx, &target, chat, deadline, force).await {
            Err(AttemptError::Skipped) => return Tried::Skipped,
            Err(AttemptError::Failed(f)) => Err(f),
            Ok(c) => Ok(c),
        };
        let latency = started.elapsed();
        let (outcome, detail) = match &result {
            Ok(_) => (Outcome::Ok, None),
            Err(f) => (Outcome::Failed(f.code()), Some(f.describe())),
        };
        self.attempts.push(Attempt {
            provider: target.provider.to_string(),
            model: target.model.to_string(),
            kind,
            outcome,
            latency_ms: millis(latency),
            detail,
        });
        match result {
            Ok(c) => Tried::Served(c),
            Err(f) if f.kind == FailureKind::Timeout && Instant::now() >= self.deadline => {
                Tried::Deadline
            }
            Err(f) => Tried::Failed(f),
        }
    }

    /// Sends the attempt to the provider's actor.
    async fn call(
        &mut self,
        idx: usize,
        target: &Target,
        chat: Arc<ChatRequest>,
        deadline: Instant,
        force: bool,
    ) -> Result<Completion, AttemptError> {
        let wait = deadline.saturating_duration_since(Instant::now()) + REPLY_GRACE;
        call_provider(
            &mut self.run.actors[idx],
            &self.run.supervisor,
            &target.provider,
            wait,
            |reply| ProviderMsg::Execute {
                model: Arc::clone(&target.model),
                request: Arc::clone(&chat),
                deadline,
                force,
                reply,
            },
        )
        .await
    }

    fn served(&mut self, idx: usize, completion: Completion) -> Generation {
        let provider = self.run.plan.targets[idx].provider.to_string();
        if self.run.plan.targets[idx] != self.run.plan.primary {
            if let (Some(spend), Some(cost)) = (
                &self.run.spend,
                cost_usd(
                    &self.run.settings,
                    &provider,
                    &completion.model,
                    completion.usage,
                ),
            ) {
                spend.add(cost);
            }
        }
        let fell_back = self.run.plan.targets[idx] != self.run.plan.primary;
        Generation::from_completion(
            self.run.request_id.clone(),
            provider,
            completion,
            fell_back,
            self.content_filtered,
            std::mem::take(&mut self.attempts),
            millis(self.run.started.elapsed()),
        )
    }

    fn all_failed(&mut self) -> Error {
        let attempts = std::mem::take(&mut self.attempts);
        let all_rate_limited = attempts
            .iter()
            .all(|a| a.outcome == Outcome::Failed(FailureCode::RateLimited));
        let code = match attempts.last() {
            _ if all_rate_limited => FailureCode::RateLimited,
            Some(Attempt {
                outcome: Outcome::Failed(code),
                ..
            }) => *code,
            _ => FailureCode::Unavailable,
        };
        Error::ProvidersFailed { code, attempts }
    }

    fn deadline_exceeded(&mut self) -> Error {
        Error::DeadlineExceeded {
            attempts: std::mem::take(&mut self.attempts),
        }
    }
}

/// Milliseconds with microsecond precision.
pub(crate) fn millis(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

/// Sends a message built by `make` to the provider's actor and waits up to
/// `wait` for the reply, starting the actor through the supervisor when
/// `slot` is empty. A stale ref (the actor died before the message went
/// out, so the provider never saw the request) is replaced once.
pub(crate) async fn call_provider<T: Send + 'static>(
    slot: &mut Option<ActorRef<ProviderMsg>>,
    supervisor: &ActorRef<SupervisorMsg>,
    provider: &Arc<str>,
    wait: Duration,
    mut make: impl FnMut(ractor::RpcReplyPort<Result<T, AttemptError>>) -> ProviderMsg,
) -> Result<T, AttemptError> {
    let failed = |kind, detail: &str| Err(AttemptError::Failed(Failure::new(kind, detail)));
    let mut fresh = false;
    loop {
        let actor = match slot {
            Some(a) => a.clone(),
            None => {
                fresh = true;
                let a = ensure(supervisor, provider)
                    .await
                    .map_err(AttemptError::Failed)?;
                *slot = Some(a.clone());
                a
            }
        };
        return match actor.call(&mut make, Some(wait)).await {
            Ok(CallResult::Success(result)) => result,
            Ok(CallResult::Timeout) => failed(
                FailureKind::Timeout,
                "the provider actor did not answer in time",
            ),
            Ok(CallResult::SenderError) => failed(
                FailureKind::Unavailable,
                "the provider actor stopped during the attempt",
            ),
            Err(_) if !fresh => {
                *slot = None;
                continue;
            }
            Err(_) => failed(
                FailureKind::Unavailable,
                "the provider actor is not running",
            ),
        };
    }
}

/// The provider's actor, started if needed.
async fn ensure(
    supervisor: &ActorRef<SupervisorMsg>,
    provider: &Arc<str>,
) -> Result<ActorRef<ProviderMsg>, Failure> {
    let asked = supervisor
        .call(
            |reply| SupervisorMsg::Ensure {
                provider: Arc::clone(provider),
                reply,
            },
            Some(Duration::from_secs(10)),
        )
        .await;
    match asked {
        Ok(CallResult::Success(Ok(actor))) => Ok(actor),
        Ok(CallResult::Success(Err(EnsureError::Unavailable(why)))) => {
            Err(Failure::new(FailureKind::Unavailable, why.as_str()))
        }
        Ok(CallResult::Success(Err(EnsureError::StartFailed(why)))) => Err(Failure::new(
            FailureKind::Unavailable,
            format!("provider failed to start: {why}"),
        )),
        _ => Err(Failure::new(
            FailureKind::Unavailable,
            "the supervisor is not running",
        )),
    }
}
