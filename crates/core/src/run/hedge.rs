//! Hedging, on a route that sets `hedge` or has a group that does: when
//! the serving attempt has shown no output after the threshold (the
//! target's observed p95 time to first output, or a fixed duration), the
//! plan's next target starts too. A member of a group with its own `hedge`
//! hedges by the group's, and only when the next target is a member of
//! the same group (a group's members stand together in the plan); any
//! other target by the route's. The first of the two to show real output
//! — the stream's commit ([`understudy_policy::stream::Watch`]: never a
//! preamble), or a whole answer — serves; the other's future is dropped
//! at once, which closes its connection (the provider stops generating)
//! and leaves its breaker untouched. One that fails while the other runs is recorded as
//! a failed attempt and the other goes on; when both fail, the decision
//! machine goes on after the backup.
//!
//! Both calls of a hedge are made from what they need, owned ([`Kit`]),
//! so that the run stays free to admit the backup while the primary
//! runs. A run whose route (and its groups) does not hedge has no
//! [`Hedging`] and takes none of this: its attempt is made as before.
//!
//! A "too long" answer is kept: a backup whose known context window is
//! no larger than a window that refused is not started, and one running
//! beside a primary that answers "too long" is cancelled (it would answer
//! the same). When both calls fail after the primary's "too long", the
//! walk goes on as after any "too long": to a later target whose window
//! is larger than the primary's.
//!
//! The backup's admission (its breaker, the spend meter, its pool's keys,
//! its credentials: some may wait on Redis or a token fetch) runs while
//! the primary is polled: a primary that ends meanwhile is settled at
//! once, as if no hedge were due, and no backup is started.
//!
//! The backup is skipped (and counted so) when the route has hedged its
//! share of requests (one count per route, its groups' hedges included,
//! held to the `max_share` of the hedging that applies), its breaker is
//! open (or half-open: a hedge does not spend its probe), its pool's keys
//! are at their rate limit, or the fallback spend cap is reached.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use understudy_policy::breaker::Admission;
use understudy_policy::decide::{Call, Input, Mode};
use understudy_policy::hedge::{self, Outcome, Skip};
use understudy_policy::output;
use understudy_settings::{HedgeSettings, RouteGroup, RouteOptions};
use understudy_types::attempt::{Attempt, AttemptKind, Outcome as AttemptOutcome};
use understudy_types::chat::{ChatRequest, Completion};
use understudy_types::failure::{Failure, FailureKind};
use understudy_types::target::Target;

use crate::actor::provider::{Lease, by_deadline};
use crate::actor::router::View;
use crate::actor::target_stats::TargetStats;
use crate::adapter::BoxEventStream;
use crate::event::HedgeNote;
use crate::key_pools::KeyInUse;
use crate::run::key_choice::KeyChoice;
use crate::run::walk::{Called, Held, Kit, Owned, Path};
use crate::run::{Run, millis};

/// A hedged route's state in one run.
pub(crate) struct Hedging {
    /// The route's own hedging, for targets outside a hedging group.
    route: Option<HedgeSettings>,
    /// The members of the route's groups that set their own hedging (as
    /// resolved), each with its group's number and settings.
    members: Vec<(Target, usize, HedgeSettings)>,
    /// The route's share cap (see [`hedge::share_taken`]), and the share
    /// of the hedging that applied, once one was due.
    share: Arc<AtomicU64>,
    max_share_ppm: u32,
    /// How the hedge went, once one was due.
    outcome: Option<Outcome>,
    /// When the backup was due (ms after its primary started) and on
    /// which plan target.
    after_ms: f64,
    backup: usize,
    /// The losing call's estimated tokens and cost, once one lost.
    loser: Option<(u64, Option<f64>)>,
    /// The largest known window that answered "too long": no backup no
    /// larger is started.
    refused: Option<u32>,
    /// Both calls failed after the primary's "too long": the walk, at the
    /// backup (plan target), goes on past windows no larger than the
    /// primary's (the window, when known).
    too_long_at: Option<(usize, Option<u32>)>,
    /// The walk moved to the backup: the decision machine is told (with
    /// the primary's failure, when it failed rather than lost).
    pub moved: Option<(usize, Option<FailureKind>)>,
}

