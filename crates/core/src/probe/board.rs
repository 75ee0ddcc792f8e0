//! [`ReadyBoard`]: every probed target's readiness, read by each plan.
//!
//! The targets are fixed at start (those the routes name), so the board
//! is a slice searched without a lock. A plan asks [`ReadyBoard::is_down`]
//! for each target: while no target is proven unable to serve (the usual
//! case) that is one atomic load, and otherwise a short scan comparing the
//! target's names (pointers first) and one more load — no lock, no hash.
//! What the status page shows besides (when, what the provider said) sits
//! behind a small mutex per target, written by the prober and read only by
//! the status routes.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use understudy_types::target::Target;

use crate::sink::metrics::Metrics;

/// What a probe proved about a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Reachable, the key taken, the model served.
    Ready,
    /// The provider refused the credentials (a 401, or an answer naming
    /// an invalid key or signature).
    Auth,
    /// The provider does not serve the model to this key (a 404 whose
    /// answer says the model or deployment is missing).
    ModelMissing,
    /// No answer that proves anything (a connection refused, a timeout, a
    /// 5xx, a rate limit): the verdict in force stays, and breakers deal
    /// with outages as they always have.
    Unreachable,
    /// The protocol has no call that checks without generating.
    NoProbe,
}

/// One target's readiness as `/v1/status` and `understudy providers
/// --check` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetReadiness {
    pub provider: String,
    pub model: String,
    /// `ready`, `not_ready` or `unchecked`.
    pub state: &'static str,
    /// Why it is not ready: `auth` or `model_missing`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// What the last probe found, when it proved nothing new or failed:
    /// the provider's words (never a key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// When the last probe ended (Unix seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checked_at: Option<u64>,
    /// `local` (this instance probed) or `fleet` (another instance did,
    /// through Redis).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'static str>,
}

impl TargetReadiness {
    /// Whether the target is proven unable to serve.
    pub fn not_ready(&self) -> bool {
        self.state == "not_ready"
    }
}

/// The board: each probed target's state.
pub(crate) struct ReadyBoard {
    /// How many targets are not ready: zero lets a plan skip the scan.
    down: AtomicUsize,
    entries: Box<[Entry]>,
    metrics: Arc<Metrics>,
}

struct Entry {
    target: Target,
    /// One of [`UNCHECKED`], [`READY`], [`AUTH`], [`MISSING`].
    state: AtomicU8,
    note: Mutex<Note>,
}

/// What the status routes show beside the state.
#[derive(Default)]
struct Note {
    checked_ms: Option<u64>,
    detail: Option<String>,
    local: bool,
}

const UNCHECKED: u8 = 0;
const READY: u8 = 1;
const AUTH: u8 = 2;
const MISSING: u8 = 3;

/// A probe's verdict as the state it sets, if it sets one.
fn state_of(verdict: Verdict) -> Option<u8> {
    match verdict {
        Verdict::Ready => Some(READY),
        Verdict::Auth => Some(AUTH),
        Verdict::ModelMissing => Some(MISSING),
        Verdict::NoProbe => Some(UNCHECKED),
        Verdict::Unreachable => None,
    }
}

/// Whether two targets are the same, their names' pointers compared
/// before their bytes (a plan's targets are clones of the routes' own).
fn same(a: &Target, b: &Target) -> bool {
    (Arc::ptr_eq(&a.provider, &b.provider) || a.provider == b.provider)
        && (Arc::ptr_eq(&a.model, &b.model) || a.model == b.model)
}

// === impl ReadyBoard ===

impl ReadyBoard {
    /// A board of `targets`, each unchecked.
    pub(crate) fn new(targets: Vec<Target>, metrics: Arc<Metrics>) -> Self {
        Self {
            down: AtomicUsize::new(0),
            entries: targets
                .into_iter()
                .map(|target| Entry {
                    target,
                    state: AtomicU8::new(UNCHECKED),
                    note: Mutex::default(),
                })
                .collect(),
            metrics,
        }
    }

    /// Forgets the verdicts on `provider`'s targets (its settings were
    /// reloaded: what a probe proved of the old ones, a refused key say,
    /// no longer holds): unchecked until the next probe.
    pub(crate) fn forget(&self, provider: &str) {
        for e in self
            .entries
            .iter()
            .filter(|e| &*e.target.provider == provider)
        {
            *e.note.lock().unwrap_or_else(PoisonError::into_inner) = Note::default();
            if e.state.swap(UNCHECKED, Ordering::Relaxed) >= AUTH {
                self.down.fetch_sub(1, Ordering::Relaxed);
            }
            let labels = crate::sink::metrics::StateLabels {
                provider: e.target.provider.to_string(),
                model: e.target.model.to_string(),
            };
            self.metrics.target_ready(&labels, UNCHECKED);
        }
    }

    /// The probed targets.
    pub(crate) fn targets(&self) -> impl Iterator<Item = &Target> {
        self.entries.iter().map(|e| &e.target)
    }

    /// Whether `target` is proven unable to serve: a plan leaves it out.
    #[inline]
    pub(crate) fn is_down(&self, target: &Target) -> bool {
        if self.down.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.entries
            .iter()
            .find(|e| same(&e.target, target))
            .is_some_and(|e| e.state.load(Ordering::Relaxed) >= AUTH)
    }

