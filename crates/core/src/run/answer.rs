//! A non-streamed request: answer from the cache if it may, else execute
//! the decision machine's steps, then publish the event.

use std::sync::Arc;
use std::time::{Duration, Instant};

use understudy_policy::decide::{Call, Decider, Input, Next};
use understudy_policy::output;
use understudy_policy::plan::Unavailable;
use understudy_policy::softening::soften;
use understudy_types::attempt::{Attempt, AttemptKind, Outcome};
use understudy_types::chat::{ChatRequest, Completion};

use crate::actor::provider::by_deadline;
use crate::adapter::CallOptions;
use crate::cache::KeyContext;
use crate::event::GenerationEvent;
use crate::generation::{GenerateResult, Generation};
use crate::keys::Ticket;
use crate::run::call::lease;
use crate::run::keys::KeyChoice;
use crate::run::{Run, cost_usd, millis};

impl Run {
    /// The answer, from the cache or the plan, with its event published.
    /// Runs on the caller's task: a caller that leaves drops the run, which
    /// stops the walk (no further target is called for an answer nobody
    /// will read) and gives back a half-open probe the call in flight took.
    pub(crate) async fn answer(&mut self) -> GenerateResult {
        let ctx = self.event_context();
        let started = self.started;
        let key = if self.use_cache && self.cache.enabled() && !self.plan.targets.is_empty() {
            let ctx = KeyContext {
                api: self.api,
                route: &self.route_label,
                policy: self.rules.refusal,
                targets: &self.plan.targets,
                client: self.client,
            };
            self.cache.key(&self.chat, &ctx)
        } else {
            None
        };
        if let Some(key) = key {
            if let Some(mut g) = Box::pin(self.cache.get(key)).await {
                g.request_id = ctx.request_id.clone();
                g.cached = true;
                g.attempts.clear();
                g.latency_ms = millis(crate::runtime_clock::since(started));
                self.publish(GenerationEvent::served(&ctx, &g, true, Some(0.0)));
                return Ok(g);
            }
        }
        let result = self.walk().await;
        match &result {
            Ok(g) => {
                if let Some(key) = key {
                    self.cache.put(key, g);
                }
                let cost = cost_usd(&self.settings, &g.provider, &g.model, g.usage);
                self.publish(GenerationEvent::served(&ctx, g, false, cost));
            }
            Err(e) => self.publish(GenerationEvent::failed(
                &ctx,
                e,
                false,
                millis(crate::runtime_clock::since(started)),
            )),
        }
        result
    }

    /// Executes the machine's steps until it stops.
    async fn walk(&mut self) -> GenerateResult {
        let mut decider = Decider::new(&self.plan, self.rules, self.deadline);
        // The schema is compiled once for the whole walk (the engine already
        // refused a request whose schema does not compile).
        let expected = Arc::new(output::Expected::of(&self.chat)?);
        let mut attempts: Vec<Attempt> = Vec::with_capacity(self.plan.targets.len() + 1);
        let mut answer: Option<Completion> = None;
        let mut input = Input::Start;
        loop {
            let next = decider.next(input, crate::runtime_clock::now(), fastrand::f64());
            input = match next {
                Next::Call(call) => {
                    self.attempt(call, &expected, &mut attempts, &mut answer)
                        .await
                }
                Next::Wait(wait, call) => {
                    tokio::time::sleep(wait).await;
                    self.attempt(call, &expected, &mut attempts, &mut answer)
                        .await
                }
                Next::Unsupported(call) => {
                    attempts.push(self.unsupported(call));
                    Input::Failed(understudy_types::FailureKind::Unsupported)
                }
                Next::CheckBudget => Input::Budget(self.budget_allows().await),
                Next::Served { target } => {
                    let Some(completion) = answer.take() else {
                        // Unreachable: `Served` follows a served attempt.
                        return Err(understudy_types::Error::Engine(
                            "served without an answer".into(),
                        ));
                    };
                    self.note_answer(&completion);
                    return Ok(self.served(target, &decider, completion, attempts));
                }
                Next::Stop(verdict) => return Err(self.error(verdict, attempts)),
            };
        }
    }