/// The run's hedging, when its route sets it or has a group that does
/// (`groups`: the route's groups, its targets as written and as resolved);
/// counts the request in the route's share.
pub(crate) fn hedging(
    stats: &TargetStats,
    route: Option<&str>,
    options: Option<&RouteOptions>,
    groups: Option<(&[RouteGroup], &[Target], &[Target])>,
) -> Option<Box<Hedging>> {
    let own = options.and_then(|o| o.hedge);
    let members = match groups {
        Some((groups, declared, resolved))
            if resolved.len() == declared.len() && groups.iter().any(|g| g.hedge.is_some()) =>
        {
            group_members(groups, resolved)
        }
        _ if own.is_none() => return None,
        _ => Vec::new(),
    };
    let share = Arc::clone(stats.hedge_share(route?)?);
    let _ = share.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
        Some(hedge::share_counted(w))
    });
    Some(Box::new(Hedging {
        route: own,
        members,
        share,
        max_share_ppm: 0,
        outcome: None,
        after_ms: 0.0,
        backup: 0,
        loser: None,
        refused: None,
        too_long_at: None,
        moved: None,
    }))
}

/// The members of the `groups` that hedge, from the route as `resolved`.
fn group_members(
    groups: &[RouteGroup],
    resolved: &[Target],
) -> Vec<(Target, usize, HedgeSettings)> {
    let mut members = Vec::new();
    for (n, g) in groups.iter().enumerate() {
        let (Some(settings), Some(targets)) =
            (g.hedge, resolved.get(g.start..g.start + g.weights.len()))
        else {
            continue;
        };
        members.extend(targets.iter().map(|t| (t.clone(), n, settings)));
    }
    members
}

/// The targets as written of hedged route `route` (`hedged`: the run
/// hedges and walks the route's own targets, not a caller's list).
pub(crate) fn declared<'v>(
    view: &'v View,
    route: Option<&str>,
    hedged: bool,
) -> Option<&'v Vec<Target>> {
    view.routes.get(route.filter(|_| hedged)?)
}

// === impl Hedging ===

impl Hedging {
    /// What the event says of the hedge, once one was due.
    pub(crate) fn note(&self, run: &Run) -> Option<Box<HedgeNote>> {
        let outcome = self.outcome?;
        let (loser_tokens, loser_cost_usd) = self.loser.unwrap_or_default();
        Some(Box::new(HedgeNote {
            outcome: Cow::Borrowed(outcome.as_str()),
            after_ms: self.after_ms,
            backup: run
                .plan
                .targets
                .get(self.backup)
                .map(ToString::to_string)
                .unwrap_or_default(),
            loser_cost_usd,
            loser_tokens,
        }))
    }

    /// The hedging that applies to a call on `serving` whose backup would
    /// be `next` (see [`hedge::applies`]).
    fn applies(&self, serving: &Target, next: &Target) -> Option<&HedgeSettings> {
        let group_of = |t: &Target| self.members.iter().find(|(m, ..)| m == t);
        hedge::applies(
            self.route.as_ref(),
            group_of(serving).map(|(_, n, s)| (*n, s)),
            group_of(next).map(|(_, n, _)| *n),
        )
    }

    /// Takes one hedge of the route's share, if it has one left.
    fn take_share(&self) -> bool {
        let max = self.max_share_ppm;
        self.share
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                hedge::share_taken(w, max)
            })
            .is_ok()
    }
}

// === impl Run ===

impl Run {
    /// One attempt on a hedged route: admitted as any, then made by
    /// [`Run::hedged`]; what the machine hears of it.
    pub(super) async fn hedged_attempt<P: Path>(
        &mut self,
        path: &P,
        call: Call,
        attempts: &mut Vec<Attempt>,
        served: &mut Option<P::Served>,
    ) -> Input {
        let (chat, held) = match self.admitted(path, call, attempts).await {
            Ok(admitted) => admitted,
            Err(input) => return input,
        };
        self.hedged(path, call, chat, held, attempts, served).await
    }

