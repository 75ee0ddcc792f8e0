//! A non-streamed request: answer from the cache if it may, else execute
//! the decision machine's steps, then publish the event.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use understudy_policy::decide::{Call, Decider};
use understudy_policy::output;
use understudy_policy::softening::soften;
use understudy_types::attempt::{Attempt, AttemptKind, Outcome};
use understudy_types::chat::{ChatRequest, Completion};

use crate::actor::provider::by_deadline;
use crate::adapter::CallOptions;
use crate::cache::KeyContext;
use crate::event::{GenerationEvent, Taken};
use crate::generation::{GenerateResult, Generation};
use crate::run::call::lease;
use crate::run::walk::{Called, Caller, Path, ServedCall, Walked};
use crate::run::{Run, millis};

impl Run {
    /// The answer, from the cache or the plan, with its event published.
    /// Runs on the caller's task: a caller that leaves drops the run, which
    /// stops the walk (no further target is called for an answer nobody
    /// will read) and gives back a half-open probe the call in flight took.
    pub(crate) async fn answer(&mut self) -> GenerateResult {
        let started = self.started;
        let key = if self.use_cache && self.wide.cache.enabled() && !self.plan.targets.is_empty() {
            let ctx = KeyContext {
                api: self.api,
                route: &self.route_label,
                policy: self.rules.refusal,
                targets: &self.plan.targets,
                client: self.client,
            };
            self.wide.cache.key(&self.chat, &ctx)
        } else {
            None
        };
        if let Some(key) = key {
            if let Some(mut g) = Box::pin(self.wide.cache.get(key)).await {
                let ctx = self.take_event_context();
                g.request_id = ctx.request_id.clone();
                g.cached = true;
                g.attempts.clear();
                g.latency_ms = millis(crate::runtime_clock::since(started));
                let taken = self.taken(&mut g);
                let event = GenerationEvent::served(ctx, &g, taken, true, Some(0.0));
                self.publish(event);
                return Ok(g);
            }
        }
        let mut result = self.walk_to_answer().await;
        // Made after the walk, so that the walk's future does not hold it.
        let ctx = self.take_event_context();
        match &mut result {
            Ok(g) => {
                if let Some(key) = key {
                    self.wide.cache.put(key, g);
                }
                let cost = self.cost_of(&g.provider, &g.model, g.usage);
                let taken = self.taken(g);
                let event = GenerationEvent::served(ctx, g, taken, false, cost);
                self.publish(event);
            }
            Err(e) => self.publish(GenerationEvent::failed(
                ctx,
                e,
                false,
                millis(crate::runtime_clock::since(started)),
            )),
        }
        result
    }

    /// What an answer's event has of `g`: the provider's name shared with
    /// the plan; the attempts moved out when the request came through a
    /// front end, whose answers never show them (the neutral API and the
    /// engine's other callers answer with them: copied), and the model too
    /// when that front end's answer is the provider's body as it came.
    fn taken(&self, g: &mut Generation) -> Taken {
        let provider = self.shared_name(&g.provider);
        let (attempts, model) = match (self.api, &g.native) {
            (None, _) => (g.attempts.clone(), g.model.clone()),
            (Some(_), None) => (std::mem::take(&mut g.attempts), g.model.clone()),
            (Some(_), Some(_)) => (
                std::mem::take(&mut g.attempts),
                std::mem::take(&mut g.model),
            ),
        };
        Taken {
            provider,
            attempts,
            model,
        }
    }

    /// Executes the machine's steps until it stops.
    async fn walk_to_answer(&mut self) -> GenerateResult {
        let mut decider = self.decider();
        // The schema is compiled once for the whole walk (the engine already
        // refused a request whose schema does not compile).
        let path = Answering {
            expected: Arc::new(output::Expected::of(&self.chat)?),
        };
        let attempts: Vec<Attempt> = Vec::with_capacity(self.plan.targets.len() + 1);
        let walked = self.walk(&path, &mut Stays, &mut decider, attempts).await;
        self.note_choice(&decider);
        match walked {
            Walked::Served {
                served,
                target,
                attempts,
            } => {
                self.note_answer(&served);
                Ok(self.served(target, &decider, served, attempts))
            }
            Walked::Stopped(error) => Err(error),
            // An answer's caller that leaves drops the walk instead.
            Walked::Left => Err(understudy_types::Error::Engine("the caller left".into())),
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
        let provider = String::from(&*self.plan.targets[idx].provider);
        let fell_back = decider.is_fallback(idx);
        // Priced here only for the spend cap's meter (the event prices the
        // answer itself).
        if fell_back && self.wide.spend.is_some() {
            self.spent(
                fell_back,
                self.cost_of(&provider, &completion.model, completion.usage),
            );
        }
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

/// The answer path's part of the walk: a completion, checked against the
/// request's schema.
struct Answering {
    expected: Arc<output::Expected>,
}

/// An answer's caller: always there while the walk runs (one that leaves
/// drops the walk's future, and the walk with it).
struct Stays;

impl Caller for Stays {
    async fn wait(&mut self, wait: Duration) -> bool {
        tokio::time::sleep(wait).await;
        true
    }

    async fn unless_left<F: Future>(&mut self, step: F) -> Option<F::Output> {
        Some(step.await)
    }
}

impl Path for Answering {
    type Served = Completion;
    const UNSERVED: &'static str = "served without an answer";

    /// The request, or its softened retry.
    fn chat(&self, run: &mut Run, call: Call) -> Arc<ChatRequest> {
        if call.kind != AttemptKind::Softened {
            return Arc::clone(&run.chat);
        }
        let default_t = run.leases[call.target].provider.default_temperature;
        let softened = Arc::new(soften(&run.chat, default_t));
        run.note_softened(&softened);
        softened
    }

    async fn call(
        &self,
        run: &mut Run,
        call: Call,
        chat: Arc<ChatRequest>,
        key: usize,
        span: Option<[u8; 8]>,
    ) -> Called<Completion> {
        let idx = call.target;
        let timeouts = run.timeouts(idx);
        let started = crate::runtime_clock::now();
        let deadline = (started + timeouts.attempt).min(run.deadline);
        let mut limits = None;
        let mut options = run.call_options(idx, timeouts.connect, span);
        options.credit = run.credit_for(call, key);
        let result = match run.call(idx, key, &chat, deadline, &options).await {
            // An answer that breaks what the request asked for is this
            // target's failure, not an answer (checked off the serving
            // threads, within a budget).
            Ok(mut c) => {
                limits = c.rate_limits.take().map(|l| *l);
                output::normalize(&run.chat, &mut c);
                crate::run::validate::check(&self.expected, c).await
            }
            Err(f) => Err(f),
        };
        let latency = crate::runtime_clock::since(started);
        run.outcome(idx, result.as_ref().map(|_| ()).map_err(|f| f.code()));
        Called {
            result,
            limits,
            latency,
        }
    }

    fn call_owned(
        &self,
        kit: crate::run::walk::Kit,
    ) -> impl Future<Output = crate::run::walk::Owned<Completion>> {
        crate::run::hedge::answer_call(kit, Arc::clone(&self.expected))
    }

    /// An answer's attempt is recorded at once.
    fn served(&self, run: &Run, call: Call, c: &mut Completion, kept: ServedCall<'_>) {
        let mut record =
            run.attempt_record(call.target, call.kind, Outcome::Ok, kept.latency, None);
        record.key = kept.key;
        record.span_id = kept.span;
        record.fallback_credit = c.fallback_credit.map(|s| s.as_str().to_owned());
        kept.attempts.push(record);
    }
}