    /// Makes one call and records it (unless its breaker turned it away).
    async fn attempt(
        &mut self,
        call: Call,
        expected: &Arc<output::Expected>,
        attempts: &mut Vec<Attempt>,
        answer: &mut Option<Completion>,
    ) -> Input {
        let idx = call.target;
        let target = self.plan.targets[idx].clone();
        let chat = if call.kind == AttemptKind::Softened {
            let default_t = self
                .settings
                .providers
                .get(&*target.provider)
                .map_or(1.0, |p| p.default_temperature);
            let softened = Arc::new(soften(&self.chat, default_t));
            self.note_softened(&softened);
            softened
        } else {
            Arc::clone(&self.chat)
        };
        if !self.admit(call).await {
            self.note_skip(idx, Unavailable::BreakerOpen);
            return Input::Skipped;
        }
        let ticket = match self.pick_key(call) {
            KeyChoice::Single => None,
            KeyChoice::Pooled(ticket) => Some(ticket),
            KeyChoice::None => {
                self.release_held_probe();
                self.note_skip(idx, Unavailable::KeysOut);
                return Input::Skipped;
            }
            KeyChoice::RateLimited(failure) => {
                self.release_held_probe();
                attempts.push(self.attempt_record(
                    idx,
                    call.kind,
                    Outcome::Failed(failure.code()),
                    Duration::ZERO,
                    Some(&failure),
                ));
                return Input::Failed(failure.kind);
            }
        };
        let key = ticket.as_ref().map_or(0, Ticket::key);
        if !self.credentials_ready(idx, key).await {
            self.release_held_probe();
            self.note_skip(idx, Unavailable::Credentials);
            return Input::Skipped;
        }
        let timeouts = self.timeouts(idx);
        let started = crate::runtime_clock::now();
        let deadline = (started + timeouts.attempt).min(self.deadline);
        let mut limits = None;
        let span = self.attempt_span(idx);
        let options = self.call_options(idx, timeouts.connect, span);
        let result = match self.call(idx, key, &chat, deadline, &options).await {
            // An answer that breaks what the request asked for is this
            // target's failure, not an answer (checked off the serving
            // threads, within a budget).
            Ok(mut c) => {
                limits = c.rate_limits.take().map(|l| *l);
                output::normalize(&self.chat, &mut c);
                crate::run::validate::check(expected, c).await
            }
            Err(f) => Err(f),
        };
        let latency = crate::runtime_clock::since(started);
        self.outcome(idx, result.as_ref().map(|_| ()).map_err(|f| f.code()));
        let (outcome, failure) = match &result {
            Ok(_) => (Outcome::Ok, None),
            Err(f) => (Outcome::Failed(f.code()), Some(f)),
        };
        let mut record = self.attempt_record(idx, call.kind, outcome, latency, failure);
        record.key = ticket.as_ref().and_then(Ticket::name);
        record.span_id = span;
        attempts.push(record);
        let key_input = self.key_outcome(idx, ticket, limits.as_ref(), failure);
        match result {
            Ok(c) => {
                *answer = Some(c);
                Input::Served
            }
            Err(f) => key_input.unwrap_or(Input::Failed(f.kind)),
        }
    }

    /// Makes the attempt with the provider's adapter, on this task.
    async fn call(
        &mut self,
        idx: usize,
        key: usize,
        chat: &Arc<ChatRequest>,
        deadline: Instant,
        options: &CallOptions,
    ) -> Result<Completion, understudy_types::Failure> {
        self.calling(idx);
        let target = &self.plan.targets[idx];
        let lease = lease(&mut self.leases[idx], &self.supervisor, &target.provider).await?;
        let (adapter, in_flight) = lease.attempt(key);
        let started = crate::runtime_clock::now();
        let result = by_deadline(
            &lease.actor,
            deadline,
            started,
            "no answer",
            adapter.complete(&target.model, chat, options),
        )
        .await;
        in_flight.finish(
            result
                .as_ref()
                .map(|_| ())
                .map_err(understudy_types::Failure::code),
        );
        result
    }

    fn served(
        &self,
        idx: usize,
        decider: &Decider,
        completion: Completion,
        attempts: Vec<Attempt>,
    ) -> Generation {
        let provider = self.plan.targets[idx].provider.to_string();
        let fell_back = decider.is_fallback(idx);
        self.spent(
            fell_back,
            cost_usd(
                &self.settings,
                &provider,
                &completion.model,
                completion.usage,
            ),
        );
        Generation::from_completion(
            self.request_id.clone(),
            provider,
            completion,
            fell_back,
            decider.content_filtered(),
            attempts,
            millis(crate::runtime_clock::since(self.started)),
        )
    }
}