    /// Makes `call` (admitted, its key `held`) on a hedged route: alone
    /// until the hedge is due, then beside the backup; what the machine
    /// hears of it (of the backup, when the walk moved there).
    async fn hedged<P: Path>(
        &mut self,
        path: &P,
        call: Call,
        chat: Arc<ChatRequest>,
        held: Held,
        attempts: &mut Vec<Attempt>,
        served: &mut Option<P::Served>,
    ) -> Input {
        let idx = call.target;
        let due = self.hedge_due(call);
        let lease = self.leases[idx].lease.clone();
        let (Some((after, backup, max_share_ppm)), Some(lease)) = (due, lease) else {
            let called = path.call(self, call, chat, held.key, held.span).await;
            return self.settled(path, call, called, held, attempts, served);
        };
        let kit = self.kit(call, chat, &held, lease);
        self.calling(idx);
        let started = crate::runtime_clock::now();
        let mut primary = Box::pin(path.call_owned(kit));
        tokio::select! {
            biased;
            owned = &mut primary => {
                let called = self.board_after(idx, owned);
                return self.settled(path, call, called, held, attempts, served);
            }
            () = tokio::time::sleep(after) => {}
        }
        if let Some(h) = self.hedge.as_deref_mut() {
            h.after_ms = millis(after);
            h.backup = backup;
            h.max_share_ppm = max_share_ppm;
        }
        // The backup's admission may wait (the spend meter's Redis, a
        // token fetch): the primary is polled meanwhile, and one that
        // ends first is settled at once, no backup started.
        let admitted = tokio::select! {
            biased;
            owned = &mut primary => Err(owned),
            admitted = self.start_backup(backup) => Ok(admitted),
        };
        let admitted = match admitted {
            Ok(admitted) => admitted,
            Err(owned) => {
                let called = self.board_after(idx, owned);
                if called.result.is_ok() {
                    // The hedge was due and its share taken: the primary
                    // won it before the backup started.
                    self.hedge_outcome(Outcome::WonPrimary);
                }
                return self.settled(path, call, called, held, attempts, served);
            }
        };
        let (bcall, bheld, bkit) = match admitted {
            Ok(started) => started,
            Err(skip) => {
                self.hedge_outcome(Outcome::Skipped(skip));
                let called = self.board_after(idx, primary.await);
                return self.settled(path, call, called, held, attempts, served);
            }
        };
        let race = Race {
            primary: Runner {
                call,
                held,
                started,
                future: Some(primary),
            },
            backup: Runner {
                call: bcall,
                held: bheld,
                started: crate::runtime_clock::now(),
                future: Some(Box::pin(path.call_owned(bkit))),
            },
        };
        self.race(path, race, attempts, served).await
    }

    /// Runs both calls of a hedge until one shows output (it serves, the
    /// other is cancelled) or both fail.
    async fn race<P: Path, F: Future<Output = Owned<P::Served>>>(
        &mut self,
        path: &P,
        mut race: Race<F>,
        attempts: &mut Vec<Attempt>,
        served: &mut Option<P::Served>,
    ) -> Input {
        let mut primary_failed: Option<FailureKind> = None;
        let mut backup_failed: Option<Input> = None;
        loop {
            let (is_backup, owned) = race.next().await;
            let runner = if is_backup {
                &mut race.backup
            } else {
                &mut race.primary
            };
            let call = runner.call;
            let held = std::mem::replace(&mut runner.held, Held::NONE);
            let called = self.board_after(call.target, owned);
            let failure = called.result.as_ref().err().map(|f| f.kind.clone());
            if failure.is_none() {
                // Served: the other is cancelled at once (and recorded
                // first: a served stream's attempt is recorded when it
                // ends).
                let lost = if is_backup {
                    &mut race.primary
                } else {
                    &mut race.backup
                };
                if lost.future.take().is_some() {
                    // When the backup won, the primary lost.
                    self.cancelled(lost, is_backup, LOST, attempts);
                }
            }
            let input = self.settled(path, call, called, held, attempts, served);
            let Some(kind) = failure else {
                let won = if is_backup {
                    Outcome::WonBackup
                } else {
                    Outcome::WonPrimary
                };
                self.hedge_outcome(won);
                if is_backup {
                    self.hedge_moved(call.target, primary_failed.take());
                }
                return input;
            };
            if is_backup {
                backup_failed = Some(input);
            } else {
                if kind == FailureKind::ContextLength {
                    let primary = race.primary.call.target;
                    self.primary_too_long(primary, &mut race.backup, attempts);
                }
                primary_failed = Some(kind);
            }
            if race.primary.future.is_none() && race.backup.future.is_none() {
                self.hedge_outcome(Outcome::Failed);
                let too_long = primary_failed == Some(FailureKind::ContextLength);
                let backup = race.backup.call.target;
                self.hedge_moved(backup, primary_failed.take());
                if too_long {
                    // On as after the primary's "too long" (see
                    // `Run::hedge_windows`), not to the plain next.
                    let refused = self.window_of(race.primary.call.target);
                    if let Some(h) = self.hedge.as_deref_mut() {
                        h.too_long_at = Some((backup, refused));
                    }
                    return Input::Failed(FailureKind::ContextLength);
                }
                return backup_failed.unwrap_or(Input::Failed(FailureKind::Unavailable {
                    retry_after: None,
                }));
            }
        }
    }