    /// Records `verdict` for `target` (found by this instance when
    /// `local`, at `checked_ms`, with the provider's words in `detail`);
    /// logs a change at WARN (not ready) or INFO (back), once per change.
    pub(crate) fn record(
        &self,
        target: &Target,
        verdict: Verdict,
        detail: Option<String>,
        checked_ms: u64,
        local: bool,
    ) {
        let Some(entry) = self.entries.iter().find(|e| same(&e.target, target)) else {
            return;
        };
        {
            let mut note = entry.note.lock().unwrap_or_else(PoisonError::into_inner);
            note.checked_ms = Some(checked_ms);
            note.detail = detail.clone();
            note.local = local;
        }
        let Some(new) = state_of(verdict) else {
            return;
        };
        let old = entry.state.swap(new, Ordering::Relaxed);
        let labels = crate::sink::metrics::StateLabels {
            provider: target.provider.to_string(),
            model: target.model.to_string(),
        };
        self.metrics.target_ready(&labels, new);
        if old == new {
            return;
        }
        match (old >= AUTH, new >= AUTH) {
            (false, true) => {
                self.down.fetch_add(1, Ordering::Relaxed);
            }
            (true, false) => {
                self.down.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
        let detail = detail.unwrap_or_default();
        match new {
            AUTH | MISSING => tracing::warn!(
                provider = %target.provider,
                model = %target.model,
                reason = reason_of(new).unwrap_or_default(),
                %detail,
                "target not ready: plans skip it until a probe passes"
            ),
            READY if old >= AUTH => tracing::info!(
                provider = %target.provider,
                model = %target.model,
                "target ready again"
            ),
            _ => {}
        }
    }

    /// Every probed target's readiness, in the board's order.
    pub(crate) fn snapshot(&self) -> Vec<TargetReadiness> {
        self.entries
            .iter()
            .map(|e| {
                let state = e.state.load(Ordering::Relaxed);
                let note = e.note.lock().unwrap_or_else(PoisonError::into_inner);
                TargetReadiness {
                    provider: e.target.provider.to_string(),
                    model: e.target.model.to_string(),
                    state: match state {
                        READY => "ready",
                        AUTH | MISSING => "not_ready",
                        _ => "unchecked",
                    },
                    reason: reason_of(state),
                    detail: note.detail.clone(),
                    checked_at: note.checked_ms.map(|ms| ms / 1000),
                    source: note
                        .checked_ms
                        .map(|_| if note.local { "local" } else { "fleet" }),
                }
            })
            .collect()
    }
}

/// A not-ready state's reason code.
fn reason_of(state: u8) -> Option<&'static str> {
    match state {
        AUTH => Some("auth"),
        MISSING => Some("model_missing"),
        _ => None,
    }
}

impl Verdict {
    /// A stable snake_case code (a metric label, the fleet's record).
    pub fn code(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Auth => "auth",
            Self::ModelMissing => "model_missing",
            Self::Unreachable => "unreachable",
            Self::NoProbe => "no_probe",
        }
    }

    /// The verdict of `code` ([`Verdict::code`]).
    pub fn parse(code: &str) -> Option<Self> {
        [
            Self::Ready,
            Self::Auth,
            Self::ModelMissing,
            Self::Unreachable,
            Self::NoProbe,
        ]
        .into_iter()
        .find(|v| v.code() == code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board() -> ReadyBoard {
        ReadyBoard::new(
            vec![Target::new("a", "m"), Target::new("b", "m")],
            Arc::new(Metrics::new()),
        )
    }

    #[test]
    fn a_proven_failure_benches_a_target_until_a_probe_passes() {
        let board = board();
        let (a, b) = (Target::new("a", "m"), Target::new("b", "m"));
        // (verdict for a, a down after it)
        let steps = [
            (Verdict::NoProbe, false),
            (Verdict::Ready, false),
            (Verdict::Auth, true),
            // Nothing proven: the verdict in force stays.
            (Verdict::Unreachable, true),
            (Verdict::ModelMissing, true),
            (Verdict::Ready, false),
            (Verdict::Unreachable, false),
        ];
        for (verdict, down) in steps {
            board.record(&a, verdict, None, 1_000, true);
            assert_eq!(board.is_down(&a), down, "{verdict:?}");
            assert!(!board.is_down(&b), "{verdict:?}: another target");
            assert_eq!(board.down.load(Ordering::Relaxed), usize::from(down));
        }
        // A target the board does not hold is never down.
        board.record(&a, Verdict::Auth, None, 2_000, false);
        assert!(!board.is_down(&Target::new("c", "m")));
        let shown = board.snapshot();
        assert_eq!(shown[0].state, "not_ready");
        assert_eq!(shown[0].reason, Some("auth"));
        assert_eq!(shown[0].source, Some("fleet"));
        assert_eq!(shown[0].checked_at, Some(2));
        assert_eq!(shown[1].state, "unchecked");
    }

    #[test]
    fn a_reloaded_provider_s_verdicts_are_forgotten() {
        let board = board();
        let (a, b) = (Target::new("a", "m"), Target::new("b", "m"));
        board.record(&a, Verdict::Auth, Some("refused".into()), 1_000, true);
        board.record(&b, Verdict::ModelMissing, None, 1_000, true);
        board.forget("a");
        assert!(
            !board.is_down(&a),
            "a reloaded provider is no longer benched"
        );
        assert!(board.is_down(&b), "another provider's verdict stays");
        assert_eq!(board.down.load(Ordering::Relaxed), 1);
        let shown = board.snapshot();
        assert_eq!(shown[0].state, "unchecked");
        assert_eq!(shown[0].checked_at, None);
        // Forgetting an unchecked or unknown provider changes nothing.
        board.forget("a");
        board.forget("c");
        assert_eq!(board.down.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn verdict_codes_read_back() {
        for v in [
            Verdict::Ready,
            Verdict::Auth,
            Verdict::ModelMissing,
            Verdict::Unreachable,
            Verdict::NoProbe,
        ] {
            assert_eq!(Verdict::parse(v.code()), Some(v));
        }
        assert_eq!(Verdict::parse("maybe"), None);
    }
}