    /// Whether a hedge is due for `call`: after how long, on which plan
    /// target (the next one), and the share cap of the hedging that
    /// applies. Once per request, for a primary or a fallback call whose
    /// next target may be called.
    fn hedge_due(&self, call: Call) -> Option<(Duration, usize, u32)> {
        let h = self.hedge.as_deref()?;
        if h.outcome.is_some() || !matches!(call.kind, AttemptKind::Primary | AttemptKind::Fallback)
        {
            return None;
        }
        let backup = call.target + 1;
        let target = self.plan.targets.get(backup)?;
        if (self.rules.no_fallback && *target != self.plan.primary)
            || self
                .plan
                .unsupported
                .get(backup)
                .copied()
                .flatten()
                .is_some()
        {
            return None;
        }
        // A backup no larger than a window that answered "too long" would
        // answer the same.
        if h.refused
            .is_some_and(|refused| self.window_of(backup).is_some_and(|w| w <= refused))
        {
            return None;
        }
        let settings = h.applies(&self.plan.targets[call.target], target)?;
        let p95 = self.leases[call.target]
            .stats
            .as_ref()
            .and_then(|s| s.p95(self.rules.mode));
        hedge::hedge_after(settings, p95).map(|after| (after, backup, settings.max_share_ppm))
    }

    /// Admits the backup on plan target `idx` and readies its call, or
    /// says why it is skipped: its breaker (open, or half-open: a hedge
    /// spends no probe), the spend cap, the route's share, its pool's keys,
    /// its credentials.
    async fn start_backup(&mut self, idx: usize) -> Result<(Call, Held, Kit), Skip> {
        let now = crate::runtime_clock::now();
        let target = &self.plan.targets[idx];
        match self.wide.board.admit(target, now, false) {
            Admission::Yes => {}
            Admission::No => return Err(Skip::Breaker),
            Admission::Probe => {
                self.wide.board.release_probe(target, now);
                return Err(Skip::Breaker);
            }
        }
        let call = Call {
            target: idx,
            kind: if *target == self.plan.primary {
                AttemptKind::Primary
            } else {
                AttemptKind::Fallback
            },
            force: false,
        };
        if self.rules.spend_cap && call.kind == AttemptKind::Fallback && !self.budget_allows().await
        {
            return Err(Skip::Spend);
        }
        if !self.hedge.as_deref().is_some_and(Hedging::take_share) {
            return Err(Skip::Share);
        }
        let ticket = match self.pick_key(call) {
            KeyChoice::Single => None,
            KeyChoice::Pooled(ticket) => Some(ticket),
            KeyChoice::None | KeyChoice::RateLimited(_) => return Err(Skip::RateLimit),
        };
        let key = ticket.as_ref().map_or(0, KeyInUse::key);
        if !self.credentials_ready(idx, key).await {
            return Err(Skip::Breaker);
        }
        let Some(lease) = self.leases[idx].lease.clone() else {
            return Err(Skip::Breaker);
        };
        let held = Held {
            key_name: ticket.as_ref().and_then(KeyInUse::name),
            ticket,
            key,
            span: self.attempt_span(idx),
        };
        self.leases[idx].enter();
        self.calling(idx);
        let kit = self.kit(call, Arc::clone(&self.chat), &held, lease);
        Ok((call, held, kit))
    }

    /// What a call of a hedge needs, owned.
    fn kit(&mut self, call: Call, chat: Arc<ChatRequest>, held: &Held, lease: Lease) -> Kit {
        let idx = call.target;
        let timeouts = self.timeouts(idx);
        let mut options = self.call_options(idx, timeouts.connect, held.span);
        options.credit = self.credit_for(call, held.key);
        Kit {
            call,
            model: Arc::clone(&self.plan.targets[idx].model),
            lease,
            key: held.key,
            chat,
            asked: Arc::clone(&self.chat),
            options,
            timeouts,
            deadline: self.deadline,
            commit: self.streams.commit,
        }
    }

    /// Records an owned call's end on target `idx`'s breaker as its path
    /// does (a committed stream's, when its stream ends).
    fn board_after<S>(&self, idx: usize, owned: Owned<S>) -> Called<S> {
        let Owned { called, opened } = owned;
        let code = called.result.as_ref().map(|_| ()).map_err(Failure::code);
        match (self.rules.mode, code) {
            (Mode::Answer, code) => self.outcome(idx, code),
            (Mode::Stream, Ok(())) => {}
            (Mode::Stream, Err(code)) if opened => {
                self.stream_ended(idx, Err(code), called.latency)
            }
            (Mode::Stream, Err(code)) => self.outcome(idx, Err(code)),
        }
        called
    }

    /// Records the hedge's call that lost (`primary`: the one raced),
    /// cancelled unfinished: no word on its breaker or key (its future was
    /// dropped, its connection closed); the time it waited in vain counts
    /// in its target's p95 (of the request's mode) as
    /// [`hedge::loser_wait_counts`] says. Its input's estimated cost (it
    /// showed no output: the commit is on the first) counts toward the
    /// spend cap when it is a fallback, and, kept for the event, in the
    /// client record's spend and the cost metrics.
    fn cancelled<F>(
        &mut self,
        lost: &mut Runner<F>,
        primary: bool,
        detail: &'static str,
        attempts: &mut Vec<Attempt>,
    ) {
        let idx = lost.call.target;
        let waited = crate::runtime_clock::since(lost.started);
        if self.probe_held.load(Ordering::Relaxed) == idx {
            self.release_held_probe();
        }
        if let Some(stats) = &self.leases[idx].stats {
            let mode = self.rules.mode;
            if hedge::loser_wait_counts(primary, waited, stats.p95(mode)) {
                stats.observe(mode, waited);
            }
        }
        self.leases[idx].leave();
        let held = std::mem::replace(&mut lost.held, Held::NONE);
        drop(held.ticket);
        let mut record =
            self.attempt_record(idx, lost.call.kind, AttemptOutcome::Cancelled, waited, None);
        record.detail = Some(detail.into());
        record.key = held.key_name;
        record.span_id = held.span;
        attempts.push(record);
        let target = &self.plan.targets[idx];
        let usage = understudy_types::chat::Usage {
            input_tokens: understudy_types::chat::estimate_tokens(&self.chat),
            ..Default::default()
        };
        let cost = self.leases[idx]
            .provider
            .price
            .and_then(|price| super::priced(price, usage));
        self.spent(*target != self.plan.primary, cost);
        if let Some(h) = self.hedge.as_deref_mut() {
            h.loser = Some((usage.input_tokens, cost));
        }
    }

    /// The primary of a race (plan target `primary`) answered "too long":
    /// its window is kept, and
    /// a backup still running whose known window is no larger is
    /// cancelled (it would answer the same).
    fn primary_too_long<F>(
        &mut self,
        primary: usize,
        backup: &mut Runner<F>,
        attempts: &mut Vec<Attempt>,
    ) {
        let Some(refused) = self.window_of(primary) else {
            return;
        };
        self.keep_refused(refused);
        let small = self
            .window_of(backup.call.target)
            .is_some_and(|w| w <= refused);
        if small && backup.future.take().is_some() {
            self.cancelled(backup, false, TOO_SMALL, attempts);
        }
    }

    fn keep_refused(&mut self, window: u32) {
        if let Some(h) = self.hedge.as_deref_mut() {
            h.refused = Some(h.refused.map_or(window, |r| r.max(window)));
        }
    }

    /// Plan target `idx`'s context window, when known.
    fn window_of(&self, idx: usize) -> Option<u32> {
        let t = self.plan.targets.get(idx)?;
        let p = self.settings.providers.get(&*t.provider)?;
        understudy_settings::windows::limits_of(p, &t.model).map(|l| l.context_window)
    }

    /// On a hedged run, before the walk goes on after a "too long" from
    /// the target it is at: the window that refused is kept (no backup
    /// no larger starts later), and, where both calls of a race failed
    /// after its primary's "too long", the backup (where the walk is)
    /// stands in `windows` for the primary's window, so the walk passes
    /// over every later target no larger than the one that refused.
    pub(super) fn hedge_windows(&mut self, at: usize, windows: &mut [Option<u32>]) {
        let Some(h) = self.hedge.as_deref_mut() else {
            return;
        };
        if let Some((backup, refused)) = h.too_long_at.take() {
            if let Some(w) = windows.get_mut(backup) {
                *w = refused;
            }
        }
        if let Some(&Some(refused)) = windows.get(at) {
            self.keep_refused(refused);
        }
    }

    fn hedge_outcome(&mut self, outcome: Outcome) {
        if let Some(h) = self.hedge.as_deref_mut() {
            h.outcome = Some(outcome);
        }
    }

    fn hedge_moved(&mut self, idx: usize, failed: Option<FailureKind>) {
        if let Some(h) = self.hedge.as_deref_mut() {
            h.moved = Some((idx, failed));
        }
    }
}

/// Why a hedge's call was cancelled: the other showed output first.
const LOST: &str = "cancelled: the hedge's other call showed output first";

/// Why a hedge's backup was cancelled: its window is no larger than the
/// primary's, which answered "too long".
const TOO_SMALL: &str =
    "cancelled: its context window is no larger than one that answered too long";

/// The two calls of a hedge.
struct Race<F> {
    primary: Runner<F>,
    backup: Runner<F>,
}

/// One call of a hedge: its future while it runs.
struct Runner<F> {
    call: Call,
    held: Held,
    started: Instant,
    future: Option<Pin<Box<F>>>,
}

impl<F: Future> Race<F> {
    /// The next call to end (`true`: the backup), and how; its future is
    /// gone from the race. Only called while one runs.
    async fn next(&mut self) -> (bool, F::Output) {
        std::future::poll_fn(|cx| {
            for (is_backup, runner) in [(false, &mut self.primary), (true, &mut self.backup)] {
                if let Some(f) = runner.future.as_mut() {
                    if let Poll::Ready(out) = f.as_mut().poll(cx) {
                        runner.future = None;
                        return Poll::Ready((is_backup, out));
                    }
                }
            }
            Poll::Pending
        })
        .await
    }
}

// === the calls, owned ===

/// An answer's call made from `kit`: the completion, normalized and
/// checked against the request's schema.
pub(super) async fn answer_call(kit: Kit, expected: Arc<output::Expected>) -> Owned<Completion> {
    let started = crate::runtime_clock::now();
    let deadline = (started + kit.timeouts.attempt).min(kit.deadline);
    let (adapter, in_flight) = kit.lease.attempt(kit.key);
    let result = by_deadline(
        &kit.lease.actor,
        deadline,
        started,
        "no answer",
        adapter.complete(&kit.model, &kit.chat, &kit.options),
    )
    .await;
    in_flight.finish(result.as_ref().map(|_| ()).map_err(Failure::code));
    let mut limits = None;
    let result = match result {
        Ok(mut c) => {
            limits = c.rate_limits.take().map(|l| *l);
            output::normalize(&kit.asked, &mut c);
            crate::run::validate::check(&expected, c).await
        }
        Err(f) => Err(f),
    };
    Owned {
        called: Called {
            result,
            limits,
            latency: crate::runtime_clock::since(started),
        },
        opened: false,
    }
}

/// Opens a stream from `kit` by `first_token_by`, counted in flight in
/// its provider's counts (until its owner hands it over; a call
/// cancelled before leaves no count behind).
pub(super) async fn open(
    kit: &Kit,
    started: Instant,
    first_token_by: Instant,
) -> Result<(BoxEventStream, crate::actor::provider::InFlight), Failure> {
    let (adapter, in_flight) = kit.lease.attempt(kit.key);
    let opened = by_deadline(
        &kit.lease.actor,
        first_token_by,
        started,
        "no response",
        adapter.stream(&kit.model, &kit.chat, &kit.options),
    )
    .await;
    match opened {
        Ok(stream) => Ok((stream, in_flight)),
        Err(f) => {
            in_flight.finish(Err(f.code()));
            Err(f)
        }
    }
}
